package engine_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	memnode "github.com/trellisflow/trellis/nodes/memory"

	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/kind/kindtest"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/memory"
)

// countCommits counts a store's commits and the checkpoints they hold.
type countCommits struct {
	*memory.Store
	mu      sync.Mutex
	commits int
	cps     int
}

func (c *countCommits) Commit(ctx context.Context, cp *store.Checkpoint) error {
	c.mu.Lock()
	c.commits++
	c.cps += len(cp.Chain())
	c.mu.Unlock()
	return c.Store.Commit(ctx, cp)
}

// calcSpec is a kind that computes its set: block inline.
var calcSpec = kind.Spec{Name: "calc", Summary: "Expressions to fields.", Inline: true, Fields: []config.Field{config.Map("set", "Field to expression.", nil)},
	New: func(b kind.Builder) kind.Node {
		sets := kindtest.CompileSet(b)
		return kind.Func(func(_ context.Context, s kind.State) (kind.Update, error) { return sets.Eval(s.Vars()) })
	}}

// compileWith compiles the flow src with the kinds of reg.
func compileWith(t *testing.T, reg kind.Registry, src string) *flow.Graph {
	t.Helper()
	path := filepath.Join(t.TempDir(), "flow.yaml")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	g, dl := flow.Load(path, reg)
	if g == nil {
		t.Fatalf("flow does not compile:\n%v", dl)
	}
	return g
}

// heldKinds: calc computes inline; probe, a node that may block, writes
// the thread's head as the store has it when it runs.
func heldKinds(st store.Store) kind.Registry {
	return kind.NewSet(calcSpec,
		kind.Spec{Name: "probe", Summary: "Write the thread's head.",
			New: func(b kind.Builder) kind.Node {
				b.Writes("seen", config.Value{})
				return kind.Func(func(ctx context.Context, s kind.State) (kind.Update, error) {
					h, err := st.Head(ctx, "t")
					if err != nil {
						return nil, err
					}
					return kind.Update{{Field: "seen", Value: int(h.Seq)}}, nil
				})
			}},
	)
}

const heldFlow = `version: 1
name: held
input: [n]
state:
  schema:
    type: object
    properties:
      n: {type: integer, default: 0}
      a: {type: integer, default: 0}
      b: {type: integer, default: 0}
      seen: {type: integer, default: 0}
      c: {type: integer, default: 0}
nodes:
  a: {kind: calc, set: {a: "state.n + 1"}}
  b: {kind: calc, set: {b: "state.a + 1"}}
  probe: {kind: probe}
  c: {kind: calc, set: {c: "C"}}
edges:
  - {from: START, to: a}
  - {from: a, to: b}
  - {from: b, to: probe}
  - {from: probe, to: c}
  - {from: c, to: END}
`

func compileHeld(t *testing.T, st store.Store, c string) *flow.Graph {
	t.Helper()
	return compileWith(t, heldKinds(st), strings.Replace(heldFlow, `"C"`, `"`+c+`"`, 1))
}

// Steps followed by inline nodes are held and committed with the next
// step that commits, in one transaction, each still a checkpoint of its
// own; a node that may block starts only once every step before it is
// committed.
func TestHeldStepsCommitTogether(t *testing.T) {
	st := &countCommits{Store: memory.New()}
	g := compileHeld(t, st, "state.b + 1")
	res, err := engine.New(st).Run(context.Background(), g, engine.Request{Thread: "t", Input: map[string]any{"n": 1}})
	if err != nil {
		t.Fatal(err)
	}
	// created (1), input, a and b (2, 3, 4) before probe; probe and c
	// (5, 6) at the end
	if res.State["seen"] != 4 || res.State["c"] != 4 || res.Checkpoint != 6 {
		t.Fatalf("probe saw the head at %v, c = %v, the run ended at %d; want 4, 4, 6", res.State["seen"], res.State["c"], res.Checkpoint)
	}
	if st.commits != 3 || st.cps != 6 {
		t.Fatalf("%d commits of %d checkpoints, want 3 of 6", st.commits, st.cps)
	}
	hist, err := st.History(context.Background(), "t", store.HistoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var writers []string
	for i := len(hist) - 1; i >= 0; i-- {
		for _, w := range hist[i].Writers {
			writers = append(writers, w.Node)
		}
	}
	if !reflect.DeepEqual(writers, []string{"a", "b", "probe", "c"}) {
		t.Fatalf("the steps' checkpoints name %v", writers)
	}
}

// A run that fails in a step after held ones commits the held ones: the
// thread is where it would be had each step been committed alone, and
// its run resumes from there.
func TestHeldStepsCommittedWhenARunFails(t *testing.T) {
	st := &countCommits{Store: memory.New()}
	g := compileHeld(t, st, "int('x')")
	_, err := engine.New(st).Run(context.Background(), g, engine.Request{Thread: "t", Input: map[string]any{"n": 1}})
	var ne *engine.NodeError
	if !errors.As(err, &ne) || ne.Node != "c" {
		t.Fatalf("the run: %v, want node c's error", err)
	}
	h, err := st.Head(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	if h.Seq != 5 || h.Values["seen"] != 4 || !reflect.DeepEqual(h.Next, []string{"c"}) {
		t.Fatalf("the head is %d (seen %v), next %v; want 5, 4, [c]", h.Seq, h.Values["seen"], h.Next)
	}
}

// A step followed by a node that may block is committed with the next
// step's node_start events, in one write, before that node starts: the
// commit that holds the first probe's step carries the second's
// node_start, and the second sees that step committed.
func TestAStepCommitsWithTheNextStepsStart(t *testing.T) {
	st := &countCommits{Store: memory.New()}
	g := compileWith(t, heldKinds(st), `version: 1
name: starts
state:
  schema:
    type: object
    properties:
      seen: {type: integer, default: 0}
nodes:
  first: {kind: probe}
  second: {kind: probe}
edges:
  - {from: START, to: first}
  - {from: first, to: second}
  - {from: second, to: END}
`)
	rec := &commitRecorder{}
	res, err := engine.New(st).Run(context.Background(), g, rec.request(engine.Request{Thread: "t"}))
	if err != nil {
		t.Fatal(err)
	}
	var holding []string
	for _, c := range rec.commits {
		var names []string
		for _, x := range c.cp.Chain() {
			for _, w := range x.Writers {
				names = append(names, "cp:"+w.Node)
			}
		}
		for _, ev := range c.seen {
			if ev.Type == engine.NodeStart {
				names = append(names, "start:"+ev.Node)
			}
		}
		if slices.Contains(names, "cp:first") {
			holding = names
		}
	}
	if !slices.Contains(holding, "start:second") {
		t.Fatalf("the commit of first's step holds %v: want second's node_start with it", holding)
	}
	// second saw first's step committed (created 1, first 2)
	if res.State["seen"] != 2 {
		t.Fatalf("second saw the head at %v, want 2", res.State["seen"])
	}
}

// The run's last step tells its changes (state_update) before its
// commit, so that they go with it where the run's events are recorded
// with its commits, and no write of its own follows for them.
func TestTheLastStepsChangesGoWithItsCommit(t *testing.T) {
	st := &countCommits{Store: memory.New()}
	g := compileHeld(t, st, "state.b + 1")
	rec := &commitRecorder{}
	res, err := engine.New(st).Run(context.Background(), g, rec.request(engine.Request{Thread: "t", Input: map[string]any{"n": 1}}))
	if err != nil {
		t.Fatal(err)
	}
	var last []engine.Event // observed when the last commit began
	for _, c := range rec.commits {
		if len(c.cp.Next) == 0 {
			last = c.seen
		}
	}
	var told bool
	for _, ev := range last {
		told = told || ev.Type == engine.StateUpdate && ev.Checkpoint == res.Checkpoint
	}
	if !told {
		t.Fatalf("the last commit (checkpoint %d) began before its step's state_update; events then: %v", res.Checkpoint, last)
	}
	var updates int
	for _, ev := range rec.seen {
		if ev.Type == engine.StateUpdate && ev.Checkpoint == res.Checkpoint {
			updates++
		}
	}
	if updates != 1 {
		t.Fatalf("%d state_updates of the last checkpoint, want 1", updates)
	}
}

// With EndsWithCommit, a run's run_end goes before its last commit, after
// that step's state_update, and is not emitted again; should that commit
// fail, run_error follows it.
func TestARunsEndGoesBeforeItsLastCommit(t *testing.T) {
	for _, fails := range []bool{false, true} {
		st := &failLast{Store: memory.New(), fail: fails}
		g := compileHeld(t, st, "state.b + 1")
		rec := &commitRecorder{}
		req := rec.request(engine.Request{Thread: "t", Input: map[string]any{"n": 1}})
		req.EndsWithCommit = true
		_, err := engine.New(st).Run(context.Background(), g, req)
		if (err != nil) != fails {
			t.Fatalf("failing the last commit %v: %v", fails, err)
		}
		var last []engine.Event // observed when the last commit began
		for _, c := range rec.commits {
			if len(c.cp.Next) == 0 {
				last = c.seen
			}
		}
		if n := len(last); n < 2 || last[n-1].Type != engine.RunEnd || last[n-2].Type != engine.StateUpdate || last[n-1].State["b"] == nil {
			t.Fatalf("failing %v: the events when the last commit began: %v", fails, last)
		}
		var types []engine.EventType
		for _, ev := range rec.seen[len(last)-1:] {
			types = append(types, ev.Type)
		}
		want := []engine.EventType{engine.RunEnd}
		if fails {
			want = append(want, engine.RunError)
		}
		if !slices.Equal(types, want) {
			t.Fatalf("failing %v: events from the run_end on: %v", fails, types)
		}
	}
}

// A node that only puts documents with its step is held as an inline
// one is: the steps before it are not committed before it runs, and
// the documents go with the commit of its step and the rest, or not at
// all when that commit fails.
func TestAPutIsHeldAsAnInlineStep(t *testing.T) {
	const src = `version: 1
name: puts
input: [n]
state:
  schema:
    type: object
    properties:
      n: {type: integer, default: 0}
      a: {type: integer, default: 0}
      c: {type: integer, default: 0}
nodes:
  a: {kind: calc, set: {a: "state.n + 1"}}
  remember: {kind: memory, action: put, namespace: "['runs']", key: "'last'", value: "{a: state.a}"}
  c: {kind: calc, set: {c: "state.a + 1"}}
edges:
  - {from: START, to: a}
  - {from: a, to: remember}
  - {from: remember, to: c}
  - {from: c, to: END}
`
	for _, fails := range []bool{false, true} {
		mem := memory.New()
		st := &countCommits{Store: mem}
		g := compileWith(t, kind.NewSet(calcSpec, memnode.Spec), src)
		var s store.Store = st
		if fails {
			s = &failLast{Store: mem, fail: true}
		}
		res, err := engine.New(s).Run(context.Background(), g, engine.Request{Thread: "t", Input: map[string]any{"n": 1}})
		doc, gerr := mem.GetMemory(context.Background(), "", []string{"runs"}, "last", time.Now())
		if gerr != nil && !errors.Is(gerr, store.ErrNotFound) {
			t.Fatal(gerr)
		}
		if fails {
			if err == nil || doc != nil {
				t.Fatalf("the last commit failed: %v, the document %+v", err, doc)
			}
			if h, err := mem.Head(context.Background(), "t"); err != nil || h.Seq != 1 {
				t.Fatalf("the head after a failed last commit: %+v %v, want the thread's creation alone", h, err)
			}
			continue
		}
		if err != nil || res.State["c"] != 3 || doc == nil || string(doc.Value) != `{"a":2}` {
			t.Fatalf("the run: %+v %v, the document %+v", res, err, doc)
		}
		// the thread's creation, then its input and the three steps in one
		if st.commits != 2 || st.cps != 5 {
			t.Fatalf("%d commits of %d checkpoints, want 2 of 5", st.commits, st.cps)
		}
	}
}

// failLast is a store that fails a run's last commit when fail is set.
type failLast struct {
	*memory.Store
	fail bool
}

func (f *failLast) Commit(ctx context.Context, cp *store.Checkpoint) error {
	if f.fail && len(cp.Next) == 0 && cp.Release != "" {
		return errors.New("the disk is full")
	}
	return f.Store.Commit(ctx, cp)
}

// commitRecorder records a run's events and, for each commit it makes,
// the checkpoint and the events observed when it began.
type commitRecorder struct {
	mu      sync.Mutex
	seen    []engine.Event
	commits []recordedCommit
}

type recordedCommit struct {
	cp   *store.Checkpoint
	seen []engine.Event
}

// request is req observed and attached by the recorder.
func (c *commitRecorder) request(req engine.Request) engine.Request {
	req.Observe = func(ev engine.Event) {
		c.mu.Lock()
		c.seen = append(c.seen, ev)
		c.mu.Unlock()
	}
	req.Attach = func(cp *store.Checkpoint) func(error) {
		c.mu.Lock()
		c.commits = append(c.commits, recordedCommit{cp: cp, seen: slices.Clone(c.seen)})
		c.mu.Unlock()
		return nil
	}
	return req
}
