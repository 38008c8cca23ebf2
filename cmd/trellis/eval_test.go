package main

import (
	"encoding/json"
	"encoding/xml"
	"io/fs"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/nodes/llm/llmtest"
)

// repoCopy copies the flows, prompts and schemas into a directory of
// their own, laid out as in the repository, and returns it.
func repoCopy(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, top := range []string{"flows", "prompts", "schemas"} {
		src := filepath.Join("..", "..", top)
		err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(filepath.Join("..", ".."), p)
			if d.IsDir() {
				if d.Name() == "bench" || d.Name() == "testdata" {
					return filepath.SkipDir
				}
				return os.MkdirAll(filepath.Join(dir, rel), 0o755)
			}
			if strings.HasSuffix(p, ".go") {
				return nil
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(dir, rel), b, 0o644)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// editFile replaces old with new in a file, which must hold old.
func editFile(t *testing.T, path, old, new string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), old) {
		t.Fatalf("%s does not hold %q", path, old)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(b), old, new, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The shipped datasets pass offline, none with a known failure left, and
// the JUnit report written beside parses.
func TestEvalShippedDatasets(t *testing.T) {
	junit := filepath.Join(t.TempDir(), "eval.xml")
	out, errs, code := trellis(t, "eval", "--report", "junit="+junit, "../../flows")
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	for _, want := range []string{
		"../../flows/interview.eval.yaml: ../../flows/interview.yaml, 1 run per case",
		"pass   a weak candidate",
		"pass   by overall: a strong candidate (7.9) > a weak candidate (0)",
		"pass   by technical: a strong candidate (7.9) > a weak candidate (0)",
		"pass   a resume for another profession",
		"pass   a strong match",
		"4 cases: 4 passed; 0 of 3 rankings failed",
		"5 cases: 5 passed; 0 of 2 rankings failed",
		"2 cases: 2 passed in",
		"pass   looks the weather up for the city asked",
		"pass   with no note to delete, deletes nothing",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("want %q in\n%s", want, out)
		}
	}
	b, err := os.ReadFile(junit)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Tests  int `xml:"tests,attr"`
		Suites []struct {
			Name  string `xml:"name,attr"`
			Cases []struct {
				Name    string    `xml:"name,attr"`
				Skipped *struct{} `xml:"skipped"`
				Failure *struct{} `xml:"failure"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("JUnit: %v\n%s", err, b)
	}
	if len(doc.Suites) != 4 || doc.Tests != 18 {
		t.Fatalf("JUnit: %d suites, %d tests", len(doc.Suites), doc.Tests)
	}
}

// A prompt change that makes a case worse fails the eval, showing the
// failing case, its score and the reason at the line of the threshold.
func TestEvalPromptChangeFailsACase(t *testing.T) {
	root := repoCopy(t)
	// the evaluation's rules need twice as many words for a clear answer
	editFile(t, filepath.Join(root, "flows", "interview.yaml"),
		"10.0 * min(1.0, float(.words ?? 0) / 25.0)", "10.0 * min(1.0, float(.words ?? 0) / 50.0)")
	dataset := filepath.Join(root, "flows", "interview.eval.yaml")
	out, errs, code := trellis(t, "eval", dataset)
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", code, out, errs)
	}
	line := lineOf(t, dataset, "{name: communication, value: state.evaluation.communication, min: 7}")
	for _, want := range []string{
		"FAIL   a strong candidate",
		"communication 6.5,",
		dataset + ":" + line + ":9: communication: state.evaluation.communication = 6.5, want >= 7",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("want %q in\n%s", want, out)
		}
	}
	// the same in JSON: the case, its score and the reason
	out, _, _ = trellis(t, "eval", "--format", "json", dataset)
	var reports []struct {
		Cases []struct {
			Name    string
			Status  string
			Results []struct {
				Scores []struct {
					Name  string
					Value float64
				}
				Failures []struct {
					Check, Reason string
					Line          int
				}
			}
		}
		Summary struct{ OK bool }
	}
	if err := json.Unmarshal([]byte(out), &reports); err != nil {
		t.Fatal(err)
	}
	strong := reports[0].Cases[0]
	if strong.Name != "a strong candidate" || strong.Status != "failed" || reports[0].Summary.OK {
		t.Fatalf("%+v", strong)
	}
	found := false
	for _, f := range strong.Results[0].Failures {
		if f.Check == "communication" && f.Reason == "state.evaluation.communication = 6.5, want >= 7" && line == itoa(f.Line) {
			found = true
		}
	}
	if !found {
		t.Fatalf("failures %+v", strong.Results[0].Failures)
	}
}

// --against REV runs the flow as it was at a git revision beside the
// working copy, in one invocation: each case's scores side by side with
// the change, a case whose pass rate dropped marked, and the eval fails.
func TestEvalAgainstRevision(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	root := repoCopy(t)
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", root, "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git("init", "-q")
	git("add", ".")
	git("commit", "-q", "-m", "flows")
	editFile(t, filepath.Join(root, "flows", "interview.yaml"),
		"10.0 * min(1.0, float(.words ?? 0) / 25.0)", "10.0 * min(1.0, float(.words ?? 0) / 50.0)")
	git("commit", "-q", "-am", "more words for a clear answer")
	dataset := filepath.Join(root, "flows", "interview.eval.yaml")
	md := filepath.Join(t.TempDir(), "summary.md")
	out, errs, code := trellis(t, "eval", "--against", "HEAD~1", "--report", "markdown="+md, dataset)
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", code, out, errs)
	}
	for _, want := range []string{
		"compared with HEAD~1:flows/interview.yaml",
		"FAIL   a strong candidate",
		"1/1 → 0/1 regressed",
		"communication 9 → 6.5 (-2.5)",
		"overall 7.9 → 7.3 (-0.6)",
		"1 regressed",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("want %q in\n%s", want, out)
		}
	}
	b, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "| ❌ | a strong candidate | 100% → 0% ⬇️ |") || !strings.Contains(string(b), "communication 9 → 6.5 (-2.5)") {
		t.Errorf("markdown:\n%s", b)
	}
	// the same revision against itself: no change, no regression
	out, errs, code = trellis(t, "eval", "--against", "HEAD", dataset, "--run", "weak")
	if code != 0 || !strings.Contains(out, "communication 0 → 0 (±0)") {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	// a revision that is not one
	_, errs, code = trellis(t, "eval", "--against", "no-such-rev", "--store", "memory", dataset)
	if code != 2 || !strings.Contains(errs, `"no-such-rev" is not a revision`) {
		t.Fatalf("exit %d: %s", code, errs)
	}
}

const judgedFlow = `version: 1
name: answer
input: [question]
state:
  schema:
    type: object
    properties:
      question: {type: string, default: ""}
      answer: {type: string, default: ""}
nodes:
  answer:
    kind: llm
    prompt: answer.prompt
    writes: {answer: output}
edges:
  - {from: START, to: answer}
  - {from: answer, to: END}
output: "{{.state.answer}}"
`

const judgedDataset = `flow: answer.yaml
cases:
  - name: explains supersteps
    turns: [{input: {question: "What is a superstep?"}}]
    expect:
      output: [{contains: nodes}]
    judges:
      - name: accurate
        rubric: The answer explains what a superstep is, correctly.
        scale: [1, 10]
        threshold: 7
        fallback: "output contains 'nodes' ? 7 : 1"
`

// A rubric judge asks the model; --record keeps its reply and the flow's
// in the dataset's cassette, so that the eval replays offline with the
// model's scores, not the rules'; a changed answer is not judged by a
// stale reply; --model names the model every node asks.
func TestEvalJudgeRecordAndReplay(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("answer.yaml", judgedFlow)
	write("answer.prompt", "---\nfallback_expr: \"'no model'\"\n---\nAnswer briefly: {{.state.question}}\n")
	write("answer.eval.yaml", judgedDataset)
	model := llmtest.New(
		llmtest.Rule{Match: "Answer briefly", Replies: []llmtest.Reply{{Content: "One round of nodes that run together."}}},
		llmtest.Rule{Match: "Rubric:", Replies: []llmtest.Reply{{Content: `{"score": 9, "reason": "Correct and concise."}`}}})
	srv := httptest.NewServer(model)
	defer srv.Close()
	dataset := filepath.Join(dir, "answer.eval.yaml")

	// offline with no cassette: the rules judge, and the flow's fallback
	// answers
	t.Setenv("OPENAI_BASE_URL", "")
	t.Setenv("OPENAI_API_KEY", "")
	out, _, code := trellis(t, "eval", dataset)
	if code != 1 || !strings.Contains(out, `the output does not contain "nodes"`) || !strings.Contains(out, "accurate 1") {
		t.Fatalf("offline: exit %d\n%s", code, out)
	}
	// recorded against the model, with another model for the flow
	t.Setenv("OPENAI_BASE_URL", srv.URL+"/v1")
	out, errs, code := trellis(t, "eval", "--record", "--model", "other-model", "--judge-model", "judge-model", dataset)
	if code != 0 || !strings.Contains(out, "accurate 9") {
		t.Fatalf("record: exit %d\n%s%s", code, out, errs)
	}
	models := map[string]string{}
	for _, c := range model.Calls() {
		models[c.Messages[len(c.Messages)-1].Content[:14]] = c.Model
	}
	if models["Answer briefly"] != "other-model" || models["Rubric:\nThe an"] != "judge-model" {
		t.Fatalf("models asked: %v", models)
	}
	cas, err := os.ReadFile(filepath.Join(dir, "answer.eval.cassette.yaml"))
	if err != nil || !strings.Contains(string(cas), "node: judge:accurate") || !strings.Contains(string(cas), "node: answer") {
		t.Fatalf("cassette: %v\n%s", err, cas)
	}
	// offline again: the cassette answers, the model is not asked
	calls := len(model.Calls())
	t.Setenv("OPENAI_BASE_URL", "")
	out, errs, code = trellis(t, "eval", "-v", dataset)
	if code != 0 || !strings.Contains(out, "accurate 9") || len(model.Calls()) != calls {
		t.Fatalf("replay: exit %d, %d calls\n%s%s", code, len(model.Calls())-calls, out, errs)
	}
	// the prompt changes: the node's request is not the one recorded, so
	// the case fails saying so, and the judge does not score an answer it
	// was not shown
	write("answer.prompt", "---\nfallback_expr: \"'no model'\"\n---\nAnswer in one line: {{.state.question}}\n")
	out, _, code = trellis(t, "eval", dataset)
	if code != 1 || !strings.Contains(out, "node answer asked what the cassette holds no reply for") ||
		!strings.Contains(out, "what the judge is shown changed since its reply was recorded") {
		t.Fatalf("drift: exit %d\n%s", code, out)
	}
}

// The command line's mistakes are usage errors, and a dataset's problems
// are listed at their lines.
func TestEvalUsage(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"eval", dir}, 2, "nothing to evaluate: no .eval.yaml files in " + dir},
		{[]string{"eval", "--format", "yaml", "../../flows"}, 2, `--format "yaml": want text, json, junit, github or markdown`},
		{[]string{"eval", "--report", "junit", "../../flows"}, 2, `--report "junit": want FORMAT=FILE`},
		{[]string{"eval", "--repeat", "0", "../../flows"}, 2, "--repeat 0: want 1 to 1000"},
		{[]string{"eval", "--record", "../../flows"}, 2, "--model and --record ask a model, and none is configured"},
	} {
		t.Setenv("OPENAI_BASE_URL", "")
		t.Setenv("OPENAI_API_KEY", "")
		_, errs, code := trellis(t, tc.args...)
		if code != tc.code || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d: %s", tc.args, code, errs)
		}
	}
	bad := filepath.Join(dir, "bad.eval.yaml")
	if err := os.WriteFile(bad, []byte("flow: ../../flows/interview.yaml\ncases:\n  - name: x\n    expect: {path: {in_order: [greting]}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs("../../flows/interview.yaml")
	editFile(t, bad, "../../flows/interview.yaml", abs)
	out, _, code := trellis(t, "eval", bad)
	if code != 1 || !regexp.MustCompile(`bad.eval.yaml:4:32: error\[G001\]: path: flow interview has no node "greting"; did you mean "greeting"\?`).MatchString(out) {
		t.Fatalf("exit %d\n%s", code, out)
	}
}

func lineOf(t *testing.T, path, text string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, text) {
			return itoa(i + 1)
		}
	}
	t.Fatalf("%s does not hold %q", path, text)
	return ""
}

func itoa(n int) string { return strconv.Itoa(n) }

// A thread becomes a case: run with a model over HTTP, made a case of
// (its message's path expected, the model's replies in the dataset's
// cassette), it replays offline and passes; the case then catches a
// change of the flow's behaviour.
func TestEvalAddFromThread(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("answer.yaml", judgedFlow)
	write("answer.prompt", "---\nfallback_expr: \"'no model'\"\n---\nAnswer briefly: {{.state.question}}\n")
	model := llmtest.New(llmtest.Rule{Match: "Answer briefly", Replies: []llmtest.Reply{{Content: "One round of nodes that run together."}}})
	srv := httptest.NewServer(model)
	defer srv.Close()
	db := "sqlite:" + filepath.Join(dir, "t.db")
	t.Setenv("OPENAI_API_KEY", "")
	t.Setenv("OPENAI_BASE_URL", srv.URL+"/v1")
	if out, errs, code := trellis(t, "run", filepath.Join(dir, "answer.yaml"), "--store", db, "--thread", "q1", "--input", "question=What is a superstep?"); code != 0 {
		t.Fatalf("run: %d\n%s%s", code, out, errs)
	}
	t.Setenv("OPENAI_BASE_URL", "")
	dataset := filepath.Join(dir, "answer.eval.yaml")
	_, errs, code := trellis(t, "eval", "add", "--from-thread", "q1", "--store", db, dataset)
	if code != 2 || !strings.Contains(errs, "--flow FLOW names the flow a new dataset evaluates") {
		t.Fatalf("no flow: %d %s", code, errs)
	}
	_, errs, code = trellis(t, "eval", "add", "--from-thread", "q1", "--store", db, "--flow", filepath.Join(dir, "answer.yaml"), "--name", "superstep", dataset)
	if code != 0 || !strings.Contains(errs, `added case "superstep" to `+dataset+", and the 1 model reply its runs were told to ") {
		t.Fatalf("add: %d %s", code, errs)
	}
	b, _ := os.ReadFile(dataset)
	if !strings.Contains(string(b), "flow: answer.yaml") || !strings.Contains(string(b), "input:\n          question: What is a superstep?") ||
		!strings.Contains(string(b), "exact: [answer]") {
		t.Fatalf("dataset:\n%s", b)
	}
	out, errs, code := trellis(t, "eval", "--format", "json", dataset)
	if code != 0 || !strings.Contains(out, `"output": "One round of nodes that run together."`) {
		t.Fatalf("offline replay: %d\n%s%s", code, out, errs)
	}
	// the same thread again under the same name is refused; under another
	// it goes after the first
	if _, errs, code := trellis(t, "eval", "add", "--from-thread", "q1", "--store", db, "--name", "superstep", dataset); code != 2 || !strings.Contains(errs, `has a case of that name: "superstep"`) {
		t.Fatalf("duplicate: %d %s", code, errs)
	}
	if _, errs, code := trellis(t, "eval", "add", "--from-thread", "q1", "--store", db, dataset); code != 0 {
		t.Fatalf("second: %d %s", code, errs)
	}
	out, _, code = trellis(t, "eval", dataset)
	if code != 0 || !strings.Contains(out, "pass   superstep") || !strings.Contains(out, "pass   thread q1") {
		t.Fatalf("two cases: %d\n%s", code, out)
	}
	// a flow that goes another way now fails the case, saying where
	editFile(t, filepath.Join(dir, "answer.yaml"), "  - {from: START, to: answer}\n  - {from: answer, to: END}", "  - {from: START, to: answer}\n  - {from: answer, to: again}\n  - {from: again, to: END}")
	editFile(t, filepath.Join(dir, "answer.yaml"), "edges:", "  again: {kind: noop}\nedges:")
	out, _, code = trellis(t, "eval", dataset)
	if code != 1 || !strings.Contains(out, "turn 1: path exact [answer]: not exactly [answer]; the path was [answer, again]") {
		t.Fatalf("changed flow: %d\n%s", code, out)
	}
}
