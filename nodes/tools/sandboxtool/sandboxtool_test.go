package sandboxtool_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/nodes/llm"
	"github.com/trellisflow/trellis/nodes/sandbox"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/store/memory"
)

const coder = `version: 1
name: coder
state:
  schema:
    type: object
    properties:
      code: {type: string, default: ""}
      result: {type: [object, "null"], default: null}
input: [code]
tools:
  run_python:
    kind: sandbox
    language: python
    limits: {wall_time: 10s}
nodes:
  coder:
    kind: llm
    prompt: coder
    tools: [run_python]
    writes: {result: "tool_calls[0].result"}
edges:
  - {from: START, to: coder}
  - {from: coder, to: END}
`

const prompt = `---
fallback_calls:
  - tool: run_python
    arguments: {code: "state.code", stdin: "'Ada'"}
fallback: done
---
Run {{.state.code}}
`

func load(t *testing.T, pool *sandbox.Pool) *flow.Graph {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "prompts"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "coder.yaml"), []byte(coder), 0o644)
	os.WriteFile(filepath.Join(dir, "prompts", "coder.prompt"), []byte(prompt), 0o644)
	reg := all.With(func() *llm.Provider { return nil }, func() *sandbox.Pool { return pool })
	g, dl := flow.Load(filepath.Join(dir, "coder.yaml"), reg)
	if dl.HasErrors() {
		t.Fatalf("load: %v", dl)
	}
	return g
}

// A sandbox tool runs the code it is given on the sandbox's backend, and
// its result is the sandbox's.
func TestRunsCodeInTheSandbox(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bubblewrap (bwrap) is not installed: the local sandbox backend cannot run; apt-get install bubblewrap")
	}
	t.Setenv("TRELLIS_SANDBOX", "local")
	pool, err := sandbox.FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	g := load(t, pool)
	res, err := engine.New(memory.New()).Run(context.Background(), g, engine.Request{Thread: "t",
		Input: map[string]any{"code": "import sys\nprint('hello', sys.stdin.read())"}})
	if err != nil {
		t.Fatal(err)
	}
	r := res.State["result"].(map[string]any)
	if r["status"] != "ok" || strings.TrimSpace(r["stdout"].(string)) != "hello Ada" || r["executed"] != true {
		t.Fatalf("result %v", r)
	}
}

// With no sandbox, a call's result says the code was not run.
func TestNoSandboxSaysNotRun(t *testing.T) {
	g := load(t, nil)
	res, err := engine.New(memory.New()).Run(context.Background(), g, engine.Request{Thread: "t", Input: map[string]any{"code": "print(1)"}})
	if err != nil {
		t.Fatal(err)
	}
	r := res.State["result"].(map[string]any)
	if r["status"] != "not_run" || !strings.Contains(r["error"].(string), "no sandbox") {
		t.Fatalf("result %v", r)
	}
}
