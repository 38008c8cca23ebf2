package testfile_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/kind/kindtest"
	"github.com/trellisflow/trellis/runtime/testfile"
)

const tallyFlow = `version: 1
name: tally
state:
  schema:
    type: object
    properties:
      items: {type: array, items: {type: string}, default: []}
      total: {type: integer, default: 0}
      label: {type: string, default: ""}
nodes:
  count: {kind: set, set: {total: "len(state.items)"}}
edges:
  - {from: START, to: count}
  - {from: count, to: END}
output: "{{.state.label}}: {{.state.total}} items"
`

// run writes the flow, a values file and a test file, and runs the tests.
func run(t *testing.T, tests string) []testfile.Result {
	t.Helper()
	dir := t.TempDir()
	for name, body := range map[string]string{
		"tally.yaml":            tallyFlow,
		"values/three.yaml":     "items: [a, b, c]\nlabel: from the file\n",
		"tally.test.yaml":       "flow: tally.yaml\ntests:\n" + tests,
		"values/not-a-map.yaml": "[a, b]\n",
	} {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, err := testfile.Load(filepath.Join(dir, "tally.test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	results, err := testfile.RunFile(context.Background(), f, kindtest.Registry(), "")
	if err != nil {
		t.Fatal(err)
	}
	return results
}

// with_file gives a thread its initial values from a file, with's go over
// them; output conditions read the flow's rendered output.
func TestWithFileAndOutput(t *testing.T) {
	results := run(t, `
  - name: passes
    with_file: values/three.yaml
    with: {label: tally}
    runs:
      - expect:
          output: ["output == 'tally: 3 items'", "output contains state.label"]
    expect:
      output: ["output endsWith '3 items'"]
  - name: fails
    with_file: values/three.yaml
    runs:
      - expect:
          output: ["output == 'tally: 3 items'", "output contains 'nothing'"]
  - name: no such file
    with_file: values/none.yaml
  - name: not a mapping
    with_file: values/not-a-map.yaml
`)
	if len(results) != 4 {
		t.Fatalf("%d results", len(results))
	}
	if !results[0].Passed() {
		t.Errorf("passes: %v", results[0].Failures)
	}
	if f := results[1].Failures; len(f) != 2 || !strings.Contains(f[0], "output: output == 'tally: 3 items' does not hold") ||
		!strings.Contains(f[0], "| from the file: 3 items") || !strings.Contains(f[1], "output contains 'nothing'") {
		t.Errorf("fails: %q", f)
	}
	for _, r := range results[2:] {
		if len(r.Failures) != 1 || !strings.Contains(r.Failures[0], "with_file: values/") {
			t.Errorf("%s: %q", r.Name, r.Failures)
		}
	}
}

// The tests of two files run at once on one compiled graph, each with
// its own scripted node and a run stopped before its first step: each
// sees its own script, and the graph is not written (the race detector
// would say so), before or after.
func TestTwoFilesShareACompiledGraph(t *testing.T) {
	dir := t.TempDir()
	flowPath := filepath.Join(dir, "tally.yaml")
	if err := os.WriteFile(flowPath, []byte(tallyFlow), 0o644); err != nil {
		t.Fatal(err)
	}
	g, dl := flow.Load(flowPath, kindtest.Registry())
	if g == nil || dl.HasErrors() {
		t.Fatal(dl)
	}
	impls := make([]kind.Node, len(g.Nodes))
	for i, n := range g.Nodes {
		impls[i] = n.Impl
	}
	file := func(name string, total int) *testfile.File {
		src := fmt.Sprintf(`flow: tally.yaml
tests:
  - name: scripted %d
    script:
      count: [{set: {total: %d}}, {set: {total: %d}}]
    runs:
      - stop_after: 0
        expect: {paused: [count]}
      - resume: true
        expect: {state: ["state.total == %d"]}
  - name: the real node
    with: {items: [a, b]}
    expect: {state: ["state.total == 2"]}
`, total, total, total, total)
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := testfile.Load(p)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	files := []*testfile.File{file("a.test.yaml", 7), file("b.test.yaml", 9)}
	var wg sync.WaitGroup
	results := make([][]testfile.Result, len(files))
	for round := range 4 {
		for i, f := range files {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i] = testfile.RunCompiled(context.Background(), f, g, testfile.Options{Reload: round%2 == 1})
			}()
		}
		wg.Wait()
		for i, rs := range results {
			if len(rs) != 2 {
				t.Fatalf("file %d: %d results", i, len(rs))
			}
			for _, r := range rs {
				if !r.Passed() {
					t.Errorf("file %d, %s: %v", i, r.Name, r.Failures)
				}
			}
		}
	}
	for i, n := range g.Nodes {
		if n.Impl != impls[i] || n.InterruptBefore {
			t.Errorf("node %s was changed", n.Name)
		}
	}
	if g.Pauses {
		t.Error("the graph pauses after the tests")
	}
}
