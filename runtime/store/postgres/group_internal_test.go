package postgres

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

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
	xmax := func() int64 { return nextXID(t, s) }
	// round 1: every commit good; round 2: one fails in the database
	for round, bad := range []int{-1, 3} {
		seq := uint64(round + 2)
		s.commits.token <- struct{}{} // a group under way
		before := xmax()
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
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) { // a bound against a hang
			n := s.commits.Len()
			if n == threads {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: %d commits waiting, want %d", round, n, threads)
			}
		}
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
		used := xmax() - before
		switch {
		case bad < 0 && used != 1:
			t.Fatalf("%d good commits took %d transactions, want 1", threads, used)
		case bad >= 0 && used != threads-1 && used != threads:
			// each good commit alone, and the failed group's own if it
			// wrote before the bad commit
			t.Fatalf("a failed group's %d commits took %d transactions, want %d (one each good one, alone) or one more", threads, used, threads-1)
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
	xmax := func() int64 { return nextXID(t, s) }
	s.commits.token <- struct{}{} // a group under way
	before := xmax()
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
	for deadline := time.Now().Add(time.Minute); s.commits.Len() != 2*n+1; time.Sleep(time.Millisecond) { // a bound against a hang
		if time.Now().After(deadline) {
			t.Fatalf("%d writes waiting, want %d", s.commits.Len(), 2*n+1)
		}
	}
	<-s.commits.token
	for range 2 * n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if err := <-refusedErr; !errors.Is(err, store.ErrRunChanged) {
		t.Fatalf("an append for a run another server holds: %v", err)
	}
	if used := xmax() - before; used != 1 {
		t.Fatalf("%d commits and %d appends took %d transactions, want 1", n, n+1, used)
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

// nextXID is the next transaction id PostgreSQL hands out: the
// transactions that wrote between two reads are their difference.
func nextXID(t *testing.T, s *Store) int64 {
	t.Helper()
	var n int64
	if err := s.pool.QueryRow(context.Background(), `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
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
