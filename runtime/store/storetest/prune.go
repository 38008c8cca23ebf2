// The conformance cases of pruning: a thread's old checkpoints, a
// prune stopped part way, idle threads, a long thread, and the prune
// benchmark.

package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/store"
)

func testPrune(t *testing.T, st store.Store) {
	create(t, st, "t", map[string]any{"n": 0, "log": []any{"start"}})
	for i := 2; i <= 20; i++ {
		commit(t, st, "t", uint64(i), store.Write{Field: "n", Version: uint64(i), Value: i},
			store.Write{Field: "log", Version: uint64(i), Append: true, Items: []any{i}})
	}
	// the thread is paused: its newest checkpoint has nodes to run and a
	// pending write
	if err := st.PutPending(ctx, "t", 20, "slow", []store.Write{{Field: "n", Value: 99}}, ""); err != nil {
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

// BenchPruneIdle measures PruneIdleThreads deleting idle served threads
// of nine turns each (nine checkpoints a turn, the thread's record, a
// run a turn with its events): an op is one thread deleted, so ns/op
// is the time per thread and 60e9/(ns/op) the threads a minute. The
// threads are written beforehand, outside the timing, with several
// writers at once; settle, when set, is called then (to have a database
// gather its statistics, as it would have long since).
func BenchPruneIdle(b *testing.B, st store.Store, settle func(b *testing.B)) {
	cat, _ := st.(store.Catalog)
	when := time.Now().Add(-time.Hour).UTC()
	ids := make(chan int)
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			for i := range ids {
				if err := seedTurns(st, cat, fmt.Sprintf("idle-%d", i), when); err != nil {
					errs <- err
					for range ids {
					}
					return
				}
			}
			errs <- nil
		}()
	}
	for i := range b.N {
		ids <- i
	}
	close(ids)
	for range 8 {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	if settle != nil {
		settle(b)
	}
	b.ResetTimer()
	n, err := store.PruneIdleThreads(ctx, st, store.IdleOptions{TTL: time.Minute})
	b.StopTimer()
	if err != nil || n != b.N {
		b.Fatalf("deleted %d of %d idle threads: %v", n, b.N, err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Minutes(), "threads/min")
}

// seedTurns writes a served thread of nine turns, written at when.
func seedTurns(st store.Store, cat store.Catalog, id string, when time.Time) error {
	if cat != nil {
		if err := cat.CreateThread(ctx, &store.ThreadRecord{ID: id, Tenant: "acme", Flow: "interview", Created: when}); err != nil {
			return err
		}
	}
	seq := uint64(1)
	if err := st.Commit(ctx, &store.Checkpoint{Thread: id, Seq: 1, Source: store.SourceCreate, Time: when,
		Writes: []store.Write{{Field: "history", Version: 1, Value: []any{}}, {Field: "turn", Version: 1, Value: 0}}}); err != nil {
		return err
	}
	for turn := range 9 {
		run := fmt.Sprintf("%s-run-%d", id, turn)
		if cat != nil {
			r := &store.RunRecord{ID: run, Tenant: "acme", Thread: id, Flow: "interview", Status: store.RunRunning,
				Input: []byte(`{}`), Server: "server-1", Created: when, Started: when}
			if err := cat.CreateRun(ctx, r); err != nil {
				return err
			}
			evs := make([]store.EventRecord, 6)
			for i := range evs {
				evs[i] = store.EventRecord{Seq: int64(i + 1), Data: fmt.Appendf(nil, `{"type":"node_end","node":"step-%d"}`, i)}
			}
			if err := cat.AppendEvents(ctx, run, "server-1", evs); err != nil {
				return err
			}
			expect := r.State()
			r.Status, r.Finished, r.Server = store.RunSucceeded, when, ""
			if err := cat.UpdateRun(ctx, r, expect, nil); err != nil {
				return err
			}
		}
		for step := range 9 {
			seq++
			cp := &store.Checkpoint{Thread: id, Seq: seq, Parent: seq - 1, Run: run, Step: step, Source: store.SourceStep, Time: when,
				Writes:  []store.Write{{Field: "turn", Version: seq, Value: turn}},
				Writers: []store.NodeWrites{{Node: fmt.Sprint("step-", step), Fields: []string{"turn"}}}}
			if step == 8 {
				cp.Writes = append(cp.Writes, store.Write{Field: "history", Version: seq, Append: true,
					Items: []any{map[string]any{"turn": turn, "content": "What was the hardest part of the project, and how did you work through it?"}}})
			}
			if err := st.Commit(ctx, cp); err != nil {
				return err
			}
		}
	}
	return nil
}
