package storetest

import (
	"errors"
	"fmt"
	"reflect"
	"sync/atomic"
	"testing"

	"github.com/trellisflow/trellis/runtime/store"
)

// stepCP is checkpoint seq of a run on thread, appending one item to log
// and counting n.
func stepCP(thread string, seq uint64) *store.Checkpoint {
	return &store.Checkpoint{Thread: thread, Seq: seq, Parent: seq - 1, Run: "r1", Step: int(seq), Source: store.SourceStep, Time: at(int(seq)),
		WriteID: fmt.Sprintf("w%d", seq),
		Writes:  []store.Write{{Field: "log", Version: seq, Append: true, Items: []any{fmt.Sprint("s", seq)}}, {Field: "n", Version: seq, Value: float64(seq)}},
		Writers: []store.NodeWrites{{Node: "n", Fields: []string{"log", "n"}}}, Next: []string{"n"}}
}

// testChainCommit: checkpoints committed together (Checkpoint.Before)
// are committed all or none, each as its own checkpoint: history, states
// and folds (across a fold's boundary) are those of one commit each.
func testChainCommit(t *testing.T, st store.Store) {
	create(t, st, "t", map[string]any{"log": []any{}, "n": 0.0})
	chain := func(from, to uint64) *store.Checkpoint {
		last := stepCP("t", to)
		for seq := from; seq < to; seq++ {
			last.Before = append(last.Before, stepCP("t", seq))
		}
		return last
	}
	if err := st.Commit(ctx, chain(2, 4)); err != nil {
		t.Fatalf("commit 2..4: %v", err)
	}
	// a chain whose first is not on the head commits none of it, even
	// where the rest would follow the checkpoint of its number there
	other := chain(4, 6)
	for _, c := range other.Chain() {
		c.WriteID += "-other"
	}
	if err := st.Commit(ctx, other); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a chain from a checkpoint already there: %v, want ErrConflict", err)
	}
	// a chain whose last a store refuses commits none of it
	bad := chain(5, 7)
	bad.Memory = []store.MemoryPut{{Tenant: "", Item: &store.MemoryItem{Namespace: []string{"x"}, Key: ""}}}
	if _, ok := st.(store.Memory); ok {
		if err := st.Commit(ctx, bad); err == nil {
			t.Fatal("a chain with a document refused was committed")
		}
	}
	if h, err := st.Head(ctx, "t"); err != nil || h.Seq != 4 {
		t.Fatalf("after the refused chains the head is %+v (%v), want 4", h, err)
	}
	// up to a fold's boundary and past it, in chains of three
	var seq uint64 = 4
	for seq < 70 {
		if err := st.Commit(ctx, chain(seq+1, seq+3)); err != nil {
			t.Fatalf("commit %d..%d: %v", seq+1, seq+3, err)
		}
		seq += 3
	}
	want := []any{}
	for s := uint64(2); s <= seq; s++ {
		want = append(want, fmt.Sprint("s", s))
	}
	h, err := st.Head(ctx, "t")
	if err != nil || h.Seq != seq || !reflect.DeepEqual(h.Values["log"], want) || h.Values["n"] != float64(seq) {
		t.Fatalf("head %d (%v): log %v, n %v; want %d, %v", h.Seq, err, h.Values["log"], h.Values["n"], seq, want)
	}
	hist, err := st.History(ctx, "t", store.HistoryOptions{})
	if err != nil || len(hist) != int(seq) {
		t.Fatalf("history: %d checkpoints (%v), want %d", len(hist), err, seq)
	}
	for _, cp := range hist {
		if len(cp.Before) > 0 {
			t.Fatalf("checkpoint %d as History lists it holds others", cp.Seq)
		}
		if cp.Seq > 1 && cp.WriteID != fmt.Sprintf("w%d", cp.Seq) {
			t.Fatalf("checkpoint %d has write id %q", cp.Seq, cp.WriteID)
		}
	}
	for _, at := range []uint64{3, 63, 64, 65, 66} {
		s, err := st.StateAt(ctx, "t", at)
		if err != nil || s.Seq != at || !reflect.DeepEqual(s.Values["log"], want[:at-1]) {
			t.Fatalf("state at %d (%v): seq %d, log %v", at, err, s.Seq, s.Values["log"])
		}
	}
}

// BenchStepCommits commits a run's steps four at a time: each in a
// commit of its own ("alone"), and the four in one commit
// (Checkpoint.Before, "together"), as a run commits inline steps held
// before a slow one; an op is four steps.
func BenchStepCommits(b *testing.B, st store.Store) {
	for _, together := range []bool{false, true} {
		name := "alone"
		if together {
			name = "together"
		}
		b.Run(name, func(b *testing.B) {
			thread := "bench-" + name
			create(b, st, thread, map[string]any{"log": []any{}, "n": 0.0})
			seq := uint64(1)
			b.ReportAllocs()
			for b.Loop() {
				var cps []*store.Checkpoint
				for range 4 {
					seq++
					cps = append(cps, stepCP(thread, seq))
				}
				if together {
					last := cps[3]
					last.Before = cps[:3]
					cps = cps[3:]
				}
				for _, cp := range cps {
					if err := st.Commit(ctx, cp); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// BenchStepsSideBySide runs threads side by side, as a server does: each
// goroutine reads its thread's head, then commits a step of it; an op is
// one step. Reads and writes meet on the store's connections.
func BenchStepsSideBySide(b *testing.B, st store.Store) {
	var threads atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		thread := fmt.Sprint("side-", threads.Add(1))
		create(b, st, thread, map[string]any{"log": []any{}, "n": 0.0})
		seq := uint64(1)
		for pb.Next() {
			if _, err := st.Head(ctx, thread); err != nil {
				b.Error(err)
				return
			}
			seq++
			if err := st.Commit(ctx, stepCP(thread, seq)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
