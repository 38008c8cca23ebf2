package store_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/kind/kindtest"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/storetest"
	"github.com/trellisflow/trellis/runtime/value"
)

// goValues are the Go values a node of kind "write" writes, by name: what
// a node kind written in Go may hand the engine.
var goValues = map[string]any{
	"nil list":        []any(nil),
	"nil strings":     []string(nil),
	"nil object":      map[string]any(nil),
	"whole float":     2.0,
	"float32":         float32(0.5),
	"bad text":        "caf\xc3\xa9 \xff",
	"list of nils":    []any{[]any(nil), map[string]any(nil)},
	"struct":          struct{ Tags []string }{},
	"null":            nil,
	"text":            "a text",
	"wide whole":      float64(1 << 60),
	"wide in integer": 9007199254740993.0,
}

// writeNode writes the Go value goValues names to a field.
type writeNode struct{ field, name string }

func (n *writeNode) Run(context.Context, kind.State) (kind.Update, error) {
	return kind.Update{{Field: n.field, Value: goValues[n.name]}}, nil
}

func valueKinds() kind.Registry {
	set := kind.NewSet(kind.Spec{Name: "write", Summary: "Write a Go value.", Inline: true,
		Fields: []config.Field{config.String("field", "The field."), config.String("value", "The value's name.")},
		New: func(b kind.Builder) kind.Node {
			n := &writeNode{}
			n.field, _ = b.Settings().String("field")
			n.name, _ = b.Settings().String("value")
			b.Writes(n.field, b.Settings().Value("field"))
			return n
		}})
	for _, sp := range kindtest.Registry().Specs() {
		set.Register(*sp)
	}
	return set
}

const valuesFlow = `version: 1
name: values
input: [pick]
state:
  schema:
    type: object
    properties:
      pick: {type: string, default: ""}
      list: {type: array, default: []}
      object: {type: object, default: {}}
      number: {type: number, default: 0}
      integer: {type: integer, default: 0}
      text: {type: string, default: ""}
      anything: {}
      seen: {type: integer, default: 0}
nodes:
  lists: {kind: write, field: list, value: nil list}
  strings: {kind: write, field: anything, value: nil strings}
  objects: {kind: write, field: object, value: nil object}
  floats: {kind: write, field: number, value: whole float}
  texts: {kind: write, field: text, value: bad text}
  read: {kind: set, set: {seen: "len(state.list) + len(state.object) + len(state.anything)"}}
edges:
  - {from: START, to: [lists, strings, objects, floats, texts]}
  - {from: [lists, strings, objects, floats, texts], to: read}
  - {from: read, to: END}
`

// What a node writes is what the store hands back, to the Go value: a nil
// list or object is the empty one, a whole float an int, text valid
// UTF-8; a process that reads the thread back (a store opened afresh)
// sees the state the run ended with, and so does the next node of the
// run.
func TestWritesAreWhatTheStoreHandsBack(t *testing.T) {
	ctx := context.Background()
	g, dl := flow.LoadSource("values.yaml", []byte(valuesFlow), valueKinds())
	if g == nil || len(dl) > 0 {
		t.Fatal(dl)
	}
	want := map[string]any{"pick": "x", "list": []any{}, "object": map[string]any{}, "number": 2, "integer": 0,
		"text": "caf\u00e9 \uFFFD", "anything": []any{}, "seen": 0}
	for name, url := range storetest.URLs(t) {
		t.Run(name, func(t *testing.T) {
			st, err := store.Open(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { st.Close() }()
			res, err := engine.New(st).Run(ctx, g, engine.Request{Thread: "t", Input: map[string]any{"pick": "x"}})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(res.State, want) {
				t.Fatalf("run ended with %s, want %s", value.Show(res.State, 500), value.Show(want, 500))
			}
			if name != "memory" {
				st.Close()
				if st, err = store.Open(ctx, url); err != nil {
					t.Fatal(err)
				}
			}
			head, err := st.Head(ctx, "t")
			if err != nil || !reflect.DeepEqual(head.Values, res.State) {
				t.Fatalf("read back %s (%v), the run ended with %s", value.Show(head.Values, 500), err, value.Show(res.State, 500))
			}
		})
	}
}

// Every write is checked against its field's schema at the write, null
// included: the error names the node, the field and the value's type,
// and nothing of the failing step is committed, a sibling's valid write
// neither. A field that takes null takes it.
func TestWritesAreCheckedAtTheWrite(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		field, value, schema string
		fails                []string
	}{
		{"list", "null", "{type: array, default: []}", []string{`node "bad"`, `field "list"`, "null"}},
		{"list", "text", "{type: array, default: []}", []string{`node "bad"`, `field "list"`, "string"}},
		{"list", "nil object", "{type: array, default: []}", []string{`node "bad"`, `field "list"`, "object"}},
		{"list", "whole float", "{type: string, default: ''}", []string{`node "bad"`, `field "list"`, "number"}},
		{"list", "wide in integer", "{type: integer, default: 0}", []string{`node "bad"`, `field "list"`, "write the integer in full"}},
		{"list", "null", "{type: [array, 'null'], default: []}", nil},
		{"list", "nil list", "{type: array, maxItems: 0, default: []}", nil},
		{"list", "wide whole", "{type: number, default: 0}", nil},
		// a null appended is one item, which the items must take
		{"log", "null", "{type: array, items: {type: string}, default: []}", []string{`node "bad"`, `field "log"`, "null"}},
		{"log", "null", "{type: array, items: {type: string}, maxItems: 3, default: []}", []string{`node "bad"`, `field "log"`, "null"}},
		{"log", "null", "{type: array, items: {type: [string, 'null']}, default: []}", nil},
		{"tags", "null", "{type: array, items: {type: string}, default: []}", []string{`node "bad"`, `field "tags"`, "null"}},
	} {
		lists := "{type: array, default: []}"
		if c.field != "list" {
			lists = c.schema
		}
		src := `version: 1
name: checks
state:
  schema:
    type: object
    properties:
      list: ` + c.schema + `
      log: ` + lists + `
      tags: ` + lists + `
      other: {type: string, default: ""}
  reducers: {log: append, tags: union}
nodes:
  good: {kind: set, set: {other: "'written'"}}
  bad: {kind: write, field: ` + c.field + `, value: '` + c.value + `'}
edges:
  - {from: START, to: [good, bad]}
  - {from: [good, bad], to: END}
`
		g, dl := flow.LoadSource("checks.yaml", []byte(src), valueKinds())
		if g == nil || len(dl) > 0 {
			t.Fatalf("%s: %v", c.schema, dl)
		}
		eng := engine.New(storeOf(t))
		res, err := eng.Run(ctx, g, engine.Request{Thread: "t"})
		if c.fails == nil {
			settled, _ := value.Normalize(goValues[c.value])
			settled, _ = value.Settle(settled)
			if c.field == "log" {
				settled = []any{settled} // appended: one item
			}
			if err != nil || !reflect.DeepEqual(res.State[c.field], settled) || res.State["other"] != "written" {
				t.Errorf("%s takes %s: %v %v", c.schema, c.value, res, err)
			}
			continue
		}
		var ne *engine.NodeError
		if !errors.As(err, &ne) {
			t.Errorf("%s written with %s: %v, want the node's error", c.schema, c.value, err)
			continue
		}
		for _, part := range c.fails {
			if !strings.Contains(err.Error(), part) {
				t.Errorf("%s written with %s: %q does not say %q", c.schema, c.value, err, part)
			}
		}
		head, err := eng.Store.Head(ctx, "t")
		if err != nil {
			t.Fatal(err)
		}
		if head.Values["other"] != "" || head.Seq != 1 {
			t.Errorf("%s written with %s: the failing step committed: seq %d, %s", c.schema, c.value, head.Seq, value.Show(head.Values, 200))
		}
	}
}

// storeOf is a new memory store, closed with the test.
func storeOf(t *testing.T) store.Store {
	st, err := store.Open(context.Background(), "memory")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// A resumed run reads its input as it was given, also where the field's
// reducer made another value of it (add, merge): after a pause, in a
// store opened afresh, input.NAME is what the run was given, as it was
// before the pause.
func TestResumedRunReadsItsInput(t *testing.T) {
	ctx := context.Background()
	g, dl := flow.LoadSource("input.yaml", []byte(`version: 1
name: input
input: [n, tags]
state:
  schema:
    type: object
    properties:
      n: {type: integer, default: 5}
      tags: {type: object, default: {a: 1}}
      before: {type: integer, default: 0}
      after: {type: integer, default: 0}
      keys: {type: integer, default: 0}
  reducers: {n: add, tags: merge}
nodes:
  first: {kind: set, set: {before: "input.n"}}
  second: {kind: set, interrupt_before: true, set: {after: "input.n", keys: "len(input.tags)"}}
edges:
  - {from: START, to: first}
  - {from: first, to: second}
  - {from: second, to: END}
`), valueKinds())
	if g == nil || len(dl) > 0 {
		t.Fatal(dl)
	}
	for name, url := range storetest.URLs(t) {
		t.Run(name, func(t *testing.T) {
			st, err := store.Open(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { st.Close() }()
			res, err := engine.New(st).Run(ctx, g, engine.Request{Thread: "t", Input: map[string]any{"n": 2, "tags": map[string]any{"b": 2}}})
			if err != nil || res.Interrupt == nil || res.State["before"] != 2 || res.State["n"] != 7 {
				t.Fatalf("first part: %v %v", res, err)
			}
			if name != "memory" {
				st.Close()
				if st, err = store.Open(ctx, url); err != nil {
					t.Fatal(err)
				}
			}
			res, err = engine.New(st).Run(ctx, g, engine.Request{Thread: "t", Resume: true})
			if err != nil || res.State["after"] != 2 || res.State["keys"] != 1 {
				t.Fatalf("resumed: %s %v", value.Show(res.State, 300), err)
			}
		})
	}
}
