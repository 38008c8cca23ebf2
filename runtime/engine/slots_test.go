package engine_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/expression"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/kind/kindtest"
	"github.com/trellisflow/trellis/runtime/store/memory"
)

// The run keeps its state by field index; expressions read it by slot,
// and the map form and the variables are made when asked for. These tests
// hold the two to each other: a node that evaluates through its view, one
// that reads the variables, Get and Input, and edges, over several steps
// and runs.

// evalNode evaluates its set through the view (the slots), as the
// built-in kinds do.
type evalNode struct {
	names    []string
	programs []*expression.Program
}

func (n *evalNode) Run(_ context.Context, s kind.State) (kind.Update, error) {
	upd := s.NewUpdate(len(n.names))
	for i, p := range n.programs {
		v, err := s.Eval(p)
		if err != nil {
			return nil, fmt.Errorf("set %s: %w", n.names[i], err)
		}
		upd = append(upd, kind.FieldValue{Field: n.names[i], Value: v})
	}
	return upd, nil
}

// peekNode writes what it reads of the state three ways: through the
// variables (the map form), Get and Input, and fails when they disagree.
type peekNode struct{ field, input, to string }

func (n *peekNode) Run(_ context.Context, s kind.State) (kind.Update, error) {
	vars := s.Vars()
	fromMap := vars["state"].(map[string]any)[n.field]
	if flat := vars["state."+n.field]; !reflect.DeepEqual(flat, fromMap) {
		return nil, fmt.Errorf("state.%s is %v, the state map says %v", n.field, flat, fromMap)
	}
	if got := s.Get(n.field); !reflect.DeepEqual(got, fromMap) {
		return nil, fmt.Errorf("Get(%q) is %v, the state map says %v", n.field, got, fromMap)
	}
	in, _ := vars["input"].(map[string]any)
	if got := s.Input(n.input); !reflect.DeepEqual(got, in[n.input]) {
		return nil, fmt.Errorf("Input(%q) is %v, the input map says %v", n.input, got, in[n.input])
	}
	return kind.Update{{Field: n.to, Value: fromMap}}, nil
}

var slotKinds = sync.OnceValue(func() kind.Registry {
	set := kind.NewSet(
		kind.Spec{Name: "eval", Summary: "Evaluate expressions through the view.", Inline: true,
			Fields: []config.Field{config.Map("set", "Field to expression.", nil)},
			New: func(b kind.Builder) kind.Node {
				n := &evalNode{}
				for _, e := range b.Settings().Entries("set") {
					b.Writes(e.Name, e.Key)
					if p := b.Expr(e.Value, nil); p != nil {
						n.names, n.programs = append(n.names, e.Name), append(n.programs, p)
					}
				}
				return n
			}},
		kind.Spec{Name: "peek", Summary: "Write a field as the variables, Get and Input read it.", Inline: true,
			Fields: []config.Field{config.String("field", "The field."), config.String("input", "An input."), config.String("to", "Where.")},
			New: func(b kind.Builder) kind.Node {
				n := &peekNode{}
				n.field, _ = b.Settings().String("field")
				n.input, _ = b.Settings().String("input")
				n.to, _ = b.Settings().String("to")
				b.Writes(n.to, b.Settings().Value("to"))
				return n
			}},
	)
	for _, sp := range kindtest.Registry().Specs() {
		set.Register(*sp)
	}
	return set
})

func compileSlots(t testing.TB, src string) *flow.Graph {
	t.Helper()
	path := filepath.Join(t.TempDir(), "flow.yaml")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(src, "\t", "  ")), 0o644); err != nil {
		t.Fatal(err)
	}
	g, dl := flow.Load(path, slotKinds())
	if g == nil || len(dl) > 0 {
		t.Fatalf("flow does not compile:\n%v", dl)
	}
	return g
}

const slotsFlow = `
version: 1
name: slots
input: [step]
state:
	schema:
		type: object
		properties:
			step: {type: integer, default: 1}
			n: {type: integer, default: 0}
			half: {type: number, default: 0}
			names: {type: array, items: {type: string}, default: []}
			seen: {type: array, items: {type: integer}, default: []}
			label: {type: string, default: ""}
	reducers:
		names: append
		seen: append
nodes:
	a: {kind: eval, set: {n: "state.n + input.step", names: "'a'", half: "state.n / 2"}}
	b: {kind: peek, field: n, input: step, to: seen}
	c: {kind: eval, set: {label: "state.label + (state.n % 2 == 0 ? 'e' : 'o')"}}
edges:
	- {from: START, to: a}
	- {from: a, to: b}
	- {from: b, to: c}
	- from: c
		bound: 10
		branch:
			- {when: "state.n < 10 && state.label != 'stop'", to: a}
			- else: END
`

// A loop of nodes that read through the slots and one that reads the
// variables sees one state: each step's, in every way of reading it, on
// a new thread and on one that continues from the store.
func TestSlotsAndVariablesAgree(t *testing.T) {
	g := compileSlots(t, slotsFlow)
	eng := engine.New(memory.New())
	res, err := eng.Run(context.Background(), g, engine.Request{Thread: "t", Input: map[string]any{"step": 3}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"step": 3, "n": 12, "half": 4.5, "names": []any{"a", "a", "a", "a"}, "seen": []any{3, 6, 9, 12}, "label": "oeoe"}
	if !reflect.DeepEqual(res.State, want) {
		t.Fatalf("state %#v, want %#v", res.State, want)
	}
	// a second run starts from the committed state, with input 4
	res, err = eng.Run(context.Background(), g, engine.Request{Thread: "t", Input: map[string]any{"step": 4}})
	if err != nil {
		t.Fatal(err)
	}
	// a whole number is an int, as the store hands it back
	want = map[string]any{"step": 4, "n": 16, "half": 6, "names": []any{"a", "a", "a", "a", "a"}, "seen": []any{3, 6, 9, 12, 16}, "label": "oeoee"}
	if !reflect.DeepEqual(res.State, want) {
		t.Fatalf("second run: state %#v, want %#v", res.State, want)
	}
	head, err := eng.Store.Head(context.Background(), "t")
	if err != nil || !reflect.DeepEqual(head.Values, want) {
		t.Fatalf("stored %#v %v, want %#v", head.Values, err, want)
	}
}

// An expression that overflows fails with the machine's own error through
// the slots as through the variables, and commits nothing.
func TestOverflowThroughTheSlots(t *testing.T) {
	src := `
version: 1
name: overflow
input: [n]
state:
	schema:
		type: object
		properties:
			n: {type: integer, default: 0}
			out: {type: integer, default: 0}
nodes:
	inc: {kind: KIND, set: {out: "state.n + 1"}}
edges:
	- {from: START, to: inc}
	- {from: inc, to: END}
`
	errs := map[string]string{}
	for _, k := range []string{"eval", "set"} {
		g := compileSlots(t, strings.Replace(src, "KIND", k, 1))
		eng := engine.New(memory.New())
		res, err := eng.Run(context.Background(), g, engine.Request{Thread: "t", Input: map[string]any{"n": math.MaxInt - 1}})
		if err != nil || res.State["out"] != math.MaxInt {
			t.Fatalf("%s: %v %v", k, res, err)
		}
		_, err = eng.Run(context.Background(), g, engine.Request{Thread: "u", Input: map[string]any{"n": math.MaxInt}})
		if err == nil || !strings.Contains(err.Error(), "integer overflow: 9223372036854775807 + 1") {
			t.Fatalf("%s: %v, want the overflow", k, err)
		}
		errs[k] = err.Error()
		head, herr := eng.Store.Head(context.Background(), "u")
		if herr != nil || head.Values["out"] != 0 {
			t.Fatalf("%s: committed %#v %v", k, head.Values, herr)
		}
	}
	// the set kind evaluates over the variables: the same message, but
	// for how each kind wraps it
	if strings.TrimPrefix(errs["eval"], `node "inc" (eval)`) == errs["eval"] ||
		!strings.HasSuffix(errs["set"], strings.SplitN(errs["eval"], "integer overflow", 2)[1]) {
		t.Fatalf("eval: %s\nset: %s", errs["eval"], errs["set"])
	}
}

// on_error.set reads the state the step began with, though a node before
// the failed one in the same step changed the field it reads.
func TestOnErrorReadsTheStepSnapshot(t *testing.T) {
	g := compileSlots(t, `
version: 1
name: snapshot
state:
	schema:
		type: object
		properties:
			x: {type: integer, default: 1}
			y: {type: integer, default: 0}
nodes:
	first: {kind: eval, set: {x: "state.x + 10"}}
	second:
		kind: fail
		on_error: {set: {y: "state.x * 100"}}
edges:
	- {from: START, to: [first, second]}
	- {from: [first, second], to: END}
`)
	res, err := engine.New(memory.New()).Run(context.Background(), g, engine.Request{Thread: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if res.State["x"] != 11 || res.State["y"] != 100 {
		t.Fatalf("state %v, want x 11 and y 100 (x as the step began)", res.State)
	}
}
