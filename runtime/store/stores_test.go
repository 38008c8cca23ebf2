package store_test

import (
	"path/filepath"
	"testing"

	"github.com/trellisflow/trellis/runtime/store/internal/pgtest"
)

// storeURLs addresses a fresh store of each kind the semantics tests run
// on: memory, SQLite and PostgreSQL.
func storeURLs(t *testing.T) map[string]string {
	return map[string]string{
		"memory":   "memory",
		"sqlite":   "sqlite:" + filepath.Join(t.TempDir(), "s.db"),
		"postgres": pgtest.Database(t),
	}
}
