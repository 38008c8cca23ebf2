package storetest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/store"
)

// Refs lists where a store still holds any of needles, by place (an SQL
// store's table.column, the memory store's field path), sorted and
// without repeats: a value holds a needle when it contains it (an id,
// the id of a thread's child flow, JSON that names it).
type Refs func(t *testing.T, st store.Store, needles []string) []string

// RunLifecycle checks that a thread's data has one lifecycle: after it
// is deleted (Store.Delete), or pruned as idle (PruneIdleThreads), no
// place of the store refers to it any more: its checkpoints, folds,
// pending writes and lease, its child flows' threads, and in a store
// with a catalog its record, runs, events (recorded and packed) and
// voice sessions. holders are the places refs names that a thread with
// all of these must be found in beforehand: every place a thread's data
// can be, so that a place the seed misses fails the test rather than
// going unchecked. open returns an empty store for each subtest.
func RunLifecycle(t *testing.T, open func(t *testing.T) store.Store, refs Refs, holders []string) {
	tests := []struct {
		name string
		fn   func(t *testing.T, st store.Store, refs Refs, holders []string)
	}{
		{"DeleteLeavesNothing", testDeleteLeavesNothing},
		{"PruneIdleLeavesNothing", testPruneLeavesNothing},
		{"DeleteRefusedWhileRunQueued", testDeleteBusy},
		{"DeleteRecordWithoutCheckpoints", testDeleteRecordOnly},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := open(t)
			t.Cleanup(func() { st.Close() })
			tc.fn(t, st, refs, holders)
		})
	}
}

// uniqueID is a thread id no other value of a test contains.
func uniqueID(name string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return name + "-" + hex.EncodeToString(b[:])
}

// seedThread gives a thread written at when all a served thread can
// have: 70 checkpoints (so the SQL stores fold it), the last of an
// unfinished run with a pending write, a child flow's thread and its
// own child, expired leases, and with a catalog a record, a run that
// succeeded, one that failed whose events are packed, one cancelled
// while queued, and a voice session; and the version of its flow it
// runs.
func seedThread(t *testing.T, st store.Store, id string, when time.Time) {
	t.Helper()
	at := func(i int) time.Time { return when.Add(time.Duration(i) * time.Millisecond) }
	mustCommit := func(cp *store.Checkpoint) {
		t.Helper()
		if err := st.Commit(ctx, cp); err != nil {
			t.Fatalf("seed %s: commit %d: %v", cp.Thread, cp.Seq, err)
		}
	}
	mustCommit(&store.Checkpoint{Thread: id, Seq: 1, Source: store.SourceCreate, Time: at(0),
		Writes: []store.Write{{Field: "log", Version: 1, Value: []any{}}, {Field: "n", Version: 1, Value: 0}}})
	const last = 70
	for seq := uint64(2); seq <= last; seq++ {
		cp := &store.Checkpoint{Thread: id, Seq: seq, Parent: seq - 1, Run: id + "-run-1", Step: int(seq), Source: store.SourceStep, Time: at(int(seq)),
			Writes: []store.Write{{Field: "log", Version: seq, Append: true, Items: []any{fmt.Sprintf("%s said %d", id, seq)}},
				{Field: "n", Version: seq, Value: int(seq)}},
			Writers: []store.NodeWrites{{Node: "n", Fields: []string{"log", "n"}}}}
		if seq == last {
			cp.Next = []string{"slow", "fast"}
		}
		mustCommit(cp)
	}
	if err := st.PutPending(ctx, id, last, "fast", []store.Write{{Field: "n", Value: id}}, ""); err != nil {
		t.Fatal(err)
	}
	child := id + store.ChildSep + "sub:3"
	for _, th := range []string{child, child + store.ChildSep + "inner:1"} {
		mustCommit(&store.Checkpoint{Thread: th, Seq: 1, Source: store.SourceCreate, Time: at(3), Writes: []store.Write{{Field: "x", Version: 1, Value: th}}})
		mustCommit(&store.Checkpoint{Thread: th, Seq: 2, Parent: 1, Run: id + "-run-1", Source: store.SourceStep, Time: at(4),
			Writes: []store.Write{{Field: "x", Version: 2, Value: "done"}}})
	}
	// the leases of runs long gone: expired, never released
	for _, th := range []string{id, child} {
		if err := st.Acquire(ctx, th, "a run of "+id, time.Nanosecond); err != nil {
			t.Fatal(err)
		}
	}
	if vs, ok := store.VersionsOf(st); ok {
		if err := vs.PinThread(ctx, &store.ThreadPin{Tenant: "acme", Thread: id, Flow: "f", Version: "v1", Since: at(0)}, ""); err != nil {
			t.Fatal(err)
		}
	}
	cat, ok := st.(store.Catalog)
	if !ok {
		return
	}
	if err := cat.CreateThread(ctx, &store.ThreadRecord{ID: id, Tenant: "acme", Flow: "f", Metadata: map[string]string{"of": id}, Created: at(0)}); err != nil {
		t.Fatal(err)
	}
	event := func(seq int64, typ string) store.EventRecord {
		return store.EventRecord{Seq: seq, Data: fmt.Appendf(nil, `{"type":%q,"thread":%q,"text":"token %d"}`, typ, id, seq)}
	}
	for i, status := range []store.RunStatus{store.RunSucceeded, store.RunFailed} {
		r := &store.RunRecord{ID: fmt.Sprintf("%s-run-%d", id, i+1), Tenant: "acme", Thread: id, Flow: "f", Status: store.RunRunning,
			Input: []byte(`{"said":"` + id + `"}`), Server: "server-1", Created: at(10 * i), Started: at(10 * i)}
		if err := cat.CreateRun(ctx, r); err != nil {
			t.Fatal(err)
		}
		var evs []store.EventRecord
		for seq := int64(1); seq <= 5; seq++ {
			evs = append(evs, event(seq, "node_output"))
		}
		if err := cat.AppendEvents(ctx, r.ID, "server-1", evs); err != nil {
			t.Fatal(err)
		}
		expect := r.State()
		r.Status, r.Finished, r.Server = status, at(10*i+5), ""
		if err := cat.UpdateRun(ctx, r, expect, []store.EventRecord{event(6, "run_end")}); err != nil {
			t.Fatal(err)
		}
		if status == store.RunFailed {
			kept, err := cat.Events(ctx, r.ID, 0, 0)
			if err != nil || len(kept) != 6 {
				t.Fatalf("events of %s: %d %v", r.ID, len(kept), err)
			}
			if n, err := cat.PackEvents(ctx, []store.EventPack{{Run: r.ID, Through: 6, Events: kept[3:]}}); err != nil || n != 1 {
				t.Fatalf("pack the events of %s: %d %v", r.ID, n, err)
			}
		}
	}
	if err := cat.CreateRun(ctx, &store.RunRecord{ID: id + "-run-3", Tenant: "acme", Thread: id, Flow: "f", Status: store.RunCancelled,
		Error: "cancelled", Created: at(30), Finished: at(31)}); err != nil {
		t.Fatal(err)
	}
	if w, ok := store.WebhooksOf(st); ok {
		d := &store.Delivery{ID: id + "-hook", Tenant: "acme", Thread: id, Run: id + "-run-1", URL: "http://127.0.0.1:9/" + id, Created: at(5)}
		if err := w.AddDelivery(ctx, d); err != nil {
			t.Fatal(err)
		}
		got, err := w.ClaimDelivery(ctx, "server-1", time.Minute)
		if err != nil {
			t.Fatalf("claim the delivery of %s: %v", id, err)
		}
		got.Status, got.Next = store.DeliveryPending, at(6)
		if err := w.RecordAttempt(ctx, "server-1", got, store.DeliveryAttempt{N: got.Attempts + 1, At: at(5), Server: "server-1",
			Error: "the receiver of " + id + " answered 500", Status: 500}); err != nil {
			t.Fatal(err)
		}
	}
	if sc, ok := store.SchedulesOf(st); ok {
		if err := sc.CreateSchedule(ctx, &store.Schedule{ID: id + "-schedule", Tenant: "acme", Flow: "f", Thread: id, Cron: "* * * * *", Zone: "UTC",
			Input: []byte(`{"said":"` + id + `"}`), Missed: store.MissedSkip, Next: at(60), Created: at(0)}, 0); err != nil {
			t.Fatal(err)
		}
	}
	if rq, ok := store.RequestsOf(st); ok {
		// a run's start sent with an idempotency key, answered with the
		// thread's state
		r := &store.RequestRecord{Tenant: "acme", Key: id + "-key", Fingerprint: "fp", Ref: id + "-run-1", Thread: id, Owner: "req-1",
			Locked: at(1), Created: at(0)}
		if _, _, err := rq.ReserveRequest(ctx, r, time.Time{}); err != nil {
			t.Fatal(err)
		}
		if err := rq.AnswerRequest(ctx, "acme", r.Key, "", 200, []byte(`{"thread":"`+id+`"}`)); err != nil {
			t.Fatal(err)
		}
	}
	if v, ok := st.(store.VoiceCatalog); ok {
		if _, _, err := v.OpenVoiceSession(ctx, &store.VoiceSessionRecord{ID: id + "-voice", Tenant: "acme", Thread: id, ThreadCreated: at(0),
			KeyHash: "hash", SigningKey: "k1", Created: at(40), Expires: at(40).Add(time.Hour), Deadline: at(40).Add(2 * time.Hour)}, ""); err != nil {
			t.Fatal(err)
		}
	}
}

// checkHeld checks that the places refs finds id in cover every holder.
func checkHeld(t *testing.T, st store.Store, refs Refs, id string, holders []string) []string {
	t.Helper()
	found := refs(t, st, []string{id})
	if len(found) == 0 {
		t.Fatalf("the store holds nothing of %s, just written", id)
	}
	for _, h := range holders {
		if !slices.ContainsFunc(found, func(f string) bool { return f == h || strings.HasPrefix(f, h+".") }) {
			t.Errorf("nothing of the seeded thread in %s (found in %v): the seed misses it, or it holds no thread's data", h, found)
		}
	}
	return found
}

func testDeleteLeavesNothing(t *testing.T, st store.Store, refs Refs, holders []string) {
	gone, kept := uniqueID("deleted"), uniqueID("kept")
	now := time.Now().UTC()
	seedThread(t, st, gone, now)
	seedThread(t, st, kept, now)
	checkHeld(t, st, refs, gone, holders)
	before := refs(t, st, []string{kept})
	if err := st.Delete(ctx, gone); err != nil {
		t.Fatal(err)
	}
	if left := refs(t, st, []string{gone}); len(left) > 0 {
		t.Fatalf("a deleted thread is still referred to in %v", left)
	}
	if after := refs(t, st, []string{kept}); !reflect.DeepEqual(after, before) {
		t.Fatalf("deleting a thread touched another: it was in %v, now in %v", before, after)
	}
	if _, err := st.Head(ctx, kept); err != nil {
		t.Fatalf("the other thread: %v", err)
	}
	if err := st.Delete(ctx, gone); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleting it again: %v", err)
	}
	checkGone(t, st, gone)
}

// checkGone checks that the catalog answers for a deleted thread as for
// one that never was.
func checkGone(t *testing.T, st store.Store, id string) {
	t.Helper()
	if _, err := st.Head(ctx, id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("head of a deleted thread: %v", err)
	}
	cat, ok := st.(store.Catalog)
	if !ok {
		return
	}
	if _, err := cat.Thread(ctx, "acme", id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("record of a deleted thread: %v", err)
	}
	if runs, err := cat.Runs(ctx, store.RunQuery{Tenant: "acme", Thread: id}); err != nil || len(runs) > 0 {
		t.Fatalf("runs of a deleted thread: %d %v", len(runs), err)
	}
	if _, err := cat.Run(ctx, "acme", id+"-run-1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a run of a deleted thread: %v", err)
	}
	if evs, err := cat.Events(ctx, id+"-run-2", 0, 0); err != nil || len(evs) > 0 {
		t.Fatalf("packed events of a deleted thread's run: %d %v", len(evs), err)
	}
	if _, err := cat.EnqueueRun(ctx, &store.RunRecord{ID: id + "-run-9", Tenant: "acme", Thread: id, Status: store.RunQueued, Created: time.Now()},
		store.BusyEnqueue); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a run queued on a deleted thread: %v", err)
	}
}

func testPruneLeavesNothing(t *testing.T, st store.Store, refs Refs, holders []string) {
	idle, active := uniqueID("idle"), uniqueID("active")
	// the active thread first: opening a voice session forgets those
	// that expired a day before
	seedThread(t, st, active, time.Now().UTC())
	seedThread(t, st, idle, at(0))
	checkHeld(t, st, refs, idle, holders)
	before := refs(t, st, []string{active})
	var deleted []string
	n, err := store.PruneIdleThreads(ctx, st, store.IdleOptions{TTL: time.Hour, Page: 1, Deleted: func(id string) { deleted = append(deleted, id) }})
	if err != nil || n != 1 || !slices.Equal(deleted, []string{idle}) {
		t.Fatalf("pruned %d idle threads (%v): %v", n, deleted, err)
	}
	if left := refs(t, st, []string{idle}); len(left) > 0 {
		t.Fatalf("a pruned thread is still referred to in %v", left)
	}
	if after := refs(t, st, []string{active}); !reflect.DeepEqual(after, before) {
		t.Fatalf("pruning touched an active thread: it was in %v, now in %v", before, after)
	}
	checkGone(t, st, idle)
}

// A thread with a queued run is deleted by nobody: not Delete, not a
// prune; all of it stays.
func testDeleteBusy(t *testing.T, st store.Store, refs Refs, _ []string) {
	cat, ok := st.(store.Catalog)
	if !ok {
		t.Skipf("%T keeps no catalog: no runs are queued in it", st)
	}
	id := uniqueID("busy")
	seedThread(t, st, id, at(0))
	if _, err := cat.EnqueueRun(ctx, &store.RunRecord{ID: id + "-run-4", Tenant: "acme", Thread: id, Flow: "f", Status: store.RunQueued,
		Created: at(50)}, store.BusyReject); err != nil {
		t.Fatal(err)
	}
	before := refs(t, st, []string{id})
	if err := st.Delete(ctx, id); !errors.Is(err, store.ErrBusy) {
		t.Fatalf("delete with a run queued: %v", err)
	}
	if after := refs(t, st, []string{id}); !reflect.DeepEqual(after, before) {
		t.Fatalf("a refused deletion changed the thread: it was in %v, now in %v", before, after)
	}
	if n, err := store.PruneIdle(ctx, st, time.Hour); err != nil || n != 0 {
		t.Fatalf("prune with a run queued: %d %v", n, err)
	}
	if _, err := st.Head(ctx, id); err != nil {
		t.Fatalf("a thread with a run queued after a prune: %v", err)
	}
	if _, err := cat.Run(ctx, "acme", id+"-run-1"); err != nil {
		t.Fatalf("a run of a thread with a run queued after a prune: %v", err)
	}
	if _, err := cat.RequestStop(ctx, "acme", id+"-run-4", store.StopCancel); err != nil {
		t.Fatal(err)
	}
	if err := st.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	if left := refs(t, st, []string{id}); len(left) > 0 {
		t.Fatalf("a deleted thread is still referred to in %v", left)
	}
}

// The record of a served thread whose checkpoints are gone (as pruning
// them alone used to leave it) is deleted by Delete all the same.
func testDeleteRecordOnly(t *testing.T, st store.Store, refs Refs, _ []string) {
	cat, ok := st.(store.Catalog)
	if !ok {
		t.Skipf("%T keeps no catalog", st)
	}
	id := uniqueID("record")
	if err := cat.CreateThread(ctx, &store.ThreadRecord{ID: id, Tenant: "acme", Flow: "f", Created: at(0)}); err != nil {
		t.Fatal(err)
	}
	if err := cat.CreateRun(ctx, &store.RunRecord{ID: id + "-run-1", Tenant: "acme", Thread: id, Flow: "f", Status: store.RunSucceeded,
		Created: at(1), Finished: at(2)}); err != nil {
		t.Fatal(err)
	}
	if err := st.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	if left := refs(t, st, []string{id}); len(left) > 0 {
		t.Fatalf("a deleted thread is still referred to in %v", left)
	}
	if err := st.Delete(ctx, id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleting it again: %v", err)
	}
}

// WalkRefs is the Refs of an in-memory store: it walks every value v
// reaches (maps, slices, pointers, fields, exported or not) and names
// the places holding a needle by their path of fields from v (map keys
// and indices left out).
func WalkRefs(v any, needles []string) []string {
	found := map[string]bool{}
	seen := map[uintptr]bool{}
	var walk func(path string, x reflect.Value)
	walk = func(path string, x reflect.Value) {
		switch x.Kind() {
		case reflect.String:
			for _, n := range needles {
				if strings.Contains(x.String(), n) {
					found[path] = true
				}
			}
		case reflect.Pointer, reflect.Interface:
			if x.IsNil() {
				return
			}
			if x.Kind() == reflect.Pointer {
				if seen[x.Pointer()] {
					return
				}
				seen[x.Pointer()] = true
			}
			walk(path, x.Elem())
		case reflect.Struct:
			for i := range x.NumField() {
				p := x.Type().Field(i).Name
				if path != "" {
					p = path + "." + p
				}
				walk(p, x.Field(i))
			}
		case reflect.Map:
			it := x.MapRange()
			for it.Next() {
				walk(path, it.Key())
				walk(path, it.Value())
			}
		case reflect.Slice, reflect.Array:
			if x.Kind() == reflect.Slice && x.Type().Elem().Kind() == reflect.Uint8 {
				for _, n := range needles {
					if strings.Contains(string(x.Bytes()), n) {
						found[path] = true
					}
				}
				return
			}
			for i := range x.Len() {
				walk(path, x.Index(i))
			}
		}
	}
	walk("", reflect.ValueOf(v))
	out := make([]string, 0, len(found))
	for p := range found {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}
