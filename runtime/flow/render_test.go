package flow_test

import (
	"testing"

	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind/kindtest"
)

// A route's arcs are labelled with its expression compared with each
// choice; an expression that is not one operand is bracketed, so the
// label means what the route does.
func TestRouteLabelsKeepTheirMeaning(t *testing.T) {
	for route, want := range map[string]string{
		`state.next`:                        `state.next == "a"`,
		`state.flag ? 'a' : state.next`:     `(state.flag ? 'a' : state.next) == "a"`,
		`(state.flag ? 'a' : state.next)`:   `(state.flag ? 'a' : state.next) == "a"`,
		`state.next ?? 'a'`:                 `(state.next ?? 'a') == "a"`,
		`lower(state.next)`:                 `lower(state.next) == "a"`,
		`(state.flag) ? 'a' : (state.next)`: `((state.flag) ? 'a' : (state.next)) == "a"`,
	} {
		src := `version: 1
name: labels
state:
  schema:
    type: object
    properties:
      next: {type: string, default: a}
      flag: {type: boolean, default: false}
nodes:
  start: {kind: set}
  a: {kind: set}
edges:
  - {from: START, to: start}
  - from: start
    route: "` + route + `"
    choices: [a, END]
  - {from: a, to: END}
`
		g, dl := flow.LoadSource("labels.yaml", []byte(src), kindtest.Registry())
		if g == nil {
			t.Fatalf("%s: %v", route, dl)
		}
		found := false
		for _, a := range g.Arcs() {
			if a.To == "a" {
				found = true
				if a.Label != want {
					t.Errorf("%s: label %q, want %q", route, a.Label, want)
				}
			}
		}
		if !found {
			t.Errorf("%s: no arc to a", route)
		}
	}
}
