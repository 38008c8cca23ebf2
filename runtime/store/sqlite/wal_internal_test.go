package sqlite

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/store"
)

var walCommits = flag.Int("wal-commits", 6000, "commits of the long write stream TestTheLogStaysBoundedUnderLoad writes")

// Under a long stream of writes from many writers, with readers reading
// all the while (as a server's runs and streams do), the write-ahead log
// stays bounded: the checkpoints beside the writes copy it into the
// database and the log is truncated whenever a whole checkpoint leaves
// nothing in it for a reader, however busy the readers. (Checkpointed but
// never truncated, the log grew without end: a reader was always reading
// from it, so it never started again from its beginning.)
func TestTheLogStaysBoundedUnderLoad(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "w.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const writers, readers = 16, 6
	pad := strings.Repeat("y", 1500)
	for w := range writers {
		if err := s.Commit(ctx, &store.Checkpoint{Thread: fmt.Sprint("w", w), Seq: 1, Source: store.SourceCreate, Time: time.Now(),
			Writes: []store.Write{{Field: "log", Version: 1, Value: []any{}}}}); err != nil {
			t.Fatal(err)
		}
	}
	var largest atomic.Int64
	var done atomic.Bool
	var commits atomic.Int64
	var rwg, wwg sync.WaitGroup
	for r := range readers {
		rwg.Go(func() {
			for i := 0; !done.Load(); i++ {
				thread := fmt.Sprint("w", (r+i)%writers)
				if _, err := s.History(ctx, thread, store.HistoryOptions{Limit: 20}); err != nil {
					t.Error(err)
					return
				}
				if fi, err := os.Stat(path + "-wal"); err == nil && fi.Size() > largest.Load() {
					largest.Store(fi.Size())
				}
				// what a server does with what it read
				time.Sleep(time.Millisecond)
			}
		})
	}
	per := *walCommits / writers
	for w := range writers {
		wwg.Go(func() {
			thread := fmt.Sprint("w", w)
			for seq := uint64(1); seq <= uint64(per); seq++ {
				cp := &store.Checkpoint{Thread: thread, Seq: seq + 1, Parent: seq, Source: store.SourceStep, Time: time.Now(),
					Writes: []store.Write{{Field: "log", Version: seq + 1, Append: true, Items: []any{pad}}}}
				if err := s.Commit(ctx, cp); err != nil {
					t.Error(err)
					return
				}
				commits.Add(1)
			}
		})
	}
	wwg.Wait()
	done.Store(true)
	rwg.Wait()
	s.checkpoints.Wait()
	fi, _ := os.Stat(path)

	t.Logf("%d commits of %d writers beside %d readers: the log's largest size %.1f MiB, the database's %.1f MiB",
		commits.Load(), writers, readers, float64(largest.Load())/(1<<20), float64(fi.Size())/(1<<20))
	// each commit writes a few pages: unbounded, the log holds them all
	// (some 100 MiB); truncated, four times checkpointBytes at most, and
	// a group commit's pages (up to groupMax writes)
	if limit := int64(4*checkpointBytes + 2<<20); largest.Load() > limit {
		t.Fatalf("the log grew to %.1f MiB over %d commits (at most %.1f MiB when truncated)", float64(largest.Load())/(1<<20), commits.Load(), float64(limit)/(1<<20))
	}
}
