package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// flowTest writes files into a new directory (the approval example
// beside them) and runs trellis test on it.
func flowTest(t *testing.T, files map[string]string) (string, int) {
	t.Helper()
	dir := t.TempDir()
	src, err := os.ReadFile("../../flows/examples/approval.yaml")
	if err != nil {
		t.Fatal(err)
	}
	files["approval.yaml"] = string(src)
	for name, body := range files {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, stderr, exit := trellis(t, "test", dir)
	return strings.ReplaceAll(out+stderr, dir+"/", ""), exit
}

// A test answers an interrupt in a later run and asserts that a run
// paused, at which node.
func TestFlowTestAnswersInterrupts(t *testing.T) {
	out, exit := flowTest(t, map[string]string{"a.test.yaml": `flow: approval.yaml
tests:
  - name: the recruiter approves
    runs:
      - input: {candidate: Ada, score: 82}
        expect:
          path: [recommend]
          paused: [recruiter]
      - answers: {recruiter: {approve: true, note: strong}}
        expect:
          path: [recruiter, invite]
          state: ["state.approved && state.note == 'strong'", "state.letter startsWith 'Dear Ada, we would like'"]
  - name: the recruiter declines, with resume and answers
    runs:
      - input: {candidate: Bo, score: 40}
        expect: {paused: [recruiter]}
      - answers: {recruiter: false}
        resume: true
        expect:
          path: [recruiter, decline]
`})
	if exit != 0 || !strings.Contains(out, "2 passed, 0 failed") {
		t.Fatalf("exit %d\n%s", exit, out)
	}
	// a pause the test does not expect, or one it expects that does not
	// happen, fails with what to write
	out, exit = flowTest(t, map[string]string{"a.test.yaml": `flow: approval.yaml
tests:
  - name: no pause expected
    runs:
      - input: {candidate: Ada, score: 82}
  - name: a pause that does not happen
    script:
      recruiter: [{set: {approved: true}}]
    runs:
      - input: {candidate: Ada, score: 82}
        expect: {paused: [recruiter]}
`})
	for _, want := range []string{
		`a.test.yaml:5:9: run 1 paused at recruiter (recruiter asks {"question":"Advance Ada?","recommendation":"advance","score":82}); expect it with paused: [recruiter], and answer it in a next run with answers: {recruiter: ...}`,
		"a.test.yaml:11:17: run 1: want it paused at recruiter, it did not pause",
	} {
		if exit != 1 || !strings.Contains(out, want) {
			t.Errorf("exit %d, want %q in\n%s", exit, want, out)
		}
	}
}

// A test file's mistakes are reported like a flow's: in the file's terms,
// at their line and column; a YAML error on its own line.
func TestFlowTestFileProblems(t *testing.T) {
	out, exit := flowTest(t, map[string]string{"a.test.yaml": `flow: approval.yaml
tests:
  - name: misspelt
    runs:
      - input: {candidate: Ada}
        answer: {recruiter: true}
        expect: {pathh: [recommend]}
  - runs: []
`})
	for _, want := range []string{
		"FAIL a.test.yaml: the test file is not valid",
		`a.test.yaml:6:9: error[S001]: unknown key "answer"; did you mean "answers"?`,
		`a.test.yaml:7:18: error[S001]: unknown key "pathh"; did you mean "path"?`,
		`a.test.yaml:8:5: error[S002]: tests[1] is missing required key "name"`,
	} {
		if exit != 1 || !strings.Contains(out, want) {
			t.Errorf("exit %d, want %q in\n%s", exit, want, out)
		}
	}
	if strings.Contains(out, "testfile.") || strings.Contains(out, "type ") {
		t.Errorf("Go names reach the designer:\n%s", out)
	}
	out, exit = flowTest(t, map[string]string{"a.test.yaml": `flow: approval.yaml
tests:
  - name: one
    runs:
      - input: {candidate: Ada, score: 82
        expect: {paused: [recruiter]}
`})
	if want := "a.test.yaml:5:7: error[Y001]: invalid YAML: a mapping opened with { is not closed: expected , or }"; exit != 1 || !strings.Contains(out, want) {
		t.Errorf("exit %d, want %q in\n%s", exit, want, out)
	}
}

// A scripted reply that breaks the reply schema fails the test at the
// script, rather than passing on the prompt's fallback.
func TestFlowTestScriptedReplyMustFitItsSchema(t *testing.T) {
	files := map[string]string{
		"r.yaml": `version: 1
name: r
state:
  schema:
    type: object
    properties:
      review: {type: object, default: {}}
nodes:
  review: {kind: llm, prompt: review, writes: {review: output}}
edges:
  - {from: START, to: review}
  - {from: review, to: END}
`,
		"prompts/review.prompt": `---
output:
  schema:
    type: object
    required: [score]
    properties: {score: {type: number, maximum: 10}}
fallback: {score: 5}
---
Review it.
`,
		"r.test.yaml": `flow: r.yaml
tests:
  - name: a reply in the schema
    script:
      review: [{output: {score: 8}}]
    expect: {state: ["state.review.score == 8"]}
  - name: a reply out of it
    script:
      review: [{output: {score: 80}}]
`,
	}
	delete(files, "approval.yaml")
	out, exit := flowTest(t, files)
	want := "r.test.yaml:9:16: the scripted output of review does not fit the node: output does not match the schema of prompt review: /score:"
	if exit != 1 || !strings.Contains(out, want) || !strings.Contains(out, "1 passed, 1 failed") || strings.Contains(out, "run 1 failed") {
		t.Fatalf("exit %d, want %q in\n%s", exit, want, out)
	}
}

// trellis test --reload runs each test again with its state read back
// between steps, and is on when the CI environment variable says so: a
// flow whose state differs from run to run (an id it makes) is caught
// there, and passes without it.
func TestFlowTestReload(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"ids.yaml": `version: 1
name: ids
state:
  schema:
    type: object
    properties:
      id: {type: string, default: ""}
nodes:
  mint: {kind: assign, set: {id: "uuid()"}}
edges:
  - {from: START, to: mint}
  - {from: mint, to: END}
`,
		"ids.test.yaml": "flow: ids.yaml\ntests:\n  - name: mints an id\n    runs:\n      - expect: {state: [\"len(state.id) == 36\"]}\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("CI", "")
	if out, stderr, code := trellis(t, "test", dir); code != 0 {
		t.Fatalf("without --reload: exit %d\n%s%s", code, out, stderr)
	}
	for _, c := range []struct {
		ci   string
		args []string
		code int
	}{
		{"", []string{"test", "--reload", dir}, 1},
		{"true", []string{"test", dir}, 1},
		{"true", []string{"test", "--reload=false", dir}, 0},
		{"false", []string{"test", dir}, 0},
	} {
		t.Setenv("CI", c.ci)
		out, stderr, code := trellis(t, c.args...)
		if code != c.code || code == 1 && !strings.Contains(out, "state.id differs when the state is read back between steps") {
			t.Errorf("CI=%s trellis %v: exit %d\n%s%s", c.ci, c.args, code, out, stderr)
		}
	}
}
