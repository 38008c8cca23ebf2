package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/sqlite"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

func TestVersionsConformance(t *testing.T) {
	storetest.RunVersions(t, func(t *testing.T) store.Store {
		st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "trellis.db"))
		if err != nil {
			t.Fatal(err)
		}
		return st
	})
}
