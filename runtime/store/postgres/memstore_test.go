package postgres_test

import (
	"context"
	"testing"

	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/internal/pgtest"
	"github.com/trellisflow/trellis/runtime/store/postgres"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

func TestMemoryConformance(t *testing.T) {
	t.Run("direct", func(t *testing.T) { storetest.RunMemory(t, func(t *testing.T) store.Store { return open(t) }) })
	t.Run("pgbouncer", func(t *testing.T) {
		storetest.RunMemory(t, func(t *testing.T) store.Store {
			st, err := postgres.Open(context.Background(), pgtest.PooledDatabase(t))
			if err != nil {
				t.Fatal(err)
			}
			return st
		})
	})
}
