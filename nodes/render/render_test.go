package render_test

import (
	"context"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/nodes/render"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/store/memory"
)

const greet = `version: 1
name: greet
state:
  schema:
    type: object
    properties:
      who: {type: object, additionalProperties: false, properties: {name: {type: string}}, default: {name: Ada}}
      visits: {type: integer, default: 2}
      message: {type: string, default: ""}
      count: {type: integer, default: 0}
nodes:
  say:
    kind: render
    vars: {next: "state.visits + 1"}
    set:
      message: "Welcome back, {{.state.who.name}}: visit {{.vars.next}}."
edges:
  - {from: START, to: say}
  - {from: say, to: END}
`

func TestRender(t *testing.T) {
	reg := kind.NewSet(render.Spec)
	g, dl := flow.LoadSource("greet.yaml", []byte(greet), reg)
	if g == nil {
		t.Fatal(dl)
	}
	res, err := engine.New(memory.New()).Run(context.Background(), g, engine.Request{Thread: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.State["message"]; got != "Welcome back, Ada: visit 3." {
		t.Fatalf("message %q", got)
	}
}

// Every field a template reads is checked at load, at its position; a
// template cannot write a field that is not text.
func TestRenderIsCheckedAtLoad(t *testing.T) {
	src := strings.Replace(greet, "{{.state.who.name}}", "{{.state.who.nme}}", 1)
	src = strings.Replace(src, "      message: \"Welcome", "      count: \"{{.vars.next}}\"\n      message: \"Welcome", 1)
	_, dl := flow.LoadSource("greet.yaml", []byte(src), kind.NewSet(render.Spec))
	var got []string
	for _, d := range dl {
		got = append(got, d.String())
	}
	want := []string{
		`greet.yaml:16:7: error[K002]: set.count: a template renders text, but field "count" is integer`,
		`greet.yaml:17:44: error[P002]: state.who has no field "nme"; did you mean "name"?`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
