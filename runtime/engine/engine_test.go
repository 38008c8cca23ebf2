package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind/kindtest"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/memory"
)

// compile loads a flow written inline in a test.
func compile(t testing.TB, src string) *flow.Graph {
	t.Helper()
	path := filepath.Join(t.TempDir(), "flow.yaml")
	src = strings.ReplaceAll(src, "\t", "  ")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	g, dl := flow.Load(path, kindtest.Registry())
	if g == nil {
		t.Fatalf("flow does not compile:\n%v", dl)
	}
	return g
}

func run(t testing.TB, g *flow.Graph, eng *engine.Engine, thread string, input map[string]any) (*engine.Result, error) {
	t.Helper()
	if eng == nil {
		eng = engine.New(memory.New())
	}
	return eng.Run(context.Background(), g, engine.Request{Thread: thread, Input: input, RecordPath: true})
}

func mustRun(t testing.TB, g *flow.Graph, eng *engine.Engine, thread string, input map[string]any) *engine.Result {
	t.Helper()
	res, err := run(t, g, eng, thread, input)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestReducers(t *testing.T) {
	g := compile(t, `
version: 1
name: reducers
state:
	schema:
		type: object
		properties:
			r: {type: integer, default: 0}
			list: {type: array, default: []}
			tags: {type: array, items: {type: string}, default: []}
			people: {type: array, default: []}
			obj: {type: object, default: {}}
			total: {type: number, default: 0}
			hi: {type: integer}
			lo: {type: integer}
			custom: {type: string, default: ""}
	reducers:
		list: append
		tags: union
		people: {union: {key: id}}
		obj: merge
		total: add
		hi: max
		lo: min
		custom: {expr: "current == '' ? update : current + '|' + update"}
input: [r]
nodes:
	w:
		kind: set
		set:
			list: "[state.r, [state.r]]"
			tags: "['a', 'b', state.r == 2 ? 'c' : 'a']"
			people: "[{id: 1, n: state.r}, {id: state.r + 10, n: state.r}]"
			obj: "{k: state.r, ('k' + string(state.r)): true}"
			total: "1.5"
			hi: "state.r * 3"
			lo: "state.r * 3"
			custom: "string(state.r)"
edges:
	- {from: START, to: w}
	- {from: w, to: END}
`)
	eng := engine.New(memory.New())
	mustRun(t, g, eng, "t", map[string]any{"r": 1})
	res := mustRun(t, g, eng, "t", map[string]any{"r": 2})
	want := map[string]string{
		"r":      `2`,
		"list":   `[1,[1],2,[2]]`,
		"tags":   `["a","b","c"]`,
		"people": `[{"id":1,"n":1},{"id":11,"n":1},{"id":12,"n":2}]`,
		"obj":    `{"k":2,"k1":true,"k2":true}`,
		"total":  `3`,
		"hi":     `6`,
		"lo":     `3`,
		"custom": `"1|2"`,
	}
	for f, w := range want {
		if got := jsonOf(res.State[f]); got != w {
			t.Errorf("%s = %s, want %s", f, got, w)
		}
	}
}

const twoWriters = `
version: 1
name: two_writers
state:
	schema:
		type: object
		properties:
			x: {default: []}
	reducers:
		x: append
nodes:
	r: {kind: set}
	a: {kind: set, set: {x: "'a'"}}
	b: {kind: set, set: {x: "'b'"}}
edges:
	- {from: START, to: r}
	- {from: r, to: [a, b]}
	- {from: a, to: END}
	- {from: b, to: END}
`

func TestConcurrentWritesFoldInDeclarationOrder(t *testing.T) {
	g := compile(t, twoWriters)
	res := mustRun(t, g, nil, "t", nil)
	if got := jsonOf(res.State["x"]); got != `["a","b"]` {
		t.Fatalf("x = %s", got)
	}
}

func TestConcurrentReplaceRejectedAtLoad(t *testing.T) {
	src := strings.Replace(twoWriters, "x: append", "x: replace", 1)
	path := filepath.Join(t.TempDir(), "f.yaml")
	os.WriteFile(path, []byte(strings.ReplaceAll(src, "\t", "  ")), 0o644)
	g, dl := flow.Load(path, kindtest.Registry())
	if g != nil || len(dl) != 1 || dl[0].Code != diag.CodeWriteConflict {
		t.Fatalf("want one W002, got %v", dl)
	}
	if !strings.Contains(dl[0].Summary, `"a" and "b"`) {
		t.Fatalf("message does not name both writers: %s", dl[0].Summary)
	}
}

func TestConcurrentReplaceRejectedAtRun(t *testing.T) {
	// The validator rejects this flow with replace; the executor's own
	// check is the second line of defence, exercised by switching the
	// compiled reducer after validation.
	g := compile(t, twoWriters)
	f, _ := g.Field("x")
	replace, _ := flow.LookupReducer("replace")
	f.Reducer = flow.NewReducer(replace)
	eng := engine.New(memory.New())
	_, err := run(t, g, eng, "t", nil)
	var ne *engine.NodeError
	if !errors.As(err, &ne) || ne.Node != "b" || !strings.Contains(err.Error(), `also written by "a"`) {
		t.Fatalf("want conflict error from b, got %v", err)
	}
	hist, _ := eng.Store.History(context.Background(), "t", store.HistoryOptions{})
	for _, cp := range hist {
		if cp.Step == 2 {
			t.Fatalf("the conflicting step was committed: %+v", cp)
		}
	}
}

func TestFanOutJoinUnequalBranches(t *testing.T) {
	g := compile(t, `
version: 1
name: join
state:
	schema:
		type: object
		properties:
			log: {type: array, items: {type: string}, default: []}
	reducers: {log: append}
nodes:
	r: {kind: set, set: {log: "'r'"}}
	a: {kind: set, set: {log: "'a'"}}
	a2: {kind: set, set: {log: "'a2'"}}
	a3: {kind: set, set: {log: "'a3'"}}
	b: {kind: set, set: {log: "'b'"}}
	j: {kind: set, set: {log: "'j:' + join(state.log, ',')"}}
edges:
	- {from: START, to: r}
	- {from: r, to: [a, b]}
	- {from: a, to: a2}
	- {from: a2, to: a3}
	- {from: [a3, b], to: j}
	- {from: j, to: END}
`)
	res := mustRun(t, g, nil, "t", nil)
	if got := jsonOf(res.Path); got != `[["r"],["a","b"],["a2"],["a3"],["j"]]` {
		t.Fatalf("path %s", got)
	}
	if res.Visits()["j"] != 1 {
		t.Fatalf("join ran %d times", res.Visits()["j"])
	}
	if got := jsonOf(res.State["log"]); got != `["r","a","b","a2","a3","j:r,a,b,a2,a3"]` {
		t.Fatalf("log %s", got)
	}
}

const routing = `
version: 1
name: routing
state:
	schema:
		type: object
		properties:
			n: {type: integer, default: 0}
			next: {type: string, default: ""}
			out: {type: string, default: ""}
input: [n, next]
nodes:
	decide: {kind: set}
	small: {kind: set, set: {out: "'small'"}}
	big: {kind: set, set: {out: "'big'"}}
	pick: {kind: set}
	x: {kind: set, set: {out: "'x'"}}
	y: {kind: set, set: {out: "'y'"}}
	fallback: {kind: set, set: {out: "'fallback'"}}
edges:
	- from: START
	  branch:
	    - when: "state.next != ''"
	      to: pick
	    - else: decide
	- from: decide
	  branch:
	    - when: "state.n < 10"
	      to: small
	    - when: "state.n < 100"
	      to: big
	    - else: END
	- from: pick
	  route: "state.next"
	  choices: [x, y, END]
	  default: fallback
	- {from: small, to: END}
	- {from: big, to: END}
	- {from: x, to: END}
	- {from: y, to: END}
	- {from: fallback, to: END}
`

func TestConditionalAndComputedRouting(t *testing.T) {
	g := compile(t, routing)
	cases := []struct {
		in   map[string]any
		out  string
		path string
	}{
		{map[string]any{"n": 3}, "small", `[["decide"],["small"]]`},
		{map[string]any{"n": 30}, "big", `[["decide"],["big"]]`},
		{map[string]any{"n": 300}, "", `[["decide"]]`},
		{map[string]any{"next": "y"}, "y", `[["pick"],["y"]]`},
		{map[string]any{"next": "END"}, "", `[["pick"]]`},
		{map[string]any{"next": "nowhere"}, "fallback", `[["pick"],["fallback"]]`},
	}
	for _, c := range cases {
		res := mustRun(t, g, nil, "t", c.in)
		if res.State["out"] != c.out || jsonOf(res.Path) != c.path {
			t.Errorf("%v: out %q path %s, want %q %s", c.in, res.State["out"], jsonOf(res.Path), c.out, c.path)
		}
	}
}

func TestRouteOutsideChoicesFails(t *testing.T) {
	src := strings.Replace(routing, "\t  default: fallback\n", "", 1)
	src = strings.Replace(src, "\tfallback: {kind: set, set: {out: \"'fallback'\"}}\n", "", 1)
	src = strings.Replace(src, "\t- {from: fallback, to: END}\n", "", 1)
	g := compile(t, src)
	_, err := run(t, g, nil, "t", map[string]any{"next": "nowhere"})
	if err == nil || !strings.Contains(err.Error(), "not one of its choices") {
		t.Fatalf("want route error, got %v", err)
	}
}

const loop = `
version: 1
name: loop
state:
	schema:
		type: object
		properties:
			i: {type: integer, default: 0}
			until: {type: integer, default: 3}
input: [until]
limits: {max_steps: 50}
nodes:
	head: {kind: set, set: {i: "state.i + 1"}}
	body: {kind: set}
edges:
	- {from: START, to: head}
	- {from: head, to: body}
	- from: body
	  bound: 10
	  branch:
	    - when: "state.i < state.until"
	      to: head
	    - else: END
`

func TestBoundedCycle(t *testing.T) {
	g := compile(t, loop)
	res := mustRun(t, g, nil, "t", map[string]any{"until": 5})
	if res.State["i"] != 5 || res.Visits()["head"] != 5 {
		t.Fatalf("state %v visits %v", res.State, res.Visits())
	}
	_, err := run(t, g, nil, "t2", map[string]any{"until": 20})
	var le *engine.LimitError
	if !errors.As(err, &le) || le.Edge == nil || le.Limit != 10 {
		t.Fatalf("want bound error, got %v", err)
	}
	if !strings.Contains(err.Error(), "head → body → head") {
		t.Fatalf("error does not name the loop: %v", err)
	}
}

func TestStepLimitNamesTheLoop(t *testing.T) {
	src := strings.Replace(loop, "max_steps: 50", "max_steps: 7", 1)
	g := compile(t, src)
	_, err := run(t, g, nil, "t", map[string]any{"until": 9})
	var le *engine.LimitError
	if !errors.As(err, &le) || le.Edge != nil || le.Limit != 7 {
		t.Fatalf("want step limit error, got %v", err)
	}
	if got := strings.Join(le.Loop, " → "); got != "head → body → head" && got != "body → head → body" {
		t.Fatalf("loop %q", got)
	}
}

const flaky = `
version: 1
name: flaky
state:
	schema:
		type: object
		properties:
			out: {type: string, default: ""}
			note: {type: string, default: ""}
nodes:
	work:
		kind: fail
		times: 2
		message: boom
		set: {out: "'done'"}
		retry: {attempts: ATTEMPTS, backoff: 1ms}
edges:
	- {from: START, to: work}
	- {from: work, to: END}
`

func TestRetry(t *testing.T) {
	g := compile(t, strings.Replace(flaky, "ATTEMPTS", "3", 1))
	var events []engine.Event
	res, err := engine.New(memory.New()).Run(context.Background(), g, engine.Request{Thread: "t",
		Observe: func(e engine.Event) { events = append(events, e) }})
	if err != nil || res.State["out"] != "done" {
		t.Fatalf("res %v err %v", res, err)
	}
	retries := 0
	for _, e := range events {
		if e.Type == engine.NodeRetry {
			retries++
		}
	}
	if retries != 2 {
		t.Fatalf("%d retry events, want 2", retries)
	}

	g = compile(t, strings.Replace(flaky, "ATTEMPTS", "2", 1))
	_, err = run(t, g, nil, "t", nil)
	var ne *engine.NodeError
	if !errors.As(err, &ne) || ne.Node != "work" || !errors.Is(err, kindtest.ErrInjected) {
		t.Fatalf("want node error, got %v", err)
	}
	if !strings.Contains(err.Error(), `node "work" (fail) at `) || !strings.Contains(err.Error(), "flow.yaml:") {
		t.Fatalf("error does not say where: %v", err)
	}
}

// A node's timeout fails it, whether or not it honours cancellation: one
// that does not is waited for the engine's grace, then left behind.
func TestTimeout(t *testing.T) {
	for _, ignore := range []bool{false, true} {
		g := compile(t, strings.ReplaceAll(`
version: 1
name: slow
state:
	schema:
		type: object
		properties:
			out: {type: string, default: ""}
nodes:
	slow: {kind: sleep, ms: 300, ignore_cancel: IGNORE, timeout: 20ms, set: {out: "'late'"}}
edges:
	- {from: START, to: slow}
	- {from: slow, to: END}
`, "IGNORE", map[bool]string{false: "false", true: "true"}[ignore]))
		// a short grace for the node that ignores cancellation; the one
		// that honours it has the default, room for a loaded machine
		grace := engine.DefaultGrace
		if ignore {
			grace = 20 * time.Millisecond
		}
		eng := engine.New(memory.New(), engine.WithGrace(grace))
		_, err := run(t, g, eng, "t", nil)
		if err == nil || !strings.Contains(err.Error(), "timed out after 20ms") {
			t.Fatalf("ignore_cancel=%v: want timeout, got %v", ignore, err)
		}
		// one that honours it is joined (or returns as its time runs out,
		// before it is given up at all)
		late := eng.Late()
		if ignore && (late.Abandoned != 1 || late.Detached != 1) || !ignore && late.Detached != 0 {
			t.Fatalf("ignore_cancel=%v: late %+v", ignore, late)
		}
	}
}

func TestOnError(t *testing.T) {
	base := strings.Replace(flaky, "times: 2", "times: 0", 1)
	base = strings.Replace(base, "ATTEMPTS", "2", 1)
	// fallback values, then the node's own edges
	g := compile(t, strings.Replace(base, "\t\tretry:", "\t\ton_error: {set: {out: \"'fallback'\", note: \"error\"}}\n\t\tretry:", 1))
	res := mustRun(t, g, nil, "t", nil)
	if res.State["out"] != "fallback" || !strings.Contains(res.State["note"].(string), "boom") {
		t.Fatalf("state %v", res.State)
	}
	// route to a handler instead
	src := strings.Replace(base, "\t\tretry:", "\t\ton_error: {route: handler, set: {note: \"'routed'\"}}\n\t\tretry:", 1)
	src = strings.Replace(src, "edges:", "\thandler: {kind: set, set: {out: \"'handled'\"}}\nedges:\n\t- {from: handler, to: END}", 1)
	g = compile(t, src)
	res = mustRun(t, g, nil, "t", nil)
	if res.State["out"] != "handled" || res.State["note"] != "routed" || jsonOf(res.Path) != `[["work"],["handler"]]` {
		t.Fatalf("state %v path %v", res.State, res.Path)
	}
}

// pendingFails is a store that cannot save pending writes.
type pendingFails struct{ *memory.Store }

var errStoreDown = errors.New("store down")

func (pendingFails) PutPending(context.Context, string, uint64, string, []store.Write, string) error {
	return errStoreDown
}

// A store that fails to save the update of a node that ran beside another
// blocking node fails the run: the node succeeded, so its on_error
// fallback does not stand in for the update, and nothing of the step is
// committed.
func TestPendingWriteFailureFailsTheRun(t *testing.T) {
	g := compile(t, `
version: 1
name: pending
state:
	schema:
		type: object
		properties:
			out: {type: string, default: ""}
			other: {type: string, default: ""}
nodes:
	work:
		kind: sleep
		ms: 1
		set: {out: "'done'"}
		on_error: {set: {out: "'fallback'"}}
	other: {kind: sleep, ms: 1, set: {other: "'done'"}}
edges:
	- {from: START, to: [work, other]}
	- {from: [work, other], to: END}
`)
	st := pendingFails{memory.New()}
	_, err := run(t, g, engine.New(st), "t", nil)
	var ne *engine.NodeError
	if !errors.Is(err, errStoreDown) || errors.As(err, &ne) || !strings.Contains(err.Error(), "save the update of node") {
		t.Fatalf("want the store's failure as the run's, got %v", err)
	}
	head, err := st.Head(context.Background(), "t")
	if err != nil || head.Values["out"] != "" || head.Values["other"] != "" {
		t.Fatalf("head %+v (%v): want the step uncommitted", head, err)
	}
}

// releaseFails is a store that cannot release leases, as when it is
// unreachable at the end of a run.
type releaseFails struct{ *memory.Store }

func (releaseFails) Release(context.Context, string, string) error { return errStoreDown }

// Commit commits, and releases nothing the checkpoint asks to release.
func (r releaseFails) Commit(ctx context.Context, cp *store.Checkpoint) error {
	c := *cp
	c.Release = ""
	return r.Store.Commit(ctx, &c)
}

// A lease a run could not release keeps other engines off the thread until
// it expires, but not the next run of the engine that holds it.
func TestUnreleasedLeaseBindsOtherEnginesOnly(t *testing.T) {
	g := compile(t, loop)
	st := releaseFails{memory.New()}
	eng, other := engine.New(st), engine.New(st)
	for i := range 2 {
		if _, err := run(t, g, eng, "t", map[string]any{"until": 3}); err != nil {
			t.Fatalf("run %d: %v", i+1, err)
		}
	}
	if _, err := run(t, g, other, "t", map[string]any{"until": 3}); !errors.Is(err, engine.ErrBusy) {
		t.Fatalf("another engine ran while the lease was held: %v", err)
	}
}

func TestInvalidUpdateIsNotCommitted(t *testing.T) {
	g := compile(t, `
version: 1
name: invalid
state:
	schema:
		type: object
		properties:
			n: {type: integer, default: 0}
			s: {type: string, maxLength: 3, default: ""}
input: [n]
nodes:
	ok: {kind: set, set: {n: "state.n + 1"}}
	bad: {kind: set, set: {s: "state.n > 1 ? 'far too ' + string(state.n) : 'ok'"}}
edges:
	- {from: START, to: ok}
	- {from: ok, to: bad}
	- {from: bad, to: END}
`)
	eng := engine.New(memory.New())
	mustRun(t, g, eng, "t", nil)
	before, _ := eng.Store.Head(context.Background(), "t")
	_, err := run(t, g, eng, "t", nil)
	var ne *engine.NodeError
	if !errors.As(err, &ne) || ne.Node != "bad" || !strings.Contains(err.Error(), `field "s"`) {
		t.Fatalf("want rejection naming node and field, got %v", err)
	}
	after, _ := eng.Store.Head(context.Background(), "t")
	if after.Values["s"] != "ok" || after.Seq != before.Seq+1 {
		// the "ok" step of the failed run is committed, the bad one is not
		t.Fatalf("before %+v after %+v", before, after)
	}
}

func TestInputs(t *testing.T) {
	g := compile(t, loop)
	_, err := run(t, g, nil, "t", map[string]any{"untl": 3})
	var ie *engine.InputError
	if !errors.As(err, &ie) || ie.Suggestion != "until" {
		t.Fatalf("want input error with suggestion, got %v", err)
	}
	_, err = run(t, g, nil, "t", map[string]any{"i": 3})
	if !errors.As(err, &ie) {
		t.Fatalf("a non-input field was accepted: %v", err)
	}
	_, err = run(t, g, nil, "t", map[string]any{"until": "three"})
	if !errors.As(err, &ie) {
		t.Fatalf("an invalid input was accepted: %v", err)
	}
	// a JSON-decoded number is accepted for an integer field
	res := mustRun(t, g, nil, "t", map[string]any{"until": 2.0})
	if res.State["until"] != 2 {
		t.Fatalf("until %#v", res.State["until"])
	}
}

func TestThreadContinues(t *testing.T) {
	g := compile(t, loop)
	eng := engine.New(memory.New())
	mustRun(t, g, eng, "t", map[string]any{"until": 2})
	res := mustRun(t, g, eng, "t", map[string]any{"until": 4})
	if res.State["i"] != 4 || res.Visits()["head"] != 2 {
		t.Fatalf("state %v visits %v", res.State, res.Visits())
	}
	hist, _ := eng.Store.History(context.Background(), "t", store.HistoryOptions{})
	if hist[0].Seq != res.Checkpoint || hist[len(hist)-1].Source != "create" {
		t.Fatalf("history %v", hist)
	}
}

func TestEventsInOrder(t *testing.T) {
	g := compile(t, loop)
	var types []string
	_, err := engine.New(memory.New()).Run(context.Background(), g, engine.Request{Thread: "t",
		Input: map[string]any{"until": 1}, Observe: func(e engine.Event) { types = append(types, string(e.Type)+":"+e.Node) }})
	if err != nil {
		t.Fatal(err)
	}
	want := "run_start: node_start:head node_end:head state_update: node_start:body node_end:body state_update: run_end:"
	if got := strings.Join(types, " "); got != want {
		t.Fatalf("events\n%s\nwant\n%s", got, want)
	}
}

func TestBusyThread(t *testing.T) {
	g := compile(t, `
version: 1
name: slow
state:
	schema: {type: object, properties: {out: {type: string}}}
nodes:
	slow: {kind: sleep, ms: 300, set: {out: "'x'"}}
edges:
	- {from: START, to: slow}
	- {from: slow, to: END}
`)
	eng := engine.New(memory.New())
	if _, err := eng.Create(context.Background(), g, "t", nil); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = run(t, g, eng, "t", nil)
		}()
	}
	wg.Wait()
	busy := 0
	for _, err := range errs {
		if errors.Is(err, engine.ErrBusy) {
			busy++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if busy != 1 {
		t.Fatalf("want exactly one busy rejection, got %v", errs)
	}
}

func TestDeterminism(t *testing.T) {
	// Four nodes with random delays race in each superstep; their writes
	// fold in declaration order, so every run ends in the same state.
	g := compile(t, `
version: 1
name: race
state:
	schema:
		type: object
		properties:
			log: {type: array, items: {type: string}, default: []}
			sum: {type: number, default: 0}
			seen: {type: object, default: {}}
			last: {type: string, default: ""}
			round: {type: integer, default: 0}
	reducers: {log: append, sum: add, seen: merge, last: {expr: "update"}}
limits: {max_steps: 40}
nodes:
	fan: {kind: set, set: {round: "state.round + 1"}}
	a: {kind: set, jitter_ms: 3, set: {log: "'a' + string(state.round)", sum: "0.1", seen: "{a: state.round}", last: "'a'"}}
	b: {kind: set, jitter_ms: 3, set: {log: "'b' + string(state.round)", sum: "0.2", seen: "{b: state.round}", last: "'b'"}}
	c: {kind: set, jitter_ms: 3, set: {log: "'c' + string(state.round)", sum: "0.3", seen: "{c: state.round}", last: "'c'"}}
	d: {kind: set, jitter_ms: 3, set: {log: "'d' + string(len(state.log))", sum: "0.4", seen: "{d: state.round}", last: "'d'"}}
	join: {kind: set, set: {log: "join(state.log[-4:], '')"}}
edges:
	- {from: START, to: fan}
	- {from: fan, to: [a, b, c, d]}
	- {from: [a, b, c, d], to: join}
	- from: join
	  bound: 3
	  branch:
	    - {when: "state.round < 3", to: fan}
	    - else: END
`)
	runs := 200
	if testing.Short() {
		runs = 20
	}
	var first string
	for i := range runs {
		res := mustRun(t, g, nil, "t", nil)
		got := jsonOf(res.State)
		if i == 0 {
			first = got
			continue
		}
		if got != first {
			t.Fatalf("run %d ended in\n%s\nrun 0 in\n%s", i, got, first)
		}
	}
	var st map[string]any
	json.Unmarshal([]byte(first), &st)
	if !reflect.DeepEqual(st["last"], "d") || len(st["log"].([]any)) != 15 {
		t.Fatalf("unexpected final state %s", first)
	}
}

func TestUpdateAsNode(t *testing.T) {
	g := compile(t, loop)
	eng := engine.New(memory.New())
	mustRun(t, g, eng, "t", map[string]any{"until": 2})
	snap, err := eng.Update(context.Background(), g, "t", "head", map[string]any{"i": 10})
	if err != nil || snap.Values["i"] != 10 || !slices.Equal(snap.Next, []string{"body"}) {
		t.Fatalf("update %+v %v", snap, err)
	}
	hist, _ := eng.Store.History(context.Background(), "t", store.HistoryOptions{Limit: 1})
	if hist[0].Source != "update" || hist[0].Writers[0].Node != "head" {
		t.Fatalf("checkpoint %+v", hist[0])
	}
	var ie *engine.InputError
	if _, err := eng.Update(context.Background(), g, "t", "body", map[string]any{"i": 1}); !errors.As(err, &ie) {
		t.Fatalf("a field the node does not write was accepted: %v", err)
	}
	if _, err := eng.Update(context.Background(), g, "t", "head", map[string]any{"i": "x"}); !errors.As(err, &ie) {
		t.Fatalf("an invalid value was accepted: %v", err)
	}
	if _, err := eng.Update(context.Background(), g, "t", "haed", nil); !errors.As(err, &ie) || ie.Suggestion != "head" {
		t.Fatalf("unknown node: %v", err)
	}
	// the update stands for a step that ran head: body is next, and
	// resuming runs it (and its branch, over i = 10, ends the run)
	res, err := eng.Run(context.Background(), g, engine.Request{Thread: "t", Resume: true, RecordPath: true})
	if err != nil || res.State["i"] != 10 || !reflect.DeepEqual(res.Path, [][]string{{"body"}}) {
		t.Fatalf("resumed after the update: %+v %v", res, err)
	}
	// the next run continues from the updated state
	res = mustRun(t, g, eng, "t", map[string]any{"until": 12})
	if res.State["i"] != 12 {
		t.Fatalf("after update: %v", res.State)
	}
}

func TestResumeAfterCrash(t *testing.T) {
	// A run stops after a checkpoint with nodes still to run (as when its
	// process dies); a new run is refused until it is resumed.
	g := compile(t, loop)
	st := memory.New()
	eng := engine.New(st)
	mustRun(t, g, eng, "t", map[string]any{"until": 1})
	head, _ := st.Head(context.Background(), "t")
	cp := &store.Checkpoint{Thread: "t", Seq: head.Seq + 1, Parent: head.Seq, Run: "dead", Step: 1, Source: "input",
		Writes: []store.Write{{Field: "until", Version: 3, Value: 4}}, Next: []string{"head"}}
	if err := st.Commit(context.Background(), cp); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, g, eng, "t", map[string]any{"until": 9}); !errors.Is(err, engine.ErrUnfinished) {
		t.Fatalf("new run on an unfinished thread: %v", err)
	}
	res, err := eng.Run(context.Background(), g, engine.Request{Thread: "t", Resume: true})
	if err != nil || res.State["i"] != 4 {
		t.Fatalf("resume: %v %v", res, err)
	}
	if res, err := eng.Run(context.Background(), g, engine.Request{Thread: "t", Resume: true}); err != nil || res.Steps != 0 {
		t.Fatalf("resume with nothing to resume: %v %v", res, err)
	}
}

func TestDurabilityModes(t *testing.T) {
	g := compile(t, `
version: 1
name: durable
state:
	schema:
		type: object
		properties:
			i: {type: integer, default: 0}
			log: {type: array, items: {type: integer}, default: []}
			until: {type: integer, default: 3}
	reducers: {log: append}
input: [until]
nodes:
	step: {kind: set, set: {i: "state.i + 1", log: "state.i"}}
edges:
	- {from: START, to: step}
	- from: step
	  bound: 100
	  branch:
	    - {when: "state.i < state.until", to: step}
	    - else: END
`)
	ctx := context.Background()
	want := map[string]any{}
	for _, d := range []engine.Durability{engine.Sync, engine.Async, engine.Exit} {
		st := memory.New()
		eng := engine.New(st)
		for turn, until := range []int{3, 7} {
			res, err := eng.Run(ctx, g, engine.Request{Thread: "t", Input: map[string]any{"until": until}, Durability: d})
			if err != nil {
				t.Fatalf("%s: %v", d, err)
			}
			head, _ := st.Head(ctx, "t")
			if !reflect.DeepEqual(head.Values, res.State) || head.Seq != res.Checkpoint {
				t.Fatalf("%s turn %d: store has %v at %d, run returned %v at %d", d, turn, head.Values, head.Seq, res.State, res.Checkpoint)
			}
			if turn == 1 {
				if len(want) == 0 {
					want = head.Values
				} else if !reflect.DeepEqual(head.Values, want) {
					t.Fatalf("%s ends in %v, sync in %v", d, head.Values, want)
				}
			}
		}
		hist, _ := st.History(ctx, "t", store.HistoryOptions{})
		switch d {
		case engine.Exit:
			// create, then one checkpoint per run; the second run's holds
			// only the items it appended
			if len(hist) != 3 || hist[0].Source != "run" || len(hist[0].Writes) != 3 {
				t.Fatalf("exit history: %d checkpoints, newest %+v", len(hist), hist[0])
			}
			for _, w := range hist[0].Writes {
				if w.Field == "log" && (!w.Append || len(w.Items) != 4) {
					t.Fatalf("exit run's log write %+v", w)
				}
			}
		default:
			if len(hist) != 1+(1+3)+(1+4) { // create; input and steps of each run
				t.Fatalf("%s history: %d checkpoints", d, len(hist))
			}
		}
	}
	if _, err := engine.New(memory.New()).Run(ctx, g, engine.Request{Thread: "t", Durability: "sometimes"}); err == nil {
		t.Fatal("unknown durability accepted")
	}
}

// A run appends to its own lists in place. Nobody outside the run may see
// that: every list handed out (events, results, checkpoints, forks) keeps
// its contents, and appending to one never reaches the state.
func TestInPlaceAppendsStayPrivate(t *testing.T) {
	g := compile(t, `
version: 1
name: appends
state:
	schema:
		type: object
		properties:
			n: {type: integer, default: 0}
			log: {type: array, items: {type: string}, default: []}
	reducers: {log: append}
nodes:
	step: {kind: set, set: {n: "state.n + 1", log: "'s' + string(state.n)"}}
edges:
	- {from: START, to: step}
	- from: step
		bound: 20
		branch:
			- {when: "state.n % 6 != 0", to: step}
			- else: END
`)
	st := memory.New()
	eng := engine.New(st)
	ctx := context.Background()
	var seen, own [][]any
	var was []string
	observe := func(e engine.Event) {
		if l, ok := e.Appended["log"].([]any); ok {
			seen, was = append(seen, l), append(was, jsonOf(l))
			own = append(own, append(l, "mine")) // a consumer extending what it got
		}
	}
	res, err := eng.Run(ctx, g, engine.Request{Thread: "a", Observe: observe})
	if err != nil {
		t.Fatal(err)
	}
	own = append(own, append(res.State["log"].([]any), "mine"))
	if _, err := store.Fork(ctx, st, "a", res.Checkpoint, "b"); err != nil {
		t.Fatal(err)
	}
	for _, thread := range []string{"a", "b", "a"} {
		if _, err := eng.Run(ctx, g, engine.Request{Thread: thread, Observe: observe}); err != nil {
			t.Fatal(err)
		}
	}
	if len(seen) != 24 {
		t.Fatalf("%d state updates with the log, want 24", len(seen))
	}
	// each view is the items as they were at its step
	for i, cur := range seen {
		if jsonOf(cur) != was[i] || len(cur) != 1 {
			t.Fatalf("view %d changed: %v, was %s", i, cur, was[i])
		}
		for _, it := range cur {
			if it == "mine" {
				t.Fatalf("view %d holds an item appended outside the run: %v", i, cur)
			}
		}
	}
	for i, l := range own {
		if l[len(l)-1] != "mine" {
			t.Fatalf("a list extended outside the run was overwritten by the run: %d %v", i, l)
		}
	}
	for thread, n := range map[string]int{"a": 18, "b": 12} {
		snap, err := st.Head(ctx, thread)
		if err != nil {
			t.Fatal(err)
		}
		log := snap.Values["log"].([]any)
		if len(log) != n || snap.Values["n"] != n {
			t.Fatalf("thread %s: n=%v log=%v", thread, snap.Values["n"], log)
		}
		for i, it := range log {
			if it != fmt.Sprintf("s%d", i) {
				t.Fatalf("thread %s: item %d is %v: %v", thread, i, it, log)
			}
		}
	}
}

// A run stopped between steps leaves an unfinished run; Resume finishes
// it, or Abandon gives it up so the thread takes new input.
func TestStopResumeAndAbandon(t *testing.T) {
	g := compile(t, `version: 1
name: chain
state:
  schema: {type: object, properties: {n: {type: integer, default: 0}, x: {type: integer, default: 0}}}
input: [x]
nodes:
  a: {kind: set, set: {n: "state.n + 1"}}
  b: {kind: set, set: {n: "state.n + 10"}}
  c: {kind: set, set: {n: "state.n + 100"}}
edges:
  - {from: START, to: a}
  - {from: a, to: b}
  - {from: b, to: c}
  - {from: c, to: END}
`)
	ctx := context.Background()
	eng := engine.New(memory.New())
	for _, thread := range []string{"resume", "abandon"} {
		stop := make(chan struct{})
		_, err := eng.Run(ctx, g, engine.Request{Thread: thread, ID: "run-" + thread, Stop: stop, Observe: func(ev engine.Event) {
			if ev.Type == engine.StateUpdate && ev.Step == 1 {
				close(stop)
			}
		}})
		if !errors.Is(err, engine.ErrStopped) {
			t.Fatalf("%s: stopped run returned %v", thread, err)
		}
		head, _ := eng.Store.Head(ctx, thread)
		if head.Values["n"] != 1 || !slices.Equal(head.Next, []string{"b"}) || head.Run != "run-"+thread {
			t.Fatalf("%s: after the stop %v next %v run %q", thread, head.Values, head.Next, head.Run)
		}
		if _, err := eng.Run(ctx, g, engine.Request{Thread: thread, Input: map[string]any{"x": 1}}); !errors.Is(err, engine.ErrUnfinished) {
			t.Fatalf("%s: new input on an unfinished run: %v", thread, err)
		}
	}
	res, err := eng.Run(ctx, g, engine.Request{Thread: "resume", Resume: true})
	if err != nil || res.State["n"] != 111 {
		t.Fatalf("resumed: %v %v", res, err)
	}
	snap, err := eng.Abandon(ctx, "abandon")
	if err != nil || snap.Values["n"] != 1 {
		t.Fatalf("abandon: %v %v", snap, err)
	}
	hist, _ := eng.Store.History(ctx, "abandon", store.HistoryOptions{Limit: 1})
	if hist[0].Source != store.SourceAbandon || len(hist[0].Writes) != 0 || len(hist[0].Next) != 0 {
		t.Fatalf("abandon checkpoint %+v", hist[0])
	}
	res, err = eng.Run(ctx, g, engine.Request{Thread: "abandon", Input: map[string]any{"x": 1}})
	if err != nil || res.State["n"] != 112 {
		t.Fatalf("a new run after abandoning: %v %v", res, err)
	}
	// abandoning a finished thread changes nothing
	if snap, err := eng.Abandon(ctx, "abandon"); err != nil || snap.Seq != res.Checkpoint {
		t.Fatalf("abandon of a finished thread: %v %v", snap, err)
	}
}

// A run refused for its input emits nothing: run_start means the run
// holds its thread and has accepted its input.
func TestRefusedRunEmitsNothing(t *testing.T) {
	g := compile(t, twoWriters)
	var events []engine.Event
	_, err := engine.New(memory.New()).Run(context.Background(), g, engine.Request{Thread: "t",
		Input: map[string]any{"nope": 1}, Observe: func(ev engine.Event) { events = append(events, ev) }})
	var ie *engine.InputError
	if !errors.As(err, &ie) || len(events) != 0 {
		t.Fatalf("err %v, events %v", err, events)
	}
}

// A named run runs once: started again (by a process that took over from
// one that died), it neither applies its input again nor runs its nodes
// again, and it continues where it stopped.
func TestNamedRunRunsOnce(t *testing.T) {
	g := compile(t, `version: 1
name: chain
state:
  schema: {type: object, properties: {n: {type: integer, default: 0}, x: {type: integer, default: 0}}}
input: [x]
nodes:
  a: {kind: set, set: {n: "state.n + input.x"}}
  b: {kind: set, set: {n: "state.n * 10"}}
edges:
  - {from: START, to: a}
  - {from: a, to: b}
  - {from: b, to: END}
`)
	ctx := context.Background()
	eng := engine.New(memory.New())
	in := map[string]any{"x": 2}
	res, err := eng.Run(ctx, g, engine.Request{Thread: "t", ID: "r1", Input: in})
	if err != nil || res.State["n"] != 20 {
		t.Fatalf("first run %v %v", res, err)
	}
	again, err := eng.Run(ctx, g, engine.Request{Thread: "t", ID: "r1", Input: in})
	if err != nil || again.State["n"] != 20 || again.Checkpoint != res.Checkpoint {
		t.Fatalf("the same run again: %v %v", again, err)
	}
	stop := make(chan struct{})
	close(stop)
	if _, err := eng.Run(ctx, g, engine.Request{Thread: "t", ID: "r2", Input: in, Stop: stop}); !errors.Is(err, engine.ErrStopped) {
		t.Fatalf("stopped: %v", err)
	}
	res, err = eng.Run(ctx, g, engine.Request{Thread: "t", ID: "r2", Input: in})
	if err != nil || res.State["n"] != 220 {
		t.Fatalf("the stopped run started again continues: %v %v", res, err)
	}
	// another run is refused on the unfinished thread as before
	if _, err := eng.Run(ctx, g, engine.Request{Thread: "t", Input: in}); err != nil {
		t.Fatalf("a new run after: %v", err)
	}
}

// A run refused for its input on a thread that does not exist yet leaves
// nothing behind: the thread is recorded only once a run is accepted.
func TestRefusedInputCreatesNoThread(t *testing.T) {
	g := compile(t, `version: 1
name: f
state:
	schema:
		type: object
		properties:
			n: {type: integer, default: 0, minimum: 0}
input: [n]
nodes:
	inc: {kind: set, set: {n: "state.n + 1"}}
edges:
	- {from: START, to: inc}
	- {from: inc, to: END}
`)
	st := memory.New()
	eng := engine.New(st)
	for _, in := range []map[string]any{{"m": 1}, {"n": "x"}, {"n": -1}} {
		var ie *engine.InputError
		if _, err := run(t, g, eng, "t1", in); !errors.As(err, &ie) {
			t.Fatalf("input %v: %v", in, err)
		}
		if _, err := st.Head(context.Background(), "t1"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("input %v was refused but the thread exists (%v)", in, err)
		}
	}
	res := mustRun(t, g, eng, "t1", map[string]any{"n": 2})
	if res.State["n"] != int64(3) && res.State["n"] != 3 {
		t.Fatalf("state %v", res.State)
	}
	hist, err := st.History(context.Background(), "t1", store.HistoryOptions{})
	if err != nil || len(hist) != 3 || hist[len(hist)-1].Source != store.SourceCreate {
		t.Fatalf("history %d checkpoints (%v), want create, input, step", len(hist), err)
	}
}

// An update the state schema refuses is the node's failure: on_error
// handles it like any other (its set, its route), and nothing of the
// refused update is applied.
func TestOnErrorHandlesARejectedUpdate(t *testing.T) {
	base := `version: 1
name: f
state:
	schema:
		type: object
		properties:
			n: {type: integer, default: 0, minimum: 0}
			log: {type: array, items: {type: string}, default: []}
			note: {type: string, default: ""}
	reducers:
		log: append
input: [n]
nodes:
	dec:
		kind: set
		set: {n: "input.n - 5", log: "'dec'"}
		ON_ERROR
	handler: {kind: set, set: {note: "'handled'"}}
edges:
	- {from: START, to: dec}
	- {from: dec, to: END}
	- {from: handler, to: END}
`
	cases := []struct {
		onError string
		fails   string // the run's error, when it fails
		note    string
		log     string
	}{
		{"on_error: {set: {note: \"'fallback: ' + error\"}}", "", "fallback: update of field \"n\" rejected", "[]"},
		{"on_error: {route: handler, set: {log: \"'fell back'\"}}", "", "handled", `["fell back"]`},
		{"", "update of field \"n\" rejected", "", ""},
		{"on_error: {set: {n: \"-1\"}}", "on_error: update of field \"n\" rejected", "", ""},
	}
	for _, c := range cases {
		src := strings.Replace(base, "ON_ERROR", c.onError, 1)
		if !strings.Contains(c.onError, "route") {
			src = strings.Replace(strings.Replace(src, "\thandler: {kind: set, set: {note: \"'handled'\"}}\n", "", 1),
				"\t- {from: handler, to: END}\n", "", 1)
		}
		g := compile(t, src)
		res, err := run(t, g, nil, "t", map[string]any{"n": 2})
		if c.fails != "" {
			if err == nil || !strings.Contains(err.Error(), c.fails) {
				t.Errorf("%s: error %v, want %q", c.onError, err, c.fails)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", c.onError, err)
		}
		if note, _ := res.State["note"].(string); !strings.HasPrefix(note, c.note) || jsonOf(res.State["log"]) != c.log || jsonOf(res.State["n"]) != "2" {
			t.Errorf("%s: state %v", c.onError, res.State)
		}
	}
}
