package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/cmd/trellis/internal/cli"
	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/runtime/flow"
)

// TestFlowsValidate: every flow in this folder compiles with no diagnostic.
func TestFlowsValidate(t *testing.T) {
	files, err := cli.FlowFiles([]string{"../../flows"})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 4 {
		t.Fatalf("found only %v", files)
	}
	for _, f := range files {
		if _, dl := flow.Load(f, all.Offline()); len(dl) > 0 {
			t.Errorf("%s:\n%v", f, dl)
		}
	}
}

func TestInterviewInTheTerminal(t *testing.T) {
	code := filepath.Join(t.TempDir(), "sol.py")
	os.WriteFile(code, []byte("def top_k(words, k):\n    return sorted(words)[:k]\n"), 0o644)
	script := strings.Join([]string{
		"I build data pipelines in Go.",
		"/state",
		"Can we do a coding exercise?",
		"/code " + code + " here is my answer",
		"I would test ties first.",
		"Please wrap up.",
	}, "\n") + "\n"
	var out, errb strings.Builder
	db := "sqlite:" + filepath.Join(t.TempDir(), "t.db")
	exit := cli.Main([]string{"run", "../../flows/interview.yaml", "--with", "../../flows/examples/candidate.yaml", "--store", db, "--thread", "i1"},
		&cli.Env{Stdin: strings.NewReader(script), Stdout: &out, Stderr: &errb, Registry: all.Offline()})
	if exit != 0 {
		t.Fatalf("exit %d: %s", exit, errb.String())
	}
	for _, want := range []string{"interview> Hi Ada", `"interview_id": "demo-001"`, "coding exercise", "I have your code: 2 lines", "Overall"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("transcript lacks %q:\n%s", want, out.String())
		}
	}
	// the conversation is in the SQLite file: a new process sees it ended
	var again strings.Builder
	exit = cli.Main([]string{"run", "../../flows/interview.yaml", "--store", db, "--thread", "i1"},
		&cli.Env{Stdin: strings.NewReader("hello?\n"), Stdout: &again, Stderr: &errb, Registry: all.Offline()})
	if exit != 0 || !strings.Contains(again.String(), "Overall") || strings.Contains(again.String(), "you>") {
		t.Fatalf("resumed finished interview: %d\n%s", exit, again.String())
	}
}
