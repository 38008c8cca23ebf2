package postgres

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/internal/pgtest"
)

// The commits waiting while one is under way are committed in one
// transaction; when the group fails, each is committed alone, and only
// the one at fault fails.
func TestWaitingCommitsCommitTogether(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, pgtest.Database(t))
	const threads = 8
	for i := range threads {
		if err := s.Commit(ctx, &store.Checkpoint{Thread: fmt.Sprint("t", i), Seq: 1, Source: store.SourceCreate, Time: time.Unix(1, 0)}); err != nil {
			t.Fatal(err)
		}
	}
	// the transactions are read from what the store counted and what
	// PostgreSQL recorded on the rows written (the transaction that wrote
	// each thread's head), not from the cluster's next transaction id,
	// which every transaction on the cluster that writes moves (another
	// database's, autovacuum's)
	var last [threads]int64 // each thread's head's writer
	for i := range threads {
		last[i] = writer(t, s, "threads", "id", fmt.Sprint("t", i))
	}
	// round 1: every commit good; round 2: one fails in the database
	for round, bad := range []int{-1, 3} {
		seq := uint64(round + 2)
		s.commits.token <- struct{}{} // a group under way
		groups, alone := s.commits.groups.Load(), s.commits.alone.Load()
		errs := make([]chan error, threads)
		for i := range threads {
			errs[i] = make(chan error, 1)
			cp := &store.Checkpoint{Thread: fmt.Sprint("t", i), Seq: seq, Parent: seq - 1, Run: "r", Step: int(seq), Source: store.SourceStep,
				Time: time.Unix(int64(seq), 0), Writes: []store.Write{{Field: "n", Version: seq, Value: i}}}
			if i == bad {
				// text PostgreSQL refuses: not UTF-8
				cp.Events = &store.EventAppend{Run: "r", Holder: "s", Events: []store.EventRecord{{Seq: 1, Data: []byte{0xff, 0xfe}}}}
			}
			go func() { errs[i] <- s.Commit(ctx, cp) }()
		}
		waitQueued(t, s, threads)
		<-s.commits.token
		for i := range threads {
			err := <-errs[i]
			if (err != nil) != (i == bad) {
				t.Fatalf("round %d: commit of t%d: %v", round, i, err)
			}
			h, herr := s.Head(ctx, fmt.Sprint("t", i))
			want := seq
			if i == bad {
				want = seq - 1
			}
			if herr != nil || h.Seq != want {
				t.Fatalf("round %d: head of t%d: %+v %v, want seq %d", round, i, h, herr, want)
			}
		}
		g, a := s.commits.groups.Load()-groups, s.commits.alone.Load()-alone
		writers := map[int64][]int{} // the threads each transaction moved
		for i := range threads {
			x := writer(t, s, "threads", "id", fmt.Sprint("t", i))
			switch {
			case i == bad && x != last[i]:
				t.Fatalf("round %d: the failed commit's thread t%d was written (by transaction %d)", round, i, x)
			case i != bad && x == last[i]:
				t.Fatalf("round %d: t%d's head is still the one transaction %d wrote", round, i, x)
			case i != bad:
				writers[x] = append(writers[x], i)
			}
			last[i] = x
		}
		switch {
		case bad < 0 && (g != 1 || a != 0 || len(writers) != 1):
			t.Fatalf("%d good commits: %d groups and %d alone, committed by %d transactions %v; want 1 group, none alone, one transaction",
				threads, g, a, len(writers), writers)
		case bad >= 0 && (g != 1 || a != threads || len(writers) != threads-1):
			// the group once, then each of its commits once, alone
			t.Fatalf("a failed group's %d commits: %d groups and %d alone, the good ones committed by %d transactions %v; want 1 group, then %d alone, one transaction each good one",
				threads, g, a, len(writers), writers, threads)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if ce := s.Commit(cctx, &store.Checkpoint{Thread: "t0", Seq: 4, Parent: 3, Source: store.SourceStep, Time: time.Unix(4, 0)}); !errors.Is(ce, context.Canceled) {
		t.Fatalf("a commit with its context ended: %v", ce)
	}
}

// The event appends waiting beside commits go in the same group: one
// transaction for both, each append still guarded by its run's holder
// and announced with its notification.
func TestWaitingAppendsJoinTheCommits(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, pgtest.Database(t))
	const n = 4
	for i := range n {
		th := fmt.Sprint("acme/t", i)
		if err := s.Commit(ctx, &store.Checkpoint{Thread: th, Seq: 1, Source: store.SourceCreate, Time: time.Unix(1, 0)}); err != nil {
			t.Fatal(err)
		}
		if err := s.CreateThread(ctx, &store.ThreadRecord{ID: th, Tenant: "acme", Flow: "f", Created: time.Unix(1, 0)}); err != nil {
			t.Fatal(err)
		}
		if err := s.CreateRun(ctx, &store.RunRecord{ID: fmt.Sprint("r", i), Tenant: "acme", Thread: th, Flow: "f", Status: store.RunRunning,
			Server: "s", Created: time.Unix(1, 0), Started: time.Unix(1, 0)}); err != nil {
			t.Fatal(err)
		}
	}
	s.commits.token <- struct{}{} // a group under way
	groups, alone := s.commits.groups.Load(), s.commits.alone.Load()
	errs := make(chan error, 2*n+1)
	for i := range n {
		cp := &store.Checkpoint{Thread: fmt.Sprint("acme/t", i), Seq: 2, Parent: 1, Run: "r", Step: 1, Source: store.SourceStep,
			Time: time.Unix(2, 0), Writes: []store.Write{{Field: "n", Version: 2, Value: i}}}
		go func() { errs <- s.Commit(ctx, cp) }()
		ea := &store.EventAppend{Run: fmt.Sprint("r", i), Holder: "s", Events: []store.EventRecord{{Seq: 1, Data: []byte(`{"type":"run_start"}`)}},
			Channel: "trellis_test", Payload: "run:r"}
		go func() { errs <- s.AppendNotify(ctx, ea) }()
	}
	// another server's run: refused, alone in the group
	refused := &store.EventAppend{Run: "r0", Holder: "other", Events: []store.EventRecord{{Seq: 2, Data: []byte(`{"type":"node_start"}`)}}}
	refusedErr := make(chan error, 1)
	go func() { refusedErr <- s.AppendNotify(ctx, refused) }()
	waitQueued(t, s, 2*n+1)
	<-s.commits.token
	for range 2 * n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if err := <-refusedErr; !errors.Is(err, store.ErrRunChanged) {
		t.Fatalf("an append for a run another server holds: %v", err)
	}
	if g, a := s.commits.groups.Load()-groups, s.commits.alone.Load()-alone; g != 1 || a != 0 {
		t.Fatalf("%d commits and %d appends: %d groups and %d alone, want 1 group", n, n+1, g, a)
	}
	// one transaction wrote every head and every event
	writers := map[int64][]string{}
	for i := range n {
		th, run := fmt.Sprint("acme/t", i), fmt.Sprint("r", i)
		x, y := writer(t, s, "threads", "id", th), writer(t, s, "api_events", "run", run)
		writers[x] = append(writers[x], th)
		writers[y] = append(writers[y], run)
	}
	if len(writers) != 1 {
		t.Fatalf("the heads and events were written by %d transactions, want 1: %v", len(writers), writers)
	}
	for i := range n {
		evs, err := s.Events(ctx, fmt.Sprint("r", i), 0, 10)
		if err != nil || len(evs) != 1 {
			t.Fatalf("events of r%d: %v %v", i, evs, err)
		}
		if h, err := s.Head(ctx, fmt.Sprint("acme/t", i)); err != nil || h.Seq != 2 {
			t.Fatalf("head of t%d: %+v %v", i, h, err)
		}
	}
}

// waitQueued waits until n writes wait for the group under way.
func waitQueued(t *testing.T, s *Store, n int) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) { // a bound against a hang
		q := s.commits.Len()
		if q == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d writes waiting, want %d", q, n)
		}
	}
}

// writer is the transaction that wrote the row of table whose column is
// key (one row, or rows one transaction wrote), as PostgreSQL recorded it
// (the row's xmin).
func writer(t *testing.T, s *Store, table, column, key string) int64 {
	t.Helper()
	var xs []int64
	rows, err := s.pool.Query(context.Background(), `SELECT DISTINCT xmin::text::bigint FROM `+table+` WHERE `+column+` = $1`, key)
	if err == nil {
		xs, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	}
	if err != nil || len(xs) != 1 {
		t.Fatalf("the writer of %s %s %q: %v %v, want one", table, column, key, xs, err)
	}
	return xs[0]
}

// openStore opens the store at url, closed when the test ends.
func openStore(t *testing.T, url string) *Store {
	t.Helper()
	s, err := Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
