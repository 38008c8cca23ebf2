package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/cmd/trellis/internal/cli"
	"github.com/trellisflow/trellis/nodes/all"
)

const askFlow = `version: 1
name: ask
input: [amount]
state:
  schema:
    type: object
    properties:
      amount: {type: integer, default: 0}
      approved: {type: boolean, default: false}
      budget: {type: string, default: ""}
nodes:
  start: {kind: noop}
  approve: {kind: interrupt, ask: "'Approve ' + string(state.amount) + '?'", writes: {approved: "answer == true"}}
  budget: {kind: interrupt, ask: "{'pick': ['ops', 'rnd']}", writes: {budget: "string(answer)"}}
edges:
  - {from: START, to: start}
  - {from: start, to: [approve, budget]}
  - {from: [approve, budget], to: END}
`

// trellis run asks a paused run's questions on standard input and
// resumes with the answers; without input it says how to answer with
// --answer, which a later --resume takes.
func TestRunAsksQuestions(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ask.yaml")
	if err := os.WriteFile(path, []byte(askFlow), 0o644); err != nil {
		t.Fatal(err)
	}
	db := "sqlite:" + filepath.Join(dir, "a.db")
	run := func(stdin string, args ...string) (string, string, int) {
		var out, errs bytes.Buffer
		code := cli.Main(args, &cli.Env{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errs, Registry: all.Registry()})
		return out.String(), errs.String(), code
	}
	out, errs, code := run("true\nops\n", "run", path, "--store", db, "--thread", "a", "--input", "amount=5")
	if code != 0 || !strings.Contains(errs, `approve asks: "Approve 5?"`) || !strings.Contains(errs, `budget asks: {"pick":["ops","rnd"]}`) ||
		!strings.Contains(out, `"approved": true`) || !strings.Contains(out, `"budget": "ops"`) {
		t.Fatalf("answered on standard input: %d\n%s%s", code, out, errs)
	}
	out, errs, code = run("", "run", path, "--store", db, "--thread", "b", "--input", "amount=7")
	if code != 0 || !strings.Contains(errs, "--resume --answer approve=VALUE --answer budget=VALUE") {
		t.Fatalf("no input to answer with: %d\n%s%s", code, out, errs)
	}
	out, errs, code = run("", "run", path, "--store", db, "--thread", "b", "--resume", "--answer", "budget=rnd")
	if code != 0 || !strings.Contains(errs, "approve asks") || strings.Contains(errs, "budget asks") {
		t.Fatalf("one answer: %d\n%s%s", code, out, errs)
	}
	out, errs, code = run("", "run", path, "--store", db, "--thread", "b", "--resume", "--answer", "approve=no")
	if code != 0 || !strings.Contains(out, `"approved": false`) || !strings.Contains(out, `"budget": "rnd"`) {
		t.Fatalf("the other answer: %d\n%s%s", code, out, errs)
	}
	if _, errs, code = run("", "run", path, "--store", db, "--thread", "c", "--input", "amount=1", "--answer", "approve=yes"); code != 2 {
		t.Fatalf("--answer without --resume: %d %s", code, errs)
	}
}

// Questions asked inside a map's items (the expenses example, whose
// claims over the limit ask in a subflow): trellis run names each by its
// path, with its id; the hint answers by path; a resume answers some by
// path or id, and asks the others again; an answer naming no question
// is refused (exit 2) with the questions there are; answering on
// standard input goes on to the end.
func TestRunAnswersNestedQuestions(t *testing.T) {
	dir := t.TempDir()
	db := "sqlite:" + filepath.Join(dir, "e.db")
	const flowPath, claims = "../../flows/examples/expenses.yaml", "../../flows/examples/claims.yaml"
	run := func(stdin string, args ...string) (string, string, int) {
		var out, errs bytes.Buffer
		code := cli.Main(args, &cli.Env{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errs, Registry: all.Registry()})
		return out.String(), errs.String(), code
	}
	out, errs, code := run("", "run", flowPath, "--store", db, "--thread", "q", "--input-file", claims)
	if code != 0 || !strings.Contains(errs, `claims[0]/manager asks: {"amount":250,"question":"Approve Ada's claim of 250?","who":"Ada"} (id claims[0]:2|manager)`) ||
		!strings.Contains(errs, "--resume --answer 'claims[0]/manager=VALUE' --answer 'claims[2]/manager=VALUE'") {
		t.Fatalf("the pause: %d\n%s%s", code, out, errs)
	}
	if _, errs, code = run("", "run", flowPath, "--store", db, "--thread", "q", "--resume", "--answer", "claims[1]/manager=true"); code != 2 ||
		!strings.Contains(errs, "claims[1]/manager") || !strings.Contains(errs, "it waits on claims[0]/manager, claims[2]/manager") {
		t.Fatalf("an answer to no question: %d %s", code, errs)
	}
	out, errs, code = run("", "run", flowPath, "--store", db, "--thread", "q", "--resume", "--answer", "claims[2]:2|manager={approve: false, note: too much}")
	if code != 0 || strings.Contains(errs, "claims[2]/manager asks") || !strings.Contains(errs, "claims[0]/manager asks") {
		t.Fatalf("Cy's answer: %d\n%s%s", code, out, errs)
	}
	// Ada's paused child, corrected under its thread with the root's flow
	if _, errs, code = run("", "update", flowPath, "q|claims[0]:2", "--store", db, "--as", "manager", "--set", "note=receipts checked"); code != 0 ||
		!strings.Contains(errs, "its run goes on with [manager] when thread q is resumed") {
		t.Fatalf("the child's update: %d %s", code, errs)
	}
	out, errs, code = run("true\n", "run", flowPath, "--store", db, "--thread", "q", "--resume")
	if code != 0 || !strings.Contains(out, "Ada: 250 approved (receipts checked)") || !strings.Contains(out, "Cy: 900 refused (too much)") || !strings.Contains(out, "Approved in all: 365") {
		t.Fatalf("Ada's answer on standard input: %d\n%s%s", code, out, errs)
	}
	// a flow test made of the thread: the pause, and every answer its
	// resumes gave, by path; it passes as made
	made := filepath.Join(dir, "q.test.yaml")
	out, errs, code = run("", "test", "--store", db, "--from-thread", "q", "--out", made, flowPath)
	text, _ := os.ReadFile(made)
	if code != 0 || !strings.Contains(out+errs, "1 passed, 0 failed") || !strings.Contains(string(text), "paused: ['claims[0]/manager', 'claims[2]/manager']") ||
		!strings.Contains(string(text), "claims[0]/manager: true") || !strings.Contains(string(text), "claims[2]/manager:") {
		t.Fatalf("the flow test of the thread: %d\n%s%s\n%s", code, out, errs, text)
	}
}

// A map of six askers: every question is listed, the command that goes
// on spells out four answers and counts the others; answering two of
// them, one by its path and one past the four, asks the four left.
func TestRunHintsManyQuestions(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "many.yaml")
	if err := os.WriteFile(path, []byte(`version: 1
name: many
input: [xs]
state:
  schema:
    type: object
    properties:
      xs: {type: array, items: {type: integer}, default: []}
      got: {type: array, items: {type: string}, default: []}
  reducers:
    got: append
nodes:
  each:
    kind: map
    items: "state.xs"
    node: {kind: interrupt, ask: "'ok ' + string(item) + '?'", writes: {got: "[string(item) + ': ' + string(answer)]"}}
edges:
  - {from: START, to: each}
  - {from: each, to: END}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	db := "sqlite:" + filepath.Join(dir, "m.db")
	run := func(args ...string) (string, string, int) {
		var out, errs bytes.Buffer
		code := cli.Main(args, &cli.Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errs, Registry: all.Registry()})
		// what is printed once standard input has no answer: the
		// questions, and the command that goes on
		text := errs.String()
		if i := strings.LastIndex(text, "> \n"); i >= 0 {
			text = text[i+3:]
		}
		return out.String(), text, code
	}
	out, errs, code := run("run", path, "--store", db, "--thread", "m", "--input", "xs=[10, 11, 12, 13, 14, 15]")
	if code != 0 || strings.Count(errs, " asks: ") != 6 || !strings.Contains(errs, `each[5] asks: "ok 15?"`) ||
		!strings.Contains(errs, "--resume --answer 'each[0]=VALUE' --answer 'each[1]=VALUE' --answer 'each[2]=VALUE' --answer 'each[3]=VALUE'` goes on; any of the 2 other questions is answered the same way") ||
		strings.Contains(errs, "'each[4]=VALUE'") {
		t.Fatalf("six questions: %d\n%s%s", code, out, errs)
	}
	out, errs, code = run("run", path, "--store", db, "--thread", "m", "--resume", "--answer", "each[5]=yes", "--answer", "each[1]=no")
	if code != 0 || strings.Count(errs, " asks: ") != 4 || strings.Contains(errs, "each[5] asks") || strings.Contains(errs, "each[1] asks") ||
		!strings.Contains(errs, "--answer 'each[4]=VALUE'` goes on\n") {
		t.Fatalf("two answered: %d\n%s%s", code, out, errs)
	}
	out, errs, code = run("run", path, "--store", db, "--thread", "m", "--resume", "--json",
		"--answer", "each[0]=a", "--answer", "each[2]=b", "--answer", "each[3]=c", "--answer", "each[4]=d")
	if code != 0 || strings.Contains(errs, " asks: ") || !strings.Contains(strings.Join(strings.Fields(out), " "), `"got": [ "10: a", "11: no", "12: b", "13: c", "14: d", "15: yes" ]`) {
		t.Fatalf("all answered: %d\n%s%s", code, out, errs)
	}
}

// A resumed run that fails is reported as a failed run, with its exit
// code, answered or not: it does not take the command down.
func TestResumedRunThatFails(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ask.yaml")
	if err := os.WriteFile(path, []byte(`version: 1
name: ask
input: [amount]
state:
  schema:
    type: object
    properties:
      amount: {type: integer, default: 0}
      approved: {type: boolean, default: false}
      share: {type: integer, default: 0}
nodes:
  approve: {kind: interrupt, ask: "'Approve ' + string(state.amount) + '?'", writes: {approved: "answer == true"}}
  split: {kind: assign, set: {share: "state.approved ? 100 % (state.amount - 5) : 0"}}
edges:
  - {from: START, to: approve}
  - {from: approve, to: split}
  - {from: split, to: END}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	db := "sqlite:" + filepath.Join(dir, "a.db")
	run := func(args ...string) (out, errs string, code int) {
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("trellis %s panicked: %v", strings.Join(args, " "), p)
			}
		}()
		var o, e bytes.Buffer
		code = cli.Main(args, &cli.Env{Stdin: strings.NewReader(""), Stdout: &o, Stderr: &e, Registry: all.Registry()})
		return o.String(), e.String(), code
	}
	if _, errs, code := run("run", path, "--store", db, "--thread", "a", "--input", "amount=5"); code != 0 || !strings.Contains(errs, "approve asks") {
		t.Fatalf("the run did not pause: %d %s", code, errs)
	}
	// an answer to no question is refused as input
	if out, errs, code := run("run", path, "--store", db, "--thread", "a", "--resume", "--answer", "split=1"); code != 2 || !strings.Contains(errs, "answers.split") {
		t.Fatalf("an answer to a node that asks nothing: exit %d\n%s%s", code, out, errs)
	}
	// the answered run fails in the step after
	if out, errs, code := run("run", path, "--store", db, "--thread", "a", "--resume", "--answer", "approve=true"); code != 3 ||
		!strings.Contains(errs, `node "split"`) || !strings.Contains(errs, "divide by zero") {
		t.Fatalf("a resumed run that fails: exit %d\n%s%s", code, out, errs)
	}
}
