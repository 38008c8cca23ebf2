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

// TestInterviewRefusesOversizedInput: a 5 MB submission and a 20,000
// character answer are refused before anything is kept, each with a
// message that names the field and its limit; the conversation goes on,
// and the thread's SQLite file stays small.
func TestInterviewRefusesOversizedInput(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.py")
	if err := os.WriteFile(big, []byte(strings.Repeat("x = 1  # padding\n", 5<<20/17)), 0o644); err != nil {
		t.Fatal(err)
	}
	script := strings.Join([]string{
		"I build data pipelines in Go.",
		"Can we do a coding exercise?",
		"/code " + big + " here is my answer",
		strings.Repeat("word ", 4000),
		"Please wrap up.",
	}, "\n") + "\n"
	var out, errb strings.Builder
	file := filepath.Join(dir, "t.db")
	exit := cli.Main([]string{"run", "../../flows/interview.yaml", "--with", "../../flows/examples/candidate.yaml", "--store", "sqlite:" + file, "--thread", "big"},
		&cli.Env{Stdin: strings.NewReader(script), Stdout: &out, Stderr: &errb, Registry: all.Offline()})
	if exit != 0 {
		t.Fatalf("exit %d: %s", exit, errb.String())
	}
	for _, want := range []string{`not sent: input "current_code"`, `not sent: input "last_response"`, "Overall"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("transcript lacks %q:\n%.3000s", want, out.String())
		}
	}
	if strings.Count(out.String(), "not sent:") != 2 || strings.Contains(out.String(), "I have your code") {
		t.Errorf("a refused turn ran:\n%.3000s", out.String())
	}
	var size int64
	for _, suffix := range []string{"", "-wal"} {
		if fi, err := os.Stat(file + suffix); err == nil {
			size += fi.Size()
		}
	}
	if size > 2<<20 {
		t.Errorf("the thread's store holds %d bytes after a refused 5 MB submission", size)
	}
	// nothing of the refused turns is in the thread
	var state strings.Builder
	if code := cli.Main([]string{"state", "big", "--store", "sqlite:" + file},
		&cli.Env{Stdin: strings.NewReader(""), Stdout: &state, Stderr: &errb, Registry: all.Offline()}); code != 0 {
		t.Fatalf("state: exit %d: %s", code, errb.String())
	}
	if strings.Contains(state.String(), "padding") || strings.Contains(state.String(), "word word word") {
		t.Errorf("a refused input reached the state (%d bytes)", state.Len())
	}
}
