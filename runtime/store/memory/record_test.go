package memory_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/memory"
)

// The store records a copy of the checkpoint struct it is given (its
// slices and maps as they are), so the writer may fill the same struct
// for its next commit: History, Head, StateAt and a fork read back every
// part of each checkpoint as committed, the parts most steps lack
// included, and nothing of what the struct was filled with later.
func TestCommitCopiesTheCheckpoint(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	if !store.Copies(st) {
		t.Fatal("the memory store does not say it copies its commits")
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	want := []store.Checkpoint{
		{Thread: "t", Seq: 1, Source: store.SourceInput, Run: "r1", Time: at, Config: map[string]any{"k": "v"},
			Input: map[string]any{"q": "hi"}, Writes: []store.Write{{Field: "q", Version: 1, Value: "hi"}}, Next: []string{"a", "b"}, WriteID: "w1"},
		{Thread: "t", Seq: 2, Parent: 1, Source: store.SourceStep, Run: "r1", Step: 1, Time: at.Add(time.Second),
			Writes:  []store.Write{{Field: "list", Version: 1, Items: []any{"x", "y"}, Append: true}, {Field: "n", Version: 1, Value: 1}},
			Writers: []store.NodeWrites{{Node: "a", Fields: []string{"list"}}, {Node: "b", Fields: []string{"list", "n"}}},
			Next:    []string{"c"}, Joins: []uint64{3, 0}, Replies: []store.Reply{{Node: "a", Key: "k1", Text: "told"}},
			Answers: map[string]any{"a": "yes"}, WriteID: "w2"},
		{Thread: "t", Seq: 3, Parent: 2, Source: store.SourceStep, Run: "r1", Step: 2, Time: at.Add(2 * time.Second),
			Writes:  []store.Write{{Field: "n", Version: 2, Value: 2}, {Field: "q", Version: 2, Removed: true}},
			Writers: []store.NodeWrites{{Node: "c", Fields: []string{"n"}}}, Release: "owner", WriteID: "w3"},
		{Thread: "t", Seq: 4, Parent: 3, Source: store.SourceUpdate, Run: "r2", Time: at.Add(3 * time.Second), Base: 2,
			Writes: []store.Write{{Field: "n", Version: 3, Value: 7}}, Input: map[string]any{"n": 7}},
	}
	// one struct for every commit, as a run that reuses its checkpoints
	var cp store.Checkpoint
	for i := range want {
		cp = want[i]
		if err := st.Commit(ctx, &cp); err != nil {
			t.Fatalf("commit %d: %v", want[i].Seq, err)
		}
		cp = store.Checkpoint{Thread: "t", Seq: 99, Run: "changed after", Writes: []store.Write{{Field: "n", Value: -1}}}
	}
	got, err := st.History(ctx, "t", store.HistoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("history has %d checkpoints, want %d", len(got), len(want))
	}
	for i, g := range got {
		w := want[len(want)-1-i]
		if !reflect.DeepEqual(*g, w) {
			t.Errorf("checkpoint %d reads back\n%+v\nwant\n%+v", w.Seq, *g, w)
		}
	}
	// each read hands back checkpoints of its own
	again, err := st.History(ctx, "t", store.HistoryOptions{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	again[0].Writes = nil
	if got, _ := st.History(ctx, "t", store.HistoryOptions{Limit: 1}); len(got[0].Writes) != 1 {
		t.Errorf("a change to a checkpoint History returned reached the store: %+v", got[0])
	}
	// filters read the records' parts
	for _, c := range []struct {
		opts store.HistoryOptions
		seqs []uint64
	}{
		{store.HistoryOptions{Source: store.SourceStep}, []uint64{3, 2}},
		{store.HistoryOptions{Run: "r2"}, []uint64{4}},
		{store.HistoryOptions{Node: "b"}, []uint64{2}},
		{store.HistoryOptions{After: 1, Before: 3}, []uint64{2}},
	} {
		cps, err := st.History(ctx, "t", c.opts)
		if err != nil {
			t.Fatal(err)
		}
		var seqs []uint64
		for _, cp := range cps {
			seqs = append(seqs, cp.Seq)
		}
		if !reflect.DeepEqual(seqs, c.seqs) {
			t.Errorf("History(%+v) = %v, want %v", c.opts, seqs, c.seqs)
		}
	}
	head, err := st.Head(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	wantValues := map[string]any{"list": []any{"x", "y"}, "n": 7}
	if head.Seq != 4 || head.Run != "r2" || !reflect.DeepEqual(head.Values, wantValues) ||
		!reflect.DeepEqual(head.Versions, map[string]uint64{"list": 1, "n": 3, "q": 2}) {
		t.Errorf("head %+v", head)
	}
	at2, err := st.StateAt(ctx, "t", 2)
	if err != nil {
		t.Fatal(err)
	}
	if at2.Seq != 2 || at2.Step != 1 || !reflect.DeepEqual(at2.Next, []string{"c"}) || !reflect.DeepEqual(at2.Joins, []uint64{3, 0}) ||
		!reflect.DeepEqual(at2.Values, map[string]any{"q": "hi", "list": []any{"x", "y"}, "n": 1}) {
		t.Errorf("state at 2: %+v", at2)
	}
	// a fork from checkpoint 2 starts from its state
	if _, err := store.Fork(ctx, st, "t", 2, "f"); err != nil {
		t.Fatal(err)
	}
	fh, err := st.Head(ctx, "f")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fh.Values, at2.Values) {
		t.Errorf("fork's state %v, want %v", fh.Values, at2.Values)
	}
}
