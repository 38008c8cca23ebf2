package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/store"
)

// A server's thousand threads in conversation stay in the store's cache
// of states: each of their turns loads its thread from it, not from the
// thread's checkpoints.
func TestAThousandThreadsStayCached(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const threads = 1000
	for i := range threads {
		cp := &store.Checkpoint{Thread: fmt.Sprint("t", i), Seq: 1, Source: store.SourceCreate, Time: time.Unix(1, 0),
			Writes: []store.Write{{Field: "n", Version: 1, Value: float64(i)}}}
		if err := s.Commit(ctx, cp); err != nil {
			t.Fatal(err)
		}
	}
	for i := range threads {
		th := fmt.Sprint("t", i)
		if !s.cache.Holds(th) {
			t.Fatalf("thread %s of %d is not cached", th, threads)
		}
		if h, err := s.Head(ctx, th); err != nil || h.Values["n"] != float64(i) {
			t.Fatalf("head of %s: %v (%v)", th, h, err)
		}
	}
}
