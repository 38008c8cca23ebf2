package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const reportFlow = `version: 1
name: tally
state:
  schema:
    type: object
    properties:
      items: {type: array, items: {type: string}, default: []}
      total: {type: integer, default: 0}
  reducers:
    items: append
input: [items]
nodes:
  count: {kind: assign, set: {total: "len(state.items)"}}
edges:
  - {from: START, to: count}
  - {from: count, to: END}
output: |
  {{.state.total}} items:
  {{- range .state.items}} {{.}}{{end}}
  {{- if gt .state.total 2}} (last: {{index .state.items 5}}){{end}}
`

// A flow without a conversation prints its output; --json prints the
// state; an output that fails to render says so, and the state follows.
func TestRunPrintsTheOutput(t *testing.T) {
	f := filepath.Join(t.TempDir(), "tally.yaml")
	if err := os.WriteFile(f, []byte(reportFlow), 0o644); err != nil {
		t.Fatal(err)
	}
	out, stderr, exit := trellis(t, "run", f, "--input", "items=[a, b]", "--store", "memory")
	if exit != 0 || out != "2 items: a b\n" || stderr != "" {
		t.Fatalf("exit %d, output %q %s", exit, out, stderr)
	}
	out, stderr, exit = trellis(t, "run", f, "--input", "items=[a, b]", "--store", "memory", "--json")
	var st map[string]any
	if err := json.Unmarshal([]byte(out), &st); exit != 0 || err != nil || st["total"] != 2.0 {
		t.Fatalf("--json: exit %d %v\n%s%s", exit, err, out, stderr)
	}
	out, stderr, exit = trellis(t, "run", f, "--input", "items=[a, b, c]", "--store", "memory")
	if err := json.Unmarshal([]byte(out), &st); exit != 1 || err != nil || st["total"] != 3.0 ||
		!strings.Contains(stderr, "trellis run: output: ") || !strings.Contains(stderr, "index out of range") {
		t.Fatalf("a failing output: exit %d %v\n%s%s", exit, err, out, stderr)
	}
}

// The resume review, run as a new user would with no model: the report,
// and a note of the nodes that answered with their fallbacks and why.
func TestRunTheResumeReviewOffline(t *testing.T) {
	out, stderr, exit := trellis(t, "run", "../../flows/resume_review.yaml", "--with", "../../flows/examples/resume.yaml", "--store", "memory")
	if exit != 0 || !strings.HasPrefix(out, "Resume review: Grace Lin for LLM Engineer\n") || strings.Count(out, "\n") > 40 ||
		!strings.Contains(out, `"Worked on backend services."`) || !strings.Contains(out, `"Helped with data tasks."`) {
		t.Fatalf("exit %d\n%s%s", exit, out, stderr)
	}
	want := "fallbacks answered for copywriter, recruiter, tech_writer, revisor, sections[0], sections[1], portfolio, design: no model is configured"
	if !strings.HasPrefix(stderr, want) || strings.Count(stderr, "\n") != 1 {
		t.Fatalf("the note of fallbacks:\n%s", stderr)
	}
}

// The drawing shows the resume review's report at END, with the first
// fields it reads.
func TestGraphShowsTheOutput(t *testing.T) {
	out, stderr, exit := trellis(t, "graph", "../../flows/resume_review.yaml")
	if want := `END(["END<br/><small>output: resume, target_role, final_score, threshold_met, threshold, current_iteration and 7 more</small>"])`; exit != 0 || !strings.Contains(out, want) {
		t.Fatalf("exit %d %s\n%s", exit, stderr, out)
	}
}
