// The conformance cases of a run's events: concurrent appends, paged
// reads, packing, and the append benchmark.

package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/trellisflow/trellis/runtime/store/internal/sqlstore"

	"github.com/trellisflow/trellis/runtime/store"
)

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

// A checkpoint's events are recorded with it, in its transaction: while
// their holder runs their run and only if the checkpoint is committed; a
// refusal of the events commits the checkpoint and says so.
func testEventsWithCheckpoints(t *testing.T, st store.Store) {
	c := st.(store.Catalog)
	claimedRun(t, st, "r", "t")
	evs := func(from, to int64) []store.EventRecord {
		var out []store.EventRecord
		for seq := from; seq <= to; seq++ {
			out = append(out, store.EventRecord{Seq: seq, Data: []byte(fmt.Sprintf(`{"n":%d}`, seq))})
		}
		return out
	}
	step := func(seq uint64, ea *store.EventAppend) error {
		return st.Commit(ctx, &store.Checkpoint{Thread: "t", Seq: seq, Parent: seq - 1, Run: "r", Step: int(seq), Source: store.SourceStep,
			Time: at(int(seq)), Writes: []store.Write{{Field: "n", Version: seq, Value: int(seq)}}, Events: ea})
	}
	ea := &store.EventAppend{Run: "r", Holder: "s1", Events: evs(1, 3), Channel: "trellis_test", Payload: "run r"}
	if err := step(2, ea); err != nil || ea.Refused {
		t.Fatalf("a step with its events: %v, refused %v", err, ea.Refused)
	}
	if got, err := c.Events(ctx, "r", 0, 0); err != nil || !reflect.DeepEqual(got, evs(1, 3)) {
		t.Fatalf("events after the step: %v %v", got, err)
	}
	// a commit that fails records none of its events
	ea = &store.EventAppend{Run: "r", Holder: "s1", Events: evs(4, 5)}
	if err := step(2, ea); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a step on an old head: %v", err)
	}
	if got, _ := c.Events(ctx, "r", 3, 0); len(got) != 0 {
		t.Fatalf("a failed commit recorded its events: %v", got)
	}
	// another server's events, or numbers taken, are refused: the step
	// is committed all the same
	for i, ea := range []*store.EventAppend{
		{Run: "r", Holder: "s2", Events: evs(4, 5)},
		{Run: "r", Holder: "s1", Events: evs(3, 4)},
	} {
		seq := uint64(3 + i)
		if err := step(seq, ea); err != nil || !ea.Refused {
			t.Fatalf("step %d with refused events: %v, refused %v", seq, err, ea.Refused)
		}
		if h, err := st.Head(ctx, "t"); err != nil || h.Seq != seq {
			t.Fatalf("head after step %d: %+v %v", seq, h, err)
		}
		if got, _ := c.Events(ctx, "r", 3, 0); len(got) != 0 {
			t.Fatalf("refused events recorded: %v", got)
		}
	}
	// a fold's checkpoint (the stores' other commit) records them too
	for seq := uint64(5); seq <= 2*sqlstore.FoldEvery; seq++ {
		ea := &store.EventAppend{Run: "r", Holder: "s1", Events: evs(int64(seq-1), int64(seq-1))}
		if err := step(seq, ea); err != nil || ea.Refused {
			t.Fatalf("step %d: %v, refused %v", seq, err, ea.Refused)
		}
	}
	if got, err := c.Events(ctx, "r", 0, 0); err != nil || !reflect.DeepEqual(got, evs(1, 2*sqlstore.FoldEvery-1)) {
		t.Fatalf("events after %d steps: %v %v", 2*sqlstore.FoldEvery, got, err)
	}
}

// A run's events appended in batches, as a step's are (a store may keep
// a batch in one place, not an event each), read back one by one: from
// every number, a page of every length, the last, and every run's at
// once; the batches come through commits and appends, by the holder and
// by anyone, and one event's data holds a newline. A run's events are
// appended in order, once: a batch holding a number recorded, or one
// before the run's last, or out of order, is refused whole (ErrExists),
// and one from a server not running the run is refused as that
// (ErrRunChanged) whatever its numbers; a batch after a gap is taken.
func testEventsInBatches(t *testing.T, st store.Store) {
	c := st.(store.Catalog)
	claimed := claimedRun(t, st, "r", "t")
	var want []store.EventRecord
	batch := func(seqs ...int64) []store.EventRecord {
		var out []store.EventRecord
		for _, seq := range seqs {
			data := fmt.Appendf(nil, `{"type":"node_end","seq":%d,"text":"é \u0000 %s"}`, seq, strings.Repeat("x", int(seq)*37))
			if seq == 7 {
				data = []byte("{\"type\": \"pretty\",\n \"seq\": 7}")
			}
			out = append(out, store.EventRecord{Seq: seq, Data: data})
		}
		return out
	}
	check := func(when string) {
		t.Helper()
		last := want[len(want)-1].Seq
		for after := int64(0); after <= last; after++ {
			var rest []store.EventRecord
			for _, ev := range want {
				if ev.Seq > after {
					rest = append(rest, ev)
				}
			}
			for limit := 1; limit <= len(rest)+1; limit++ {
				got, err := c.Events(ctx, "r", after, limit)
				page := rest[:min(limit, len(rest))]
				if err != nil || !sameEvents(got, page) {
					t.Fatalf("%s: events after %d, %d at most: %v %v, want %v", when, after, limit, seqsOf(got), err, seqsOf(page))
				}
			}
		}
		if got, err := c.LastEvent(ctx, "r"); err != nil || !sameEvents([]store.EventRecord{*got}, want[len(want)-1:]) {
			t.Fatalf("%s: last event %v %v", when, got, err)
		}
		if all, err := c.RunsEvents(ctx, []string{"r", "none"}); err != nil || len(all) != 1 || !sameEvents(all["r"], want) {
			t.Fatalf("%s: the run's events at once: %v %v", when, seqsOf(all["r"]), err)
		}
	}
	ea := &store.EventAppend{Run: "r", Holder: "s1", Events: batch(1, 2, 3, 4, 5)}
	if err := st.Commit(ctx, &store.Checkpoint{Thread: "t", Seq: 2, Parent: 1, Run: "r", Step: 1, Source: store.SourceStep, Time: at(2),
		Writes: []store.Write{{Field: "n", Version: 2, Value: 1}}, Events: ea}); err != nil || ea.Refused {
		t.Fatalf("a step with its events: %v, refused %v", err, ea.Refused)
	}
	want = append(want, ea.Events...)
	check("after a step")
	// a store that notifies as it appends (store.Notifier) takes the
	// holder's batches both ways
	notifier, notifies := st.(store.Notifier)
	appendAs := func(holder string, evs []store.EventRecord, notify bool) error {
		if notify {
			return notifier.AppendNotify(ctx, &store.EventAppend{Run: "r", Holder: holder, Events: evs, Channel: "trellis_test", Payload: "run r"})
		}
		return c.AppendEvents(ctx, "r", holder, evs)
	}
	for _, b := range [][]store.EventRecord{batch(6, 7, 8, 9), batch(10)} {
		if err := appendAs("s1", b, notifies && b[0].Seq == 10); err != nil {
			t.Fatalf("append %v: %v", seqsOf(b), err)
		}
		want = append(want, b...)
	}
	check("after the holder's appends")
	if err := c.AppendEvents(ctx, "r", "", batch(11, 12, 13)); err != nil {
		t.Fatal(err)
	}
	want = append(want, batch(11, 12, 13)...)
	check("after anyone's append")
	for _, b := range []struct {
		holder string
		evs    []store.EventRecord
		want   error
	}{
		{"s1", batch(4, 5, 6), store.ErrExists},
		{"s1", batch(12, 13, 14, 15), store.ErrExists},
		{"s1", batch(13), store.ErrExists},
		{"s1", batch(3), store.ErrExists},
		{"", batch(9, 10, 11, 14), store.ErrExists},
		{"s1", batch(14, 16, 15), store.ErrExists},
		{"", batch(15, 14), store.ErrExists},
		{"s2", batch(14, 15), store.ErrRunChanged},
		{"s2", batch(13, 14), store.ErrRunChanged},
		{"s2", batch(15, 14), store.ErrRunChanged},
	} {
		for _, notify := range []bool{false, notifies && b.holder != ""} {
			if err := appendAs(b.holder, b.evs, notify); !errors.Is(err, b.want) {
				t.Fatalf("append %v by %q (notifying %v): %v, want %v", seqsOf(b.evs), b.holder, notify, err, b.want)
			}
		}
	}
	check("after the refusals")
	if err := c.AppendEvents(ctx, "r", "s1", batch(16, 17)); err != nil {
		t.Fatalf("a batch after a gap: %v", err)
	}
	want = append(want, batch(16, 17)...)
	check("after a gap")
	if err := c.AppendEvents(ctx, "r", "s1", batch(14, 15)); !errors.Is(err, store.ErrExists) {
		t.Fatalf("a batch in the gap: %v", err)
	}
	check("after a batch in the gap")
	// packed through an event inside a batch: the pack's events (every
	// other one kept) up to it, the batch's after it, and the rest
	end := *claimed
	end.Status, end.Finished = store.RunSucceeded, moment(3)
	if err := c.UpdateRun(ctx, &end, claimed.State(), nil); err != nil {
		t.Fatal(err)
	}
	var kept []store.EventRecord
	for _, ev := range want {
		if ev.Seq <= 12 && ev.Seq%2 == 0 {
			kept = append(kept, ev)
		}
	}
	if n, err := c.PackEvents(ctx, []store.EventPack{{Run: "r", Through: 12, Events: kept}}); err != nil || n != 1 {
		t.Fatalf("pack: %d %v", n, err)
	}
	want = append(kept, slices.DeleteFunc(want, func(ev store.EventRecord) bool { return ev.Seq <= 12 })...)
	check("after a pack through an event inside a batch")
}

// A batch of more events than a statement has room for a parameter each
// (SQLite's 32,766) is appended and read back a page at a time, from the
// start and from inside it; a few of its events hold newlines.
func testALargeBatch(t *testing.T, c store.Catalog) {
	threads(t, c, "t")
	const n = 25000
	evs := make([]store.EventRecord, n)
	for i := range evs {
		seq := int64(i + 1)
		evs[i] = store.EventRecord{Seq: seq, Data: fmt.Appendf(nil, `{"n":%d}`, seq)}
		if seq%5000 == 0 {
			evs[i].Data = fmt.Appendf(nil, "{\n\"n\": %d}", seq)
		}
	}
	if err := c.AppendEvents(ctx, "r", "", evs); err != nil {
		t.Fatalf("append %d events at once: %v", n, err)
	}
	for _, after := range []int64{0, 4999, 5000, 12345, n - 1} {
		got, err := c.Events(ctx, "r", after, store.MaxPage)
		if want := evs[after:min(int(after)+store.MaxPage, n)]; err != nil || !sameEvents(got, want) {
			t.Fatalf("a page after %d: %d events from %v, %v", after, len(got), seqsOf(got[:min(len(got), 1)]), err)
		}
	}
	if last, err := c.LastEvent(ctx, "r"); err != nil || !sameEvents([]store.EventRecord{*last}, evs[n-1:]) {
		t.Fatalf("the last event: %v %v", last, err)
	}
	if err := c.AppendEvents(ctx, "r", "", evs[n-2:]); !errors.Is(err, store.ErrExists) {
		t.Fatalf("the batch's last two again: %v", err)
	}
}

// claimedRun is a run on a new thread (its first checkpoint holds n: 0),
// queued and claimed by server s1.
func claimedRun(t *testing.T, st store.Store, id, thread string) *store.RunRecord {
	t.Helper()
	c := st.(store.Catalog)
	threads(t, c, thread)
	if err := c.CreateRun(ctx, &store.RunRecord{ID: id, Tenant: "acme", Thread: thread, Status: store.RunQueued, Created: moment(1)}); err != nil {
		t.Fatal(err)
	}
	r, err := c.ClaimRun(ctx, "s1", "", moment(2))
	if err != nil || r.ID != id {
		t.Fatalf("claim: %v %v", r, err)
	}
	create(t, st, thread, map[string]any{"n": 0})
	return r
}

// sameEvents reports whether a and b hold the same events: numbers and
// data.
func sameEvents(a, b []store.EventRecord) bool {
	return slices.EqualFunc(a, b, func(x, y store.EventRecord) bool { return x.Seq == y.Seq && bytes.Equal(x.Data, y.Data) })
}

// seqsOf are the numbers of evs.
func seqsOf(evs []store.EventRecord) []int64 {
	out := make([]int64, len(evs))
	for i, ev := range evs {
		out[i] = ev.Seq
	}
	return out
}

// A run's end goes with its last checkpoint (EventAppend.End): its record
// and the events that tell it are recorded in the checkpoint's
// transaction, when the record holds what the end expects; a record not
// as expected leaves the end unrecorded and commits the rest, and a
// failed commit records nothing. Every kind of commit carries it: one
// checkpoint, one with a fold, one after others in a chain, and a commit
// tried again recognises an end its earlier attempt recorded.
func testRunEndWithCheckpoint(t *testing.T, st store.Store) {
	c := st.(store.Catalog)
	evs := func(from, to int64) []store.EventRecord {
		var out []store.EventRecord
		for seq := from; seq <= to; seq++ {
			out = append(out, store.EventRecord{Seq: seq, Data: []byte(fmt.Sprintf(`{"n":%d}`, seq))})
		}
		return out
	}
	running := func(id, thread string) *store.RunRecord {
		t.Helper()
		return claimedRun(t, st, id, thread)
	}
	ended := func(r *store.RunRecord, seq uint64) *store.RunRecord {
		e := *r
		e.Status, e.Checkpoint, e.Finished, e.Server, e.WriteID = store.RunSucceeded, seq, moment(9), "s1", store.NewWriteID()
		return &e
	}
	step := func(r *store.RunRecord, seq uint64, ea *store.EventAppend) *store.Checkpoint {
		return &store.Checkpoint{Thread: r.Thread, Seq: seq, Parent: seq - 1, Run: r.ID, Step: int(seq), Source: store.SourceStep,
			Time: at(int(seq)), Writes: []store.Write{{Field: "n", Version: seq, Value: int(seq)}}, Events: ea, Release: "s1", WriteID: store.NewWriteID()}
	}
	check := func(r *store.RunRecord, want store.RunStatus, writeID string, events []store.EventRecord) {
		t.Helper()
		got, err := c.Run(ctx, "acme", r.ID)
		if err != nil || got.Status != want || got.WriteID != writeID {
			t.Fatalf("run %s: %+v %v, want %s with write id %q", r.ID, got, err, want, writeID)
		}
		if got, err := c.Events(ctx, r.ID, 0, 0); err != nil || len(got) != len(events) || len(got) > 0 && !reflect.DeepEqual(got, events) {
			t.Fatalf("run %s's events: %v %v, want %v", r.ID, got, err, events)
		}
	}

	// the end recorded with the checkpoint and its events
	r := running("r1", "t1")
	e := ended(r, 2)
	ea := &store.EventAppend{Run: r.ID, Holder: "s1", Events: evs(1, 3), End: &store.RunEnd{Record: e, Expect: r.State(), Events: evs(4, 4)}}
	cp := step(r, 2, ea)
	if err := st.Commit(ctx, cp); err != nil || ea.Refused || !ea.End.Applied {
		t.Fatalf("the last step with the run's end: %v, refused %v, applied %v", err, ea.Refused, ea.End.Applied)
	}
	check(r, store.RunSucceeded, e.WriteID, evs(1, 4))
	// tried again after a failure that came after it committed: the
	// earlier attempt's end is recognised
	ea = &store.EventAppend{Run: r.ID, Holder: "s1", Events: evs(1, 3), End: &store.RunEnd{Record: e, Expect: r.State(), Events: evs(4, 4)}}
	again := step(r, 2, ea)
	again.WriteID = cp.WriteID
	if err := store.Recommitted(ctx, st, again, st.Commit(ctx, again)); err != nil || !ea.End.Applied {
		t.Fatalf("the last step tried again: %v, applied %v", err, ea.End.Applied)
	}

	// a record not as the end expects: the checkpoint and its events are
	// committed, the end is left to its writer
	r = running("r2", "t2")
	cancelled := *r
	cancelled.Stop = store.StopCancel
	if err := c.UpdateRun(ctx, &cancelled, r.State(), nil); err != nil {
		t.Fatal(err)
	}
	ea = &store.EventAppend{Run: r.ID, Holder: "s1", Events: evs(1, 2), End: &store.RunEnd{Record: ended(r, 2), Expect: r.State(), Events: evs(3, 3)}}
	if err := st.Commit(ctx, step(r, 2, ea)); err != nil || ea.Refused || ea.End.Applied {
		t.Fatalf("the last step of a run asked to stop: %v, refused %v, applied %v", err, ea.Refused, ea.End.Applied)
	}
	check(r, store.RunRunning, "", evs(1, 2))
	if h, err := st.Head(ctx, r.Thread); err != nil || h.Seq != 2 {
		t.Fatalf("head: %+v %v", h, err)
	}

	// a commit that fails records no end
	r = running("r3", "t3")
	ea = &store.EventAppend{Run: r.ID, Holder: "s1", Events: evs(1, 2), End: &store.RunEnd{Record: ended(r, 3), Expect: r.State(), Events: evs(3, 3)}}
	if err := st.Commit(ctx, step(r, 3, ea)); !errors.Is(err, store.ErrConflict) || ea.End.Applied {
		t.Fatalf("a last step on an old head: %v, applied %v", err, ea.End.Applied)
	}
	check(r, store.RunRunning, "", nil)
	// after another in a chain
	r4 := running("r4", "t4")
	e = ended(r4, 3)
	ea = &store.EventAppend{Run: r4.ID, Holder: "s1", Events: evs(1, 2), End: &store.RunEnd{Record: e, Expect: r4.State(), Events: evs(3, 3)}}
	cp = step(r4, 3, ea)
	cp.Before = []*store.Checkpoint{step(r4, 2, nil)}
	cp.Before[0].Release = ""
	if err := st.Commit(ctx, cp); err != nil || !ea.End.Applied {
		t.Fatalf("a chain of two ending with the run's end: %v, applied %v", err, ea.End.Applied)
	}
	check(r4, store.RunSucceeded, e.WriteID, evs(1, 3))
	// an end with no other event to go with it, on a checkpoint that
	// records a fold, after others in a chain
	seq := uint64(sqlstore.FoldEvery)
	var before []*store.Checkpoint
	for s := uint64(2); s < seq; s++ {
		before = append(before, step(r, s, nil))
		before[len(before)-1].Release = ""
	}
	e = ended(r, seq)
	ea = &store.EventAppend{Run: r.ID, Holder: "s1", End: &store.RunEnd{Record: e, Expect: r.State(), Events: evs(1, 1)}}
	cp = step(r, seq, ea)
	cp.Before = before
	if err := st.Commit(ctx, cp); err != nil || !ea.End.Applied {
		t.Fatalf("a chain ending with the run's end: %v, applied %v", err, ea.End.Applied)
	}
	check(r, store.RunSucceeded, e.WriteID, evs(1, 1))
	if h, err := st.Head(ctx, r.Thread); err != nil || h.Seq != seq {
		t.Fatalf("head: %+v %v", h, err)
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

// benchRuns numbers the benchmarks' runs.
var benchRuns int

// BenchAppendEvents records batches of a run's events (8 to a batch, as a
// step's node and state events come): by anyone (holder ""), and by the
// server holding the run, which the store checks in the same step. The
// last, holder/one-row, appends the same bytes as one event a batch: what
// a layout keeping a step's events in one row would write, against a row
// each.
func BenchAppendEvents(b *testing.B, c store.Catalog) {
	if err := c.CreateThread(ctx, &store.ThreadRecord{ID: "bench", Tenant: "acme", Flow: "f", Created: moment(0)}); err != nil {
		b.Fatal(err)
	}
	data := []byte(`{"type":"node_end","run":"r","thread":"bench","step":3,"time":"2026-01-01T00:00:00Z","node":"think","update":{"n":1}}`)
	for _, way := range []struct {
		name, holder string
		rows         int
	}{{"anyone", "", 8}, {"holder", "s1", 8}, {"holder/one-row", "s1", 1}} {
		b.Run(way.name, func(b *testing.B) {
			benchRuns++
			run := &store.RunRecord{ID: fmt.Sprint("run-", way.name, benchRuns), Tenant: "acme", Thread: "bench", Flow: "f", Created: moment(benchRuns), Server: "s1"}
			if _, err := c.EnqueueRun(ctx, run, store.BusyEnqueue); err != nil {
				b.Fatal(err)
			}
			row := data
			if way.rows == 1 {
				row = bytes.Repeat(data, 8)
			}
			b.ReportAllocs()
			seq := int64(0)
			batch := make([]store.EventRecord, way.rows)
			for b.Loop() {
				for i := range batch {
					seq++
					batch[i] = store.EventRecord{Seq: seq, Data: row}
				}
				if err := c.AppendEvents(ctx, run.ID, way.holder, batch); err != nil {
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

// BenchRunEvents records the events of whole runs as a served interview
// turn has them: thirty, from a hundred bytes to a run's end of twelve
// kilobytes, in four batches (a turn's commits), each run under a random
// id of its own as served runs are, so that where many runs' events lie
// in the store counts, not only the appending of one run's.
func BenchRunEvents(b *testing.B, c store.Catalog) {
	if err := c.CreateThread(ctx, &store.ThreadRecord{ID: "bench-runs", Tenant: "acme", Flow: "f", Created: moment(0)}); err != nil {
		b.Fatal(err)
	}
	sizes := []int{120, 150, 300, 260, 150, 180, 260, 150, 150, 260, 600, 950, 1400, 150, 260, 900, 260,
		150, 400, 260, 150, 900, 700, 150, 200, 260, 150, 1000, 700, 12000}
	events := make([]store.EventRecord, len(sizes))
	for i, n := range sizes {
		events[i] = store.EventRecord{Seq: int64(i + 1), Data: fmt.Appendf(nil, `{"type":"node_end","pad":%q}`, strings.Repeat("x", n-28))}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		id := fmt.Sprintf("run_%016x", rand.Uint64())
		if err := c.CreateRun(ctx, &store.RunRecord{ID: id, Tenant: "acme", Thread: "bench-runs", Flow: "f", Status: store.RunRunning,
			Server: "s1", Created: moment(i), Started: moment(i)}); err != nil {
			b.Fatal(err)
		}
		for _, batch := range [][]store.EventRecord{events[:8], events[8:16], events[16:24], events[24:]} {
			if err := c.AppendEvents(ctx, id, "s1", batch); err != nil {
				b.Fatal(err)
			}
		}
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
	// several runs' events at once, packed or not, as Events reads them
	// one by one
	byRun, err := c.RunsEvents(ctx, []string{"ended-1", "running", "quiet", "gone"})
	if err != nil {
		t.Fatal(err)
	}
	if len(byRun) != 2 || !reflect.DeepEqual(byRun["ended-1"], kept) || !reflect.DeepEqual(byRun["running"], all) {
		t.Fatalf("the events of several runs: %d runs, ended-1 %d events (want %d), running %d (want %d)",
			len(byRun), len(byRun["ended-1"]), len(kept), len(byRun["running"]), len(all))
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

// EventRows checks how an SQL store lays a run's events out in rows
// (sqlstore.EventRows): rows reads back the run's rows, each as the
// numbers of its first and last event, in order. A step's events (a
// checkpoint's), a holder's batch, a notified batch (a store.Notifier's)
// and a run's end are each one row; an event whose data holds a newline,
// and a batch's events on either side of it, rows of their own; and every
// event reads back as appended.
func EventRows(t *testing.T, st store.Store, rows func(run string) [][2]int64) {
	c := st.(store.Catalog)
	claimed := claimedRun(t, st, "r", "t")
	evs := func(from, to int64) []store.EventRecord {
		var out []store.EventRecord
		for seq := from; seq <= to; seq++ {
			data := fmt.Appendf(nil, `{"type":"node_end","seq":%d}`, seq)
			if seq == 8 {
				data = []byte("{\"type\": \"pretty\",\n \"seq\": 8}")
			}
			out = append(out, store.EventRecord{Seq: seq, Data: data})
		}
		return out
	}
	step := func(seq uint64, ea *store.EventAppend, release string) {
		t.Helper()
		if err := st.Commit(ctx, &store.Checkpoint{Thread: "t", Seq: seq, Parent: seq - 1, Run: "r", Step: int(seq), Source: store.SourceStep,
			Time: at(int(seq)), Writes: []store.Write{{Field: "n", Version: seq, Value: int(seq)}}, Events: ea, Release: release,
			WriteID: store.NewWriteID()}); err != nil || ea.Refused || ea.End != nil && !ea.End.Applied {
			t.Fatalf("step %d: %v, refused %v", seq, err, ea.Refused)
		}
	}
	step(2, &store.EventAppend{Run: "r", Holder: "s1", Events: evs(1, 5)}, "")
	if err := c.AppendEvents(ctx, "r", "s1", evs(6, 10)); err != nil {
		t.Fatal(err)
	}
	want := [][2]int64{{1, 5}, {6, 7}, {8, 8}, {9, 10}}
	next := int64(11)
	if n, ok := st.(store.Notifier); ok {
		if err := n.AppendNotify(ctx, &store.EventAppend{Run: "r", Holder: "s1", Events: evs(11, 13)}); err != nil {
			t.Fatal(err)
		}
		want, next = append(want, [2]int64{11, 13}), 14
	}
	// the run's end with the last step, its events told with it
	end := *claimed
	end.Status, end.Finished, end.Checkpoint, end.WriteID = store.RunSucceeded, moment(3), 3, store.NewWriteID()
	step(3, &store.EventAppend{Run: "r", Holder: "s1", Events: evs(next, next+1),
		End: &store.RunEnd{Record: &end, Expect: claimed.State(), Events: evs(next+2, next+4)}}, "s1")
	want = append(want, [2]int64{next, next + 1}, [2]int64{next + 2, next + 4})
	if got := rows("r"); !reflect.DeepEqual(got, want) {
		t.Fatalf("the run's rows of events %v, want %v", got, want)
	}
	got, err := c.Events(ctx, "r", 0, 0)
	if err != nil || !sameEvents(got, evs(1, next+4)) {
		t.Fatalf("the run's events %v %v", seqsOf(got), err)
	}
}
