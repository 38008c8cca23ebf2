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
