package engine_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/kind/kindtest"
	"github.com/trellisflow/trellis/runtime/store/memory"
	"go.uber.org/goleak"
)

// The tests of a run's lifetime: nothing an attempt does after the engine
// gave up on it (its timeout, the run's cancellation) reaches the run's
// observer, its state or another node, and Run returns without leaving
// anything of the run behind that could.

// hooks are the behaviours of hook nodes, by the name their hook setting
// gives: a test registers one with hook.
var hooks sync.Map

var hookSeq atomic.Int64

// hook registers fn for the test and returns its name. A hook node runs
// fn; when fn returns nil, the node writes its set.
func hook(t *testing.T, fn func(ctx context.Context, s kind.State) error) string {
	name := "h" + strconv.FormatInt(hookSeq.Add(1), 10)
	hooks.Store(name, fn)
	t.Cleanup(func() { hooks.Delete(name) })
	return name
}

type hookNode struct {
	name string
	sets kind.Writes
}

func (n *hookNode) Run(ctx context.Context, s kind.State) (kind.Update, error) {
	fn, ok := hooks.Load(n.name)
	if !ok {
		return nil, errors.New("no hook " + n.name)
	}
	if err := fn.(func(context.Context, kind.State) error)(ctx, s); err != nil {
		return nil, err
	}
	return n.sets.Eval(s.Vars())
}

// fallbackNode is a hook node with a fallback, which writes what it saw of
// its view.
type fallbackNode struct{ hookNode }

func (n *fallbackNode) Fallback(_ context.Context, s kind.State, err error) (kind.Update, error) {
	return kind.Update{{Field: "note", Value: s.Node() + " " + strconv.Itoa(s.Attempt()) + " " + s.Get("out").(string) + ": " + err.Error()}}, nil
}

// panicFallback fails, and its fallback panics.
type panicFallback struct{}

func (panicFallback) Run(context.Context, kind.State) (kind.Update, error) {
	return nil, errors.New("broke")
}

func (panicFallback) Fallback(context.Context, kind.State, error) (kind.Update, error) {
	panic("fallback broke")
}

// panicAsk panics when the engine asks it for its question.
type panicAsk struct{}

func (panicAsk) Ask(kind.State) (any, error) { panic("ask broke") }

func (panicAsk) Run(context.Context, kind.State) (kind.Update, error) { return nil, nil }

// fanNode runs its nested node once per item of 0..items-1, all at once,
// and returns their writes (or the first failure): a map reduced to what
// the engine sees of one.
type fanNode struct {
	items  int
	nested *kind.Nested
}

func (n *fanNode) Run(ctx context.Context, s kind.State) (kind.Update, error) {
	upds := make([]kind.Update, n.items)
	errs := make([]error, n.items)
	var wg sync.WaitGroup
	for i := range n.items {
		wg.Go(func() {
			upds[i], errs[i] = s.RunNested(ctx, n.nested, strconv.Itoa(i), map[string]any{"item": i})
		})
	}
	wg.Wait()
	var out kind.Update
	for i := range upds {
		if errs[i] != nil {
			return nil, errs[i]
		}
		out = append(out, upds[i]...)
	}
	return out, nil
}

var scopeKinds = sync.OnceValue(func() kind.Registry {
	set := kind.NewSet(
		kind.Spec{Name: "hook", Summary: "Run a test's hook, then write.", Fields: []config.Field{
			config.String("hook", "The hook's name."), config.Map("set", "Field to expression.", nil)},
			New: func(b kind.Builder) kind.Node {
				name, _ := b.Settings().String("hook")
				return &hookNode{name: name, sets: kindtest.CompileSet(b)}
			}},
		kind.Spec{Name: "hook_fallback", Summary: "Run a test's hook, then write; fall back to what the view shows.", Fields: []config.Field{
			config.String("hook", "The hook's name."), config.Map("set", "Field to expression.", nil)},
			New: func(b kind.Builder) kind.Node {
				name, _ := b.Settings().String("hook")
				return &fallbackNode{hookNode{name: name, sets: kindtest.CompileSet(b)}}
			}},
		kind.Spec{Name: "panic_fallback", Summary: "Fail, then panic in the fallback.",
			New: func(b kind.Builder) kind.Node { return panicFallback{} }},
		kind.Spec{Name: "panic_ask", Summary: "Panic when asked for the question.",
			New: func(b kind.Builder) kind.Node { return panicAsk{} }},
		kind.Spec{Name: "fan", Summary: "Run a nested node per item.", Fields: []config.Field{
			config.Integer("items", "How many."), config.Ref("node", "The nested node.", "node")},
			New: func(b kind.Builder) kind.Node {
				n := &fanNode{}
				n.items, _ = b.Settings().Int("items")
				if n.nested = b.Nested(b.Settings().Value("node"), kind.Vars{"item": nil}); n.nested == nil {
					return nil
				}
				return n
			}},
	)
	for _, sp := range kindtest.Registry().Specs() {
		set.Register(*sp)
	}
	return set
})

func compileScope(t testing.TB, src string) *flow.Graph {
	t.Helper()
	path := filepath.Join(t.TempDir(), "flow.yaml")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(src, "\t", "  ")), 0o644); err != nil {
		t.Fatal(err)
	}
	g, dl := flow.Load(path, scopeKinds())
	if g == nil {
		t.Fatalf("flow does not compile:\n%v", dl)
	}
	return g
}

// watch is an observer that records a run's events and every event that
// comes after the run returned.
type watch struct {
	mu     sync.Mutex
	events []engine.Event
	ended  bool
	after  []engine.Event
}

func (w *watch) observe(ev engine.Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		w.after = append(w.after, ev)
		return
	}
	w.events = append(w.events, ev)
}

// end marks the run returned.
func (w *watch) end() {
	w.mu.Lock()
	w.ended = true
	w.mu.Unlock()
}

// late lists the events that came after the run returned.
func (w *watch) late() []engine.Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]engine.Event(nil), w.after...)
}

func (w *watch) outputs() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, ev := range w.events {
		if ev.Type == engine.NodeOutput {
			out = append(out, ev.Node+":"+ev.Text)
		}
	}
	return out
}

// hang bounds the waits of these tests: only against a hang, as a
// loaded machine takes many times what an idle one does.
const hang = time.Minute

// eventually fails the test when cond does not hold within a bound.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(hang); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, hang)
		}
	}
}

// wait receives from ch, failing the test after a bound.
func wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(hang):
		t.Fatalf("%s: not within %s", what, hang)
	}
}

const oneNode = `
version: 1
name: one
state:
	schema:
		type: object
		properties:
			out: {type: string, default: ""}
			note: {type: string, default: ""}
nodes:
	work: {kind: hook, hook: HOOK, timeout: TIMEOUT, set: {out: "'done'"}SETTINGS}
edges:
	- {from: START, to: work}
	- {from: work, to: END}
`

func oneNodeFlow(t *testing.T, name, timeout, settings string) *flow.Graph {
	return compileScope(t, strings.NewReplacer("HOOK", name, "TIMEOUT", timeout, "SETTINGS", settings).Replace(oneNode))
}

// An attempt given up at its timeout that streams afterwards: its text
// reaches no one, before or after Run returned.
func TestAbandonedAttemptStreamsToNoOne(t *testing.T) {
	release, finished := make(chan struct{}), make(chan struct{})
	var once sync.Once
	let := func() { once.Do(func() { close(release) }) }
	t.Cleanup(let) // a failed check leaves no hook behind for the next test
	name := hook(t, func(ctx context.Context, s kind.State) error {
		defer close(finished)
		s.Stream("before")
		<-ctx.Done()
		<-release // the model's last chunk, arriving after the engine gave up
		s.Stream("after")
		return nil
	})
	// the timeout leaves a loaded machine room to stream "before" first
	g := oneNodeFlow(t, name, "2s", "")
	var w watch
	eng := engine.New(memory.New(), engine.WithGrace(20*time.Millisecond))
	_, err := eng.Run(context.Background(), g, engine.Request{Thread: "t", Observe: w.observe})
	w.end()
	if late := eng.Late(); late != (engine.Late{Abandoned: 1, Detached: 1}) {
		t.Fatalf("late %+v when Run returned, want the attempt abandoned and detached", late)
	}
	let()
	wait(t, finished, "the hook's end")
	if err == nil || !strings.Contains(err.Error(), "timed out after 2s") {
		t.Fatalf("want the timeout, got %v", err)
	}
	// the text and the update it returned are dropped
	eventually(t, "two outputs dropped", func() bool { return eng.Late().Dropped == 2 })
	if late := w.late(); len(late) > 0 {
		t.Fatalf("%d events after Run returned, the first %s %q", len(late), late[0].Type, late[0].Text)
	}
	if got := strings.Join(w.outputs(), ","); got != "work:before" {
		t.Fatalf("outputs %s, want work:before alone", got)
	}
	goleak.VerifyNone(t)
}

// A retry after an abandoned attempt: the abandoned attempt goes on
// reading and writing its view while the retry runs; each has its own
// (-race), and what the abandoned one streams or measures after it was
// given up is dropped.
func TestRetryAfterAnAbandonedAttempt(t *testing.T) {
	finished := make(chan struct{})
	var second atomic.Bool
	name := hook(t, func(ctx context.Context, s kind.State) error {
		if s.Attempt() == 2 {
			second.Store(true)
			s.Measure("calls", 1)
			s.Stream("second")
			return nil
		}
		defer close(finished)
		s.Measure("calls", 1)
		<-ctx.Done()
		// a node slow to notice: it keeps using its view while the
		// retry runs (which only the first's being given up starts)
		for deadline := time.Now().Add(hang); !second.Load() && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		for range 20 {
			s.Stream("late")
			s.Measure("calls", 1)
			s.Degrade("late")
			_, _, _ = s.Node(), s.Attempt(), s.Get("out")
			time.Sleep(time.Millisecond)
		}
		return nil
	})
	g := oneNodeFlow(t, name, "20ms", ", retry: {attempts: 2, backoff: 1ms}")
	var w watch
	eng := engine.New(memory.New(), engine.WithGrace(5*time.Millisecond))
	res, err := eng.Run(context.Background(), g, engine.Request{Thread: "t", Observe: w.observe})
	w.end()
	wait(t, finished, "the first attempt's end")
	if err != nil || res.State["out"] != "done" {
		t.Fatalf("res %v err %v", res, err)
	}
	if res.Late.Abandoned != 1 || res.Late.Detached != 1 {
		t.Fatalf("late %+v, want the first attempt abandoned and detached", res.Late)
	}
	// 20 texts, 20 measures and the update it returned
	eventually(t, "41 outputs dropped", func() bool { return eng.Late().Dropped == 41 })
	if got := strings.Join(w.outputs(), ","); got != "work:second" {
		t.Fatalf("outputs %s, want work:second alone", got)
	}
	for _, ev := range w.events {
		if ev.Type == engine.NodeOutput && ev.Attempt != 2 {
			t.Fatalf("node_output %q of attempt %d, want 2", ev.Text, ev.Attempt)
		}
		if ev.Type == engine.NodeEnd && (ev.Usage["calls"] != 2 || ev.Degraded != "") {
			t.Fatalf("node_end usage %v degraded %q: want the calls of both attempts until the first was given up (2), not degraded", ev.Usage, ev.Degraded)
		}
	}
	if late := w.late(); len(late) > 0 {
		t.Fatalf("%d events after Run returned", len(late))
	}
	goleak.VerifyNone(t)
}

// A token an abandoned attempt streams once the next step's node runs is
// not that node's: it is dropped.
func TestLateTokenAfterTheNextStepBegan(t *testing.T) {
	bStarted, aStreamed := make(chan struct{}), make(chan struct{})
	a := hook(t, func(ctx context.Context, s kind.State) error {
		defer close(aStreamed)
		<-ctx.Done()
		select {
		case <-bStarted:
		case <-time.After(hang):
		}
		s.Stream("from a")
		return nil
	})
	b := hook(t, func(ctx context.Context, s kind.State) error {
		close(bStarted)
		select {
		case <-aStreamed:
		case <-time.After(hang):
		}
		s.Stream("from b")
		return nil
	})
	g := compileScope(t, strings.NewReplacer("HOOK_A", a, "HOOK_B", b).Replace(`
version: 1
name: two
state:
	schema:
		type: object
		properties:
			out: {type: string, default: ""}
			note: {type: string, default: ""}
nodes:
	a: {kind: hook, hook: HOOK_A, timeout: 10ms, set: {out: "'a'"}, on_error: {set: {note: "'a timed out'"}}}
	b: {kind: hook, hook: HOOK_B, set: {out: "'b'"}}
edges:
	- {from: START, to: a}
	- {from: a, to: b}
	- {from: b, to: END}
`))
	var w watch
	eng := engine.New(memory.New(), engine.WithGrace(10*time.Millisecond))
	res, err := eng.Run(context.Background(), g, engine.Request{Thread: "t", Observe: w.observe})
	w.end()
	if err != nil || res.State["out"] != "b" || res.State["note"] != "a timed out" {
		t.Fatalf("res %v err %v", res, err)
	}
	if got := strings.Join(w.outputs(), ","); got != "b:from b" {
		t.Fatalf("outputs %s, want b:from b alone", got)
	}
	if res.Late.Abandoned != 1 || res.Late.Detached != 1 || res.Late.Dropped < 1 {
		t.Fatalf("late %+v, want a's attempt abandoned, detached, and its text dropped", res.Late)
	}
	eventually(t, "a's text and update dropped", func() bool { return eng.Late().Dropped == 2 })
	goleak.VerifyNone(t)
}

// A run cancelled while a node that ignores cancellation runs returns
// all the same, within the engine's grace; the node's end reaches no one.
func TestCancelledRunDoesNotWaitForANodeThatIgnoresIt(t *testing.T) {
	started, release, finished := make(chan struct{}), make(chan struct{}), make(chan struct{})
	name := hook(t, func(ctx context.Context, s kind.State) error {
		defer close(finished)
		close(started)
		<-release
		s.Stream("after")
		return nil
	})
	g := oneNodeFlow(t, name, "0s", "")
	ctx, cancel := context.WithCancel(context.Background())
	var w watch
	returned := make(chan error, 1)
	eng := engine.New(memory.New(), engine.WithGrace(20*time.Millisecond))
	go func() {
		_, err := eng.Run(ctx, g, engine.Request{Thread: "t", Observe: w.observe})
		w.end()
		returned <- err
	}()
	wait(t, started, "the node's start")
	cancel()
	var err error
	select {
	case err = <-returned:
	case <-time.After(hang): // the node returns only once released
		close(release)
		<-returned
		t.Fatal("Run did not return after its cancellation")
	}
	if late := eng.Late(); late != (engine.Late{Abandoned: 1, Detached: 1}) {
		t.Fatalf("late %+v when Run returned, want the attempt abandoned and detached", late)
	}
	close(release)
	wait(t, finished, "the hook's end")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("want context.Canceled, got %v", err)
	}
	eventually(t, "its text and update dropped", func() bool { return eng.Late().Dropped == 2 })
	if late := w.late(); len(late) > 0 {
		t.Fatalf("%d events after Run returned, the first %s", len(late), late[0].Type)
	}
	goleak.VerifyNone(t)
}

// An attempt that honours cancellation, but not at once, is waited for:
// when Run returns, it has returned too.
func TestTimedOutAttemptThatHonoursCancellationIsJoined(t *testing.T) {
	var done atomic.Bool
	name := hook(t, func(ctx context.Context, s kind.State) error {
		<-ctx.Done()
		time.Sleep(30 * time.Millisecond) // closing a connection, say
		done.Store(true)
		return ctx.Err()
	})
	g := oneNodeFlow(t, name, "10ms", "")
	eng := engine.New(memory.New())
	_, err := eng.Run(context.Background(), g, engine.Request{Thread: "t"})
	if !done.Load() {
		t.Fatal("Run returned before the attempt it gave up on")
	}
	if err == nil || !strings.Contains(err.Error(), "timed out after 10ms") {
		t.Fatalf("want the timeout, got %v", err)
	}
	if late := eng.Late(); late != (engine.Late{Abandoned: 1}) {
		t.Fatalf("late %+v, want the attempt abandoned, joined, nothing dropped", late)
	}
}

// A node's fallback after an attempt that was given up and left behind
// runs on a view of its own that still shows the node, its attempt and
// the state.
func TestFallbackAfterADetachedAttempt(t *testing.T) {
	release, finished := make(chan struct{}), make(chan struct{})
	name := hook(t, func(ctx context.Context, s kind.State) error {
		defer close(finished)
		<-release
		return nil
	})
	g := compileScope(t, strings.Replace(strings.NewReplacer("HOOK", name, "TIMEOUT", "10ms", "SETTINGS", "", `set: {out: "'done'"}`, `set: {out: "'done'", note: "''"}`).Replace(oneNode),
		"kind: hook,", "kind: hook_fallback,", 1))
	eng := engine.New(memory.New(), engine.WithGrace(10*time.Millisecond))
	res, err := eng.Run(context.Background(), g, engine.Request{Thread: "t"})
	close(release)
	wait(t, finished, "the hook's end")
	if err != nil {
		t.Fatal(err)
	}
	if res.State["note"] != "work 1 : timed out after 10ms" || res.Late.Detached != 1 {
		t.Fatalf("note %q, late %+v", res.State["note"], res.Late)
	}
	goleak.VerifyNone(t)
}

const fanFlow = `
version: 1
name: fan
state:
	schema:
		type: object
		properties:
			out: {type: array, default: []}
	reducers:
		out: append
nodes:
	each:
		kind: fan
		items: 8
		timeout: 5ms
		node: NODE
edges:
	- {from: START, to: each}
	- {from: each, to: END}
`

// The nested runs of a host given up at its timeout (a map's items) end
// after it, when they notice; their events reach no one after Run. Items
// that honour cancellation are joined with their host; items that ignore
// it hold their host's attempt past the grace, and it is detached.
func TestNestedRunsOfAnAbandonedHostEndWithTheRun(t *testing.T) {
	for _, tc := range []struct {
		name, node string
		runs       int
		grace      time.Duration
		detached   bool
	}{
		{"honouring", "{kind: sleep, ms: 200, set: {out: \"item\"}}", 50, time.Second, false},
		// (a second past the grace: a loaded machine's late timer still
		// gives up before they end)
		{"ignoring", "{kind: sleep, ms: 1000, ignore_cancel: true, set: {out: \"item\"}}", 5, 10 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := compileScope(t, strings.Replace(fanFlow, "NODE", tc.node, 1))
			eng := engine.New(memory.New(), engine.WithGrace(tc.grace))
			for i := range tc.runs {
				var w watch
				start := time.Now()
				_, err := eng.Run(context.Background(), g, engine.Request{Thread: "t" + strconv.Itoa(i), Observe: w.observe})
				w.end()
				if took := time.Since(start); took > hang {
					t.Fatalf("run %d took %s", i, took)
				}
				if err == nil || !strings.Contains(err.Error(), "timed out after 5ms") {
					t.Fatalf("run %d: want the timeout, got %v", i, err)
				}
				// what the items did when they noticed had time to arrive
				time.Sleep(5 * time.Millisecond)
				if late := w.late(); len(late) > 0 {
					t.Fatalf("run %d: %d events after Run returned, the first %s of %s", i, len(late), late[0].Type, late[0].Node)
				}
			}
			// the hosts, and items that ignore cancellation, are given up;
			// those are detached
			late := eng.Late()
			if late.Abandoned < int64(tc.runs) || (late.Detached >= int64(tc.runs)) != tc.detached || (late.Detached == 0) == tc.detached {
				t.Fatalf("late %+v after %d runs", late, tc.runs)
			}
			if tc.detached {
				// every item's end, and its update, is dropped, once the
				// items, which ignore their cancellation, have ended
				eventually(t, "the items' ends dropped", func() bool { return eng.Late().Dropped >= int64(tc.runs*8) })
				eventually(t, "the items' end", func() bool { return goleak.Find() == nil })
			}
			goleak.VerifyNone(t)
		})
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A node whose code panics outside Run (its fallback, its question) fails
// its run with a run error that says so, alone in its step or beside
// another blocking node, and leaves its thread free.
func TestPanickingNodeEndsTheRunWithARunError(t *testing.T) {
	quiet := hook(t, func(context.Context, kind.State) error { return nil })
	for _, tc := range []struct{ name, nodes, edges, want string }{
		{"fallback", "bad: {kind: panic_fallback}", "- {from: START, to: bad}", "fallback broke"},
		{"fallback beside another node",
			"bad: {kind: panic_fallback}\n\tother: {kind: hook, hook: " + quiet + ", set: {out: \"'done'\"}}",
			"- {from: START, to: [bad, other]}\n\t- {from: other, to: END}", "fallback broke"},
		{"question", "bad: {kind: panic_ask}", "- {from: START, to: bad}", "ask broke"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := compileScope(t, `
version: 1
name: panics
state:
	schema:
		type: object
		properties:
			out: {type: string, default: ""}
nodes:
	`+tc.nodes+`
edges:
	`+tc.edges+`
	- {from: bad, to: END}
`)
			eng := engine.New(memory.New())
			var w watch
			res, err := eng.Run(context.Background(), g, engine.Request{Thread: "t", Observe: w.observe})
			w.end()
			if err == nil || !strings.Contains(err.Error(), "panic") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("result %+v, error %v: want an error naming the panic %q", res, err, tc.want)
			}
			if res != nil {
				t.Errorf("a failed run returned a result: %+v", res)
			}
			if n := len(w.events); n == 0 || w.events[n-1].Type != engine.RunError || !strings.Contains(w.events[n-1].Error, tc.want) {
				t.Fatalf("events %+v: want the last a run_error naming %q", w.events, tc.want)
			}
			// the thread is not held by the failed run
			if _, err := eng.Run(context.Background(), g, engine.Request{Thread: "t", Resume: true}); errors.Is(err, engine.ErrBusy) {
				t.Fatalf("the thread is still busy after the failed run: %v", err)
			}
		})
	}
}

// A panic on the run's goroutine that no node's guard catches (here the
// observer's own, at a node's start) ends the run as a run error too, and
// leaves the thread free.
func TestPanicOnTheRunsGoroutineEndsTheRun(t *testing.T) {
	name := hook(t, func(context.Context, kind.State) error { return nil })
	g := oneNodeFlow(t, name, "0s", "")
	eng := engine.New(memory.New())
	var events []engine.Event
	observe := func(ev engine.Event) {
		events = append(events, ev)
		if ev.Type == engine.NodeStart {
			panic("observer broke")
		}
	}
	res, err := eng.Run(context.Background(), g, engine.Request{Thread: "t", Observe: observe})
	if err == nil || !strings.Contains(err.Error(), "panic: observer broke") || res != nil {
		t.Fatalf("result %+v, error %v: want a run error naming the panic", res, err)
	}
	if n := len(events); events[n-1].Type != engine.RunError || !strings.Contains(events[n-1].Error, "observer broke") {
		t.Fatalf("events %+v: want the last a run_error naming the panic", events)
	}
	if _, err := eng.Run(context.Background(), g, engine.Request{Thread: "t", Resume: true}); err != nil {
		t.Fatalf("resuming the failed run: %v", err)
	}
}
