package postgres_test

import (
	"testing"

	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/internal/pgtest"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

func TestVoiceCatalogConformance(t *testing.T) {
	t.Run("direct", func(t *testing.T) { storetest.RunVoiceCatalog(t, func(t *testing.T) store.Store { return open(t) }) })
	t.Run("pgbouncer", func(t *testing.T) {
		storetest.RunVoiceCatalog(t, func(t *testing.T) store.Store { return openURL(t, pgtest.PooledDatabase(t)) })
	})
}
