package engine_test

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"testing"

	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/memory"
)

// travel fans out to two nodes joined by a third, reads its input in a
// node that runs late, and loops: a checkpoint in the middle of a run has
// next nodes, join arrivals and an input that a fork must carry.
const travel = `
version: 1
name: travel
state:
	schema:
		type: object
		properties:
			i: {type: integer, default: 0}
			by: {type: integer, default: 1}
			log: {type: array, items: {type: string}, default: []}
	reducers:
		log: append
input: [by]
limits: {max_steps: 50}
nodes:
	split: {kind: set, set: {log: "'split'"}}
	left: {kind: set, set: {log: "'left'"}}
	right: {kind: set, set: {log: "'right'"}}
	slow: {kind: set, set: {log: "'slow'"}}
	join: {kind: set, set: {i: "state.i + input.by", log: "'join ' + string(state.i + input.by)"}}
edges:
	- {from: START, to: split}
	- {from: split, to: [left, right]}
	- {from: right, to: slow}
	- {from: [left, slow], to: join}
	- from: join
	  bound: 10
	  branch:
		- when: "state.i < 6"
		  to: split
		- else: END
`

// seqOf finds the checkpoint of a thread that completed step n of its
// last run.
func history(t *testing.T, eng *engine.Engine, thread string) []*store.Checkpoint {
	t.Helper()
	h, err := eng.Store.History(context.Background(), thread, store.HistoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	slices.Reverse(h)
	return h
}

// A fork at a checkpoint in the middle of a run carries the run: resumed,
// it runs the nodes that were next there, with the run's input and the
// join's arrivals, and takes the path the original took from there.
func TestForkContinuesTheRun(t *testing.T) {
	ctx := context.Background()
	g := compile(t, travel)
	eng := engine.New(memory.New())
	orig := mustRun(t, g, eng, "t", map[string]any{"by": 2})
	if orig.State["i"] != 6 {
		t.Fatalf("the run ended with %v", orig.State)
	}
	for _, cp := range history(t, eng, "t") {
		if len(cp.Next) == 0 {
			continue
		}
		to := "fork-" + jsonOf(cp.Seq)
		snap, err := eng.Store.StateAt(ctx, "t", cp.Seq)
		if err != nil {
			t.Fatal(err)
		}
		f, err := store.Fork(ctx, eng.Store, "t", cp.Seq, to)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(f.Next, cp.Next) || f.Step != cp.Step {
			t.Fatalf("the fork at %d: next %v step %d, the checkpoint's %v %d", cp.Seq, f.Next, f.Step, cp.Next, cp.Step)
		}
		head, err := eng.Store.Head(ctx, to)
		if err != nil || !slices.Equal(head.Next, cp.Next) || !slices.Equal(head.Joins, snap.Joins) {
			t.Fatalf("the fork's head: %v %+v", err, head)
		}
		res, err := eng.Run(ctx, g, engine.Request{Thread: to, Resume: true, RecordPath: true})
		if err != nil {
			t.Fatalf("resume the fork at %d: %v", cp.Seq, err)
		}
		if want := orig.Path[cp.Step:]; !reflect.DeepEqual(res.Path, want) {
			t.Errorf("the fork at %d (step %d) went\n%v\nthe original from there\n%v", cp.Seq, cp.Step, res.Path, want)
		}
		if !reflect.DeepEqual(res.State, orig.State) {
			t.Errorf("the fork at %d ended with %v, the original with %v", cp.Seq, res.State, orig.State)
		}
	}
	// a checkpoint with nothing to run forks a thread with nothing to
	// resume, which takes new runs
	last := history(t, eng, "t")
	end := last[len(last)-1]
	if _, err := store.Fork(ctx, eng.Store, "t", end.Seq, "done"); err != nil {
		t.Fatal(err)
	}
	if res := mustRun(t, g, eng, "done", map[string]any{"by": 10}); res.State["i"] != 16 {
		t.Errorf("a run on a fork of a finished thread: %v", res.State)
	}
}

// A fork at a paused run's newest checkpoint keeps the updates of nodes
// that completed after it (pending writes): resuming the fork does not
// run them again.
func TestForkKeepsPendingWrites(t *testing.T) {
	ctx := context.Background()
	g := compile(t, `
version: 1
name: pending
state:
	schema:
		type: object
		properties:
			a: {type: string, default: ""}
			b: {type: string, default: ""}
			c: {type: string, default: ""}
nodes:
	start: {kind: set}
	a: {kind: set, set: {a: "'ran'"}}
	b: {kind: set, set: {b: "'ran'"}}
	c: {kind: set, set: {c: "state.a + '/' + state.b"}}
edges:
	- {from: START, to: start}
	- {from: start, to: [a, b]}
	- {from: [a, b], to: c}
	- {from: c, to: END}
`)
	eng := engine.New(memory.New())
	// a run that stopped before its second step, as a crash leaves it:
	// a completed, its update saved, b not
	stop := make(chan struct{})
	close(stop)
	if _, err := eng.Run(ctx, g, engine.Request{Thread: "t", Stop: stop}); err != engine.ErrStopped {
		t.Fatalf("the stopped run: %v", err)
	}
	head, err := eng.Store.Head(ctx, "t")
	if err != nil || !slices.Equal(head.Next, []string{"a", "b"}) {
		t.Fatalf("the stopped thread: %v %+v", err, head)
	}
	if err := eng.Store.PutPending(ctx, "t", head.Seq, "a", []store.Write{{Field: "a", Value: "kept"}}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Fork(ctx, eng.Store, "t", head.Seq, "f"); err != nil {
		t.Fatal(err)
	}
	fh, err := eng.Store.Head(ctx, "f")
	if err != nil || len(fh.Pending["a"]) != 1 {
		t.Fatalf("the fork's pending writes: %v %+v", err, fh)
	}
	res, err := eng.Run(ctx, g, engine.Request{Thread: "f", Resume: true, RecordPath: true})
	if err != nil {
		t.Fatal(err)
	}
	// a's saved update stands: had it run again, it would have written
	// "ran"
	if res.State["a"] != "kept" || res.State["c"] != "kept/ran" {
		t.Errorf("the fork resumed to %v", res.State)
	}
}

// An update at an older checkpoint branches from it: its checkpoint
// follows the thread's head but holds the older state with the edit, says
// which checkpoint it goes on from, and keeps that checkpoint's
// unfinished run, which a resume continues over the edit.
func TestUpdateAtBranches(t *testing.T) {
	ctx := context.Background()
	g := compile(t, travel)
	eng := engine.New(memory.New())
	orig := mustRun(t, g, eng, "t", map[string]any{"by": 2})
	h := history(t, eng, "t")
	// the input checkpoint: the run's first nodes are next
	in := h[1]
	if in.Source != store.SourceInput || !slices.Equal(in.Next, []string{"split"}) {
		t.Fatalf("checkpoint 2: %+v", in)
	}
	snap, err := eng.UpdateAt(ctx, g, "t", in.Seq, "join", map[string]any{"i": 3})
	if err != nil {
		t.Fatal(err)
	}
	top := h[len(h)-1]
	if snap.Seq != top.Seq+1 || !slices.Equal(snap.Next, in.Next) || snap.Values["i"] != 3 {
		t.Fatalf("the branch: %+v", snap)
	}
	if !reflect.DeepEqual(snap.Values["log"], []any{}) {
		t.Errorf("the branch's log is %v, checkpoint 2's was empty", snap.Values["log"])
	}
	nh := history(t, eng, "t")
	b := nh[len(nh)-1]
	if b.Base != in.Seq || b.Parent != top.Seq || b.Source != store.SourceUpdate {
		t.Errorf("the branch's checkpoint: base %d parent %d source %s", b.Base, b.Parent, b.Source)
	}
	st, err := eng.Store.StateAt(ctx, "t", b.Seq)
	if err != nil || st.Values["i"] != 3 || !reflect.DeepEqual(st.Values["log"], []any{}) {
		t.Fatalf("the stored branch: %v %+v", err, st)
	}
	// resumed, the branch runs the original's first round over i = 3
	// (with the run's input, by 2): two rounds, to 7
	res, err := eng.Run(ctx, g, engine.Request{Thread: "t", Resume: true, RecordPath: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.State["i"] != 7 || !reflect.DeepEqual(res.Path, orig.Path[:8]) {
		t.Errorf("the branch resumed to %v along %v", res.State, res.Path)
	}
	// an update at a finished checkpoint as join stands for a step that
	// ran join: its branch over the edit (i = 1 < 6) makes split next; a
	// new run waits until that run is resumed or given up
	snap, err = eng.UpdateAt(ctx, g, "t", top.Seq, "join", map[string]any{"i": 1})
	if err != nil || !slices.Equal(snap.Next, []string{"split"}) {
		t.Fatalf("update as join at a finished checkpoint: %v %+v", err, snap)
	}
	if _, err := eng.Run(ctx, g, engine.Request{Thread: "t", Input: map[string]any{"by": 5}}); !errors.Is(err, engine.ErrUnfinished) {
		t.Fatalf("a new run over the update's unfinished one: %v", err)
	}
	if _, err := eng.Abandon(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if res := mustRun(t, g, eng, "t", map[string]any{"by": 5}); res.State["i"] != 6 {
		t.Errorf("a run after the branch: %v", res.State)
	}
	if _, err := eng.UpdateAt(ctx, g, "t", 999, "join", map[string]any{"i": 1}); err == nil {
		t.Error("an update at a checkpoint the thread does not have was accepted")
	}
}

// An update on a paused run (its newest checkpoint has nodes to run)
// keeps the run: it is resumed over the edit.
func TestUpdateOnAPausedRun(t *testing.T) {
	ctx := context.Background()
	g := compile(t, travel)
	eng := engine.New(memory.New())
	stop := make(chan struct{})
	close(stop)
	if _, err := eng.Run(ctx, g, engine.Request{Thread: "t", Input: map[string]any{"by": 2}, Stop: stop}); err != engine.ErrStopped {
		t.Fatalf("the stopped run: %v", err)
	}
	snap, err := eng.Update(ctx, g, "t", "join", map[string]any{"i": 4})
	if err != nil || len(snap.Next) == 0 {
		t.Fatalf("an update of a paused run: %v %+v", err, snap)
	}
	res, err := eng.Run(ctx, g, engine.Request{Thread: "t", Resume: true})
	if err != nil || res.State["i"] != 6 {
		t.Fatalf("resumed after the update: %v %v", err, res)
	}
}

// An update at a finished checkpoint routes as the step it stands for
// would: a fan-out triggers every target, a branch takes the case the
// edited state makes hold (END leaves the thread finished), and one
// source of a join triggers nothing until the others arrive.
func TestUpdateOfAFinishedThreadRoutes(t *testing.T) {
	ctx := context.Background()
	g := compile(t, travel)
	for _, c := range []struct {
		as     string
		values map[string]any
		next   []string
	}{
		{"split", nil, []string{"left", "right"}},
		{"join", map[string]any{"i": 2}, []string{"split"}},
		{"join", map[string]any{"i": 9}, nil},
		{"slow", nil, nil},
	} {
		eng := engine.New(memory.New())
		mustRun(t, g, eng, "t", map[string]any{"by": 3})
		snap, err := eng.Update(ctx, g, "t", c.as, c.values)
		if err != nil || !slices.Equal(snap.Next, c.next) {
			t.Errorf("update as %s with %v: next %v, want %v (%v)", c.as, c.values, snap.Next, c.next, err)
			continue
		}
		h, err := eng.Store.Head(ctx, "t")
		if err != nil || !slices.Equal(h.Next, c.next) || len(c.next) == 0 && len(h.Joins) > 0 {
			t.Errorf("update as %s: the stored head %+v %v", c.as, h, err)
		}
		_, err = eng.Run(ctx, g, engine.Request{Thread: "t", Input: map[string]any{"by": 1}})
		if unfinished := errors.Is(err, engine.ErrUnfinished); unfinished != (len(c.next) > 0) || err != nil && !unfinished {
			t.Errorf("update as %s: a new run: %v", c.as, err)
		}
	}
}
