package engine_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/memory"
)

// A new thread's input is checked together with its initial values: a
// required field with no default is satisfied by the input, and every
// problem with the input (a bad value, an unknown name, a required field
// missing) is reported at once; a refused input leaves no thread.
func TestInputCheckedWithTheInitialValues(t *testing.T) {
	g := compile(t, `
version: 1
name: req
input: [name, age]
state:
	schema:
		type: object
		required: [name, age]
		properties:
			name: {type: string}
			age: {type: integer, minimum: 0}
			greeting: {type: string, default: ""}
nodes:
	greet: {kind: set, set: {greeting: "'Hello, ' + state.name"}}
edges:
	- {from: START, to: greet}
	- {from: greet, to: END}
`)
	st := memory.New()
	eng := engine.New(st)
	res := mustRun(t, g, eng, "ok", map[string]any{"name": "Ann", "age": 3})
	if res.State["greeting"] != "Hello, Ann" {
		t.Fatalf("state %v", res.State)
	}
	for input, want := range map[string]struct {
		in       map[string]any
		problems []string
	}{
		"bad-and-unknown": {map[string]any{"name": "Ann", "age": -3, "nmae": "x"}, []string{`"age"`, ">= 0", `"nmae"`, `did you mean "name"`}},
		"one-missing":     {map[string]any{"age": "x"}, []string{`"age"`, "expected integer", `"name": required`}},
		"none":            {nil, []string{`"name": required`, `"age": required`}},
	} {
		_, err := run(t, g, eng, input, want.in)
		var ie *engine.InputError
		if !errors.As(err, &ie) {
			t.Fatalf("%s: %v", input, err)
		}
		for _, p := range want.problems {
			if !strings.Contains(err.Error(), p) {
				t.Errorf("%s: %q lacks %s", input, err, p)
			}
		}
		if strings.Contains(err.Error(), "missing properties") {
			t.Errorf("%s: %v", input, err)
		}
		if _, err := st.Head(context.Background(), input); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s: a thread was left: %v", input, err)
		}
	}
}

// A thread created before its first run (Create) may lack the input
// fields its schema requires: the run that brings input brings them, a run
// without them is refused naming each and commits nothing, and a field
// the schema requires that is not an input still comes with the thread.
func TestCreateOwesRequiredInputs(t *testing.T) {
	g := compile(t, `
version: 1
name: req
input: [name]
state:
	schema:
		type: object
		required: [name, place]
		properties:
			name: {type: string}
			place: {type: string}
			greeting: {type: string, default: ""}
nodes:
	greet: {kind: set, set: {greeting: "'Hello, ' + state.name + ' of ' + state.place"}}
edges:
	- {from: START, to: greet}
	- {from: greet, to: END}
`)
	ctx := context.Background()
	st := memory.New()
	eng := engine.New(st)
	if _, err := eng.Create(ctx, g, "no-place", map[string]any{"name": "Ann"}); err == nil {
		t.Fatal("a thread without place, which is not an input, was created")
	}
	if _, err := eng.Create(ctx, g, "t", map[string]any{"place": "Oz"}); err != nil {
		t.Fatal(err)
	}
	for _, in := range []map[string]any{nil, {"name": 3}} {
		_, err := run(t, g, eng, "t", in)
		var ie *engine.InputError
		if !errors.As(err, &ie) || ie.Field != "name" {
			t.Fatalf("input %v: %v", in, err)
		}
	}
	if head, err := st.Head(ctx, "t"); err != nil || head.Seq != 1 {
		t.Fatalf("refused runs committed: %+v %v", head, err)
	}
	if res := mustRun(t, g, eng, "t", map[string]any{"name": "Ann"}); res.State["greeting"] != "Hello, Ann of Oz" {
		t.Fatalf("state %v", res.State)
	}
	mustRun(t, g, eng, "t", nil) // it has one now
}

// A new thread's id is restricted to characters safe to print and to put
// in a path or URL; a refused id leaves nothing.
func TestThreadIDs(t *testing.T) {
	g := compile(t, `
version: 1
name: ids
state:
	schema:
		type: object
		properties:
			n: {type: integer, default: 0}
nodes:
	inc: {kind: set, set: {n: "state.n + 1"}}
edges:
	- {from: START, to: inc}
	- {from: inc, to: END}
`)
	st := memory.New()
	eng := engine.New(st)
	mustRun(t, g, eng, "Ok-id_1.2:x/y@z+w", nil)
	for _, id := range []string{"", "a\x1b[2Jb", "tab\there", "space here", "ünï", strings.Repeat("x", 257), "new\nline"} {
		_, err := run(t, g, eng, id, nil)
		var ie *engine.InputError
		if !errors.As(err, &ie) || ie.Field != "thread" || !errors.Is(err, store.ErrThreadID) && !strings.Contains(err.Error(), "thread id") {
			t.Errorf("%q: %v", id, err)
		}
		if _, err := engine.New(st).Create(context.Background(), g, id, nil); err == nil {
			t.Errorf("%q created", id)
		}
		if _, err := store.Fork(context.Background(), st, "Ok-id_1.2:x/y@z+w", 1, id); !errors.Is(err, store.ErrThreadID) {
			t.Errorf("fork to %q: %v", id, err)
		}
	}
	if threads, _ := st.Threads(context.Background(), store.ThreadOptions{}); len(threads) != 1 {
		t.Errorf("threads %v", threads)
	}
}

// An input the flow reads as input.NAME with nothing to fall back on is
// one a run must give: a run without it is refused before anything runs,
// naming the field and the read, and leaves no thread; a read that
// guards against its absence (??, a nil test, ?.) asks nothing of a run;
// a resumed run is not asked again.
func TestInputsTheFlowReads(t *testing.T) {
	g := compile(t, `
version: 1
name: greet
input: [name, title, note, extra]
state:
	schema:
		type: object
		properties:
			name: {type: string, default: ""}
			title: {type: string, default: ""}
			note: {type: string, default: ""}
			extra: {type: object, default: {}}
			greeting: {type: string, default: ""}
nodes:
	greet:
		kind: set
		set:
			greeting: "'Hello, ' + (input.title ?? '') + input.name + (input.note != nil ? input.note : '') + string(input.extra?.x ?? '')"
edges:
	- {from: START, to: greet}
	- {from: greet, to: END}
`)
	f, _ := g.Field("name")
	if f.ReadAt == nil || f.ReadAt.Line != 18 || f.ReadAt.Col != 58 {
		t.Fatalf("name read at %v", f.ReadAt)
	}
	for _, name := range []string{"title", "note", "extra"} {
		if f, _ := g.Field(name); f.ReadAt != nil {
			t.Errorf("%s, read with a fallback, is required by its read at %v", name, f.ReadAt)
		}
	}
	eng := engine.New(memory.New())
	for _, in := range []map[string]any{nil, {"title": "Dr "}} {
		_, err := run(t, g, eng, "t", in)
		var ie *engine.InputError
		if !errors.As(err, &ie) || ie.Field != "name" || !strings.Contains(err.Error(), "reads input.name at ") ||
			!strings.Contains(err.Error(), "flow.yaml:18:58") {
			t.Fatalf("input %v: %v", in, err)
		}
		if _, err := eng.Store.Head(context.Background(), "t"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("a refused run left a thread: %v", err)
		}
	}
	if err := engine.CheckInput(g, map[string]any{"title": "Dr "}); err == nil || !strings.Contains(err.Error(), `input "name": required`) {
		t.Fatalf("CheckInput: %v", err)
	}
	if err := engine.CheckNew(g, nil, nil); err == nil || !strings.Contains(err.Error(), `input "name": required`) {
		t.Fatalf("CheckNew: %v", err)
	}
	res := mustRun(t, g, eng, "t", map[string]any{"name": "Ann"})
	if res.State["greeting"] != "Hello, Ann" {
		t.Fatalf("state %v", res.State)
	}
	// the thread exists now: a later run without the name is refused too
	if _, err := run(t, g, eng, "t", map[string]any{"note": "!"}); err == nil || !strings.Contains(err.Error(), `input "name": required`) {
		t.Fatalf("a second run without the name: %v", err)
	}
}

// A refused input is named by its field and says what is wrong with it,
// with a JSON pointer only to a value inside it: never the empty
// pointer's "/:" (input "x": /: length must be ...), whether the input
// was checked on its own or with the thread's initial values.
func TestInputRefusalsNameTheField(t *testing.T) {
	g := compile(t, `
version: 1
name: lengths
input: [x, tags]
state:
	schema:
		type: object
		properties:
			x: {type: string, maxLength: 3}
			tags: {type: array, items: {type: string, maxLength: 2}}
			kept: {type: string, maxLength: 2}
			out: {type: string, default: ""}
nodes:
	a: {kind: set, set: {out: "'done'"}}
edges:
	- {from: START, to: a}
	- {from: a, to: END}
`)
	eng := engine.New(memory.New())
	for name, c := range map[string]struct {
		req  engine.Request
		want string
	}{
		"too long":         {engine.Request{Thread: "long", Input: map[string]any{"x": "abcdef"}}, `input "x": length must be <= 3, but got 6`},
		"inside a list":    {engine.Request{Thread: "list", Input: map[string]any{"tags": []any{"ok", "long"}}}, `input "tags": /1: length must be <= 2, but got 4`},
		"an initial value": {engine.Request{Thread: "kept", Values: map[string]any{"kept": "long"}}, `input "kept": length must be <= 2, but got 4`},
	} {
		_, err := eng.Run(context.Background(), g, c.req)
		var ie *engine.InputError
		if !errors.As(err, &ie) {
			t.Fatalf("%s: %v", name, err)
		}
		if err.Error() != c.want {
			t.Errorf("%s: %q, want %q", name, err, c.want)
		}
	}
}
