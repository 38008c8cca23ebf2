package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/store"
)

// RunCatalog runs the suite of store.Catalog; open returns an empty store
// for each subtest.
func RunCatalog(t *testing.T, open func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, c store.Catalog)
	}{
		{"ThreadsByTenant", testCatalogThreads},
		{"ThreadPagesAndFilters", testCatalogThreadPages},
		{"RunsAndEvents", testCatalogRuns},
		{"ConcurrentEventAppends", testCatalogConcurrentEvents},
		{"Keys", testCatalogKeys},
		{"QueuePolicies", testQueuePolicies},
		{"QueueOrderAndStops", testQueueOrder},
		{"QueueConcurrentClaims", testQueueConcurrentClaims},
		{"QueueAdoptsRunsOfDeadServers", testQueueAdopt},
		{"RunChangesCompareAndSet", testRunCompareAndSet},
		{"ThreadDeletion", testThreadDeletion},
		{"PagedReads", testPagedReads},
		{"PackedEvents", testPackedEvents},
		{"NodeCache", func(t *testing.T, c store.Catalog) { testNodeCache(t, c.(store.Cache)) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := open(t)
			t.Cleanup(func() { st.Close() })
			c, err := store.CatalogOf(st)
			if err != nil {
				t.Fatal(err)
			}
			tc.fn(t, c)
		})
	}
}

// moment is a time the stores keep exactly (they keep microseconds).
func moment(i int) time.Time { return time.Date(2026, 1, 1, 0, 0, i, 0, time.UTC) }

func sameTime(a, b time.Time) bool { return a.Equal(b) }

func testCatalogThreads(t *testing.T, c store.Catalog) {
	tr := &store.ThreadRecord{ID: "t1", Tenant: "acme", Flow: "interview", Metadata: map[string]string{"candidate": "ada"}, Created: moment(1)}
	if err := c.CreateThread(ctx, tr); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateThread(ctx, &store.ThreadRecord{ID: "t1", Tenant: "other", Flow: "x", Created: moment(2)}); !errors.Is(err, store.ErrExists) {
		t.Fatalf("a second thread t1: %v", err)
	}
	got, err := c.Thread(ctx, "acme", "t1")
	if err != nil || got.Flow != "interview" || got.Metadata["candidate"] != "ada" || !sameTime(got.Created, moment(1)) {
		t.Fatalf("thread %+v %v", got, err)
	}
	// another tenant sees nothing
	if _, err := c.Thread(ctx, "other", "t1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("another tenant read t1: %v", err)
	}
	if err := c.DeleteThread(ctx, "other", "t1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("another tenant deleted t1: %v", err)
	}
	// deleting a thread deletes its runs and their events
	run := &store.RunRecord{ID: "r1", Tenant: "acme", Thread: "t1", Flow: "interview", Status: store.RunSucceeded, Created: moment(3)}
	if err := c.CreateRun(ctx, run); err != nil {
		t.Fatal(err)
	}
	if err := c.AppendEvents(ctx, "r1", "", []store.EventRecord{{Seq: 1, Data: []byte(`{"type":"run_start"}`)}}); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteThread(ctx, "acme", "t1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Thread(ctx, "acme", "t1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleted thread still read: %v", err)
	}
	if _, err := c.Run(ctx, "acme", "r1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a deleted thread's run still read: %v", err)
	}
	if evs, err := c.Events(ctx, "r1", 0, 0); err != nil || len(evs) != 0 {
		t.Fatalf("a deleted thread's events still read: %v %v", evs, err)
	}
	// the id is free again
	if err := c.CreateThread(ctx, tr); err != nil {
		t.Fatal(err)
	}
}

func testCatalogThreadPages(t *testing.T, c store.Catalog) {
	for i := 1; i <= 7; i++ {
		flow := "interview"
		if i%2 == 0 {
			flow = "review"
		}
		md := map[string]string{"batch": fmt.Sprint(i % 3)}
		if err := c.CreateThread(ctx, &store.ThreadRecord{ID: fmt.Sprintf("t%d", i), Tenant: "acme", Flow: flow, Metadata: md, Created: moment(i)}); err != nil {
			t.Fatal(err)
		}
	}
	// one at the same instant as t7: ids break the tie
	if err := c.CreateThread(ctx, &store.ThreadRecord{ID: "t7b", Tenant: "acme", Flow: "interview", Created: moment(7)}); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateThread(ctx, &store.ThreadRecord{ID: "x", Tenant: "other", Flow: "interview", Created: moment(9)}); err != nil {
		t.Fatal(err)
	}
	ids := func(ts []*store.ThreadRecord) []string {
		var out []string
		for _, t := range ts {
			out = append(out, t.ID)
		}
		return out
	}
	var all []string
	after := ""
	for page := 0; page < 10; page++ {
		ts, err := c.ListThreads(ctx, store.ThreadQuery{Tenant: "acme", After: after, Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		if len(ts) == 0 {
			break
		}
		all = append(all, ids(ts)...)
		after = ts[len(ts)-1].ID
	}
	if want := []string{"t7b", "t7", "t6", "t5", "t4", "t3", "t2", "t1"}; !reflect.DeepEqual(all, want) {
		t.Fatalf("pages %v, want %v", all, want)
	}
	ts, err := c.ListThreads(ctx, store.ThreadQuery{Tenant: "acme", Flow: "review"})
	if err != nil || !reflect.DeepEqual(ids(ts), []string{"t6", "t4", "t2"}) {
		t.Fatalf("by flow %v %v", ids(ts), err)
	}
	ts, err = c.ListThreads(ctx, store.ThreadQuery{Tenant: "acme", Flow: "interview", Metadata: map[string]string{"batch": "1"}})
	if err != nil || !reflect.DeepEqual(ids(ts), []string{"t7", "t1"}) {
		t.Fatalf("by flow and metadata %v %v", ids(ts), err)
	}
	ts, err = c.ListThreads(ctx, store.ThreadQuery{Tenant: "acme", Metadata: map[string]string{"batch": "1"}, Limit: 1, After: "t7"})
	if err != nil || !reflect.DeepEqual(ids(ts), []string{"t4"}) {
		t.Fatalf("filtered page %v %v", ids(ts), err)
	}
	if _, err := c.ListThreads(ctx, store.ThreadQuery{Tenant: "other", After: "t3"}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("paging after another tenant's thread: %v", err)
	}
}

func testCatalogRuns(t *testing.T, c store.Catalog) {
	if err := c.CreateThread(ctx, &store.ThreadRecord{ID: "t", Tenant: "acme", Flow: "f", Created: moment(0)}); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		r := &store.RunRecord{ID: fmt.Sprintf("r%d", i), Tenant: "acme", Thread: "t", Flow: "f", FlowVersion: "v1",
			Status: store.RunQueued, Input: json.RawMessage(`{"say":"hi"}`), Created: moment(i)}
		if err := c.CreateRun(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.CreateRun(ctx, &store.RunRecord{ID: "r1", Tenant: "acme", Thread: "t", Created: moment(5)}); !errors.Is(err, store.ErrExists) {
		t.Fatalf("a second run r1: %v", err)
	}
	r, err := c.Run(ctx, "acme", "r2")
	if err != nil || r.Status != store.RunQueued || string(r.Input) != `{"say":"hi"}` || r.FlowVersion != "v1" {
		t.Fatalf("run %+v %v", r, err)
	}
	if n, err := c.QueueDepth(ctx); n != 3 || err != nil {
		t.Fatalf("queue depth %d %v, want 3", n, err)
	}
	expect := r.State()
	r.Status, r.Started, r.Finished, r.Checkpoint, r.Error = store.RunFailed, moment(10), moment(11), 42, "boom"
	if err := c.UpdateRun(ctx, r, expect, nil); err != nil {
		t.Fatal(err)
	}
	if n, err := c.QueueDepth(ctx); n != 2 || err != nil {
		t.Fatalf("queue depth %d %v after a run ended, want 2", n, err)
	}
	r, err = c.Run(ctx, "acme", "r2")
	if err != nil || r.Status != store.RunFailed || r.Error != "boom" || r.Checkpoint != 42 || !sameTime(r.Finished, moment(11)) || !sameTime(r.Started, moment(10)) {
		t.Fatalf("updated run %+v %v", r, err)
	}
	if _, err := c.Run(ctx, "other", "r2"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("another tenant read r2: %v", err)
	}
	if err := c.UpdateRun(ctx, &store.RunRecord{ID: "nope"}, store.RunState{}, nil); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("update of a missing run: %v", err)
	}
	runs, err := c.Runs(ctx, store.RunQuery{Tenant: "acme", Thread: "t", Limit: 2})
	if err != nil || len(runs) != 2 || runs[0].ID != "r3" || runs[1].ID != "r2" {
		t.Fatalf("runs %v %v", runs, err)
	}
	if runs, _ := c.Runs(ctx, store.RunQuery{Tenant: "other", Thread: "t"}); len(runs) != 0 {
		t.Fatalf("another tenant lists %d runs", len(runs))
	}
	if err := c.AppendEvents(ctx, "r1", "", []store.EventRecord{{Seq: 1, Data: []byte(`{"n":1}`)}}); err != nil {
		t.Fatal(err)
	}
	var batch []store.EventRecord
	for seq := int64(2); seq <= 5; seq++ {
		batch = append(batch, store.EventRecord{Seq: seq, Data: []byte(fmt.Sprintf(`{"n":%d}`, seq))})
	}
	if err := c.AppendEvents(ctx, "r1", "", batch); err != nil {
		t.Fatal(err)
	}
	if err := c.AppendEvents(ctx, "r1", "", nil); err != nil {
		t.Fatalf("an empty batch: %v", err)
	}
	// a batch with one seq already recorded records none of its events
	if err := c.AppendEvents(ctx, "r1", "", []store.EventRecord{{Seq: 6, Data: []byte(`{}`)}, {Seq: 3, Data: []byte(`{}`)}}); !errors.Is(err, store.ErrExists) {
		t.Fatalf("a repeated event seq: %v", err)
	}
	if evs, _ := c.Events(ctx, "r1", 5, 0); len(evs) != 0 {
		t.Fatalf("a refused batch left %d events", len(evs))
	}
	evs, err := c.Events(ctx, "r1", 2, 0)
	if err != nil || len(evs) != 3 || evs[0].Seq != 3 || string(evs[2].Data) != `{"n":5}` {
		t.Fatalf("events after 2: %v %v", evs, err)
	}
	if evs, _ := c.Events(ctx, "r2", 0, 0); len(evs) != 0 {
		t.Fatalf("r2 has %d events", len(evs))
	}
}

// Events appended concurrently to different runs all land, each run's in
// order.
func testCatalogConcurrentEvents(t *testing.T, c store.Catalog) {
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for r := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := int64(1); seq <= 25; seq++ {
				if err := c.AppendEvents(ctx, fmt.Sprint("run", r), "", []store.EventRecord{{Seq: seq, Data: []byte(`{}`)}}); err != nil {
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
	for r := range 4 {
		evs, err := c.Events(ctx, fmt.Sprint("run", r), 0, 0)
		if err != nil || len(evs) != 25 || evs[24].Seq != 25 {
			t.Fatalf("run%d: %d events, %v", r, len(evs), err)
		}
	}
}

func testCatalogKeys(t *testing.T, c store.Catalog) {
	k := &store.KeyRecord{ID: "k1", Hash: "h1", Tenant: "acme", Name: "ci", Created: moment(1)}
	if err := c.CreateKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateKey(ctx, &store.KeyRecord{ID: "k2", Hash: "h1", Tenant: "x", Created: moment(2)}); !errors.Is(err, store.ErrExists) {
		t.Fatalf("a second key with hash h1: %v", err)
	}
	if err := c.CreateKey(ctx, &store.KeyRecord{ID: "k0", Hash: "h0", Tenant: "root", Admin: true, Created: moment(0)}); err != nil {
		t.Fatal(err)
	}
	got, err := c.KeyByHash(ctx, "h1")
	if err != nil || got.ID != "k1" || got.Tenant != "acme" || got.Admin || got.Name != "ci" || !got.Revoked.IsZero() {
		t.Fatalf("key %+v %v", got, err)
	}
	if _, err := c.KeyByHash(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a missing key: %v", err)
	}
	if err := c.RevokeKey(ctx, "k1", moment(5)); err != nil {
		t.Fatal(err)
	}
	got, _ = c.KeyByHash(ctx, "h1")
	if !sameTime(got.Revoked, moment(5)) {
		t.Fatalf("revoked at %v", got.Revoked)
	}
	if err := c.RevokeKey(ctx, "nope", moment(5)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("revoking a missing key: %v", err)
	}
	keys, err := c.Keys(ctx, "")
	if err != nil || len(keys) != 2 || keys[0].ID != "k1" || !keys[1].Admin {
		t.Fatalf("all keys %v %v", keys, err)
	}
	keys, _ = c.Keys(ctx, "root")
	if len(keys) != 1 || keys[0].ID != "k0" {
		t.Fatalf("root's keys %v", keys)
	}
}

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
	time.Sleep(300 * time.Millisecond)
	if err := c.Beat(ctx, "alive"); err != nil {
		t.Fatal(err)
	}
	r, err := c.AdoptRun(ctx, "heir", 200*time.Millisecond)
	if err != nil || r.ID != "x" || r.Server != "heir" || r.Status != store.RunRunning {
		t.Fatalf("adopted %+v %v, want x", r, err)
	}
	if r, err := c.AdoptRun(ctx, "heir", 200*time.Millisecond); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("adopted %+v twice", r)
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

// A thread being deleted takes no run and is not listed, but its record
// stays readable (for the deletion to be finished); a thread with a
// queued or running run can be neither marked nor deleted.
func testThreadDeletion(t *testing.T, c store.Catalog) {
	threads(t, c, "t", "u")
	if _, err := c.EnqueueRun(ctx, queued("r", "u", 1), store.BusyEnqueue); err != nil {
		t.Fatal(err)
	}
	if err := c.MarkThreadDeleting(ctx, "acme", "u", true); !errors.Is(err, store.ErrBusy) {
		t.Fatalf("marking a busy thread: %v", err)
	}
	if err := c.DeleteThread(ctx, "acme", "u"); !errors.Is(err, store.ErrBusy) {
		t.Fatalf("deleting a busy thread: %v", err)
	}
	if err := c.MarkThreadDeleting(ctx, "other", "t", true); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("another tenant marked t: %v", err)
	}
	if err := c.MarkThreadDeleting(ctx, "acme", "t", true); err != nil {
		t.Fatal(err)
	}
	if _, err := c.EnqueueRun(ctx, queued("r2", "t", 2), store.BusyEnqueue); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a run on a thread being deleted: %v", err)
	}
	if th, err := c.Thread(ctx, "acme", "t"); err != nil || !th.Deleting {
		t.Fatalf("the thread being deleted reads %+v %v", th, err)
	}
	if ts, err := c.ListThreads(ctx, store.ThreadQuery{Tenant: "acme"}); err != nil || len(ts) != 1 || ts[0].ID != "u" {
		t.Fatalf("the listing %v %v", ts, err)
	}
	if err := c.CreateThread(ctx, &store.ThreadRecord{ID: "t", Tenant: "acme", Flow: "f", Created: moment(3)}); !errors.Is(err, store.ErrExists) {
		t.Fatalf("a thread created over one being deleted: %v", err)
	}
	// a deletion given up
	if err := c.MarkThreadDeleting(ctx, "acme", "t", false); err != nil {
		t.Fatal(err)
	}
	if ts, _ := c.ListThreads(ctx, store.ThreadQuery{Tenant: "acme"}); len(ts) != 2 {
		t.Fatalf("the listing after the deletion was given up: %v", ts)
	}
	if _, err := c.EnqueueRun(ctx, queued("r2", "t", 2), store.BusyEnqueue); err != nil {
		t.Fatal(err)
	}
}

// Events and runs are read a page at a time, in order, from a cursor.
func testPagedReads(t *testing.T, c store.Catalog) {
	threads(t, c, "t")
	if _, err := c.LastEvent(ctx, "r"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the last event of a run with none: %v", err)
	}
	const n = store.MaxPage + 250
	var evs []store.EventRecord
	for seq := int64(1); seq <= n; seq++ {
		evs = append(evs, store.EventRecord{Seq: seq, Data: []byte(fmt.Sprintf(`{"n":%d}`, seq))})
	}
	if err := c.AppendEvents(ctx, "r", "", evs); err != nil {
		t.Fatal(err)
	}
	if last, err := c.LastEvent(ctx, "r"); err != nil || last.Seq != n || string(last.Data) != fmt.Sprintf(`{"n":%d}`, n) {
		t.Fatalf("the last event: %+v %v", last, err)
	}
	var read []int64
	for after := int64(0); ; {
		page, err := c.Events(ctx, "r", after, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > store.MaxPage {
			t.Fatalf("one read returned %d events", len(page))
		}
		if len(page) == 0 {
			break
		}
		for _, e := range page {
			read = append(read, e.Seq)
		}
		after = page[len(page)-1].Seq
	}
	if len(read) != n || read[0] != 1 || read[n-1] != n {
		t.Fatalf("read %d events in pages", len(read))
	}
	if page, _ := c.Events(ctx, "r", 10, 5); len(page) != 5 || page[0].Seq != 11 {
		t.Fatalf("a page of 5 after 10: %v", page)
	}
	for i := range 7 {
		r := &store.RunRecord{ID: fmt.Sprintf("r%d", i), Tenant: "acme", Thread: "t", Flow: "f", Status: store.RunSucceeded, Created: moment(i / 2)}
		if err := c.CreateRun(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	var ids []string
	for before := ""; ; {
		page, err := c.Runs(ctx, store.RunQuery{Tenant: "acme", Thread: "t", Before: before, Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > 3 {
			t.Fatalf("a page of %d runs", len(page))
		}
		if len(page) == 0 {
			break
		}
		for _, r := range page {
			ids = append(ids, r.ID)
		}
		before = page[len(page)-1].ID
	}
	if want := []string{"r6", "r5", "r4", "r3", "r2", "r1", "r0"}; !reflect.DeepEqual(ids, want) {
		t.Fatalf("runs in pages %v, want %v", ids, want)
	}
	if _, err := c.Runs(ctx, store.RunQuery{Tenant: "other", Thread: "t", Before: "r3"}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("paging after another tenant's run: %v", err)
	}
}

func testNodeCache(t *testing.T, c store.Cache) {
	now := moment(1)
	if _, ok, err := c.CacheGet(ctx, "k", now); ok || err != nil {
		t.Fatalf("an empty cache: %v %v", ok, err)
	}
	if err := c.CachePut(ctx, "k", []byte("v1"), now, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if err := c.CachePut(ctx, "k", []byte("v2"), now, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := c.CacheGet(ctx, "k", moment(1000)); !ok || err != nil || string(v) != "v2" {
		t.Fatalf("kept for ever: %q %v %v", v, ok, err)
	}
	if err := c.CachePut(ctx, "t", []byte("x"), now, moment(10)); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := c.CacheGet(ctx, "t", moment(9)); !ok {
		t.Fatal("expired early")
	}
	if _, ok, _ := c.CacheGet(ctx, "t", moment(10)); ok {
		t.Fatal("kept past its expiry")
	}
	// bounded: beyond the limit the expired go, then the oldest
	limit := store.CacheLimit
	store.CacheLimit = 3
	defer func() { store.CacheLimit = limit }()
	for i, k := range []string{"a", "b", "c", "d"} {
		if err := c.CachePut(ctx, k, []byte(k), moment(20+i), time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
	for k, want := range map[string]bool{"t": false, "k": false, "a": false, "b": true, "c": true, "d": true} {
		if _, ok, _ := c.CacheGet(ctx, k, moment(30)); ok != want {
			t.Errorf("after the bound, %s kept: %v", k, ok)
		}
	}
}

// benchRuns numbers the benchmarks' runs.
var benchRuns int

// BenchAppendEvents records batches of a run's events (8 to a batch, as a
// step's node and state events come): by anyone (holder ""), and by the
// server holding the run, which the store checks in the same step.
func BenchAppendEvents(b *testing.B, c store.Catalog) {
	if err := c.CreateThread(ctx, &store.ThreadRecord{ID: "bench", Tenant: "acme", Flow: "f", Created: moment(0)}); err != nil {
		b.Fatal(err)
	}
	data := []byte(`{"type":"node_end","run":"r","thread":"bench","step":3,"time":"2026-01-01T00:00:00Z","node":"think","update":{"n":1}}`)
	for _, holder := range []string{"", "s1"} {
		name := "anyone"
		if holder != "" {
			name = "holder"
		}
		b.Run(name, func(b *testing.B) {
			benchRuns++
			run := &store.RunRecord{ID: fmt.Sprint("run-", name, benchRuns), Tenant: "acme", Thread: "bench", Flow: "f", Created: moment(benchRuns), Server: "s1"}
			if _, err := c.EnqueueRun(ctx, run, store.BusyEnqueue); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			seq := int64(0)
			batch := make([]store.EventRecord, 8)
			for b.Loop() {
				for i := range batch {
					seq++
					batch[i] = store.EventRecord{Seq: seq, Data: data}
				}
				if err := c.AppendEvents(ctx, run.ID, holder, batch); err != nil {
					b.Fatal(err)
				}
			}
			end := *run
			end.Status = store.RunSucceeded
			if err := c.UpdateRun(ctx, &end, run.State(), nil); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// A run's events packed (PackEvents) read as they were, by the same
// numbers, through Events and LastEvent, in pages; only ended runs are
// listed to pack and packed, each once; a run's later events follow its
// packed ones; deleting the run deletes its pack.
func testPackedEvents(t *testing.T, c store.Catalog) {
	ev := func(seq int64, typ string) store.EventRecord {
		return store.EventRecord{Seq: seq, Data: fmt.Appendf(nil, `{"type":%q,"text":"%d é \u0000 %s"}`, typ, seq, strings.Repeat("x", int(seq)))}
	}
	var all []store.EventRecord
	for seq := int64(1); seq <= 40; seq++ {
		all = append(all, ev(seq, "node_output"))
	}
	runs := []*store.RunRecord{
		{ID: "ended-1", Tenant: "acme", Thread: "t", Status: store.RunSucceeded, Created: moment(1), Finished: moment(10)},
		{ID: "ended-2", Tenant: "acme", Thread: "t", Status: store.RunFailed, Created: moment(2), Finished: moment(5)},
		{ID: "late", Tenant: "acme", Thread: "t", Status: store.RunCancelled, Created: moment(3), Finished: moment(50)},
		{ID: "running", Tenant: "acme", Thread: "t", Status: store.RunRunning, Server: "s", Created: moment(4), Started: moment(4)},
		{ID: "quiet", Tenant: "acme", Thread: "t", Status: store.RunSucceeded, Created: moment(5), Finished: moment(6)},
	}
	for _, r := range runs {
		if err := c.CreateRun(ctx, r); err != nil {
			t.Fatal(err)
		}
		if r.ID != "quiet" {
			if err := c.AppendEvents(ctx, r.ID, "", all); err != nil {
				t.Fatal(err)
			}
		}
	}
	due, err := c.RunsToPack(ctx, moment(20), 10)
	if err != nil || !reflect.DeepEqual(due, []string{"ended-2", "quiet", "ended-1"}) {
		t.Fatalf("runs to pack before 20s: %v %v", due, err)
	}
	if due, err := c.RunsToPack(ctx, moment(20), 2); err != nil || len(due) != 2 {
		t.Fatalf("two runs to pack: %v %v", due, err)
	}
	// every fourth event kept, and the last; the running run is not
	// packed, whatever it is asked
	var kept []store.EventRecord
	for _, e := range all {
		if e.Seq%4 == 0 || e.Seq == 40 {
			kept = append(kept, e)
		}
	}
	n, err := c.PackEvents(ctx, []store.EventPack{{Run: "ended-1", Through: 40, Events: kept}, {Run: "ended-2", Through: 40, Events: kept},
		{Run: "quiet", Through: 0}, {Run: "running", Through: 40, Events: kept}, {Run: "gone", Through: 3}})
	if err != nil || n != 3 {
		t.Fatalf("packed %d runs: %v", n, err)
	}
	if n, err := c.PackEvents(ctx, []store.EventPack{{Run: "ended-1", Through: 40, Events: kept[:1]}}); err != nil || n != 0 {
		t.Fatalf("packed a packed run again: %d %v", n, err)
	}
	if due, err := c.RunsToPack(ctx, moment(100), 10); err != nil || !reflect.DeepEqual(due, []string{"late"}) {
		t.Fatalf("runs to pack after packing: %v %v", due, err)
	}
	got, err := c.Events(ctx, "ended-1", 0, 0)
	if err != nil || !reflect.DeepEqual(got, kept) {
		t.Fatalf("packed events: %d of %d, %v", len(got), len(kept), err)
	}
	if got, err := c.Events(ctx, "running", 0, 0); err != nil || !reflect.DeepEqual(got, all) {
		t.Fatalf("the running run's events: %d, %v", len(got), err)
	}
	if got, err := c.Events(ctx, "quiet", 0, 0); err != nil || len(got) != 0 {
		t.Fatalf("events of a run without any: %v %v", got, err)
	}
	// pages of packed events, from any number
	var paged []store.EventRecord
	for after := int64(0); ; {
		page, err := c.Events(ctx, "ended-2", after, 3)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		paged = append(paged, page...)
		after = page[len(page)-1].Seq
	}
	if !reflect.DeepEqual(paged, kept) {
		t.Fatalf("packed events in pages: %d of %d", len(paged), len(kept))
	}
	if got, err := c.Events(ctx, "ended-2", 13, 2); err != nil || len(got) != 2 || got[0].Seq != 16 || got[1].Seq != 20 {
		t.Fatalf("packed events after 13: %+v %v", got, err)
	}
	if last, err := c.LastEvent(ctx, "ended-1"); err != nil || !reflect.DeepEqual(*last, all[39]) {
		t.Fatalf("last packed event %+v %v", last, err)
	}
	if _, err := c.LastEvent(ctx, "quiet"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("last event of a run without any: %v", err)
	}
	// an event recorded later takes the numbers after the packed ones
	if err := c.AppendEvents(ctx, "ended-1", "", []store.EventRecord{ev(40, "run_error")}); !errors.Is(err, store.ErrExists) {
		t.Fatalf("an event numbered as a packed one: %v", err)
	}
	if err := c.AppendEvents(ctx, "ended-1", "", []store.EventRecord{ev(41, "run_error")}); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Events(ctx, "ended-1", 36, 0); err != nil || len(got) != 2 || got[0].Seq != 40 || got[1].Seq != 41 {
		t.Fatalf("packed and later events: %+v %v", got, err)
	}
	if last, err := c.LastEvent(ctx, "ended-1"); err != nil || last.Seq != 41 {
		t.Fatalf("last event after a pack: %+v %v", last, err)
	}
	if err := c.DeleteRun(ctx, "ended-2", runs[1].State()); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Events(ctx, "ended-2", 0, 0); err != nil || len(got) != 0 {
		t.Fatalf("events of a deleted run: %d %v", len(got), err)
	}
}
