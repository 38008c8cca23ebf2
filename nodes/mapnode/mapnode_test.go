package mapnode_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/trellisflow/trellis/nodes/all/alltest"
	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/kind/kindtest"
	"github.com/trellisflow/trellis/runtime/store"
	_ "github.com/trellisflow/trellis/runtime/store/all"
	"github.com/trellisflow/trellis/runtime/store/storetest"
	"go.uber.org/goleak"
)

// TestMain runs the tests with the stores' servers, and fails when a
// goroutine outlives them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(withStores{m}) }

type withStores struct{ *testing.M }

func (m withStores) Run() int { return storetest.Main(m.M) }

// registry is the built-in kinds and the runtime's test kinds (set, with
// a random delay, fail, sleep).
func registry() kind.Registry { return alltest.WithTestKinds() }

func load(t *testing.T, name, src string) *flow.Graph {
	t.Helper()
	g, dl := flow.LoadSource(name+".yaml", []byte(src), registry())
	if g == nil || dl.HasErrors() {
		t.Fatalf("%s does not load:\n%v", name, dl)
	}
	return g
}

const squares = `version: 1
name: squares
input: [items]
state:
  schema:
    type: object
    properties:
      items: {type: array, items: {type: integer}, default: []}
      squares: {type: array, items: {type: integer}, default: []}
      sum: {type: integer, default: 0}
      failed: {type: array, items: {type: integer}, default: []}
  reducers:
    squares: append
    sum: add
nodes:
  square:
    kind: map
    items: "state.items"
    max_concurrency: 10
    node:
      kind: set
      sleep_ms: "3"
      jitter_ms: 6
      set: {squares: "item * item", sum: "item"}
    writes: {failed: "map(filter(results, !.ok), .index)"}
edges:
  - {from: START, to: square}
  - {from: square, to: END}
`

// A map over 100 items, 10 at a time, on each store: the items run in
// any order (their random delays see to it) but never more than ten at
// once, and their writes fold in item order; the step is one checkpoint
// holding them all.
func TestMapHundredItemsTenAtATime(t *testing.T) {
	ctx := context.Background()
	g := load(t, "squares", squares)
	items := make([]any, 100)
	want := make([]any, 100)
	for i := range items {
		items[i] = i + 1
		want[i] = (i + 1) * (i + 1)
	}
	for name, url := range storetest.URLs(t) {
		t.Run(name, func(t *testing.T) {
			st, err := store.Open(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			var mu sync.Mutex
			inflight, most := 0, 0
			var finished []string
			observe := func(ev engine.Event) {
				if !strings.HasPrefix(ev.Node, "square[") {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				switch ev.Type {
				case engine.NodeStart:
					inflight++
					most = max(most, inflight)
				case engine.NodeEnd:
					inflight--
					finished = append(finished, ev.Node)
				}
			}
			res, err := engine.New(st).Run(ctx, g, engine.Request{Thread: "t", Input: map[string]any{"items": items}, Observe: observe})
			if err != nil {
				t.Fatal(err)
			}
			if got := res.State["squares"]; !slices.Equal(got.([]any), want) {
				t.Fatalf("squares not in item order: %v", got)
			}
			if res.State["sum"] != 5050 || len(res.State["failed"].([]any)) != 0 {
				t.Fatalf("sum %v failed %v", res.State["sum"], res.State["failed"])
			}
			if most != 10 || len(finished) != 100 {
				t.Fatalf("at most %d items at once (want 10), %d finished", most, len(finished))
			}
			inOrder := true
			for i, n := range finished {
				inOrder = inOrder && n == "square["+strconv.Itoa(i)+"]"
			}
			if inOrder {
				t.Fatalf("the items completed in item order, so the test shows nothing: %v", finished)
			}
			// the whole map is one step, read back from the store
			cps, err := st.History(ctx, "t", store.HistoryOptions{Source: store.SourceStep})
			if err != nil || len(cps) != 1 {
				t.Fatalf("history: %d checkpoints, %v", len(cps), err)
			}
			var items []any
			for _, w := range cps[0].Writes {
				if w.Field == "squares" {
					items = w.Items
				}
			}
			if !slices.Equal(items, want) {
				t.Fatalf("the step's checkpoint holds %v", items)
			}
			head, _ := st.Head(ctx, "t")
			if !slices.Equal(head.Values["squares"].([]any), want) {
				t.Fatalf("state in the store: %v", head.Values["squares"])
			}
		})
	}
}

const failing = `version: 1
name: failing
input: [items]
state:
  schema:
    type: object
    properties:
      items: {type: array, items: {type: integer}, default: []}
      out: {type: array, items: {type: integer}, default: []}
      failed: {type: array, items: {type: integer}, default: []}
      note: {type: string, default: ""}
  reducers:
    out: append
nodes:
  each:
    kind: map
    items: "state.items"
    max_concurrency: 3
    node:
      kind: set
      retry: {attempts: 2, backoff: 1ms}
      set: {out: "item % 4 == 3 ? [0][item] : item"}
    ON_ITEM_ERROR
    writes: {failed: "map(filter(results, !.ok), .index)"}
    on_error: {set: {note: "error"}}
edges:
  - {from: START, to: each}
  - {from: each, to: END}
`

// A failed item follows on_item_error: skipped, written with its fallback
// values, or failing the node (whose on_error then applies); the results
// say which items failed, and the node's end event says it degraded.
func TestMapItemErrors(t *testing.T) {
	ctx := context.Background()
	items := []any{0, 1, 2, 3, 4, 5, 6, 7}
	for _, tc := range []struct {
		policy       string
		out, failed  []any
		note         string
		degradedNote bool
	}{
		{"on_item_error: skip", []any{0, 1, 2, 4, 5, 6}, []any{3, 7}, "", true},
		{"on_item_error: {set: {out: \"-index\"}}", []any{0, 1, 2, -3, 4, 5, 6, -7}, []any{3, 7}, "", true},
		{"", []any{}, []any{}, "item 3 of 8", false},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			g := load(t, "failing", strings.Replace(failing, "ON_ITEM_ERROR", tc.policy, 1))
			st, _ := store.Open(ctx, "memory")
			var degraded string
			res, err := engine.New(st).Run(ctx, g, engine.Request{Thread: "t", Input: map[string]any{"items": items},
				Observe: func(ev engine.Event) {
					if ev.Node == "each" && ev.Type == engine.NodeEnd {
						degraded = ev.Degraded
					}
				}})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(res.State["out"].([]any), tc.out) || !slices.Equal(res.State["failed"].([]any), tc.failed) {
				t.Fatalf("out %v failed %v", res.State["out"], res.State["failed"])
			}
			if note := res.State["note"].(string); !strings.Contains(note, tc.note) || (tc.note == "") != (note == "") {
				t.Fatalf("note %q, want it to hold %q", note, tc.note)
			}
			if tc.degradedNote && !strings.Contains(degraded, "2 of 8 items failed (3, 7)") {
				t.Fatalf("degraded %q", degraded)
			}
		})
	}
}

// What the validator says of maps: items that are not a list, a node
// that writes a replace field, pauses or sets on_error, an on_item_error
// fallback of the wrong type.
func TestMapDiagnostics(t *testing.T) {
	for _, tc := range []struct {
		edit, code, text string
	}{
		{`items: "state.items"|items: "state.note"`, "C004", "items must be a list"},
		{`set: {out: "item % 4 == 3 ? [0][item] : item"}|set: {note: "'x'"}`, "C004", `field "note" has reducer replace`},
		{`retry: {attempts: 2, backoff: 1ms}|interrupt_before: true`, "C004", "interrupt_before acts on a run's steps"},
		{`ON_ITEM_ERROR|on_item_error: {set: {out: "'x' + error"}}`, "W004", `takes a list or an item of integer`},
		{`set: {out: "item % 4 == 3 ? [0][item] : item"}|set: {out: "item.name"}`, "E001", ""},
	} {
		old, repl, _ := strings.Cut(tc.edit, "|")
		src := strings.Replace(failing, old, repl, 1)
		src = strings.Replace(src, "ON_ITEM_ERROR", "", 1)
		_, dl := flow.LoadSource("failing.yaml", []byte(src), registry())
		found := false
		for _, d := range dl {
			if string(d.Code) == tc.code && strings.Contains(d.Summary, tc.text) && d.Severity == diag.Error {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: want %s %q, got:\n%v", tc.edit, tc.code, tc.text, dl)
		}
	}
}

// A map retried after an item failed (its own retry policy) runs again
// only the items that did not complete: the others' writes were kept.
func TestMapRetryRunsOnlyFailedItems(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	runs := map[any]int{}
	set := registry().(*kind.Set)
	set.Register(kind.Spec{Name: "flaky", Summary: "Fail an item's first run when it is 3.", Fields: []config.Field{config.Map("set", "Field to expression.", nil)},
		New: func(b kind.Builder) kind.Node {
			sets := kindtest.CompileSet(b)
			return kind.Func(func(_ context.Context, s kind.State) (kind.Update, error) {
				item := s.Vars()["item"]
				mu.Lock()
				runs[item]++
				n := runs[item]
				mu.Unlock()
				if item == 3 && n == 1 {
					return nil, errors.New("flaked")
				}
				return sets.Eval(s.Vars())
			})
		}})
	src := strings.NewReplacer("kind: set\n      sleep_ms: \"3\"\n      jitter_ms: 6\n", "kind: flaky\n", "    max_concurrency: 10\n", "    max_concurrency: 2\n    retry: {attempts: 2, backoff: 1ms}\n").Replace(squares)
	g, dl := flow.LoadSource("squares.yaml", []byte(src), set)
	if g == nil || dl.HasErrors() {
		t.Fatal(dl)
	}
	st, _ := store.Open(ctx, "memory")
	res, err := engine.New(st).Run(ctx, g, engine.Request{Thread: "t", Input: map[string]any{"items": []any{0, 1, 2, 3, 4, 5}}})
	if err != nil || !slices.Equal(res.State["squares"].([]any), []any{0, 1, 4, 9, 16, 25}) {
		t.Fatalf("%v %v", res, err)
	}
	for item, n := range runs {
		if want := map[bool]int{true: 2, false: 1}[item == 3]; n != want {
			t.Errorf("item %v ran %d times, want %d: %v", item, n, want, runs)
		}
	}
}
