package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/sqlite"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

func TestMemoryConformance(t *testing.T) {
	storetest.RunMemory(t, func(t *testing.T) store.Store {
		st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "trellis.db"))
		if err != nil {
			t.Fatal(err)
		}
		return st
	})
}

// go test ./runtime/store/sqlite -run '^$' -bench Memory
func BenchmarkMemory(b *testing.B) {
	st, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "trellis.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	storetest.BenchMemory(b, st, 5000)
}
