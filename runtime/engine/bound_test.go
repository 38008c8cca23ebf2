package engine_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/runtime/engine"
)

// A bound counts the traversals that re-enter its loop: a branch whose
// case loops back and whose else leaves may loop bound times and still
// leave, and the error of one that loops more names the loop's nodes.
func TestBoundCountsReentries(t *testing.T) {
	const src = `
version: 1
name: rounds
state:
	schema:
		type: object
		properties:
			i: {type: integer, default: 0}
			until: {type: integer, default: 3}
input: [until]
nodes:
	head: {kind: set, set: {i: "state.i + 1"}}
	check: {kind: set}
	after: {kind: set}
edges:
	- {from: START, to: head}
	- {from: head, to: check}
	- from: check
	  bound: 2
	  branch:
	    - when: "state.i < state.until"
	      to: head
	    - else: after
	- {from: after, to: END}
`
	g := compile(t, src)
	res := mustRun(t, g, nil, "t", map[string]any{"until": 3})
	if res.State["i"] != 3 || res.Visits()["head"] != 3 || res.Visits()["after"] != 1 {
		t.Fatalf("three rounds and out: state %v visits %v", res.State, res.Visits())
	}
	_, err := run(t, g, nil, "t2", map[string]any{"until": 4})
	var le *engine.LimitError
	if !errors.As(err, &le) || le.Edge == nil || le.Limit != 2 {
		t.Fatalf("want a bound error, got %v", err)
	}
	if got := strings.Join(le.Loop, " → "); got != "head → check → head" {
		t.Fatalf("the error names the loop %q: %v", got, err)
	}
}
