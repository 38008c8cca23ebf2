package all_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/store/memory"
)

// A template's read of .input.NAME outside a with or an if on it asks
// the run for the input, as an expression's does; inside one it does not.
func TestTemplatesReadInputs(t *testing.T) {
	g, dl := flow.LoadSource("letter.yaml", []byte(`version: 1
name: letter
input: [to, ps]
state:
  schema:
    type: object
    properties:
      to: {type: string, default: ""}
      ps: {type: string, default: ""}
      letter: {type: string, default: ""}
nodes:
  write:
    kind: render
    set: {letter: "Dear {{.input.to}},{{with .input.ps}} PS: {{.}}{{end}}"}
edges:
  - {from: START, to: write}
  - {from: write, to: END}
`), all.Offline())
	if g == nil || len(dl) > 0 {
		t.Fatal(dl)
	}
	if f, _ := g.Field("to"); f.ReadAt == nil || f.ReadAt.Line != 14 || f.ReadAt.Col != 34 {
		t.Fatalf("to read at %v", f.ReadAt)
	}
	if f, _ := g.Field("ps"); f.ReadAt != nil {
		t.Fatalf("ps, read inside a with, required by %v", f.ReadAt)
	}
	eng := engine.New(memory.New())
	defer eng.Store.Close()
	_, err := eng.Run(context.Background(), g, engine.Request{Thread: "t", Input: map[string]any{"ps": "hi"}})
	var ie *engine.InputError
	if !errors.As(err, &ie) || ie.Field != "to" || !strings.Contains(err.Error(), "letter.yaml:14:34") {
		t.Fatalf("a run without to: %v", err)
	}
	res, err := eng.Run(context.Background(), g, engine.Request{Thread: "t", Input: map[string]any{"to": "Ann"}})
	if err != nil || res.State["letter"] != "Dear Ann," {
		t.Fatalf("%v %v", res, err)
	}
}
