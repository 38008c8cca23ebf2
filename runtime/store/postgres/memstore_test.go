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
		storetest.RunMemory(t, func(t *testing.T) store.Store { return openURL(t, pgtest.PooledDatabase(t)) })
	})
}

// go test ./runtime/store/postgres -run '^$' -bench Memory
func BenchmarkMemory(b *testing.B) {
	st, err := postgres.Open(context.Background(), pgtest.Database(b))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	storetest.BenchMemory(b, st, 5000)
}
