package sandbox_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/nodes/sandbox"
	"github.com/trellisflow/trellis/nodes/sandbox/sandboxtest"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/store/memory"
)

const review = `version: 1
name: review
input: [code]
state:
  schema:
    type: object
    properties:
      code: {type: string, default: ""}
      exercise:
        type: object
        default: {tests: [{name: small, call: "add(1, 2)", expected: 3}, {name: big, call: "add(40, 2)", expected: 42}]}
      results: {type: array, items: {type: object}, default: []}
      verdict: {type: string, default: ""}
      signals: {type: array, items: {type: string}, default: []}
    reducers:
      results: append
nodes:
  run_code:
    kind: sandbox
    language: python
    code: state.code
    tests: state.exercise.tests
    limits: {wall_time: 10s, memory_mb: 128}
    writes:
      results: "[output]"
      verdict: "output.executed ? output.status + ' ' + string(output.passed) + '/' + string(output.total) : 'not run: ' + (output.error ?? 'no reason given')"
      signals: "output.status == 'syntax_error' ? ['syntax_error'] : (output.failed > 0 ? ['struggling'] : ['confident'])"
edges:
  - {from: START, to: run_code}
  - {from: run_code, to: END}
`

func load(t *testing.T, src string, pool *sandbox.Pool) *flow.Graph {
	t.Helper()
	g, dl := flow.LoadSource("review.yaml", []byte(src), kind.NewSet(sandbox.NewSpec(func() *sandbox.Pool { return pool })))
	if g == nil || len(dl) > 0 {
		t.Fatalf("load: %v", dl)
	}
	return g
}

func TestSandboxNode(t *testing.T) {
	for name, pool := range sandboxtest.Backends(t, 2) {
		t.Run(name, func(t *testing.T) {
			g := load(t, review, pool)
			var events []engine.Event
			res, err := engine.New(memory.New()).Run(ctx, g, engine.Request{Thread: "t",
				Input:   map[string]any{"code": "def add(a, b):\n    return a + b if a < 40 else 0\n"},
				Observe: func(e engine.Event) { events = append(events, e) }})
			if err != nil {
				t.Fatal(err)
			}
			if v := res.State["verdict"]; v != "failed 1/2" {
				t.Errorf("verdict %v", v)
			}
			results := res.State["results"].([]any)
			r := results[0].(map[string]any)
			if r["backend"] != name || r["executed"] != true || r["language"] != "python" {
				t.Errorf("result %v", r)
			}
			if s := res.State["signals"].([]any); len(s) != 1 || s[0] != "struggling" {
				t.Errorf("signals %v", s)
			}
			for _, e := range events {
				if e.Type == engine.NodeEnd && e.Degraded != "" {
					t.Errorf("degraded: %s", e.Degraded)
				}
			}
		})
	}
}

// With no sandbox the node writes a result that says so and is marked
// degraded: the flow never pretends the code ran.
func TestSandboxNodeWithoutSandbox(t *testing.T) {
	g := load(t, review, nil)
	var degraded string
	res, err := engine.New(memory.New()).Run(ctx, g, engine.Request{Thread: "t",
		Input: map[string]any{"code": "def add(a, b):\n    return a + b\n"},
		Observe: func(e engine.Event) {
			if e.Type == engine.NodeEnd {
				degraded = e.Degraded
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if v := res.State["verdict"].(string); !strings.HasPrefix(v, "not run: the code was not run: no sandbox") {
		t.Errorf("verdict %q", v)
	}
	if degraded == "" {
		t.Error("the node is not marked degraded")
	}
	r := res.State["results"].([]any)[0].(map[string]any)
	if r["executed"] != false || r["status"] != "not_run" {
		t.Errorf("result %v", r)
	}
}

// Every problem of a sandbox node is reported at load, at its place.
func TestSandboxNodeIsCheckedAtLoad(t *testing.T) {
	src := strings.NewReplacer(
		"language: python", "language: pyhton",
		"code: state.code", "code: len(state.code)",
		"wall_time: 10s", "wall_time: 2h",
		"verdict: \"output.executed", "verdict: \"output.exectued",
	).Replace(review)
	_, dl := flow.LoadSource("review.yaml", []byte(src), kind.NewSet(sandbox.NewSpec(func() *sandbox.Pool { return nil })))
	var got []string
	for _, d := range dl {
		got = append(got, d.String())
	}
	text := strings.Join(got, "\n")
	for _, want := range []string{
		`review.yaml:20:15: error[K002]: unknown language "pyhton" (known: javascript, python); did you mean "python"?`,
		`review.yaml:21:11: error[K002]: this expression gives a number, not a string`,
		`limits.wall_time: 2h0m0s is out of range (10ms to 1h)`,
		`exectued`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("missing %q in:\n%s", want, text)
		}
	}
}

// A flow adds a language as data: sandbox/NAME.yaml beside it, with its
// driver there too.
func TestLanguageOfTheFlow(t *testing.T) {
	dir := t.TempDir()
	driver, err := os.ReadFile("languages/python.py")
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "sandbox"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "sandbox", "py.py"), driver, 0o644))
	must(os.WriteFile(filepath.Join(dir, "sandbox", "py.yaml"), []byte("name: py\ntitle: Python, as the flow's own\nfile: solution.py\ndriver: py.py\ncommand: [python3, -I, -c, $DRIVER]\n"), 0o644))
	src := strings.Replace(review, "language: python", "language: py", 1)
	must(os.WriteFile(filepath.Join(dir, "review.yaml"), []byte(src), 0o644))
	pool := sandboxtest.Local(t, 1)
	g, dl := flow.Load(filepath.Join(dir, "review.yaml"), kind.NewSet(sandbox.NewSpec(func() *sandbox.Pool { return pool })))
	if g == nil || len(dl) > 0 {
		t.Fatal(dl)
	}
	res, err := engine.New(memory.New()).Run(ctx, g, engine.Request{Thread: "t",
		Input: map[string]any{"code": "def add(a, b):\n    return a + b\n"}})
	if err != nil {
		t.Fatal(err)
	}
	r := res.State["results"].([]any)[0].(map[string]any)
	if res.State["verdict"] != "passed 2/2" || r["language"] != "py" {
		t.Errorf("verdict %v, result %v", res.State["verdict"], r)
	}

	// a language file that misses what it needs is reported at the node
	must(os.WriteFile(filepath.Join(dir, "sandbox", "py.yaml"), []byte("name: py\nfile: a/b.py\ncommand: [python3]\n"), 0o644))
	_, dl = flow.Load(filepath.Join(dir, "review.yaml"), kind.NewSet(sandbox.NewSpec(func() *sandbox.Pool { return nil })))
	if len(dl) != 1 || !strings.Contains(dl[0].String(), "missing driver") {
		t.Errorf("diagnostics %v", dl)
	}
}

// The result's schema flows into the field it is written to.
func TestResultTypeFlow(t *testing.T) {
	src := strings.NewReplacer(
		"      verdict: {type: string, default: \"\"}", "      verdict: {type: string, default: \"\"}\n      last: {type: object, properties: {status: {enum: [passed, failed]}, wall_ms: {type: string}}, default: {}}",
		"      results: \"[output]\"", "      results: \"[output]\"\n      last: output",
	).Replace(review)
	_, dl := flow.LoadSource("review.yaml", []byte(src), kind.NewSet(sandbox.NewSpec(func() *sandbox.Pool { return nil })))
	if len(dl) != 1 || !strings.Contains(dl[0].String(), `error[W004]: field "last" cannot hold what this expression gives: output.status may be "ok", "error", "syntax_error", "limit", "not_run", which the field's enum ("passed", "failed") does not list; output.wall_ms is integer, where the field takes string`) {
		t.Errorf("diagnostics: %v", dl)
	}
}
