package sqlite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/trellisflow/trellis/runtime/store"
)

// A commit never checkpoints the log itself (the writer would hold every
// waiting write while the pages are copied and the file synced): the
// connections do not checkpoint on their own, and the log is
// checkpointed beside the writes, so that it starts again from its
// beginning and stays short.
func TestTheLogIsCheckpointedBesideTheWrites(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "c.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for range maxConns {
		var pages int
		if err := s.db.QueryRowContext(ctx, `PRAGMA wal_autocheckpoint`).Scan(&pages); err != nil {
			t.Fatal(err)
		}
		if pages != 0 {
			t.Fatalf("a connection checkpoints the log itself every %d pages", pages)
		}
		// (and keeps its temporary files, a group commit's savepoint
		// journal among them, in memory)
		var temp int
		if err := s.db.QueryRowContext(ctx, `PRAGMA temp_store`).Scan(&temp); err != nil || temp != 2 {
			t.Fatalf("temp_store %d, want 2 (memory): %v", temp, err)
		}
	}
	wal := path + "-wal"
	const commits = 4 * checkpointFar
	var largest int64
	for i := range commits {
		if err := s.PutPending(ctx, fmt.Sprintf("t%d", i%50), uint64(i), "n", []store.Write{{Field: "x", Value: i}}, ""); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(wal); err == nil {
			largest = max(largest, fi.Size())
		}
	}
	s.checkpoints.Wait()
	// unchecked, the log holds every commit's pages (two or more each:
	// 34 MB); checkpointed, those of checkpointFar commits at most (2 or
	// 3 pages each)
	if limit := int64(checkpointFar * 4 * 4120); largest > limit {
		t.Fatalf("the log grew to %d bytes over %d commits (%d at most if checkpointed)", largest, commits, limit)
	}
	t.Logf("the log's largest size over %d commits: %d bytes", commits, largest)
}
