package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/store"
)

// A write waiting for this process's writer gives up when its context
// ends, whatever holds the writer.
func TestAWriteWaitsOnlyAsLongAsItsContext(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	defer holdWriter(t, s)()
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	waited := make(chan error, 1)
	go func() { waited <- s.PutPending(wctx, "t", 1, "n", nil, "") }()
	select {
	case err := <-waited:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("the waiting write ended with %v", err)
		}
	case <-time.After(time.Minute): // a bound against a hang
		t.Fatal("a write whose context ended still waits for the writer")
	}
}

// A prune of idle threads is paced by the time its writes hold this
// process's writer, not by the time they queue for it behind the runs'
// writes: the queue costs the runs nothing, and counting it made the
// prune rest the longer the busier the store was.
func TestAPruneIsPacedByTheTimeItHoldsTheWriter(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	old := time.Now().Add(-48 * time.Hour)
	if err := s.Commit(ctx, &store.Checkpoint{Thread: "idle", Seq: 1, Step: 0, Source: store.SourceInput, Time: old}); err != nil {
		t.Fatal(err)
	}
	const queued = time.Second
	held := make(chan struct{})
	done := make(chan error, 1)
	var released time.Time // when the writer was free again
	go func() {
		done <- s.write(ctx, func() error {
			close(held)
			time.Sleep(queued)
			released = time.Now()
			return nil
		})
	}()
	<-held
	var took []time.Duration
	n, err := store.PruneIdleThreads(ctx, s, store.IdleOptions{TTL: 24 * time.Hour, Pace: func(_ context.Context, d time.Duration) error {
		took = append(took, d)
		return nil
	}})
	end := time.Now()
	if err != nil || n != 1 {
		t.Fatalf("PruneIdleThreads = %d, %v; want 1 thread deleted", n, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if end.Before(released) {
		t.Fatalf("the prune ended %s before the write holding the writer let it go", released.Sub(end))
	}
	// the time it held the writer lies between the writer's release and
	// the prune's end, however loaded the machine: a pace counting the
	// queue's time (a second) as well does not fit there
	if len(took) != 1 || took[0] <= 0 || took[0] > end.Sub(released) {
		t.Fatalf("the prune paced by %v; want the time it held the writer, above 0 and within the %s from the writer's release to the prune's end",
			took, end.Sub(released))
	}
}

// The writes waiting while one runs are committed in one transaction, in
// the order they came, and one that fails rolls back only its own work.
func TestWaitingWritesCommitTogetherAndFailAlone(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	release := holdWriter(t, s)
	before := s.WriteTransactions()
	const writers = 10
	errs := make(chan error, writers+1)
	for i := range writers {
		go func() { errs <- s.PutPending(ctx, "t", 1, fmt.Sprintf("n%d", i), nil, "") }()
	}
	refused := errors.New("refused")
	go func() {
		errs <- s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			if _, err := tx.Exec(`INSERT INTO pending (thread, parent, node, writes) VALUES ('t', 1, 'failed', '[]')`); err != nil {
				return err
			}
			return refused
		})
	}()
	// every write is queued before the writer is free
	for deadline := time.Now().Add(time.Minute); ; { // a bound against a hang
		n := s.waiting.Len()
		if n == writers+1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d writes queued, want %d", n, writers+1)
		}
		time.Sleep(time.Millisecond)
	}
	release()
	failed := 0
	for range writers + 1 {
		switch err := <-errs; {
		case errors.Is(err, refused):
			failed++
		case err != nil:
			t.Fatal(err)
		}
	}
	if failed != 1 {
		t.Fatalf("%d writes failed, want the one that refused", failed)
	}
	if got := s.WriteTransactions() - before; got != 2 {
		t.Fatalf("%d transactions committed, want 2: the write holding the writer, then every write that waited", got-1)
	}
	var nodes []string
	rows, err := s.db.Query(`SELECT node FROM pending WHERE thread = 't' ORDER BY node`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	if len(nodes) != writers || slices.Contains(nodes, "failed") {
		t.Fatalf("pending rows %v: want the %d writes that succeeded and not the one that failed", nodes, writers)
	}
}

// A write alone in its transaction that fails leaves nothing behind.
func TestAFailedWriteAloneLeavesNothing(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	refused := errors.New("refused")
	err := s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.Exec(`INSERT INTO pending (thread, parent, node, writes) VALUES ('t', 1, 'failed', '[]')`); err != nil {
			return err
		}
		return refused
	})
	if !errors.Is(err, refused) {
		t.Fatalf("the write ended with %v", err)
	}
	var n int
	if err := s.db.QueryRow(`SELECT count(*) FROM pending`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d pending rows (%v) after a failed write, want none", n, err)
	}
}

// openTemp opens a store in a new file, closed when the test ends.
func openTemp(t *testing.T) *Store {
	t.Helper()
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "w.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// holdWriter holds s's writer until the function it returns is called.
func holdWriter(t *testing.T, s *Store) (release func()) {
	t.Helper()
	held, free := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- s.write(context.Background(), func() error { close(held); <-free; return nil }) }()
	<-held
	return func() {
		close(free)
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

// A write whose caller gives up while its group runs neither fails nor
// interrupts the others' work in the transaction: its statements run
// without the caller's cancellation, the shared catalog's too.
func TestACallerGivingUpInAGroupInterruptsNothing(t *testing.T) {
	s := openTemp(t)
	release := holdWriter(t, s)
	errs := make(chan error, 3)
	go func() { errs <- s.PutPending(context.Background(), "t", 1, "before", nil, "") }()
	caller, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		errs <- s.tx(caller, func(ctx context.Context, tx *sql.Tx) error {
			cancel() // the caller gives up as its write runs
			_, err := catalogDB{db: tx, s: s}.Exec(caller, `INSERT INTO pending (thread, parent, node, writes) VALUES ('t', 1, 'gave up', '[]')`)
			return err
		})
	}()
	for s.waiting.Len() < 2 {
		time.Sleep(time.Millisecond)
	}
	go func() { errs <- s.PutPending(context.Background(), "t", 1, "after", nil, "") }()
	for s.waiting.Len() < 3 {
		time.Sleep(time.Millisecond)
	}
	release()
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := s.db.QueryRow(`SELECT count(*) FROM pending WHERE thread = 't'`).Scan(&n); err != nil || n != 3 {
		t.Fatalf("%d pending rows (%v), want the three writes of the group", n, err)
	}
}
