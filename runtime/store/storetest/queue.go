// The run queue's conformance cases: busy policies, order, concurrent
// claims, adoption of a dead server's runs, and compare-and-set updates.

package storetest

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/store"
)

func queued(id, thread string, at int) *store.RunRecord {
	return &store.RunRecord{ID: id, Tenant: "acme", Thread: thread, Flow: "f", Created: moment(at)}
}

// threads records acme's threads, which runs are queued on.
func threads(t *testing.T, c store.Catalog, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if err := c.CreateThread(ctx, &store.ThreadRecord{ID: id, Tenant: "acme", Flow: "f", Created: moment(0)}); err != nil {
			t.Fatal(err)
		}
	}
}

func testQueuePolicies(t *testing.T, c store.Catalog) {
	threads(t, c, "t", "u", "o")
	// a thread with no record takes no run, nor another tenant's thread
	if _, err := c.EnqueueRun(ctx, queued("r0", "none", 1), store.BusyEnqueue); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a run on a thread with no record: %v", err)
	}
	other := queued("r0", "t", 1)
	other.Tenant = "other"
	if _, err := c.EnqueueRun(ctx, other, store.BusyEnqueue); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a run on another tenant's thread: %v", err)
	}
	first := queued("r1", "t", 1)
	first.Trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	if busy, err := c.EnqueueRun(ctx, first, store.BusyReject); err != nil || busy {
		t.Fatalf("first run: %v %v", busy, err)
	}
	if busy, err := c.EnqueueRun(ctx, queued("r2", "t", 2), store.BusyReject); !errors.Is(err, store.ErrBusy) || !busy {
		t.Fatalf("reject on a busy thread: %v %v", busy, err)
	}
	if _, err := c.Run(ctx, "acme", "r2"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a rejected run was recorded: %v", err)
	}
	if busy, err := c.EnqueueRun(ctx, queued("r2", "t", 2), store.BusyEnqueue); err != nil || !busy {
		t.Fatalf("enqueue: %v %v", busy, err)
	}
	if _, err := c.EnqueueRun(ctx, queued("r2", "u", 3), store.BusyEnqueue); !errors.Is(err, store.ErrExists) {
		t.Fatalf("a second run r2: %v", err)
	}
	r1, err := c.ClaimRun(ctx, "s1", "", moment(5))
	if err != nil || r1.ID != "r1" || r1.Status != store.RunRunning || r1.Server != "s1" || !sameTime(r1.Started, moment(5)) || r1.Trace != first.Trace {
		t.Fatalf("claim %+v %v", r1, err)
	}
	// interrupt: the queued run is cancelled, the running one asked to stop
	if busy, err := c.EnqueueRun(ctx, &store.RunRecord{ID: "r3", Tenant: "acme", Thread: "t", Created: moment(6), Interrupt: true}, store.BusyInterrupt); err != nil || !busy {
		t.Fatalf("interrupt: %v %v", busy, err)
	}
	r2, _ := c.Run(ctx, "acme", "r2")
	r1, _ = c.Run(ctx, "acme", "r1")
	r3, _ := c.Run(ctx, "acme", "r3")
	if r2.Status != store.RunCancelled || r2.Error == "" || r1.Stop != store.StopInterrupt || r1.Status != store.RunRunning || !r3.Interrupt || r3.Status != store.RunQueued {
		t.Fatalf("after the interrupt: r1 %+v, r2 %+v, r3 %+v", r1, r2, r3)
	}
	if rs, _ := c.ServerRuns(ctx, "s1"); len(rs) != 1 || rs[0].ID != "r1" || rs[0].Stop != store.StopInterrupt {
		t.Fatalf("s1's runs %v", rs)
	}
	if err := c.DeleteRun(ctx, "r3", r3.State()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Run(ctx, "acme", "r3"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleted run: %v", err)
	}

	// a run queued for a server is claimed by it at once on a free thread,
	// and queued for anyone on a busy one
	own := queued("o1", "o", 20)
	own.Server = "s2"
	if busy, err := c.EnqueueRun(ctx, own, store.BusyEnqueue); err != nil || busy || own.Status != store.RunRunning || own.Server != "s2" || !sameTime(own.Started, own.Created) {
		t.Fatalf("enqueue for s2 on a free thread: %v %v %+v", busy, err, own)
	}
	if r, err := c.Run(ctx, "acme", "o1"); err != nil || r.Status != store.RunRunning || r.Server != "s2" || !sameTime(r.Started, own.Created) {
		t.Fatalf("o1 as recorded: %+v %v", r, err)
	}
	if r, err := c.ClaimRun(ctx, "s1", "o1", moment(21)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("o1 claimed twice: %+v %v", r, err)
	}
	next := queued("o2", "o", 22)
	next.Server = "s2"
	if busy, err := c.EnqueueRun(ctx, next, store.BusyEnqueue); err != nil || !busy || next.Status != store.RunQueued || next.Server != "" {
		t.Fatalf("enqueue for s2 on a busy thread: %v %v %+v", busy, err, next)
	}
	if r, err := c.Run(ctx, "acme", "o2"); err != nil || r.Status != store.RunQueued || r.Server != "" || !r.Started.IsZero() {
		t.Fatalf("o2 as recorded: %+v %v", r, err)
	}
}

func testQueueOrder(t *testing.T, c store.Catalog) {
	threads(t, c, "a", "b", "c")
	for i, id := range []string{"a1", "a2", "b1", "a3"} {
		thread := id[:1]
		if _, err := c.EnqueueRun(ctx, queued(id, thread, i+1), store.BusyEnqueue); err != nil {
			t.Fatal(err)
		}
	}
	claim := func(want string) *store.RunRecord {
		t.Helper()
		r, err := c.ClaimRun(ctx, "s", "", moment(10))
		if want == "" {
			if !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("claimed %+v, want none", r)
			}
			return nil
		}
		if err != nil || r.ID != want {
			t.Fatalf("claimed %+v %v, want %s", r, err, want)
		}
		return r
	}
	a1 := claim("a1")
	claim("b1")
	claim("") // a2 waits for a1
	// a queued run cancelled is never claimed
	if r, err := c.RequestStop(ctx, "acme", "a2", store.StopCancel); err != nil || r.Status != store.RunCancelled || r.Error != "cancelled" || r.Finished.IsZero() {
		t.Fatalf("stop of a queued run: %+v %v", r, err)
	}
	if r, err := c.RequestStop(ctx, "acme", "a1", store.StopCancel); err != nil || r.Status != store.RunRunning || r.Stop != store.StopCancel {
		t.Fatalf("stop of a running run: %+v %v", r, err)
	}
	if _, err := c.RequestStop(ctx, "other", "a1", store.StopCancel); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("another tenant stopped a1: %v", err)
	}
	expect := a1.State()
	expect.Stop = store.StopCancel
	a1.Status, a1.Finished, a1.Stop = store.RunCancelled, moment(11), ""
	if err := c.UpdateRun(ctx, a1, expect, nil); err != nil {
		t.Fatal(err)
	}
	claim("a3")
	claim("")
	// a run queued later claims later, even with an earlier clock
	if _, err := c.EnqueueRun(ctx, queued("c1", "c", 50), store.BusyEnqueue); err != nil {
		t.Fatal(err)
	}
	if _, err := c.EnqueueRun(ctx, queued("c2", "c", 40), store.BusyEnqueue); err != nil {
		t.Fatal(err)
	}
	claim("c1")
}

// Servers claiming at once each get a different run, and a thread's runs
// run one at a time, in the order they were queued.
func testQueueConcurrentClaims(t *testing.T, c store.Catalog) {
	const nthreads, per = 5, 4
	for th := range nthreads {
		threads(t, c, fmt.Sprint("t", th))
	}
	for i := range per {
		for th := range nthreads {
			id := fmt.Sprintf("t%d-r%d", th, i)
			if _, err := c.EnqueueRun(ctx, queued(id, fmt.Sprint("t", th), i*nthreads+th), store.BusyEnqueue); err != nil {
				t.Fatal(err)
			}
		}
	}
	var mu sync.Mutex
	running := map[string]string{}
	order := map[string][]string{}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for s := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			idle := 0
			for idle < 20 {
				r, err := c.ClaimRun(ctx, fmt.Sprint("s", s), "", time.Now())
				if errors.Is(err, store.ErrNotFound) {
					idle++
					time.Sleep(time.Millisecond)
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				idle = 0
				mu.Lock()
				if other, busy := running[r.Thread]; busy {
					mu.Unlock()
					errs <- fmt.Errorf("%s claimed while %s runs on %s", r.ID, other, r.Thread)
					return
				}
				running[r.Thread] = r.ID
				order[r.Thread] = append(order[r.Thread], r.ID)
				mu.Unlock()
				time.Sleep(time.Millisecond)
				mu.Lock()
				delete(running, r.Thread)
				mu.Unlock()
				expect := r.State()
				r.Status, r.Finished = store.RunSucceeded, time.Now()
				if err := c.UpdateRun(ctx, r, expect, nil); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for th := range nthreads {
		var want []string
		for i := range per {
			want = append(want, fmt.Sprintf("t%d-r%d", th, i))
		}
		if got := order[fmt.Sprint("t", th)]; !reflect.DeepEqual(got, want) {
			t.Fatalf("thread t%d ran %v, want %v", th, got, want)
		}
	}
}

// Runs queued at once on one thread are judged one after another, each
// seeing the ones before it: with reject, one is claimed and the others
// refused; with enqueue, one is claimed and the others queued behind it,
// each at its own time, whatever the times they came with.
func testQueueConcurrentEnqueues(t *testing.T, c store.Catalog) {
	const n = 8
	threads(t, c, "t", "u")
	enqueue := func(thread string, policy store.BusyPolicy) ([]*store.RunRecord, []bool, []error) {
		runs, busy, errs := make([]*store.RunRecord, n), make([]bool, n), make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			runs[i] = queued(fmt.Sprintf("%s-r%d", thread, i), thread, 1)
			runs[i].Server, runs[i].Lease = fmt.Sprint("s", i), &store.LeaseClaim{Owner: fmt.Sprint("e", i), TTL: time.Minute}
			wg.Go(func() { busy[i], errs[i] = c.EnqueueRun(ctx, runs[i], policy) })
		}
		wg.Wait()
		return runs, busy, errs
	}

	runs, busy, errs := enqueue("t", store.BusyReject)
	won := -1
	for i, err := range errs {
		switch {
		case err == nil && !busy[i] && runs[i].Status == store.RunRunning && runs[i].Lease.Taken:
			if won >= 0 {
				t.Fatalf("reject: %s and %s both claimed the thread", runs[won].ID, runs[i].ID)
			}
			won = i
		case errors.Is(err, store.ErrBusy) && busy[i] && !runs[i].Lease.Taken:
			if _, err := c.Run(ctx, "acme", runs[i].ID); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("reject: the refused %s was recorded (%v)", runs[i].ID, err)
			}
		default:
			t.Fatalf("reject: %s: busy %v, %v, %+v %+v", runs[i].ID, busy[i], err, runs[i], runs[i].Lease)
		}
	}
	if won < 0 {
		t.Fatal("reject: no run claimed the free thread")
	}

	runs, busy, errs = enqueue("u", store.BusyEnqueue)
	seen := map[int64]string{}
	claimed := -1
	for i, err := range errs {
		if err != nil {
			t.Fatalf("enqueue: %s: %v", runs[i].ID, err)
		}
		rec, err := c.Run(ctx, "acme", runs[i].ID)
		if err != nil || rec.Status != runs[i].Status || rec.Server != runs[i].Server || !sameTime(rec.Created, runs[i].Created) {
			t.Fatalf("enqueue: %s recorded as %+v (%v), returned as %+v", runs[i].ID, rec, err, runs[i])
		}
		if other, ok := seen[rec.Created.UnixNano()]; ok {
			t.Fatalf("enqueue: %s and %s were queued at the same time %v", other, rec.ID, rec.Created)
		}
		seen[rec.Created.UnixNano()] = rec.ID
		if !busy[i] {
			if claimed >= 0 || rec.Status != store.RunRunning || !runs[i].Lease.Taken {
				t.Fatalf("enqueue: %s claimed (%+v, lease %+v), %d before it", rec.ID, rec, runs[i].Lease, claimed)
			}
			claimed = i
		} else if rec.Status != store.RunQueued || rec.Server != "" || runs[i].Lease.Taken {
			t.Fatalf("enqueue: %s behind another: %+v, lease %+v", rec.ID, rec, runs[i].Lease)
		}
	}
	if claimed < 0 {
		t.Fatal("enqueue: no run claimed the free thread")
	}
	for i := range runs {
		if i != claimed && !runs[i].Created.After(runs[claimed].Created) {
			t.Fatalf("enqueue: %s queued at %v, before the claimed %s at %v", runs[i].ID, runs[i].Created, runs[claimed].ID, runs[claimed].Created)
		}
	}
}

// BenchEnqueueRun queues runs claimed at once with their thread's lease,
// as a server queues the run its caller waits for, each on a thread of
// its own (a free one).
func BenchEnqueueRun(b *testing.B, c store.Catalog) {
	ids := make([]string, b.N)
	for i := range ids {
		benchRuns++
		ids[i] = fmt.Sprint("enqueue-", benchRuns)
		if err := c.CreateThread(ctx, &store.ThreadRecord{ID: ids[i], Tenant: "acme", Flow: "f", Created: moment(0)}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i, id := range ids {
		r := &store.RunRecord{ID: id + "-run", Tenant: "acme", Thread: id, Flow: "f", Created: moment(i + 1), Server: "s1",
			Lease: &store.LeaseClaim{Owner: "e1", TTL: time.Minute}}
		if busy, err := c.EnqueueRun(ctx, r, store.BusyReject); err != nil || busy || !r.Lease.Taken {
			b.Fatalf("%v %v %+v", busy, err, r)
		}
	}
}

// Heartbeats and their staleness are judged by the store's clock alone:
// no time the servers read from their own clocks enters.
func testQueueAdopt(t *testing.T, c store.Catalog) {
	threads(t, c, "x", "y")
	for i, id := range []string{"x", "y"} {
		if _, err := c.EnqueueRun(ctx, queued(id, id, i), store.BusyEnqueue); err != nil {
			t.Fatal(err)
		}
	}
	// a run named is claimed only if it is runnable
	if _, err := c.ClaimRun(ctx, "dead", "nope", moment(10)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("claimed a run that does not exist: %v", err)
	}
	if r, err := c.ClaimRun(ctx, "dead", "x", moment(10)); err != nil || r.ID != "x" {
		t.Fatalf("claim x: %+v %v", r, err)
	}
	if _, err := c.ClaimRun(ctx, "alive", "", moment(10)); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"dead", "alive"} {
		if err := c.Beat(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	// nothing is stale yet
	if r, err := c.AdoptRun(ctx, "heir", time.Minute); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("adopted %+v while every server was alive", r)
	}
	// dead's beat is older than deadAfter by the store's clock once
	// this much has passed on any clock since it returned; alive beats
	// all along, so that a busy machine's pauses between two calls here
	// do not leave it without a beat for that long
	const deadAfter = time.Second
	time.Sleep(deadAfter + 200*time.Millisecond)
	if err := c.Beat(ctx, "alive"); err != nil {
		t.Fatal(err)
	}
	beating, beaten := make(chan struct{}), make(chan error, 1)
	go func() {
		defer close(beaten)
		for {
			select {
			case <-beating:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if err := c.Beat(ctx, "alive"); err != nil {
				beaten <- err
				return
			}
		}
	}()
	r, err := c.AdoptRun(ctx, "heir", deadAfter)
	r2, err2 := c.AdoptRun(ctx, "heir", deadAfter)
	close(beating)
	if err := <-beaten; err != nil {
		t.Fatal(err)
	}
	if err != nil || r.ID != "x" || r.Server != "heir" || r.Status != store.RunRunning {
		t.Fatalf("adopted %+v %v, want x", r, err)
	}
	if !errors.Is(err2, store.ErrNotFound) {
		t.Fatalf("adopted %+v twice", r2)
	}
	if rs, _ := c.ServerRuns(ctx, "heir"); len(rs) != 1 || rs[0].ID != "x" {
		t.Fatalf("heir runs %v", rs)
	}
}

// A change of a run's record is made only if the record still stands as
// its maker last saw it: a shutdown that queues a run again does not
// overwrite a cancel another server recorded, a server does not end a
// run another server adopted, and a refused run is not deleted from
// under the server that adopted it.
func testRunCompareAndSet(t *testing.T, c store.Catalog) {
	threads(t, c, "t", "u")
	r := queued("r", "t", 1)
	r.Server = "a"
	if _, err := c.EnqueueRun(ctx, r, store.BusyEnqueue); err != nil || r.Status != store.RunRunning {
		t.Fatalf("enqueue for a: %+v %v", r, err)
	}
	seen := r.State()
	// b asks a to cancel the run while a queues it again
	if _, err := c.RequestStop(ctx, "acme", "r", store.StopCancel); err != nil {
		t.Fatal(err)
	}
	requeue := *r
	requeue.Status, requeue.Server, requeue.Resume = store.RunQueued, "", true
	if err := c.UpdateRun(ctx, &requeue, seen, nil); !errors.Is(err, store.ErrRunChanged) {
		t.Fatalf("a requeue over a cancel: %v", err)
	}
	got, err := c.Run(ctx, "acme", "r")
	if err != nil || got.Status != store.RunRunning || got.Stop != store.StopCancel {
		t.Fatalf("the run after the refused change: %+v %v", got, err)
	}
	// a reads the record again and decides again
	end := *got
	end.Status, end.Stop, end.Error, end.Finished = store.RunCancelled, "", "cancelled", moment(2)
	if err := c.UpdateRun(ctx, &end, got.State(), nil); err != nil {
		t.Fatal(err)
	}
	if got, _ := c.Run(ctx, "acme", "r"); got.Status != store.RunCancelled || got.Error != "cancelled" {
		t.Fatalf("the cancelled run: %+v", got)
	}

	// a run adopted by c is not ended by a, nor deleted
	u := queued("u1", "u", 3)
	u.Server = "a"
	if _, err := c.EnqueueRun(ctx, u, store.BusyEnqueue); err != nil {
		t.Fatal(err)
	}
	mine := u.State()
	if err := c.Beat(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	adopted, err := c.AdoptRun(ctx, "c", time.Minute) // a never beat: dead
	if err != nil || adopted.ID != "u1" {
		t.Fatalf("adopt: %+v %v", adopted, err)
	}
	done := *u
	done.Status, done.Finished = store.RunSucceeded, moment(4)
	if err := c.UpdateRun(ctx, &done, mine, nil); !errors.Is(err, store.ErrRunChanged) {
		t.Fatalf("a ended a run c adopted: %v", err)
	}
	if err := c.DeleteRun(ctx, "u1", mine); !errors.Is(err, store.ErrRunChanged) {
		t.Fatalf("a deleted a run c adopted: %v", err)
	}
	if err := c.DeleteRun(ctx, "nope", mine); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleting a run that does not exist: %v", err)
	}
	// nor does a add to its events, which c's go on from
	ev := func(seq int64) []store.EventRecord { return []store.EventRecord{{Seq: seq, Data: []byte(`{}`)}} }
	if err := c.AppendEvents(ctx, "u1", "a", ev(1)); !errors.Is(err, store.ErrRunChanged) {
		t.Fatalf("a added to the events of a run c adopted: %v", err)
	}
	if err := c.AppendEvents(ctx, "u1", "c", ev(1)); err != nil {
		t.Fatal(err)
	}
	// a run's end and its last events are recorded together or not at
	// all: not when the record changed, nor when an event's seq is taken
	if err := c.UpdateRun(ctx, &done, mine, ev(2)); !errors.Is(err, store.ErrRunChanged) {
		t.Fatalf("a ended a run c adopted: %v", err)
	}
	if err := c.UpdateRun(ctx, &done, adopted.State(), ev(1)); !errors.Is(err, store.ErrExists) {
		t.Fatalf("an end with an event whose seq is taken: %v", err)
	}
	if got, _ := c.Run(ctx, "acme", "u1"); got.Status != store.RunRunning {
		t.Fatalf("the end was recorded without its events: %+v", got)
	}
	if evs, _ := c.Events(ctx, "u1", 0, 0); len(evs) != 1 {
		t.Fatalf("a refused end left events: %v", evs)
	}
	if err := c.UpdateRun(ctx, &done, adopted.State(), ev(2)); err != nil {
		t.Fatal(err)
	}
	if evs, _ := c.Events(ctx, "u1", 0, 0); len(evs) != 2 {
		t.Fatalf("the end's events: %v", evs)
	}
	if err := c.AppendEvents(ctx, "u1", "c", ev(3)); !errors.Is(err, store.ErrRunChanged) {
		t.Fatalf("events added to a run that ended: %v", err)
	}

	// of concurrent changes from one state, exactly one is made
	v := queued("v1", "u", 5)
	if _, err := c.EnqueueRun(ctx, v, store.BusyEnqueue); err != nil {
		t.Fatal(err)
	}
	from := v.State()
	var wg sync.WaitGroup
	var mu sync.Mutex
	made := 0
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			next := *v
			next.Status, next.Server = store.RunRunning, fmt.Sprint("s", i)
			if err := c.UpdateRun(ctx, &next, from, nil); err == nil {
				mu.Lock()
				made++
				mu.Unlock()
			} else if !errors.Is(err, store.ErrRunChanged) {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if made != 1 {
		t.Fatalf("%d of 8 concurrent changes from one state were made", made)
	}
}

// A run claimed as it is queued takes its thread's lease in the same
// step when asked, on the store's clock as Acquire does; a run queued
// behind another takes none, and another holder's lease that has not
// expired keeps it while the run is claimed all the same.
func testQueueClaimTakesTheLease(t *testing.T, c store.Catalog) {
	st := c.(store.Store)
	threads(t, c, "t", "u", "w")
	claim := func(id, thread string, at int, owner string, policy store.BusyPolicy) *store.RunRecord {
		t.Helper()
		r := queued(id, thread, at)
		r.Server, r.Lease = "s1", &store.LeaseClaim{Owner: owner, TTL: time.Minute}
		if _, err := c.EnqueueRun(ctx, r, policy); err != nil {
			t.Fatal(err)
		}
		return r
	}
	holder := func(thread string) string {
		t.Helper()
		var le *store.LeasedError
		if err := st.Acquire(ctx, thread, "someone-else", time.Minute); !errors.As(err, &le) {
			t.Fatalf("%s: the lease is free (%v)", thread, err)
		}
		if time.Until(le.Until) < 50*time.Second {
			t.Fatalf("%s: the lease ends at %v, a minute was asked", thread, le.Until)
		}
		return le.Owner
	}
	r := claim("r1", "t", 1, "e1", store.BusyReject)
	if r.Status != store.RunRunning || !r.Lease.Taken || holder("t") != "e1" {
		t.Fatalf("claimed with its lease: %+v %+v", r, r.Lease)
	}
	if err := st.Acquire(ctx, "t", "e1", time.Minute); err != nil {
		t.Fatalf("the owner takes its lease again: %v", err)
	}
	if r2 := claim("r2", "t", 2, "e3", store.BusyEnqueue); r2.Status != store.RunQueued || r2.Lease.Taken || holder("t") != "e1" {
		t.Fatalf("queued behind r1: %+v %+v", r2, r2.Lease)
	}
	if err := st.Acquire(ctx, "u", "other", time.Minute); err != nil {
		t.Fatal(err)
	}
	if r3 := claim("r3", "u", 3, "e1", store.BusyReject); r3.Status != store.RunRunning || r3.Lease.Taken || holder("u") != "other" {
		t.Fatalf("beside another holder's lease: %+v %+v", r3, r3.Lease)
	}
	if err := st.Acquire(ctx, "w", "gone", time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	if r4 := claim("r4", "w", 4, "e1", store.BusyReject); !r4.Lease.Taken || holder("w") != "e1" {
		t.Fatalf("an expired lease: %+v %+v", r4, r4.Lease)
	}
	if rec, err := c.Run(ctx, "acme", "r1"); err != nil || rec.Lease != nil {
		t.Fatalf("the record keeps the claim's lease: %+v %v", rec, err)
	}
}
