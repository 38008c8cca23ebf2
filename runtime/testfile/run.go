package testfile

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/schema"
	"github.com/trellisflow/trellis/runtime/store/memory"
	"github.com/trellisflow/trellis/runtime/value"
)

// RunFile loads the flow and runs every test of f (those whose name
// contains match, when it is not empty). A flow that does not load is an
// error with its diagnostics.
func RunFile(ctx context.Context, f *File, reg kind.Registry, match string) ([]Result, error) {
	return RunFileWith(ctx, f, reg, Options{Match: match})
}

// Options says which tests RunFileWith runs, and how.
type Options struct {
	// Match runs only the tests whose name contains it ("": all).
	Match string
	// Reload runs each test twice: in one process, and with its state
	// encoded, stored and decoded between every step, as a process that
	// picks the thread up reads it (engine.WithReload). Each must pass,
	// and the two must take the same paths to the same outputs and final
	// states: where they differ, a value held in memory is not the value
	// the store hands back, and a thread would behave otherwise after a
	// restart or on another replica.
	Reload bool
}

// RunFileWith loads the flow and runs the tests of f as opts says. A flow
// that does not load is an error with its diagnostics.
func RunFileWith(ctx context.Context, f *File, reg kind.Registry, opts Options) ([]Result, error) {
	g, dl, src := flow.Compile(nil, f.FlowPath(), nil, reg)
	if dl.HasErrors() {
		return nil, &diag.ListError{List: dl, Sources: src}
	}
	return RunCompiled(ctx, f, g, opts), nil
}

// RunCompiled runs the tests of f as opts says on g, the graph compiled
// from f's flow. g is not changed (a test's scripted nodes and stops
// are its runs' own), so the tests of several files may run on one
// compiled graph at once.
func RunCompiled(ctx context.Context, f *File, g *flow.Graph, opts Options) []Result {
	match := opts.Match
	var results []Result
	for _, t := range f.Tests {
		if match != "" && !strings.Contains(t.Name, match) {
			continue
		}
		start := time.Now()
		r := Result{Name: t.Name}
		var ran []ranRun
		r.Failures, ran = runTest(ctx, f, g, t, nil, false)
		if opts.Reload || t.Reload {
			fails, reran := runTest(ctx, f, g, t, nil, true)
			for _, m := range fails {
				if !slices.Contains(r.Failures, m) {
					r.Failures = append(r.Failures, "with the state read back between steps: "+m)
				}
			}
			r.Failures = append(r.Failures, differences(ran, reran)...)
		}
		r.Took = time.Since(start)
		results = append(results, r)
	}
	return results
}

// ranRun is what a run of a test did, for comparing the runs of a test
// made in one process with those that read their state back.
type ranRun struct {
	pos    diag.Pos
	err    string
	path   [][]string
	paused []string
	state  map[string]any
	output string
}

// runTest runs one test; replies, when set, answer its llm nodes as the
// runs of a thread were answered; with reload, the runs read their state
// back between steps (engine.WithReload). It returns what each run did.
func runTest(ctx context.Context, f *File, g *flow.Graph, t Test, replies *engine.Replies, reload bool) (fails []string, ran []ranRun) {
	at := func(pos diag.Pos, format string, args ...any) {
		fails = append(fails, fmt.Sprintf("%s: %s", pos, fmt.Sprintf(format, args...)))
	}
	// scripted nodes stand in for the graph's in this test's runs alone
	// (engine.Request.StandIns): the graph is not changed
	stand := map[*flow.Node]engine.StandIn{}
	items := map[*flow.Node]*itemScripts{}
	var scripts []*scripted
	for _, name := range slices.Sorted(maps.Keys(t.Script)) {
		calls := t.Script[name]
		n, ok := g.Node(name)
		if !ok {
			n, ok = nestedOf(g, name)
		}
		if !ok {
			var names []string
			for _, m := range g.Nodes {
				names = append(names, m.Name)
			}
			d := diag.Diagnostic{Summary: fmt.Sprintf("script: flow %s has no node %q", g.Name, name), Suggestion: diag.Suggest(name, names)}
			at(t.scriptPos[name], "%s", d.Message())
			continue
		}
		for ci := range calls {
			c := &calls[ci]
			for _, field := range slices.Sorted(maps.Keys(c.Set)) {
				if !n.Writes[field] {
					at(c.Pos, "script %s: the node does not write %q", name, field)
				}
			}
		}
		if _, top := g.Node(name); !top {
			// one item of a map: its nested node dispatches by item
			is := items[n]
			if is == nil {
				is = &itemScripts{inner: n.Impl, byItem: map[string]*scripted{}}
				items[n] = is
				var impl kind.Node = is
				if _, ok := n.Impl.(kind.Fallback); ok {
					impl = itemScriptsFallback{is}
				}
				stand[n] = engine.StandIn{Node: impl, NoBackoff: true}
			}
			sc := &scripted{inner: is.inner, calls: calls}
			is.byItem[name] = sc
			scripts = append(scripts, sc)
			continue
		}
		sc := &scripted{inner: n.Impl, calls: calls}
		scripts = append(scripts, sc)
		var impl kind.Node = sc
		if _, ok := n.Impl.(kind.Fallback); ok {
			impl = scriptedFallback{sc}
		}
		// scripted failures need no waiting
		stand[n] = engine.StandIn{Node: impl, NoBackoff: true}
	}
	if len(fails) > 0 {
		return fails, ran
	}
	// a scripted output the node refused fails the test, whatever the run
	// made of it
	defer func() {
		for _, sc := range scripts {
			fails = append(fails, sc.bad...)
		}
	}()
	if len(t.Tools) > 0 {
		mock, bad := toolScripts(g, t)
		for _, b := range bad {
			at(b.pos, "%s", b.msg)
		}
		if len(bad) > 0 {
			return fails, ran
		}
		ctx = kind.WithToolMock(ctx, mock)
	}
	var opts []engine.Option
	if reload {
		opts = append(opts, engine.WithReload())
	}
	eng := engine.New(memory.New(), opts...)
	defer eng.Store.Close()
	const first = "test"
	with := map[string]any{}
	if t.WithFile != "" {
		vals, err := schema.ReadFile(filepath.Join(filepath.Dir(f.Path), t.WithFile))
		m, ok := vals.(map[string]any)
		if err != nil || !ok {
			at(t.Pos, "with_file: %s: want a file holding a mapping of field to value: %v", t.WithFile, err)
			return fails, ran
		}
		maps.Copy(with, m)
	}
	maps.Copy(with, t.With)
	if _, err := eng.Create(ctx, g, first, with); err != nil {
		at(t.Pos, "with: %v", err)
		return fails, ran
	}
	created := map[string]bool{first: true}
	runs := t.Runs
	if len(runs) == 0 {
		runs = []Run{{Pos: t.Pos}}
	}
	total := map[string]int{}
	var state map[string]any
	var last *engine.Result
	for i, r := range runs {
		degraded := map[string]bool{}
		in := r.Input
		if in == nil {
			in = map[string]any{}
		}
		thread := first
		if r.Thread != "" {
			thread = r.Thread
		}
		switch {
		case created[thread] && r.With != nil:
			at(r.Pos, "with: thread %q exists: with gives a new thread its initial values", thread)
			return fails, ran
		case !created[thread]:
			values := maps.Clone(with)
			maps.Copy(values, r.With)
			if _, err := eng.Create(ctx, g, thread, values); err != nil {
				at(r.Pos, "thread %s: with: %v", thread, err)
				return fails, ran
			}
			created[thread] = true
		}
		if r.Update != nil {
			snap, err := eng.Update(ctx, g, thread, r.Update.As, r.Update.Values)
			if err != nil {
				at(r.Pos, "update %d: %v", i+1, err)
				return fails, ran
			}
			state, last = snap.Values, &engine.Result{Thread: thread, State: snap.Values, Checkpoint: snap.Seq}
			continue
		}
		if r.StopAfter != nil && *r.StopAfter == 0 {
			// stopped before its first step: it pauses before whichever
			// nodes it would run first
			res, err := pauseFirst(ctx, eng, g, engine.Request{Thread: thread, Input: in, Config: r.Config, Replies: replies, StandIns: stand})
			if err != nil || res.Interrupt == nil {
				at(r.Pos, "run %d: want it stopped before its first step, it %s", i+1, endedHow(err))
				return fails, ran
			}
			continue
		}
		var stop chan struct{}
		var stopped [][]string // the path of a run stopped part way
		if r.StopAfter != nil && *r.StopAfter > 0 {
			stop = make(chan struct{})
		}
		var once sync.Once
		var called []string
		var calledMu sync.Mutex
		req := engine.Request{Thread: thread, Input: in, Config: r.Config, RecordPath: true, Replies: replies, Stop: stop, StandIns: stand, Observe: func(ev engine.Event) {
			if ev.NS != "" { // a child flow's nodes are not this flow's
				return
			}
			switch {
			case ev.Type == engine.NodeEnd && ev.Degraded != "":
				degraded[ev.Node] = true
			case stop != nil && ev.Type == engine.NodeStart:
				if _, top := g.Node(ev.Node); top { // not a map's item
					if len(stopped) == 0 {
						stopped = append(stopped, nil)
					}
					stopped[len(stopped)-1] = append(stopped[len(stopped)-1], ev.Node)
				}
			case stop != nil && ev.Type == engine.StateUpdate && len(stopped) > 0 && stopped[len(stopped)-1] != nil:
				stopped = append(stopped, nil)
				if ev.Step >= *r.StopAfter {
					once.Do(func() { close(stop) })
				}
			}
			if ev.Type == engine.ToolEnd && ev.NS == "" && ev.Tool != nil && ev.Tool.Approval != "rejected" { // a rejected call was not made
				calledMu.Lock()
				called = append(called, ev.Tool.Name)
				calledMu.Unlock()
			}
		}}
		if r.Resume || r.Answers != nil {
			req.Input, req.Resume, req.Answers = nil, true, r.Answers
		}
		res, err := eng.Run(ctx, g, req)
		ex := r.Expect
		if stop != nil {
			if !errors.Is(err, engine.ErrStopped) {
				at(r.Pos, "run %d: want it stopped after step %d, it %s", i+1, *r.StopAfter, endedHow(err))
				return fails, ran
			}
			if len(stopped) > 0 && stopped[len(stopped)-1] == nil {
				stopped = stopped[:len(stopped)-1]
			}
			ran = append(ran, ranRun{pos: r.Pos, err: "stopped", path: stopped})
			if ex != nil && ex.Path != nil {
				fails = append(fails, check(&Expect{Path: ex.Path, pathPos: ex.pathPos}, g, nil, nil, stopped, nil, fmt.Sprintf("run %d", i+1))...)
			}
			continue
		}
		if err != nil {
			ran = append(ran, ranRun{pos: r.Pos, err: err.Error()})
			if slices.ContainsFunc(scripts, (*scripted).refused) {
				return fails, ran // the refused script says why
			}
			if ex == nil || ex.Error == "" || !strings.Contains(err.Error(), ex.Error) {
				at(r.Pos, "run %d failed: %v", i+1, err)
				return fails, ran
			}
			continue
		}
		if ex != nil && ex.Error != "" {
			at(ex.Pos, "run %d: want an error containing %q, the run succeeded", i+1, ex.Error)
		}
		for n, c := range res.Visits() {
			total[n] += c
		}
		state, last = res.State, res
		paused := pausedAt(res.Interrupt)
		did := ranRun{pos: r.Pos, path: res.Path, paused: paused, state: res.State}
		if g.Output != nil && res.Interrupt == nil {
			if text, err := g.Output.Render(res.State); err == nil {
				did.output = text
			} else {
				did.output = "error: " + err.Error()
			}
		}
		ran = append(ran, did)
		switch {
		case paused != nil && (ex == nil || ex.Paused == nil):
			at(r.Pos, "run %d paused at %s%s; expect it with paused: [%s]%s", i+1, strings.Join(paused, ", "), asked(res.Interrupt),
				strings.Join(paused, ", "), answerHint(res.Interrupt, i+1 == len(runs)))
		case ex != nil && ex.Paused != nil && !slices.Equal(paused, slices.Sorted(slices.Values(*ex.Paused))):
			if paused == nil {
				at(ex.Pos, "run %d: want it paused at %s, it did not pause", i+1, strings.Join(*ex.Paused, ", "))
			} else {
				at(ex.Pos, "run %d: paused at %s, want %s", i+1, strings.Join(paused, ", "), strings.Join(*ex.Paused, ", "))
			}
		}
		if ex != nil && ex.Tools != nil {
			want := slices.Sorted(slices.Values(*ex.Tools))
			if got := slices.Sorted(slices.Values(called)); !slices.Equal(got, want) {
				at(ex.Pos, "run %d called the tools %s, want %s", i+1, listOrNone(got), listOrNone(want))
			}
		}
		if ex != nil {
			fails = append(fails, check(ex, g, res.State, res.Visits(), res.Path, degraded, fmt.Sprintf("run %d", i+1))...)
			fails = append(fails, checkOutput(ex, g, res, fmt.Sprintf("run %d", i+1))...)
		}
	}
	if t.Expect != nil && state != nil {
		fails = append(fails, check(t.Expect, g, state, total, nil, nil, "after the last run")...)
		fails = append(fails, checkOutput(t.Expect, g, last, "after the last run")...)
	}
	return fails, ran
}

// differences compares the runs of a test made in one process (one) with
// those that read their state back between steps (other): the same
// outcome, path, pause, output and final state, run by run.
func differences(one, other []ranRun) []string {
	var out []string
	for i := range min(len(one), len(other)) {
		a, b := one[i], other[i]
		differ := func(what string, x, y any) {
			out = append(out, fmt.Sprintf("%s: run %d: %s differs when the state is read back between steps: in one process %s, read back %s",
				a.pos, i+1, what, x, y))
		}
		switch {
		case a.err != b.err:
			differ("the outcome", orDone(a.err), orDone(b.err))
			continue
		case a.err != "":
			continue
		}
		if !slices.EqualFunc(a.path, b.path, slices.Equal) {
			differ("the path", showPath(a.path), showPath(b.path))
		}
		if !slices.Equal(a.paused, b.paused) {
			differ("the pause", a.paused, b.paused)
		}
		if a.output != b.output {
			differ("the output", fmt.Sprintf("%q", a.output), fmt.Sprintf("%q", b.output))
		}
		for _, k := range slices.Sorted(maps.Keys(a.state)) {
			if x, y := a.state[k], b.state[k]; !reflect.DeepEqual(x, y) {
				differ("state."+k, value.Show(x, 300), value.Show(y, 300))
			}
		}
		for _, k := range slices.Sorted(maps.Keys(b.state)) {
			if _, ok := a.state[k]; !ok {
				differ("state."+k, "nothing", value.Show(b.state[k], 300))
			}
		}
	}
	if len(one) != len(other) {
		out = append(out, fmt.Sprintf("%d runs in one process, %d with the state read back between steps", len(one), len(other)))
	}
	return out
}

func orDone(err string) string {
	if err == "" {
		return "it succeeded"
	}
	return "it failed: " + err
}

// pauseFirst runs req pausing before its first step, as a run of nodes
// that all pause before they run would; the graph, which other runs may
// share, is left as it is.
func pauseFirst(ctx context.Context, eng *engine.Engine, g *flow.Graph, req engine.Request) (*engine.Result, error) {
	req.PauseFirst = true
	return eng.Run(ctx, g, req)
}

// endedHow says how a run that was to stop ended.
func endedHow(err error) string {
	if err != nil {
		return "failed: " + err.Error()
	}
	return "ran to its end"
}

// pausedAt lists where a run paused, sorted (nil when it did not): the
// nodes, or inside a node the paths (review/approve, items[2]/approve).
func pausedAt(in *engine.Interrupt) []string {
	if in == nil {
		return nil
	}
	set := map[string]bool{}
	for _, n := range append(slices.Clone(in.Before), in.After...) {
		set[n] = true
	}
	for _, a := range in.Asks {
		set[a.Path] = true
	}
	return slices.Sorted(maps.Keys(set))
}

// asked shows the questions a paused run asked.
func asked(in *engine.Interrupt) string {
	var qs []string
	for _, a := range in.Asks {
		q, _ := jsonShort(a.Payload)
		qs = append(qs, a.Path+" asks "+q)
	}
	if len(qs) == 0 {
		return ""
	}
	return " (" + strings.Join(qs, "; ") + ")"
}

// answerHint says how a test goes on after a pause.
func answerHint(in *engine.Interrupt, last bool) string {
	if !last {
		return ""
	}
	if len(in.Asks) > 0 {
		return ", and answer it in a next run with answers: {" + in.Asks[0].Path + ": ...}"
	}
	return ", and go on in a next run with resume: true"
}
