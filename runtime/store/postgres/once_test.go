package postgres_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/internal/pgtest"
	"github.com/trellisflow/trellis/runtime/store/postgres"
)

// A write whose reply is lost with its connection, after the server
// committed it, is tried again and finds its own work in the way: the
// thread moved past the checkpoint's parent, the run's record changed,
// the events' numbers taken. Read back by its write id (or its events'
// bytes), it is recognised as done, once, and not judged another
// writer's. A proxy between the store and a real server forwards each
// write and cuts the connection as the server's reply comes back.
func TestWritesWhoseReplyIsLostAreRecognised(t *testing.T) {
	ctx := context.Background()
	url, proxy := pgtest.NewProxy(t, pgtest.Database(t))
	st, err := postgres.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	retry := &store.Retrier{Budget: 30 * time.Second}
	var downs, backs int
	retry.Down = func(error) { downs++ }
	retry.Back = func(time.Duration) { backs++ }
	now := time.Now()

	// a thread and the record of a run running on it
	first := &store.Checkpoint{Thread: "t", Seq: 1, Source: store.SourceCreate, Time: now,
		Writes: []store.Write{{Field: "n", Version: 1, Value: 0}}}
	if err := store.CommitOnce(ctx, st, retry, first); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateThread(ctx, &store.ThreadRecord{ID: "t", Tenant: "acme", Flow: "f", Created: now}); err != nil {
		t.Fatal(err)
	}
	run := &store.RunRecord{ID: "run-1", Tenant: "acme", Thread: "t", Flow: "f", Status: store.RunQueued, Created: now, Server: "server-a"}
	proxy.Lose("run-1", "", 1) // the one call that queues it
	if _, err := store.EnqueueRunOnce(ctx, st, st, retry, run, store.BusyReject); err != nil {
		t.Fatalf("a queued run whose reply was lost: %v", err)
	}
	if run.Status != store.RunRunning || run.Server != "server-a" {
		t.Fatalf("the run queued is %s on %q, want running on server-a", run.Status, run.Server)
	}

	// a step with its events, whose reply is lost
	step := &store.Checkpoint{Thread: "t", Seq: 2, Parent: 1, Run: "run-1", Step: 1, Source: store.SourceStep, Time: now,
		Writes: []store.Write{{Field: "n", Version: 2, Value: 1}}, WriteID: store.NewWriteID(),
		Events: &store.EventAppend{Run: "run-1", Holder: "server-a", Events: []store.EventRecord{{Seq: 1, Data: []byte(`{"type":"run_start"}`)}}}}
	proxy.Lose(step.WriteID, "", 1)
	if err := store.CommitOnce(ctx, st, retry, step); err != nil {
		t.Fatalf("a step whose reply was lost: %v", err)
	}
	if step.Events.Refused {
		t.Fatal("the step's events, committed with it, are said refused")
	}
	// the same step tried again naively is judged a conflict: what the
	// write id saves it from
	again := *step
	again.Events = nil
	if err := st.Commit(ctx, &again); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("the step committed twice: %v, want a conflict", err)
	}

	// events alone, whose reply is lost
	evs := []store.EventRecord{{Seq: 2, Data: []byte(`{"type":"node_start","time":"` + now.Format(time.RFC3339Nano) + `"}`)}}
	proxy.Lose("node_start", "", 1)
	err = retry.Do(ctx, func(again bool) error {
		err := st.AppendNotify(ctx, &store.EventAppend{Run: "run-1", Holder: "server-a", Events: evs})
		if again {
			err = store.Reappended(ctx, st, "run-1", evs, err)
		}
		return err
	})
	if err != nil {
		t.Fatalf("events whose reply was lost: %v", err)
	}

	// the run's end, whose reply is lost
	end := *run
	end.Status, end.Finished, end.Checkpoint = store.RunSucceeded, now, 2
	end.WriteID = store.NewWriteID()
	proxy.Lose(end.WriteID, "commit", 1)
	last := []store.EventRecord{{Seq: 3, Data: []byte(`{"type":"run_end"}`)}}
	if err := store.UpdateRunOnce(ctx, st, retry, &end, run.State(), last); err != nil {
		t.Fatalf("a run's end whose reply was lost: %v", err)
	}

	if n := proxy.Lost(); n != 4 {
		t.Fatalf("the proxy lost %d replies, want 4", n)
	}
	if downs != 4 || backs != 4 {
		t.Fatalf("the retrier heard %d outages begin and %d end, want 4 and 4", downs, backs)
	}
	hist, err := st.History(ctx, "t", store.HistoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != 2 || hist[0].WriteID != step.WriteID {
		t.Fatalf("the thread's history: %d checkpoints, the newest written by %q (want 2, %q)", len(hist), hist[0].WriteID, step.WriteID)
	}
	got, err := st.Events(ctx, "run-1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].Seq != 1 || got[2].Seq != 3 {
		t.Fatalf("the run's events: %v", got)
	}
	rec, err := st.Run(ctx, "acme", "run-1")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Status != store.RunSucceeded || rec.WriteID != end.WriteID {
		t.Fatalf("the run's record: %s written by %q", rec.Status, rec.WriteID)
	}
}

// A group of commits whose connection fails is not run again statement
// by statement (each would then be judged against its own work): every
// writer in it hears the failure, and tries again as it knows how.
func TestAGroupWhoseConnectionFailsIsNotRunAgain(t *testing.T) {
	ctx := context.Background()
	url, proxy := pgtest.NewProxy(t, pgtest.Database(t))
	st, err := postgres.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	const threads = 16
	// the first request that commits two checkpoints or more (a group)
	// loses its reply
	var mu sync.Mutex
	var ids [][]byte
	proxy.LoseIf(func(req []byte) bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, id := range ids {
			if bytes.Contains(req, id) {
				n++
			}
		}
		return n >= 2
	}, "", 1)
	var failed []*store.Checkpoint
	for round := 0; proxy.Lost() == 0; round++ {
		if round == 20 {
			t.Fatal("20 rounds of concurrent commits and not one group")
		}
		cps := make([]*store.Checkpoint, threads)
		for i := range threads {
			thread := fmt.Sprintf("g%d-%d", round, i)
			cp := &store.Checkpoint{Thread: thread, Seq: 1, Source: store.SourceCreate, Time: time.Now(),
				Writes: []store.Write{{Field: "n", Version: 1, Value: 0}}}
			if err := st.Commit(ctx, cp); err != nil {
				t.Fatal(err)
			}
			cps[i] = &store.Checkpoint{Thread: thread, Seq: 2, Parent: 1, Source: store.SourceStep, Time: time.Now(),
				Writes: []store.Write{{Field: "n", Version: 2, Value: i}}, WriteID: store.NewWriteID()}
			mu.Lock()
			ids = append(ids, []byte(cps[i].WriteID))
			mu.Unlock()
		}
		errs := make([]error, threads)
		var wg sync.WaitGroup
		begin := make(chan struct{})
		for i := range threads {
			wg.Go(func() {
				<-begin
				errs[i] = st.Commit(ctx, cps[i])
			})
		}
		close(begin)
		wg.Wait()
		for i, err := range errs {
			switch {
			case err == nil:
			case store.Classify(err) == store.Unavailable:
				failed = append(failed, cps[i])
			default:
				t.Errorf("a commit of a group whose reply was lost returned %v, want the connection's failure", err)
			}
		}
	}
	if len(failed) < 2 {
		t.Fatalf("%d commits failed with the group's connection", len(failed))
	}
	for _, cp := range failed {
		if err := store.Recommitted(ctx, st, cp, st.Commit(ctx, cp)); err != nil {
			t.Errorf("thread %s: the commit tried again: %v", cp.Thread, err)
		}
	}
}
