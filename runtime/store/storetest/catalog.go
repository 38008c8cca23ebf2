package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
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
		{"KeysThatLapse", testCatalogKeysLapse},
		{"QueuePolicies", testQueuePolicies},
		{"QueueOrderAndStops", testQueueOrder},
		{"QueueConcurrentClaims", testQueueConcurrentClaims},
		{"QueueConcurrentEnqueues", testQueueConcurrentEnqueues},
		{"QueueClaimTakesTheLease", testQueueClaimTakesTheLease},
		{"QueueAdoptsRunsOfDeadServers", testQueueAdopt},
		{"RunChangesCompareAndSet", testRunCompareAndSet},
		{"ThreadDeletion", testThreadDeletion},
		{"PagedReads", testPagedReads},
		{"PackedEvents", testPackedEvents},
		{"EventsWithCheckpoints", func(t *testing.T, c store.Catalog) { testEventsWithCheckpoints(t, c.(store.Store)) }},
		{"EventsInBatches", func(t *testing.T, c store.Catalog) { testEventsInBatches(t, c.(store.Store)) }},
		{"ALargeBatchOfEvents", testALargeBatch},
		{"RunEndWithCheckpoint", func(t *testing.T, c store.Catalog) { testRunEndWithCheckpoint(t, c.(store.Store)) }},
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

// A key with an expiry is renewed while it is not revoked; a sweep
// revokes the keys whose server stopped beating or whose expiry passed,
// and leaves the others.
func testCatalogKeysLapse(t *testing.T, c store.Catalog) {
	now := time.Now()
	keys := []*store.KeyRecord{
		{ID: "alive", Hash: "h1", Tenant: "studio", Scope: store.ScopeStudio, Owner: "s1", Expires: now.Add(time.Hour), Created: now},
		{ID: "dead", Hash: "h2", Tenant: "studio", Scope: store.ScopeStudio, Owner: "s2", Expires: now.Add(time.Hour), Created: now},
		{ID: "expired", Hash: "h3", Tenant: "studio", Scope: store.ScopeStudio, Owner: "s1", Expires: now.Add(-time.Minute), Created: now},
		{ID: "plain", Hash: "h4", Tenant: "acme", Created: now},
	}
	for _, k := range keys {
		if err := c.CreateKey(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	got, err := c.KeyByHash(ctx, "h1")
	if err != nil || got.Scope != store.ScopeStudio || got.Owner != "s1" || !sameTime(got.Expires, keys[0].Expires) {
		t.Fatalf("a studio key read back: %v %+v", err, got)
	}
	until := now.Add(2 * time.Hour)
	if err := c.RenewKey(ctx, "alive", until); err != nil {
		t.Fatal(err)
	}
	if got, _ := c.KeyByHash(ctx, "h1"); !sameTime(got.Expires, until) {
		t.Errorf("renewed to %v, want %v", got.Expires, until)
	}
	if err := c.RenewKey(ctx, "plain", until); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a key that never expires was renewed: %v", err)
	}
	// s1 beats, s2 never did
	if err := c.Beat(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	n, err := c.SweepKeys(ctx, time.Hour)
	if err != nil || n != 2 {
		t.Fatalf("the sweep revoked %d keys: %v", n, err)
	}
	for hash, revoked := range map[string]bool{"h1": false, "h2": true, "h3": true, "h4": false} {
		k, err := c.KeyByHash(ctx, hash)
		if err != nil || k.Revoked.IsZero() == revoked {
			t.Errorf("key %s after the sweep: %v %+v", hash, err, k)
		}
	}
	if err := c.RenewKey(ctx, "dead", until); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a revoked key was renewed: %v", err)
	}
	if n, err := c.SweepKeys(ctx, time.Hour); err != nil || n != 0 {
		t.Errorf("a second sweep revoked %d: %v", n, err)
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
