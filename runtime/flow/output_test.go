package flow_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind/kindtest"
)

const outputFlow = `version: 1
name: report
state:
  schema:
    type: object
    properties:
      n: {type: integer, default: 0}
      notes: {type: array, items: {type: string}, default: []}
      verdict:
        type: [object, "null"]
        properties: {text: {type: string}}
        default: null
nodes:
  count: {kind: set, set: {n: "state.n + 1", notes: "['counted']"}}
  judge: {kind: set, set: {verdict: "{text: 'fine'}"}}
edges:
  - {from: START, to: count}
  - BRANCH
OUTPUT
`

func loadOutput(t *testing.T, branch, output string) (*flow.Graph, diag.List) {
	t.Helper()
	src := strings.Replace(strings.Replace(outputFlow, "BRANCH", branch, 1), "OUTPUT", output, 1)
	return flow.LoadSource("report.yaml", []byte(src), kindtest.Registry())
}

const alwaysJudged = "{from: count, to: judge}\n  - {from: judge, to: END}"

// The output renders over the final state; it lists the fields it reads.
func TestOutputRenders(t *testing.T) {
	g, dl := loadOutput(t, alwaysJudged, `output: |
  {{.state.n}} step(s): {{range .state.notes}}{{.}} {{end}}
  verdict: {{.state.verdict.text}}{{with $.state.n}}{{end}}`)
	if g == nil || len(dl) > 0 {
		t.Fatalf("load: %v", dl)
	}
	if g.Output == nil || !slices.Equal(g.Output.Reads, []string{"n", "notes", "verdict"}) || g.Output.Pos.Line != 20 {
		t.Fatalf("output %+v", g.Output)
	}
	got, err := g.Output.Render(map[string]any{"n": 2, "notes": []any{"a", "b"}, "verdict": map[string]any{"text": "fine"}})
	if want := "2 step(s): a b \nverdict: fine\n"; err != nil || got != want {
		t.Fatalf("rendered %q %v, want %q", got, err, want)
	}
	if g, _ := loadOutput(t, alwaysJudged, ""); g == nil || g.Output != nil {
		t.Fatal("a flow without an output block has one")
	}
}

// A misspelt field is an error at its position, with a suggestion; so is
// a template that does not parse. Neither leaves an output behind.
func TestOutputIsChecked(t *testing.T) {
	g, dl := loadOutput(t, alwaysJudged, `output: "{{.state.nots}} and {{.stat.n}}"`)
	if g != nil || len(dl) != 2 {
		t.Fatalf("got %v", dl)
	}
	d := dl[0]
	if d.Code != diag.CodeTemplateField || d.Pos.Line != 20 || d.Pos.Col != 19 || d.Path != "output" ||
		d.Summary != `state has no field "nots"` || d.Suggestion != "notes" {
		t.Fatalf("misspelt field: %+v", d)
	}
	if d := dl[1]; d.Code != diag.CodeTemplateField || d.Summary != `the template data has no field "stat"` || d.Suggestion != "state" {
		t.Fatalf("misspelt root: %+v", d)
	}
	_, dl = loadOutput(t, alwaysJudged, `output: "{{.state.n"`)
	if len(dl) != 1 || dl[0].Code != diag.CodeResource || !strings.Contains(dl[0].Summary, "template:") {
		t.Fatalf("a broken template: %v", dl)
	}
	_, dl = loadOutput(t, alwaysJudged, `output: [a, b]`)
	if len(dl) != 1 || dl[0].Code != diag.CodeType || dl[0].Path != "output" {
		t.Fatalf("a list for a template: %v", dl)
	}
}

// Reading through a field that may be null is fine when every path to
// END writes it, and a warning when one does not.
func TestOutputNullReads(t *testing.T) {
	read := `output: "{{.state.verdict.text}}"`
	if _, dl := loadOutput(t, alwaysJudged, read); len(dl) > 0 {
		t.Fatalf("written on every path: %v", dl)
	}
	skip := "from: count\n    branch:\n      - {when: \"state.n > 1\", to: judge}\n      - else: END\n  - {from: judge, to: END}"
	g, dl := loadOutput(t, skip, read)
	if g == nil || len(dl) != 1 || dl[0].Severity != diag.Warning || dl[0].Code != diag.CodeTemplateNull ||
		!strings.Contains(dl[0].Summary, `state.verdict may be null, and reading "text" of null fails when the output is rendered`) {
		t.Fatalf("skipped on a path: %v", dl)
	}
	if _, dl := loadOutput(t, skip, `output: "{{with .state.verdict}}{{.text}}{{end}}"`); len(dl) > 0 {
		t.Fatalf("guarded: %v", dl)
	}
}

// A drawing shows the output at END, with the fields it reads.
func TestOutputIsDrawn(t *testing.T) {
	g, dl := loadOutput(t, alwaysJudged, `output: "{{.state.n}} {{.state.notes}}"`)
	if g == nil {
		t.Fatal(dl)
	}
	if m := g.Mermaid(); !strings.Contains(m, `END(["END<br/><small>output: n, notes</small>"])`) {
		t.Errorf("mermaid:\n%s", m)
	}
	if d := g.DOT(); !strings.Contains(d, `"END" [label="END\n(output: n, notes)", shape=doublecircle];`) {
		t.Errorf("dot:\n%s", d)
	}
	if j, err := g.JSON(); err != nil || !strings.Contains(string(j), `"output": {
    "reads": [
      "n",
      "notes"
    ],
    "line": 20
  }`) {
		t.Errorf("json %v:\n%s", err, j)
	}
	g, _ = loadOutput(t, alwaysJudged, `output: "{{$.state.n}}{{.state.notes}}{{.state.verdict}}{{.state.n}}{{range .state.notes}}{{$.state.verdict}}{{end}}"`)
	if !slices.Equal(g.Output.Reads, []string{"n", "notes", "verdict"}) {
		t.Errorf("reads %v", g.Output.Reads)
	}
	g, _ = loadOutput(t, alwaysJudged, "")
	if m := g.Mermaid(); !strings.Contains(m, "END([END])") {
		t.Errorf("no output, mermaid:\n%s", m)
	}
}
