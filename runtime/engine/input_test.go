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
		"bad and unknown": {map[string]any{"name": "Ann", "age": -3, "nmae": "x"}, []string{`"age"`, ">= 0", `"nmae"`, `did you mean "name"`}},
		"one missing":     {map[string]any{"age": "x"}, []string{`"age"`, "expected integer", `"name": required`}},
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
