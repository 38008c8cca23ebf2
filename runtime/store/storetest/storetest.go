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
		{"ThreadsAndDelete", testThreadsAndDelete},
		{"ConcurrentWritersOneWins", testConcurrentWriters},
		{"PendingWrites", testPending},
		{"Leases", testLeases},
		{"PruneKeepsHeadAndPausedRun", testPrune},
		{"PruneStoppedAndFinished", testPruneStopped},
		{"PruneIdleThreads", testPruneIdle},
		{"PruneIdleLeavesHeldThreads", testPruneIdleHeld},
		{"LongThreadEveryState", testLongThread},
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
	if err := a.PutPending(ctx, "p", 2, "slow", []store.Write{{Field: "n", Value: 5}}); err != nil {
		t.Fatal(err)
	}
	hp, err := b.Head(ctx, "p")
	if err != nil || hp.Seq != 2 || hp.Values["n"] != 1 || !reflect.DeepEqual(hp.Pending, map[string][]store.Write{"slow": {{Field: "n", Value: 5}}}) {
		t.Fatalf("b reads the unfinished run as %+v %v", hp, err)
	}
	if _, err := b.Head(ctx, "none"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("b reads a thread that does not exist: %v", err)
	}
}

func at(sec int) time.Time { return time.Date(2026, 1, 1, 0, 0, sec, 0, time.UTC) }

func create(t *testing.T, st store.Store, thread string, values map[string]any) {
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
	if err := st.PutPending(ctx, "t", 2, "slow", []store.Write{{Field: "n", Value: 5}, {Field: "s", Value: map[string]any{"k": []any{1}}}}); err != nil {
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

func testPrune(t *testing.T, st store.Store) {
	create(t, st, "t", map[string]any{"n": 0, "log": []any{"start"}})
	for i := 2; i <= 20; i++ {
		commit(t, st, "t", uint64(i), store.Write{Field: "n", Version: uint64(i), Value: i},
			store.Write{Field: "log", Version: uint64(i), Append: true, Items: []any{i}})
	}
	// the thread is paused: its newest checkpoint has nodes to run and a
	// pending write
	if err := st.PutPending(ctx, "t", 20, "slow", []store.Write{{Field: "n", Value: 99}}); err != nil {
		t.Fatal(err)
	}
	before, _ := st.Head(ctx, "t")
	at16, _ := st.StateAt(ctx, "t", 16)
	removed, err := st.Prune(ctx, "t", store.PruneOptions{Keep: 5})
	if err != nil || removed != 14 {
		t.Fatalf("pruned %d %v", removed, err)
	}
	after, err := st.Head(ctx, "t")
	if err != nil || !reflect.DeepEqual(after.Values, before.Values) || after.Seq != 20 || len(after.Pending) != 1 || len(after.Next) != 1 {
		t.Fatalf("head changed by pruning: %+v %v", after, err)
	}
	hist, _ := st.History(ctx, "t", store.HistoryOptions{})
	if len(hist) != 6 || hist[5].Source != store.SourceBase || hist[5].Seq != 15 {
		t.Fatalf("history after prune: %v", seqs(hist))
	}
	if s16, err := st.StateAt(ctx, "t", 16); err != nil || !reflect.DeepEqual(s16.Values, at16.Values) {
		t.Fatalf("state at a kept checkpoint changed: %v %v", s16, err)
	}
	if _, err := st.StateAt(ctx, "t", 10); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("state at a pruned checkpoint: %v", err)
	}
	commit(t, st, "t", 21, store.Write{Field: "log", Version: 21, Append: true, Items: []any{21}})
	if h, _ := st.Head(ctx, "t"); len(h.Values["log"].([]any)) != 21 {
		t.Fatalf("log after prune and commit: %v", h.Values["log"])
	}
	if n, err := st.Prune(ctx, "t", store.PruneOptions{Keep: 50}); err != nil || n != 0 {
		t.Fatalf("prune of a short thread: %d %v", n, err)
	}
}

// A prune works in batches and reports each; stopped between two (its
// context ended), every state still listed is exact, commits go on and
// fold as before, and the next prune finishes the work.
func testPruneStopped(t *testing.T, st store.Store) {
	create(t, st, "t", map[string]any{"n": 0, "log": []any{}})
	states := map[uint64]map[string]any{}
	for i := 2; i <= 300; i++ {
		commit(t, st, "t", uint64(i), store.Write{Field: "n", Version: uint64(i), Value: i},
			store.Write{Field: "log", Version: uint64(i), Append: true, Items: []any{i}})
	}
	for seq := uint64(1); seq <= 300; seq++ {
		s, err := st.StateAt(ctx, "t", seq)
		if err != nil {
			t.Fatal(err)
		}
		states[seq] = s.Values
	}
	stop, cancel := context.WithCancel(ctx)
	defer cancel()
	var reports [][2]int
	removed, err := st.Prune(stop, "t", store.PruneOptions{Keep: 20, Batch: 30, Progress: func(removed, total int) {
		reports = append(reports, [2]int{removed, total})
		if len(reports) == 3 {
			cancel()
		}
	}})
	atOnce := err == nil && removed == 279 && len(reports) == 1 && reports[0] == [2]int{279, 279} // a store in memory
	if !atOnce && (!errors.Is(err, context.Canceled) || removed != 90 || len(reports) != 3 || reports[2] != [2]int{90, 279}) {
		t.Fatalf("stopped prune: removed %d, reports %v, %v", removed, reports, err)
	}
	exact := func() []*store.Checkpoint {
		t.Helper()
		hist, err := st.History(ctx, "t", store.HistoryOptions{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for _, cp := range hist {
			s, err := st.StateAt(ctx, "t", cp.Seq)
			if err != nil || !reflect.DeepEqual(s.Values, states[cp.Seq]) {
				t.Fatalf("state at %d after a stopped prune: %v %v", cp.Seq, s, err)
			}
		}
		return hist
	}
	exact()
	// commits after it fold (the stores fold every few dozen commits)
	for i := 301; i <= 500; i++ {
		commit(t, st, "t", uint64(i), store.Write{Field: "n", Version: uint64(i), Value: i},
			store.Write{Field: "log", Version: uint64(i), Append: true, Items: []any{i}})
		s, err := st.StateAt(ctx, "t", uint64(i))
		if err != nil {
			t.Fatal(err)
		}
		states[uint64(i)] = s.Values
		if l := s.Values["log"].([]any); len(l) != i-1 || l[0] != 2 || l[i-2] != i {
			t.Fatalf("log at %d: %d items", i, len(l))
		}
	}
	exact()
	// the next prune finishes: only the base and the kept remain
	if _, err := st.Prune(ctx, "t", store.PruneOptions{Keep: 20}); err != nil {
		t.Fatal(err)
	}
	hist := exact()
	if len(hist) != 21 || hist[20].Source != store.SourceBase || hist[20].Seq != 480 {
		t.Fatalf("history after the prune finished: %v", seqs(hist))
	}
	// a prune with nothing to fold removes what a stopped one left
	if n, err := st.Prune(ctx, "t", store.PruneOptions{Keep: 20}); err != nil || n != 0 {
		t.Fatalf("a second prune: %d %v", n, err)
	}
}

func testPruneIdle(t *testing.T, st store.Store) {
	create(t, st, "old", map[string]any{"n": 1}) // created at(0), long ago
	cp := &store.Checkpoint{Thread: "new", Seq: 1, Source: store.SourceCreate, Time: time.Now()}
	if err := st.Commit(ctx, cp); err != nil {
		t.Fatal(err)
	}
	n, err := store.PruneIdle(ctx, st, time.Hour)
	if err != nil || n != 1 {
		t.Fatalf("pruned %d idle threads: %v", n, err)
	}
	if _, err := st.Head(ctx, "old"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("idle thread kept: %v", err)
	}
	if _, err := st.Head(ctx, "new"); err != nil {
		t.Fatalf("active thread pruned: %v", err)
	}
}

// A thread a run holds (its lease) is not idle, however long ago it was
// written: pruning leaves it, as deleting it would.
func testPruneIdleHeld(t *testing.T, st store.Store) {
	create(t, st, "held", map[string]any{"n": 1}) // created at(0), long ago
	create(t, st, "free", map[string]any{"n": 1})
	if err := st.Acquire(ctx, "held", "a run", time.Minute); err != nil {
		t.Fatal(err)
	}
	n, err := store.PruneIdle(ctx, st, time.Hour)
	if err != nil || n != 1 {
		t.Fatalf("pruned %d idle threads: %v", n, err)
	}
	if _, err := st.Head(ctx, "held"); err != nil {
		t.Fatalf("a held thread was pruned: %v", err)
	}
	if _, err := st.Head(ctx, "free"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("an idle thread kept: %v", err)
	}
	// the prune left no lease of its own behind
	if err := st.Acquire(ctx, "free", "next", time.Minute); err != nil {
		t.Fatalf("a lease left on a pruned thread: %v", err)
	}
}

// testLongThread writes a thread long enough for a store to summarise
// (the SQL stores fold it every 64 checkpoints and join long runs of
// appends), with fields replaced often, rarely, once or never, and lists
// replaced midway; the state at each checkpoint must be what folding the
// checkpoints gives. Pruning, continuing, deleting and creating the thread
// again must keep it so.
func testLongThread(t *testing.T, st store.Store) {
	want := map[uint64]*store.Snapshot{}
	var f *store.Folder
	version := map[string]uint64{}
	step := func(cp *store.Checkpoint) {
		t.Helper()
		for i := range cp.Writes {
			version[cp.Writes[i].Field]++
			cp.Writes[i].Version = version[cp.Writes[i].Field]
		}
		if err := st.Commit(ctx, cp); err != nil {
			t.Fatalf("commit %d: %v", cp.Seq, err)
		}
		f.Apply(cp)
		want[cp.Seq] = f.Snapshot("t")
	}
	writes := func(seq uint64) []store.Write {
		var ws []store.Write
		if seq%150 == 0 {
			return append(ws, store.Write{Field: "log", Value: []any{"reset", int(seq)}})
		}
		if seq%7 != 0 { // some checkpoints append nothing
			items := []any{fmt.Sprint("m", seq)}
			if seq%5 == 0 {
				items = append(items, map[string]any{"seq": int(seq), "note": "a, b]"})
			}
			if seq%11 == 0 {
				items = nil
			}
			ws = append(ws, store.Write{Field: "log", Append: true, Items: items})
		}
		if seq%3 == 0 {
			ws = append(ws, store.Write{Field: "n", Value: int(seq)})
		}
		if seq%40 == 0 {
			ws = append(ws, store.Write{Field: "tags", Append: true, Items: []any{int(seq)}})
		}
		if seq > 200 {
			ws = append(ws, store.Write{Field: "late", Append: true, Items: []any{int(seq)}})
		}
		return ws
	}
	check := func(from, to uint64) {
		t.Helper()
		for seq := from; seq <= to; seq++ {
			// the states around every 64th checkpoint, where the SQL
			// stores fold, and a sample of the rest
			if near := (seq+2)%64 <= 4; !near && seq%5 != 0 && seq != to {
				continue
			}
			got, err := st.StateAt(ctx, "t", seq)
			if err != nil {
				t.Fatalf("state at %d: %v", seq, err)
			}
			if w := want[seq]; !reflect.DeepEqual(got.Values, w.Values) || !reflect.DeepEqual(got.Versions, w.Versions) {
				t.Fatalf("state at %d:\n got %v %v\nwant %v %v", seq, got.Values, got.Versions, w.Values, w.Versions)
			}
		}
		h, err := st.Head(ctx, "t")
		if err != nil || !reflect.DeepEqual(h.Values, want[to].Values) {
			t.Fatalf("head at %d: %+v %v", to, h, err)
		}
	}
	run := func(from, to uint64) {
		for seq := from; seq <= to; seq++ {
			step(&store.Checkpoint{Thread: "t", Seq: seq, Parent: seq - 1, Run: "r", Step: int(seq), Source: store.SourceStep, Time: at(int(seq)),
				Writes: writes(seq), Next: []string{"n"}})
		}
	}
	begin := func() {
		f, version = store.NewFolder(), map[string]uint64{}
		clear(want)
		step(&store.Checkpoint{Thread: "t", Seq: 1, Source: store.SourceCreate, Time: at(0),
			Writes: []store.Write{{Field: "log", Value: []any{}}, {Field: "n", Value: 0}, {Field: "once", Value: "set at creation"}}})
	}
	begin()
	run(2, 460)
	check(1, 460)

	// prune folds the older checkpoints into a base; the kept states and
	// the states after it must not change
	if _, err := st.Prune(ctx, "t", store.PruneOptions{Keep: 100}); err != nil {
		t.Fatal(err)
	}
	run(461, 700)
	check(361, 700)

	// a thread deleted and created again under its id starts from nothing
	if err := st.Delete(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	begin()
	run(2, 140)
	check(1, 140)
}

// BenchPrune measures Prune (keeping 100) on threads of 10^3, 10^5 and
// 10^6 checkpoints, each writing a counter and every hundredth appending
// to a list: the time per checkpoint and checkpoints per second, the
// batches, and the longest a stopped prune may take to notice (until the
// first report, between two). The store makes the first two checkpoints;
// fill copies the second into seq 3..n straight in the store's database
// (committing a million checkpoints one by one would take longer than the
// prune) and moves the thread's head to n.
func BenchPrune(b *testing.B, st store.Store, fill func(b *testing.B, thread string, n int)) {
	for _, n := range []int{1_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("checkpoints=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			// batches made, the longest wait for the first report (the
			// base written) and between two reports: how long a stop
			// (Ctrl-C) may take to be heard
			var batches int
			var toFirst, gap time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				thread := fmt.Sprintf("prune-%d-%d", n, i)
				first := &store.Checkpoint{Thread: thread, Seq: 1, Source: store.SourceCreate, Time: at(0),
					Writes: []store.Write{{Field: "log", Version: 1, Value: []any{}}, {Field: "n", Version: 1, Value: 1}}}
				second := &store.Checkpoint{Thread: thread, Seq: 2, Parent: 1, Run: "r1", Step: 2, Source: store.SourceStep, Time: at(2),
					Writes: []store.Write{{Field: "n", Version: 2, Value: 2}}, Writers: []store.NodeWrites{{Node: "n", Fields: []string{"n"}}}, Next: []string{"n"}}
				for _, cp := range []*store.Checkpoint{first, second} {
					if err := st.Commit(ctx, cp); err != nil {
						b.Fatal(err)
					}
				}
				fill(b, thread, n)
				b.StartTimer()
				start := time.Now()
				last := start
				report := func(int, int) {
					now := time.Now()
					if batches == 0 {
						toFirst = max(toFirst, now.Sub(start))
					} else {
						gap = max(gap, now.Sub(last))
					}
					last = now
					batches++
				}
				removed, err := st.Prune(ctx, thread, store.PruneOptions{Keep: 100, Progress: report})
				if err != nil || removed != n-101 {
					b.Fatalf("pruned %d of %d: %v", removed, n, err)
				}
				b.StopTimer()
				head, err := st.Head(ctx, thread)
				if err != nil || head.Seq != uint64(n) || head.Values["n"] != n || len(head.Values["log"].([]any)) != n/100 {
					b.Fatalf("head after the prune: %d %v %v", head.Seq, head.Values["n"], err)
				}
				if err := st.Delete(ctx, thread); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/checkpoint")
			b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "checkpoints/s")
			b.ReportMetric(float64(batches)/float64(b.N), "batches/op")
			b.ReportMetric(float64(toFirst.Milliseconds()), "ms-to-first-report")
			b.ReportMetric(float64(gap.Milliseconds()), "ms-longest-between-reports")
		})
	}
}
