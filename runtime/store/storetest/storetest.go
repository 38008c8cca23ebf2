// Package storetest is the conformance suite every checkpoint store
// passes: the same behaviour in memory, in SQLite and in PostgreSQL.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/store"
)

// Run runs the suite; open returns an empty store for each subtest.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, st store.Store)
	}{
		{"CreateAndHead", testCreateAndHead},
		{"ChainAndConflicts", testChainAndConflicts},
		{"AppendReassembled", testAppendReassembled},
		{"AppendItemsOfAnyContent", testAppendItemsOfAnyContent},
		{"ValuesRoundTrip", testValuesRoundTrip},
		{"HistoryPagesAndFilters", testHistory},
		{"StateAtAndFork", testStateAtAndFork},
		{"ForkCarriesTheRun", testForkCarries},
		{"BranchAndRepliesRoundTrip", testBranchMeta},
		{"ThreadsAndDelete", testThreadsAndDelete},
		{"ConcurrentWritersOneWins", testConcurrentWriters},
		{"PendingWrites", testPending},
		{"PendingWritesFencedByTheLease", testPendingFenced},
		{"Leases", testLeases},
		{"LeaseReleasedByACommit", testLeaseReleasedByACommit},
		{"PruneKeepsHeadAndPausedRun", testPrune},
		{"PruneStoppedAndFinished", testPruneStopped},
		{"PruneIdleThreads", testPruneIdle},
		{"PruneIdleLeavesHeldThreads", testPruneIdleHeld},
		{"LongThreadEveryState", testLongThread},
		{"RemovedFieldIsGone", testRemovedField},
		{"ChainInOneCommit", testChainCommit},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := open(t)
			t.Cleanup(func() { st.Close() })
			tc.fn(t, st)
		})
	}
}

var ctx = context.Background()

// RunShared checks two stores over one database, as two processes see it:
// each must read what the other committed, whatever it holds in memory.
func RunShared(t *testing.T, open func(t *testing.T) (a, b store.Store)) {
	a, b := open(t)
	t.Cleanup(func() { a.Close(); b.Close() })
	create(t, a, "t", map[string]any{"log": []any{}, "n": 0})
	commit(t, a, "t", 2, store.Write{Field: "log", Version: 2, Append: true, Items: []any{"a2"}})
	if h, err := b.Head(ctx, "t"); err != nil || !reflect.DeepEqual(h.Values["log"], []any{"a2"}) {
		t.Fatalf("b reads %v %v", h, err)
	}
	for i := uint64(3); i <= 6; i++ {
		commit(t, a, "t", i, store.Write{Field: "log", Version: i, Append: true, Items: []any{fmt.Sprint("a", i)}},
			store.Write{Field: "n", Version: i, Value: int(i)})
	}
	hb, _ := b.Head(ctx, "t")
	ha, _ := a.Head(ctx, "t")
	if !reflect.DeepEqual(ha.Values, hb.Values) || hb.Seq != 6 {
		t.Fatalf("b caught up to %+v, a has %+v", hb, ha)
	}
	// b writes next; a must see it
	commit(t, b, "t", 7, store.Write{Field: "log", Version: 7, Append: true, Items: []any{"b7"}})
	ha, _ = a.Head(ctx, "t")
	if l := ha.Values["log"].([]any); len(l) != 6 || l[5] != "b7" {
		t.Fatalf("a reads %v", l)
	}
	// b deletes the thread and creates a new one with the same id; a must
	// not fold the new thread's checkpoints onto the old state
	if err := b.Delete(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(ctx, &store.Checkpoint{Thread: "t", Seq: 1, Source: store.SourceCreate, Time: at(50),
		Writes: []store.Write{{Field: "log", Version: 1, Value: []any{"new"}}}}); err != nil {
		t.Fatal(err)
	}
	for i := uint64(2); i <= 9; i++ {
		commit(t, b, "t", i, store.Write{Field: "log", Version: i, Append: true, Items: []any{i}})
	}
	ha, err := a.Head(ctx, "t")
	if err != nil || ha.Seq != 9 || len(ha.Values["log"].([]any)) != 9 || ha.Values["n"] != nil {
		t.Fatalf("a after recreate: %+v %v", ha, err)
	}
	// b reads an unfinished run of a thread it has never read: the head's
	// pending writes come with its state
	create(t, a, "p", map[string]any{"n": 0})
	commit(t, a, "p", 2, store.Write{Field: "n", Version: 2, Value: 1})
	if err := a.PutPending(ctx, "p", 2, "slow", []store.Write{{Field: "n", Value: 5}}, ""); err != nil {
		t.Fatal(err)
	}
	hp, err := b.Head(ctx, "p")
	if err != nil || hp.Seq != 2 || hp.Values["n"] != 1 || !reflect.DeepEqual(hp.Pending, map[string][]store.Write{"slow": {{Field: "n", Value: 5}}}) {
		t.Fatalf("b reads the unfinished run as %+v %v", hp, err)
	}
	if _, err := b.Head(ctx, "none"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("b reads a thread that does not exist: %v", err)
	}
	// a takes a field out of a thread's state (a move to a version without
	// it), then the thread grows past a fold: b, reading it from the
	// database, has no such field, not a null one
	create(t, a, "r", map[string]any{"gone": "x", "n": 0})
	commit(t, a, "r", 2, store.Write{Field: "gone", Version: 2, Removed: true})
	for i := uint64(3); i <= 80; i++ {
		commit(t, a, "r", i, store.Write{Field: "n", Version: i, Value: int(i)})
	}
	hr, err := b.Head(ctx, "r")
	if _, has := hr.Values["gone"]; err != nil || has || hr.Values["n"] != 80 {
		t.Fatalf("b reads a thread whose field was removed as %+v %v", hr.Values, err)
	}
}

// A write that removes a field takes it out of the state (no value, not
// a null one): at the head, at every later checkpoint, in a fork and
// after a fold, while the state before it still has it; a later write
// brings it back.
func testRemovedField(t *testing.T, st store.Store) {
	create(t, st, "t", map[string]any{"gone": map[string]any{"a": 1}, "n": 0})
	commit(t, st, "t", 2, store.Write{Field: "gone", Version: 2, Removed: true}, store.Write{Field: "n", Version: 2, Value: 1})
	absent := func(what string, values map[string]any) {
		t.Helper()
		if v, has := values["gone"]; has {
			t.Fatalf("%s: the removed field is there (%v): %v", what, v, values)
		}
	}
	h, err := st.Head(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	absent("the head", h.Values)
	for i := uint64(3); i <= 70; i++ {
		commit(t, st, "t", i, store.Write{Field: "n", Version: i, Value: int(i)})
	}
	for _, seq := range []uint64{2, 40, 70} {
		s, err := st.StateAt(ctx, "t", seq)
		if err != nil {
			t.Fatal(err)
		}
		absent(fmt.Sprintf("the state at %d", seq), s.Values)
	}
	if s, err := st.StateAt(ctx, "t", 1); err != nil || !reflect.DeepEqual(s.Values["gone"], map[string]any{"a": 1}) {
		t.Fatalf("the state before the removal: %+v %v", s, err)
	}
	f, err := store.Fork(ctx, st, "t", 70, "t-fork")
	if err != nil {
		t.Fatal(err)
	}
	absent("a fork", f.Values)
	if h, err = st.Head(ctx, "t-fork"); err != nil {
		t.Fatal(err)
	}
	absent("the fork's head", h.Values)
	hist, err := st.History(ctx, "t", store.HistoryOptions{Source: store.SourceStep, Limit: 100})
	if err != nil || len(hist) == 0 {
		t.Fatal(hist, err)
	}
	first := hist[len(hist)-1]
	if first.Seq != 2 || len(first.Writes) != 2 || first.Writes[0].Field != "gone" || !first.Writes[0].Removed {
		t.Fatalf("the removal in the history: %+v", first)
	}
	commit(t, st, "t", 71, store.Write{Field: "gone", Version: 3, Value: "back"})
	if h, err = st.Head(ctx, "t"); err != nil || h.Values["gone"] != "back" {
		t.Fatalf("the field written again: %+v %v", h, err)
	}
}

func at(sec int) time.Time { return time.Date(2026, 1, 1, 0, 0, sec, 0, time.UTC) }

func create(t testing.TB, st store.Store, thread string, values map[string]any) {
	t.Helper()
	cp := &store.Checkpoint{Thread: thread, Seq: 1, Source: store.SourceCreate, Time: at(0)}
	for _, k := range slices.Sorted(maps.Keys(values)) {
		cp.Writes = append(cp.Writes, store.Write{Field: k, Version: 1, Value: values[k]})
	}
	if err := st.Commit(ctx, cp); err != nil {
		t.Fatal(err)
	}
}

func commit(t *testing.T, st store.Store, thread string, seq uint64, writes ...store.Write) {
	t.Helper()
	cp := &store.Checkpoint{Thread: thread, Seq: seq, Parent: seq - 1, Run: "r1", Step: int(seq), Source: store.SourceStep, Time: at(int(seq)),
		Writes: writes, Writers: []store.NodeWrites{{Node: "n", Fields: fieldsOf(writes)}}, Next: []string{"n"}}
	if err := st.Commit(ctx, cp); err != nil {
		t.Fatalf("commit %d: %v", seq, err)
	}
}

func fieldsOf(ws []store.Write) []string {
	var f []string
	for _, w := range ws {
		f = append(f, w.Field)
	}
	return f
}

func testCreateAndHead(t *testing.T, st store.Store) {
	if _, err := st.Head(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("missing thread: %v", err)
	}
	create(t, st, "t1", map[string]any{"n": 1, "s": "x"})
	h, err := st.Head(ctx, "t1")
	if err != nil || h.Seq != 1 || h.Values["n"] != 1 || h.Values["s"] != "x" || h.Versions["n"] != 1 {
		t.Fatalf("head %+v %v", h, err)
	}
	err = st.Commit(ctx, &store.Checkpoint{Thread: "t1", Seq: 1, Source: store.SourceCreate, Time: at(0)})
	if !errors.Is(err, store.ErrExists) {
		t.Fatalf("second create: %v", err)
	}
	err = st.Commit(ctx, &store.Checkpoint{Thread: "ghost", Seq: 5, Parent: 4, Source: store.SourceStep, Time: at(0)})
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("commit to a missing thread: %v", err)
	}
}

func testChainAndConflicts(t *testing.T, st store.Store) {
	create(t, st, "t", map[string]any{"n": 0})
	commit(t, st, "t", 2, store.Write{Field: "n", Version: 2, Value: 1})
	commit(t, st, "t", 3, store.Write{Field: "n", Version: 3, Value: 2})
	err := st.Commit(ctx, &store.Checkpoint{Thread: "t", Seq: 3, Parent: 2, Source: store.SourceStep, Time: at(9)})
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("stale parent: %v", err)
	}
	h, _ := st.Head(ctx, "t")
	if h.Seq != 3 || h.Values["n"] != 2 || h.Versions["n"] != 3 || !reflect.DeepEqual(h.Next, []string{"n"}) {
		t.Fatalf("head %+v", h)
	}
}

func testAppendReassembled(t *testing.T, st store.Store) {
	create(t, st, "t", map[string]any{"log": []any{}})
	for i := 2; i <= 40; i++ {
		commit(t, st, "t", uint64(i), store.Write{Field: "log", Version: uint64(i), Append: true, Items: []any{i, fmt.Sprint("m", i)}})
	}
	// a replace in the middle of appends resets the list
	commit(t, st, "t", 41, store.Write{Field: "log", Version: 41, Value: []any{"reset"}})
	commit(t, st, "t", 42, store.Write{Field: "log", Version: 42, Append: true, Items: []any{"after"}})
	h, err := st.Head(ctx, "t")
	if err != nil || !reflect.DeepEqual(h.Values["log"], []any{"reset", "after"}) {
		t.Fatalf("head log %v %v", h.Values["log"], err)
	}
	at20, err := st.StateAt(ctx, "t", 20)
	if err != nil {
		t.Fatal(err)
	}
	log := at20.Values["log"].([]any)
	if len(log) != 38 || log[0] != 2 || log[37] != "m20" {
		t.Fatalf("log at 20: %v", log)
	}
	// reading twice, and reading the head after an earlier read, agree
	again, _ := st.StateAt(ctx, "t", 20)
	if !reflect.DeepEqual(again.Values, at20.Values) {
		t.Fatalf("StateAt is not repeatable")
	}
}

// Appended items come back exactly, whatever they hold: separators,
// brackets, quotes, non-ASCII text, nested lists, and empty appends.
func testAppendItemsOfAnyContent(t *testing.T, st store.Store) {
	create(t, st, "t", map[string]any{"log": []any{}})
	batches := [][]any{
		{"a,b]", "[c"},
		{},
		{"é€😀 \"quoted\"", []any{}, []any{"x", []any{1, 2.5}}},
		{map[string]any{"k": "]", "n": []any{}}},
		{},
		{""},
	}
	var want []any
	for i, b := range batches {
		commit(t, st, "t", uint64(i+2), store.Write{Field: "log", Version: uint64(i + 2), Append: true, Items: b})
		want = append(want, b...)
	}
	head := uint64(len(batches) + 1)
	got, err := st.StateAt(ctx, "t", head)
	if err != nil || !reflect.DeepEqual(got.Values["log"], want) || got.Versions["log"] != head {
		t.Fatalf("log %#v (version %d) %v\nwant %#v", got.Values["log"], got.Versions["log"], err, want)
	}
	at3, err := st.StateAt(ctx, "t", 3)
	if err != nil || !reflect.DeepEqual(at3.Values["log"], []any{"a,b]", "[c"}) {
		t.Fatalf("log at 3 %#v %v", at3.Values["log"], err)
	}
}

func testValuesRoundTrip(t *testing.T, st store.Store) {
	values := map[string]any{
		"int":    42,
		"big":    1 << 52,
		"float":  2.5,
		"neg":    -7,
		"bool":   true,
		"null":   nil,
		"text":   "héllo \"quoted\" \n ✓",
		"list":   []any{1, "two", 3.5, nil, []any{}, map[string]any{}},
		"object": map[string]any{"a": map[string]any{"b": []any{1, 2}}, "z": false},
	}
	create(t, st, "t", values)
	h, err := st.Head(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range values {
		if !reflect.DeepEqual(h.Values[k], v) {
			t.Errorf("%s: got %#v want %#v", k, h.Values[k], v)
		}
	}
}

func testHistory(t *testing.T, st store.Store) {
	create(t, st, "t", map[string]any{"n": 0})
	for i := 2; i <= 10; i++ {
		commit(t, st, "t", uint64(i), store.Write{Field: "n", Version: uint64(i), Value: i})
	}
	all, err := st.History(ctx, "t", store.HistoryOptions{})
	if err != nil || len(all) != 10 || all[0].Seq != 10 || all[9].Seq != 1 || all[9].Source != store.SourceCreate {
		t.Fatalf("history %d %v", len(all), err)
	}
	if cp := all[0]; cp.Run != "r1" || cp.Step != 10 || !cp.Time.Equal(at(10)) || cp.Parent != 9 ||
		len(cp.Writers) != 1 || cp.Writers[0].Node != "n" || len(cp.Writes) != 1 || cp.Writes[0].Value != 10 {
		t.Fatalf("checkpoint metadata lost: %+v", cp)
	}
	page, _ := st.History(ctx, "t", store.HistoryOptions{Before: 8, Limit: 3})
	if len(page) != 3 || page[0].Seq != 7 || page[2].Seq != 5 {
		t.Fatalf("page %v", seqs(page))
	}
	created, _ := st.History(ctx, "t", store.HistoryOptions{Source: store.SourceCreate})
	if len(created) != 1 {
		t.Fatalf("filter by source %v", seqs(created))
	}
	byNode, _ := st.History(ctx, "t", store.HistoryOptions{Node: "n", Limit: 2})
	if len(byNode) != 2 || byNode[0].Seq != 10 {
		t.Fatalf("filter by node %v", seqs(byNode))
	}
}

func seqs(cps []*store.Checkpoint) []uint64 {
	var s []uint64
	for _, cp := range cps {
		s = append(s, cp.Seq)
	}
	return s
}

func testStateAtAndFork(t *testing.T, st store.Store) {
	create(t, st, "t", map[string]any{"n": 0, "log": []any{}})
	for i := 2; i <= 5; i++ {
		commit(t, st, "t", uint64(i), store.Write{Field: "n", Version: uint64(i), Value: i},
			store.Write{Field: "log", Version: uint64(i), Append: true, Items: []any{i}})
	}
	s3, err := st.StateAt(ctx, "t", 3)
	if err != nil || s3.Values["n"] != 3 || !reflect.DeepEqual(s3.Values["log"], []any{2, 3}) {
		t.Fatalf("state at 3: %+v %v", s3, err)
	}
	if _, err := st.StateAt(ctx, "t", 0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("state at checkpoint 0: %v", err)
	}
	if _, err := st.StateAt(ctx, "t", 99); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("state at a missing checkpoint: %v", err)
	}
	f, err := store.Fork(ctx, st, "t", 3, "t2")
	if err != nil || f.Seq != 1 {
		t.Fatal(err)
	}
	commit(t, st, "t2", 2, store.Write{Field: "log", Version: 4, Append: true, Items: []any{"fork"}})
	h2, _ := st.Head(ctx, "t2")
	h1, _ := st.Head(ctx, "t")
	if !reflect.DeepEqual(h2.Values["log"], []any{2, 3, "fork"}) || !reflect.DeepEqual(h1.Values["log"], []any{2, 3, 4, 5}) {
		t.Fatalf("fork %v original %v", h2.Values["log"], h1.Values["log"])
	}
}

// A fork at a checkpoint with nodes to run carries the run: its next
// nodes, join arrivals, step, its input and configuration (read from its
// input checkpoint) and, at the thread's head, the pending writes.
func testForkCarries(t *testing.T, st store.Store) {
	create(t, st, "t", map[string]any{"n": 0})
	in := &store.Checkpoint{Thread: "t", Seq: 2, Parent: 1, Run: "r1", Source: store.SourceInput, Time: at(2),
		Writes: []store.Write{{Field: "n", Version: 2, Value: 7}}, Next: []string{"a", "b"}, Config: map[string]any{"model": "m"}}
	if err := st.Commit(ctx, in); err != nil {
		t.Fatal(err)
	}
	step := &store.Checkpoint{Thread: "t", Seq: 3, Parent: 2, Run: "r1", Step: 1, Source: store.SourceStep, Time: at(3),
		Writers: []store.NodeWrites{{Node: "a"}}, Next: []string{"c", "d"}, Joins: []uint64{1}}
	if err := st.Commit(ctx, step); err != nil {
		t.Fatal(err)
	}
	// another run resumed the first, and paused again: the run it goes on
	// with is still the first's, with its input
	resumed := &store.Checkpoint{Thread: "t", Seq: 4, Parent: 3, Run: "r2", Step: 2, Source: store.SourceStep, Time: at(4),
		Writers: []store.NodeWrites{{Node: "c"}, {Node: "d"}}, Next: []string{"e"}}
	if err := st.Commit(ctx, resumed); err != nil {
		t.Fatal(err)
	}
	if err := st.PutPending(ctx, "t", 4, "e", []store.Write{{Field: "n", Value: 8}}, ""); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		seq     uint64
		next    []string
		joins   []uint64
		step    int
		pending bool
	}{{2, []string{"a", "b"}, nil, 0, false}, {3, []string{"c", "d"}, []uint64{1}, 1, false}, {4, []string{"e"}, nil, 2, true}} {
		to := fmt.Sprintf("f%d", tc.seq)
		if _, err := store.Fork(ctx, st, "t", tc.seq, to); err != nil {
			t.Fatal(err)
		}
		h, err := st.Head(ctx, to)
		if err != nil || h.Seq != 1 || !slices.Equal(h.Next, tc.next) || !slices.Equal(h.Joins, tc.joins) || h.Step != tc.step {
			t.Fatalf("the fork at %d: %v %+v", tc.seq, err, h)
		}
		if got := len(h.Pending[tc.next[0]]) == 1; got != tc.pending {
			t.Errorf("the fork at %d has pending writes %v", tc.seq, h.Pending)
		}
		input, cfg := store.RunInput(ctx, st, to, h.Seq)
		if !reflect.DeepEqual(input, map[string]any{"n": 7}) || !reflect.DeepEqual(cfg, map[string]any{"model": "m"}) {
			t.Errorf("the fork at %d carries input %v and configuration %v", tc.seq, input, cfg)
		}
	}
}

// A checkpoint's branch, replies and answers are kept as committed.
func testBranchMeta(t *testing.T, st store.Store) {
	create(t, st, "t", map[string]any{"n": 0})
	commit(t, st, "t", 2, store.Write{Field: "n", Version: 2, Value: 2})
	cp := &store.Checkpoint{Thread: "t", Seq: 3, Parent: 2, Base: 1, Run: "r2", Step: 1, Source: store.SourceUpdate, Time: at(3),
		Writes:  []store.Write{{Field: "n", Version: 3, Value: 0}},
		Replies: []store.Reply{{Node: "ask", Key: "k1", Text: "a reply\nin two lines"}, {Node: "m[2]", Key: "k2", Text: `{"x": 1}`}},
		Answers: map[string]any{"approve": map[string]any{"ok": true, "note": "fine"}}}
	if err := st.Commit(ctx, cp); err != nil {
		t.Fatal(err)
	}
	h, err := st.History(ctx, "t", store.HistoryOptions{Limit: 1})
	if err != nil || len(h) != 1 {
		t.Fatal(err)
	}
	got := h[0]
	if got.Base != 1 || !reflect.DeepEqual(got.Replies, cp.Replies) || !reflect.DeepEqual(got.Answers, cp.Answers) {
		t.Errorf("read back: base %d replies %+v answers %v", got.Base, got.Replies, got.Answers)
	}
	s, err := st.StateAt(ctx, "t", 3)
	if err != nil || s.Values["n"] != 0 {
		t.Errorf("the branch's state: %v %+v", err, s)
	}
}

func testThreadsAndDelete(t *testing.T, st store.Store) {
	create(t, st, "a", map[string]any{"n": 1})
	create(t, st, "b", map[string]any{"n": 1})
	commit(t, st, "b", 2, store.Write{Field: "n", Version: 2, Value: 2})
	list, err := st.Threads(ctx, store.ThreadOptions{})
	if err != nil || len(list) != 2 || list[0].ID != "b" || list[0].Head != 2 {
		t.Fatalf("threads %+v %v", list, err)
	}
	idle, _ := st.Threads(ctx, store.ThreadOptions{IdleSince: at(1)})
	if len(idle) != 1 || idle[0].ID != "a" {
		t.Fatalf("idle threads %+v", idle)
	}
	// a prefix matches byte for byte, whatever the database's collation
	create(t, st, "b|x:1", map[string]any{"n": 1})
	create(t, st, "b|x:1|y:2", map[string]any{"n": 1})
	create(t, st, "B|x:1", map[string]any{"n": 1})
	create(t, st, "b_x", map[string]any{"n": 1})
	var ids []string
	kids, err := st.Threads(ctx, store.ThreadOptions{Prefix: "b|"})
	for _, k := range kids {
		ids = append(ids, k.ID)
	}
	slices.Sort(ids)
	if err != nil || !slices.Equal(ids, []string{"b|x:1", "b|x:1|y:2"}) {
		t.Fatalf("threads by prefix %v %v", ids, err)
	}
	// a thread's children go with it, and only its own
	if err := st.Delete(ctx, "b|x:1"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"b|x:1", "b|x:1|y:2"} {
		if _, err := st.Head(ctx, id); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("%s after its parent's deletion: %v", id, err)
		}
	}
	create(t, st, "b|x:2", map[string]any{"n": 1})
	if err := st.Delete(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	left, err := st.Threads(ctx, store.ThreadOptions{})
	ids = ids[:0]
	for _, k := range left {
		ids = append(ids, k.ID)
	}
	slices.Sort(ids)
	if err != nil || !slices.Equal(ids, []string{"B|x:1", "a", "b_x"}) {
		t.Fatalf("threads after deleting b and its children: %v %v", ids, err)
	}
	// roots only, and a listing in pages
	roots, err := st.Threads(ctx, store.ThreadOptions{Roots: true, Limit: 1})
	if err != nil || len(roots) != 1 {
		t.Fatalf("first page of roots %+v %v", roots, err)
	}
	next, err := st.Threads(ctx, store.ThreadOptions{Roots: true, After: &roots[0]})
	if err != nil || len(next) != 1 || next[0].ID == roots[0].ID || strings.Contains(next[0].ID, store.ChildSep) {
		t.Fatalf("roots after %s: %+v %v", roots[0].ID, next, err)
	}
	for _, id := range []string{"B|x:1", "b_x"} {
		if err := st.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Head(ctx, "a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleted thread: %v", err)
	}
	if err := st.Delete(ctx, "a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	create(t, st, "a", map[string]any{"n": 7}) // the id can be reused
}

func testConcurrentWriters(t *testing.T, st store.Store) {
	create(t, st, "t", map[string]any{"n": 0})
	const writers = 8
	// seq 64 is also a checkpoint the SQL stores record a fold with
	for seq := uint64(2); seq <= 66; seq++ {
		if seq > 6 && seq < 62 {
			commit(t, st, "t", seq, store.Write{Field: "n", Version: seq, Value: -1})
			continue
		}
		var wg sync.WaitGroup
		won := make([]bool, writers)
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := st.Commit(ctx, &store.Checkpoint{Thread: "t", Seq: seq, Parent: seq - 1, Source: store.SourceStep, Time: at(int(seq)),
					Writes: []store.Write{{Field: "n", Version: seq, Value: w}}})
				if err == nil {
					won[w] = true
				} else if !errors.Is(err, store.ErrConflict) {
					t.Errorf("writer %d: %v", w, err)
				}
			}()
		}
		wg.Wait()
		n := 0
		for _, ok := range won {
			if ok {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("seq %d: %d writers won", seq, n)
		}
	}
	hist, _ := st.History(ctx, "t", store.HistoryOptions{})
	for i, cp := range hist[:len(hist)-1] {
		if cp.Parent != hist[i+1].Seq {
			t.Fatalf("chain forked at %d", cp.Seq)
		}
	}
}

func testPending(t *testing.T, st store.Store) {
	create(t, st, "t", map[string]any{"n": 0})
	commit(t, st, "t", 2, store.Write{Field: "n", Version: 2, Value: 1}) // Next: [n]
	if err := st.PutPending(ctx, "t", 2, "slow", []store.Write{{Field: "n", Value: 5}, {Field: "s", Value: map[string]any{"k": []any{1}}}}, ""); err != nil {
		t.Fatal(err)
	}
	h, err := st.Head(ctx, "t")
	if err != nil || len(h.Pending) != 1 || !reflect.DeepEqual(h.Pending["slow"], []store.Write{{Field: "n", Value: 5}, {Field: "s", Value: map[string]any{"k": []any{1}}}}) {
		t.Fatalf("pending %+v %v", h.Pending, err)
	}
	if len(h.Next) != 1 || h.Run != "r1" || h.Step != 2 {
		t.Fatalf("unfinished run not described: %+v", h)
	}
	commit(t, st, "t", 3, store.Write{Field: "n", Version: 3, Value: 6})
	if h, _ := st.Head(ctx, "t"); len(h.Pending) != 0 {
		t.Fatalf("pending writes survived the commit: %v", h.Pending)
	}
	// run state round-trips
	cp := &store.Checkpoint{Thread: "t", Seq: 4, Parent: 3, Run: "r2", Step: 7, Source: store.SourceStep, Time: at(4),
		Next: []string{"j"}, Joins: []uint64{0, 5}}
	if err := st.Commit(ctx, cp); err != nil {
		t.Fatal(err)
	}
	h, _ = st.Head(ctx, "t")
	if !reflect.DeepEqual(h.Joins, []uint64{0, 5}) || h.Step != 7 || h.Run != "r2" {
		t.Fatalf("run state %+v", h)
	}
}

// A pending write naming an owner is saved only while the thread's
// lease names that owner, expired or not: once another took the lease,
// or it was given up, it saves nothing (ErrLeased) and leaves what was
// saved as it was. One naming no owner is not fenced.
func testPendingFenced(t *testing.T, st store.Store) {
	create(t, st, "t", map[string]any{"n": 0})
	commit(t, st, "t", 2, store.Write{Field: "n", Version: 2, Value: 1})
	puts := map[string]func(ctx context.Context, thread string, parent uint64, node string, writes []store.Write, owner string) error{
		"plain": st.PutPending}
	if q, ok := st.(store.QuickPending); ok {
		puts["quick"] = q.PutPendingQuick
	}
	for _, way := range slices.Sorted(maps.Keys(puts)) {
		put := puts[way]
		pending := func() map[string][]store.Write {
			t.Helper()
			h, err := st.Head(ctx, "t")
			if err != nil {
				t.Fatal(err)
			}
			return h.Pending
		}
		node := func(n string) string { return way + "-" + n }
		// no lease at all: refused
		if err := put(ctx, "t", 2, node("none"), []store.Write{{Field: "n", Value: 1}}, "a"); !errors.Is(err, store.ErrLeased) {
			t.Fatalf("%s: a write naming an owner with no lease taken: %v, want ErrLeased", way, err)
		}
		if err := st.Acquire(ctx, "t", "a", time.Nanosecond); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
		// expired, and no other took it: still a's
		if err := put(ctx, "t", 2, node("x"), []store.Write{{Field: "n", Value: 2}}, "a"); err != nil {
			t.Fatalf("%s: the holder's write: %v", way, err)
		}
		if err := st.Acquire(ctx, "t", "b", time.Minute); err != nil {
			t.Fatal(err)
		}
		// a's late write, of a node saved before and of another
		for _, n := range []string{"x", "y"} {
			if err := put(ctx, "t", 2, node(n), []store.Write{{Field: "n", Value: 99}}, "a"); !errors.Is(err, store.ErrLeased) {
				t.Fatalf("%s: a write after another took the lease: %v, want ErrLeased", way, err)
			}
		}
		got := pending()
		if _, ok := got[node("y")]; ok || !reflect.DeepEqual(got[node("x")], []store.Write{{Field: "n", Value: 2}}) {
			t.Fatalf("%s: after refused writes the pending writes are %v", way, got)
		}
		if err := put(ctx, "t", 2, node("y"), []store.Write{{Field: "n", Value: 3}}, "b"); err != nil {
			t.Fatalf("%s: the new holder's write: %v", way, err)
		}
		if err := put(ctx, "t", 2, node("z"), []store.Write{{Field: "n", Value: 4}}, ""); err != nil {
			t.Fatalf("%s: a write naming no owner: %v", way, err)
		}
		if err := st.Release(ctx, "t", "b"); err != nil {
			t.Fatal(err)
		}
		if err := put(ctx, "t", 2, node("y"), []store.Write{{Field: "n", Value: 99}}, "b"); !errors.Is(err, store.ErrLeased) {
			t.Fatalf("%s: a write after the lease was given up: %v, want ErrLeased", way, err)
		}
		got = pending()
		if !reflect.DeepEqual(got[node("y")], []store.Write{{Field: "n", Value: 3}}) || !reflect.DeepEqual(got[node("z")], []store.Write{{Field: "n", Value: 4}}) {
			t.Fatalf("%s: pending writes %v", way, got)
		}
	}
}

// A commit naming its lease's owner releases the lease in its
// transaction; a failed commit, or another owner's name, releases
// nothing.
func testLeaseReleasedByACommit(t *testing.T, st store.Store) {
	create(t, st, "t", map[string]any{"n": 0})
	if err := st.Acquire(ctx, "t", "a", time.Minute); err != nil {
		t.Fatal(err)
	}
	last := func(seq uint64, owner string) error {
		return st.Commit(ctx, &store.Checkpoint{Thread: "t", Seq: seq, Parent: seq - 1, Run: "r", Step: int(seq), Source: store.SourceStep,
			Time: at(int(seq)), Writes: []store.Write{{Field: "n", Version: seq, Value: int(seq)}}, Release: owner})
	}
	if err := last(3, "a"); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a commit on an old head: %v", err)
	}
	if err := last(2, "b"); err != nil {
		t.Fatal(err)
	}
	if err := st.Acquire(ctx, "t", "b", time.Minute); !errors.Is(err, store.ErrLeased) {
		t.Fatalf("a failed commit, or another owner's, released a's lease: %v", err)
	}
	if err := last(3, "a"); err != nil {
		t.Fatal(err)
	}
	if err := st.Acquire(ctx, "t", "b", time.Minute); err != nil {
		t.Fatalf("the lease after its owner's last commit: %v", err)
	}
	// a fold's checkpoint (the stores' other commit) releases it too
	for seq := uint64(4); seq <= 64; seq++ {
		owner := ""
		if seq == 64 {
			owner = "b"
		}
		if err := last(seq, owner); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Acquire(ctx, "t", "c", time.Minute); err != nil {
		t.Fatalf("the lease after its owner's last commit, a fold's: %v", err)
	}
}

func testLeases(t *testing.T, st store.Store) {
	if err := st.Acquire(ctx, "t", "a", time.Minute); err != nil {
		t.Fatal(err)
	}
	err := st.Acquire(ctx, "t", "b", time.Minute)
	if !errors.Is(err, store.ErrLeased) {
		t.Fatalf("b acquired a held lease: %v", err)
	}
	// b hears who holds it and until when
	var le *store.LeasedError
	if !errors.As(err, &le) || le.Owner != "a" || time.Until(le.Until) < 50*time.Second || time.Until(le.Until) > time.Minute {
		t.Fatalf("the holder of the lease: %#v", err)
	}
	if err := st.Acquire(ctx, "t", "a", time.Minute); err != nil {
		t.Fatalf("renewal: %v", err)
	}
	if err := st.Release(ctx, "t", "b"); err != nil {
		t.Fatal(err)
	}
	if err := st.Acquire(ctx, "t", "b", time.Minute); !errors.Is(err, store.ErrLeased) {
		t.Fatalf("b released a's lease: %v", err)
	}
	st.Release(ctx, "t", "a")
	if err := st.Acquire(ctx, "t", "b", 30*time.Millisecond); err != nil {
		t.Fatalf("after release: %v", err)
	}
	time.Sleep(60 * time.Millisecond)
	if err := st.Acquire(ctx, "t", "c", time.Minute); err != nil {
		t.Fatalf("expired lease not taken over: %v", err)
	}
}
