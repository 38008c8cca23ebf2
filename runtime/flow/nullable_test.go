package flow_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind/kindtest"
)

// A read through a possibly-null field is reported only where some path
// from START reaches the reader without passing a node that writes the
// field; an edge's condition reads after its node ran.
func TestNullableReadsFollowTheGraph(t *testing.T) {
	src := `
version: 1
name: nullable
state:
  schema:
    type: object
    properties:
      q:
        type: [object, "null"]
        properties: {text: {type: string}}
        required: [text]
        default: null
      out: {type: string, default: ""}
      n: {type: integer, default: 0}
nodes:
  early: {kind: set, set: {out: "state.q.text"}}
  setq: {kind: set, set: {q: "{text: 'x'}", n: "state.n + 1"}}
  late: {kind: set, set: {out: "state.q.text"}}
  again: {kind: set, set: {out: "state.q.text + '!'"}}
edges:
  - {from: START, to: early}
  - {from: early, to: setq}
  - from: setq
    branch:
      - {when: "state.q.text != ''", to: late}
      - else: again
  - {from: late, to: END}
  - from: again
    bound: 3
    branch:
      - {when: "state.q.text == 'x' && state.n < 3", to: setq}
      - else: END
`
	path := filepath.Join(t.TempDir(), "flow.yaml")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	g, dl := flow.Load(path, kindtest.Registry())
	if g == nil {
		t.Fatalf("flow does not compile:\n%v", dl)
	}
	var lines []string
	for _, d := range dl {
		lines = append(lines, d.String())
	}
	if len(dl) != 1 || dl[0].Code != "E004" || dl[0].Line != 16 || !strings.Contains(dl[0].Summary, "state.q may be null") {
		t.Fatalf("want one E004 on early's read (line 16), got:\n%s", strings.Join(lines, "\n"))
	}
}

// A node reached only through branch cases that found a value not null
// (its own test, or the else of one that found it null) reads it safely,
// until a node that writes the field: the warning stays where a way in
// did not test it.
func TestNullableReadsFollowBranchTests(t *testing.T) {
	src := `
version: 1
name: tested
state:
  schema:
    type: object
    properties:
      note: {type: [object, "null"], properties: {text: {type: string}}, required: [text], default: null}
      n: {type: [integer, "null"], default: null}
      out: {type: string, default: ""}
      m: {type: integer, default: 0}
nodes:
  show: {kind: set, set: {out: "state.note.text", m: "state.n + 1"}}
  after: {kind: set, set: {out: "state.note.text + '!'"}}
  none: {kind: set, set: {out: "'none'"}}
  reset: {kind: set, set: {note: "nil"}}
  late: {kind: set, set: {out: "state.note.text"}}
edges:
  - from: START
    branch:
      - {when: "state.note == nil || state.n == nil", to: none}
      - else: show
  - {from: show, to: after}
  - {from: after, to: reset}
  - {from: reset, to: late}
  - {from: none, to: late}
  - {from: late, to: END}
`
	g, dl := flow.LoadSource("tested.yaml", []byte(src), kindtest.Registry())
	if g == nil {
		t.Fatalf("flow does not compile:\n%v", dl)
	}
	if len(dl) != 1 || dl[0].Code != "E004" || dl[0].Line != 17 {
		var lines []string
		for _, d := range dl {
			lines = append(lines, d.String())
		}
		t.Fatalf("want one E004 on late's read (line 17), got:\n%s", strings.Join(lines, "\n"))
	}
}
