// Package testfile runs flow test files: YAML files beside a flow that start
// threads with given values, run them through one or more turns with
// scripted node outputs, and check the path taken, visit counts and the
// state with expressions.
//
//	flow: resume_review.yaml
//	tests:
//	  - name: a reviewer fails and the review goes on
//	    with_file: examples/resume.yaml             # initial values from a file (beside the test file)
//	    with: {target_role: LLM Engineer}          # the thread's initial values (over the file's)
//	    script:                                     # per node, one entry per call
//	      recruiter:
//	        - error: model timed out                # the node fails (its fallback applies)
//	      tech_writer:
//	        - set: {tech_writer_feedback: {...}}    # the node writes exactly this
//	        - run: true                             # the node runs for real
//	    runs:                                       # one entry per run (default: one, no input)
//	      - input: {last_response: hi}
//	        config: {model: large}                  # the run's configuration
//	        expect:
//	          path: [router, [recruiter, tech_writer, copywriter], aggregator, portfolio]
//	          degraded: [recruiter]
//	          state: ["state.recruiter_feedback.score == 5.0"]
//	          output: ["output contains 'Evaluation failed'"]  # over the flow's output
//	      - thread: second                          # another thread of the same store
//	        with: {target_role: SRE}                # its initial values (over the test's)
//	    expect:                                     # after the last run
//	      visits: {revisor: 0}
//	      state: ["state.threshold_met"]
//
// A call beyond a node's script runs the real node. A map's items are
// scripted by their names, NODE[INDEX] (sections[1]), one script per
// item. With no model
// configured, llm nodes use their prompts' fallbacks, so tests are offline
// and deterministic.
//
// Each test has a store of its own. Its runs go to one thread unless a run
// names another: the first run naming a thread creates it from the test's
// values overlaid by the run's with. The threads of a test share the
// store, and so what memory nodes remember (a second interview recalls
// the first); the state checked after the last run is that run's
// thread's.
package testfile

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/expression"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/schema"
	"github.com/trellisflow/trellis/runtime/store/memory"
	"github.com/trellisflow/trellis/runtime/value"
)

// Suffix names flow test files.
const Suffix = ".test.yaml"

// File is a parsed test file.
type File struct {
	Path string `yaml:"-"`
	Flow string `yaml:"flow"`
	// Fixtures is free: a place for YAML anchors the tests share.
	Fixtures any    `yaml:"fixtures"`
	Tests    []Test `yaml:"tests"`
}

// Test is one test case.
type Test struct {
	Name string `yaml:"name"`
	// WithFile names a YAML or JSON file of initial values, relative to
	// the test file; With's values go over them.
	WithFile string            `yaml:"with_file"`
	With     map[string]any    `yaml:"with"`
	Script   map[string][]Call `yaml:"script"`
	Runs     []Run             `yaml:"runs"`
	Expect   *Expect           `yaml:"expect"`
	Line     int               `yaml:"-"`
}

// Call is one scripted node call: exactly one of Set (the node's update),
// Output (its output, for kinds that produce one, such as an llm node's
// reply: the node's writes still apply), Error (the node fails) or Run (the
// node runs for real).
type Call struct {
	Set    map[string]any `yaml:"set"`
	Output any            `yaml:"output"`
	Error  string         `yaml:"error"`
	Run    bool           `yaml:"run"`
}

// Run is one run of the thread.
type Run struct {
	// Thread names the thread the run goes to (default: the test's
	// first); With gives a thread it creates its initial values, over the
	// test's.
	Thread string         `yaml:"thread"`
	With   map[string]any `yaml:"with"`
	Input  map[string]any `yaml:"input"`
	// Config is the run's configuration (the flow's config block).
	Config map[string]any `yaml:"config"`
	Expect *Expect        `yaml:"expect"`
	Line   int            `yaml:"-"`
}

// Expect holds assertions. Path lists each superstep's nodes (a name, or a
// list for a step running several); Visits counts node runs (over the run,
// or over the whole test at test level); State holds conditions over the
// state; Output holds conditions over output, the flow's declared output
// rendered over the state the run ended with (and over the state);
// Degraded lists the nodes that must have used a fallback, and no other
// node may have; Error is a substring of the run's error, which then must
// fail.
type Expect struct {
	Path     []any          `yaml:"path"`
	Visits   map[string]int `yaml:"visits"`
	State    []string       `yaml:"state"`
	Output   []string       `yaml:"output"`
	Degraded *[]string      `yaml:"degraded"`
	Error    string         `yaml:"error"`
	Line     int            `yaml:"-"`
}

// Result is one test's outcome.
type Result struct {
	Name     string
	Failures []string
	Took     time.Duration
}

// Passed reports whether the test passed.
func (r Result) Passed() bool { return len(r.Failures) == 0 }

// Load reads a test file.
func Load(path string) (*File, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var root yaml.Node
	if err := yaml.Unmarshal(src, &root); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	f := &File{Path: path}
	dec := yaml.NewDecoder(bytes.NewReader(src))
	dec.KnownFields(true)
	if err := dec.Decode(f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	// keep the line of every test, run and expectation for messages
	if len(root.Content) > 0 {
		if tests := mapValue(root.Content[0], "tests"); tests != nil {
			for i, tn := range tests.Content {
				if i >= len(f.Tests) {
					break
				}
				f.Tests[i].Line = tn.Line
				if ex := mapValue(tn, "expect"); ex != nil && f.Tests[i].Expect != nil {
					f.Tests[i].Expect.Line = ex.Line
				}
				if runs := mapValue(tn, "runs"); runs != nil {
					for j, rn := range runs.Content {
						if j < len(f.Tests[i].Runs) {
							f.Tests[i].Runs[j].Line = rn.Line
							if ex := mapValue(rn, "expect"); ex != nil && f.Tests[i].Runs[j].Expect != nil {
								f.Tests[i].Runs[j].Expect.Line = ex.Line
							}
						}
					}
				}
			}
		}
	}
	if f.Flow == "" {
		return nil, fmt.Errorf("%s: flow: the flow under test is required", path)
	}
	for i, t := range f.Tests {
		if t.Name == "" {
			return nil, fmt.Errorf("%s:%d: test %d needs a name", path, t.Line, i+1)
		}
	}
	return f, nil
}

func mapValue(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// FlowPath is the flow file a test file tests.
func (f *File) FlowPath() string {
	if filepath.IsAbs(f.Flow) {
		return f.Flow
	}
	return filepath.Join(filepath.Dir(f.Path), f.Flow)
}

// RunFile loads the flow and runs every test of f (those whose name
// contains match, when it is not empty). A flow that does not load is an
// error with its diagnostics.
func RunFile(ctx context.Context, f *File, reg kind.Registry, match string) ([]Result, error) {
	g, dl, src := flow.Compile(nil, f.FlowPath(), nil, reg)
	if dl.HasErrors() {
		return nil, &diag.ListError{List: dl, Sources: src}
	}
	impls := make([]kind.Node, len(g.Nodes))
	for i, n := range g.Nodes {
		impls[i] = n.Impl
	}
	defer func() {
		for i, n := range g.Nodes {
			n.Impl = impls[i]
		}
	}()
	var results []Result
	for _, t := range f.Tests {
		if match != "" && !strings.Contains(t.Name, match) {
			continue
		}
		start := time.Now()
		r := Result{Name: t.Name}
		r.Failures = runTest(ctx, f, g, impls, t)
		r.Took = time.Since(start)
		results = append(results, r)
	}
	return results, nil
}

// scripted replaces a node's Run with its script.
type scripted struct {
	inner kind.Node
	calls []Call
	n     int
}

func (s *scripted) Run(ctx context.Context, st kind.State) (kind.Update, error) {
	i := s.n
	s.n++
	if i >= len(s.calls) || s.calls[i].Run {
		return s.inner.Run(ctx, st)
	}
	c := s.calls[i]
	if c.Error != "" {
		return nil, errors.New(c.Error)
	}
	if c.Output != nil {
		o, ok := s.inner.(kind.Outputter)
		if !ok {
			return nil, fmt.Errorf("script: node %s produces no output; script set instead", st.Node())
		}
		return o.WithOutput(st, c.Output)
	}
	upd := st.NewUpdate(len(c.Set))
	for _, k := range slices.Sorted(maps.Keys(c.Set)) {
		upd = append(upd, kind.FieldValue{Field: k, Value: c.Set[k]})
	}
	return upd, nil
}

// scriptedFallback keeps the fallback of a node that has one.
type scriptedFallback struct{ *scripted }

func (s scriptedFallback) Fallback(ctx context.Context, st kind.State, err error) (kind.Update, error) {
	return s.inner.(kind.Fallback).Fallback(ctx, st, err)
}

// nestedOf finds the nested node that runs the item a script names
// (NODE[INDEX], NODE a map).
func nestedOf(g *flow.Graph, name string) (*flow.Node, bool) {
	base, rest, ok := strings.Cut(name, "[")
	if !ok || !strings.HasSuffix(rest, "]") {
		return nil, false
	}
	host, ok := g.Node(base)
	if !ok {
		return nil, false
	}
	c, ok := host.Impl.(kind.Composite)
	if !ok || c.Parts().Nested == nil {
		return nil, false
	}
	n, ok := c.Parts().Nested.Impl.(*flow.Node)
	return n, ok
}

// itemScripts runs a map's nested node: the items with a script run it,
// the others the real node.
type itemScripts struct {
	inner   kind.Node
	backoff time.Duration
	mu      sync.Mutex
	byItem  map[string]*scripted
}

func (is *itemScripts) Run(ctx context.Context, st kind.State) (kind.Update, error) {
	is.mu.Lock()
	s := is.byItem[st.Node()]
	is.mu.Unlock()
	if s == nil {
		return is.inner.Run(ctx, st)
	}
	return s.Run(ctx, st)
}

type itemScriptsFallback struct{ *itemScripts }

func (s itemScriptsFallback) Fallback(ctx context.Context, st kind.State, err error) (kind.Update, error) {
	return s.inner.(kind.Fallback).Fallback(ctx, st, err)
}

func runTest(ctx context.Context, f *File, g *flow.Graph, impls []kind.Node, t Test) (fails []string) {
	at := func(line int, format string, args ...any) {
		fails = append(fails, fmt.Sprintf("%s:%d: %s", f.Path, line, fmt.Sprintf(format, args...)))
	}
	for i, n := range g.Nodes {
		n.Impl = impls[i]
	}
	items := map[*flow.Node]*itemScripts{}
	defer func() {
		for n, is := range items {
			n.Impl, n.Retry.Backoff = is.inner, is.backoff
		}
	}()
	for name, calls := range t.Script {
		n, ok := g.Node(name)
		if !ok {
			n, ok = nestedOf(g, name)
		}
		if !ok {
			at(t.Line, "script: no node %q in %s", name, g.Name)
			continue
		}
		for ci := range calls {
			c := &calls[ci]
			if c.Output != nil {
				norm, err := value.Normalize(c.Output)
				if err != nil {
					at(t.Line, "script %s output: %v", name, err)
				}
				c.Output = norm
			}
			given := 0
			for _, b := range []bool{c.Set != nil, c.Output != nil, c.Error != "", c.Run} {
				if b {
					given++
				}
			}
			if given != 1 {
				at(t.Line, "script %s: each call is exactly one of set, output, error or run: true", name)
			}
			for field, v := range c.Set {
				if !n.Writes[field] {
					at(t.Line, "script %s: the node does not write %q", name, field)
					continue
				}
				norm, err := value.Normalize(v)
				if err != nil {
					at(t.Line, "script %s.%s: %v", name, field, err)
				}
				c.Set[field] = norm
			}
		}
		if _, top := g.Node(name); !top {
			// one item of a map: its nested node dispatches by item
			is := items[n]
			if is == nil {
				is = &itemScripts{inner: n.Impl, backoff: n.Retry.Backoff, byItem: map[string]*scripted{}}
				items[n] = is
				if _, ok := n.Impl.(kind.Fallback); ok {
					n.Impl = itemScriptsFallback{is}
				} else {
					n.Impl = is
				}
				n.Retry.Backoff = 0
			}
			is.byItem[name] = &scripted{inner: is.inner, calls: calls}
			continue
		}
		s := &scripted{inner: n.Impl, calls: calls}
		if _, ok := n.Impl.(kind.Fallback); ok {
			n.Impl = scriptedFallback{s}
		} else {
			n.Impl = s
		}
		n.Retry.Backoff = 0 // scripted failures need no waiting
	}
	if len(fails) > 0 {
		return fails
	}
	eng := engine.New(memory.New())
	defer eng.Store.Close()
	const first = "test"
	with := map[string]any{}
	if t.WithFile != "" {
		vals, err := schema.ReadFile(filepath.Join(filepath.Dir(f.Path), t.WithFile))
		m, ok := vals.(map[string]any)
		if err != nil || !ok {
			at(t.Line, "with_file: %s: want a file holding a mapping of field to value: %v", t.WithFile, err)
			return fails
		}
		maps.Copy(with, m)
	}
	for k, v := range t.With {
		norm, err := value.Normalize(v)
		if err != nil {
			at(t.Line, "with.%s: %v", k, err)
			return fails
		}
		with[k] = norm
	}
	if _, err := eng.Create(ctx, g, first, with); err != nil {
		at(t.Line, "with: %v", err)
		return fails
	}
	created := map[string]bool{first: true}
	runs := t.Runs
	if len(runs) == 0 {
		runs = []Run{{Line: t.Line}}
	}
	total := map[string]int{}
	var state map[string]any
	var last *engine.Result
	for i, r := range runs {
		degraded := map[string]bool{}
		in := map[string]any{}
		for k, v := range r.Input {
			norm, err := value.Normalize(v)
			if err != nil {
				at(r.Line, "input.%s: %v", k, err)
				return fails
			}
			in[k] = norm
		}
		thread := first
		if r.Thread != "" {
			thread = r.Thread
		}
		switch {
		case created[thread] && r.With != nil:
			at(r.Line, "with: thread %q exists: with gives a new thread its initial values", thread)
			return fails
		case !created[thread]:
			values := maps.Clone(with)
			for k, v := range r.With {
				norm, err := value.Normalize(v)
				if err != nil {
					at(r.Line, "with.%s: %v", k, err)
					return fails
				}
				values[k] = norm
			}
			if _, err := eng.Create(ctx, g, thread, values); err != nil {
				at(r.Line, "thread %s: with: %v", thread, err)
				return fails
			}
			created[thread] = true
		}
		res, err := eng.Run(ctx, g, engine.Request{Thread: thread, Input: in, Config: r.Config, RecordPath: true, Observe: func(ev engine.Event) {
			if ev.Type == engine.NodeEnd && ev.Degraded != "" && ev.NS == "" { // a child flow's nodes are not this flow's
				degraded[ev.Node] = true
			}
		}})
		ex := r.Expect
		if err != nil {
			if ex == nil || ex.Error == "" || !strings.Contains(err.Error(), ex.Error) {
				at(r.Line, "run %d failed: %v", i+1, err)
				return fails
			}
			continue
		}
		if ex != nil && ex.Error != "" {
			at(ex.Line, "run %d: want an error containing %q, the run succeeded", i+1, ex.Error)
		}
		for n, c := range res.Visits() {
			total[n] += c
		}
		state, last = res.State, res
		if ex != nil {
			fails = append(fails, check(f.Path, ex, g, res.State, res.Visits(), res.Path, degraded, fmt.Sprintf("run %d", i+1))...)
			fails = append(fails, checkOutput(f.Path, ex, g, res, fmt.Sprintf("run %d", i+1))...)
		}
	}
	if t.Expect != nil && state != nil {
		fails = append(fails, check(f.Path, t.Expect, g, state, total, nil, nil, "after the last run")...)
		fails = append(fails, checkOutput(f.Path, t.Expect, g, last, "after the last run")...)
	}
	return fails
}

func check(file string, ex *Expect, g *flow.Graph, state map[string]any, visits map[string]int, path [][]string, degraded map[string]bool, when string) (fails []string) {
	fail := func(format string, args ...any) {
		fails = append(fails, fmt.Sprintf("%s:%d: %s: %s", file, ex.Line, when, fmt.Sprintf(format, args...)))
	}
	if ex.Path != nil && path == nil {
		fail("path is checked per run: put it under runs[].expect")
	} else if ex.Path != nil {
		want, err := steps(ex.Path)
		if err != nil {
			fail("path: %v", err)
		} else if !samePath(want, path) {
			fail("path:\n      got  %s\n      want %s", showPath(path), showPath(want))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(ex.Visits)) {
		if _, ok := g.Node(name); !ok {
			fail("visits: no node %q", name)
			continue
		}
		if visits[name] != ex.Visits[name] {
			fail("visits of %s: got %d, want %d", name, visits[name], ex.Visits[name])
		}
	}
	if ex.Degraded != nil && degraded != nil {
		got := slices.Sorted(maps.Keys(degraded))
		want := slices.Sorted(slices.Values(*ex.Degraded))
		if !slices.Equal(got, want) {
			fail("degraded nodes: got %v, want %v", got, want)
		}
	}
	vars := g.Vars(state, nil)
	for _, cond := range ex.State {
		p, probs := expression.Compile(cond, g.Env(), true)
		if p == nil {
			fail("state %q: %s", cond, probs[0].Message)
			continue
		}
		ok, err := p.EvalBool(vars)
		if err != nil {
			fail("state %q: %v", cond, err)
		} else if !ok {
			fail("state: %s does not hold%s", cond, explain(cond, vars))
		}
	}
	return fails
}

// checkOutput checks the conditions over the flow's output, rendered over
// the state the run ended with.
func checkOutput(file string, ex *Expect, g *flow.Graph, res *engine.Result, when string) (fails []string) {
	if len(ex.Output) == 0 {
		return nil
	}
	fail := func(format string, args ...any) {
		fails = append(fails, fmt.Sprintf("%s:%d: %s: %s", file, ex.Line, when, fmt.Sprintf(format, args...)))
	}
	switch {
	case g.Output == nil:
		fail("output: the flow declares no output")
		return fails
	case res.Interrupt != nil:
		fail("output: the run paused; it has no output yet")
		return fails
	}
	text, err := g.Output.Render(res.State)
	if err != nil {
		fail("%v", err)
		return fails
	}
	env := g.Env().With("output", &schema.Shape{Types: []string{"string"}})
	vars := g.Vars(res.State, nil)
	vars["output"] = text
	for _, cond := range ex.Output {
		p, probs := expression.Compile(cond, env, true)
		if p == nil {
			fail("output %q: %s", cond, probs[0].Message)
			continue
		}
		if ok, err := p.EvalBool(vars); err != nil {
			fail("output %q: %v", cond, err)
		} else if !ok {
			fail("output: %s does not hold; the output is:\n%s", cond, indent(text))
		}
	}
	return fails
}

// indent sets text off under a failure.
func indent(text string) string {
	return "      | " + strings.ReplaceAll(strings.TrimRight(text, "\n"), "\n", "\n      | ")
}

// explain shows the values of the state fields a failed condition reads.
func explain(cond string, vars map[string]any) string {
	var b strings.Builder
	seen := map[string]bool{}
	for _, word := range strings.FieldsFunc(cond, func(r rune) bool {
		return !(r == '.' || r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	}) {
		parts := strings.SplitN(word, ".", 3)
		if len(parts) < 2 || parts[0] != "state" || seen[parts[1]] {
			continue
		}
		seen[parts[1]] = true
		v := vars["state."+parts[1]]
		s := fmt.Sprintf("%v", v)
		if b, err := jsonShort(v); err == nil {
			s = b
		}
		fmt.Fprintf(&b, "\n      state.%s = %s", parts[1], s)
	}
	return b.String()
}

func jsonShort(v any) (string, error) {
	b, err := json.Marshal(v)
	if len(b) > 300 {
		b = append(b[:300], "..."...)
	}
	return string(b), err
}

func steps(raw []any) ([][]string, error) {
	out := make([][]string, len(raw))
	for i, s := range raw {
		switch x := s.(type) {
		case string:
			out[i] = []string{x}
		case []any:
			for _, e := range x {
				name, ok := e.(string)
				if !ok {
					return nil, fmt.Errorf("step %d: node names only", i+1)
				}
				out[i] = append(out[i], name)
			}
		default:
			return nil, fmt.Errorf("step %d: a node name or a list of them", i+1)
		}
	}
	return out, nil
}

func samePath(want, got [][]string) bool {
	if len(want) != len(got) {
		return false
	}
	for i := range want {
		a, b := slices.Sorted(slices.Values(want[i])), slices.Sorted(slices.Values(got[i]))
		if !slices.Equal(a, b) {
			return false
		}
	}
	return true
}

func showPath(p [][]string) string {
	parts := make([]string, len(p))
	for i, s := range p {
		if len(s) == 1 {
			parts[i] = s[0]
		} else {
			parts[i] = "[" + strings.Join(s, ", ") + "]"
		}
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
