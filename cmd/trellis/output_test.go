package main

import (
	"encoding/json"
	"fmt"
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

// A null or blank resume is reported and the command succeeds: nothing
// to review is an answer, not a failure.
func TestRunTheResumeReviewOfNoResume(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"null":  "target_role: LLM Engineer\nresume: null\n",
		"blank": "target_role: LLM Engineer\nresume: {name: '', title: ' ', summary: '  ', experience: [{company: '', role: '', bullets: ['', ' - ']}], skills: []}\n",
	} {
		values := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(values, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		out, stderr, exit := trellis(t, "run", "../../flows/resume_review.yaml", "--with", values, "--store", "memory")
		if exit != 0 || !strings.HasPrefix(out, "Resume review for LLM Engineer: ") || !strings.Contains(out, "nothing to review") {
			t.Errorf("a %s resume: exit %d\n%s%s", name, exit, out, stderr)
		}
	}
}

// A map over many items is named once in the note of fallbacks, as a
// range, where each item was listed; an empty file of values says which
// file, and that it is empty.
func TestRunNotesManyItemsAsARange(t *testing.T) {
	var entries []string
	for i := range 30 {
		entries = append(entries, fmt.Sprintf("{company: C%d, role: ML Engineer, bullets: [Built retrieval over %dM articles.]}", i, i+1))
	}
	dir := t.TempDir()
	values := filepath.Join(dir, "long.yaml")
	body := "target_role: LLM Engineer\nresume: {name: Ada, title: ML Engineer, summary: Ships retrieval., skills: [Python], experience: [" + strings.Join(entries, ", ") + "]}\n"
	if err := os.WriteFile(values, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	out, stderr, exit := trellis(t, "run", "../../flows/resume_review.yaml", "--with", values, "--store", "memory")
	want := "fallbacks answered for copywriter, recruiter, tech_writer, revisor, sections[0..11] (12 items), portfolio: no model is configured"
	if exit != 0 || !strings.HasPrefix(stderr, want) || strings.Count(stderr, "\n") != 1 {
		t.Fatalf("exit %d\n%s\n%s", exit, stderr, out)
	}
	empty := filepath.Join(dir, "empty.yaml")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, exit = trellis(t, "run", "../../flows/resume_review.yaml", "--with", empty, "--store", "memory")
	if exit != 2 || stderr != "trellis run: "+empty+": the file is empty: it holds no YAML or JSON value\n" {
		t.Fatalf("an empty file of values: exit %d %q", exit, stderr)
	}
}

// The drawing shows the resume review's report at END, with the first
// fields it reads.
func TestGraphShowsTheOutput(t *testing.T) {
	out, stderr, exit := trellis(t, "graph", "../../flows/resume_review.yaml")
	if want := `END(["END<br/><small>output: blank, target_role, resume, final_score, threshold_met, threshold and 11 more</small>"])`; exit != 0 || !strings.Contains(out, want) {
		t.Fatalf("exit %d %s\n%s", exit, stderr, out)
	}
}
