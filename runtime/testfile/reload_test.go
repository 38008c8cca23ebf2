package testfile_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/kind/kindtest"
	"github.com/trellisflow/trellis/runtime/testfile"
)

// ticks counts the runs of tick nodes in the process: a node whose
// writes differ from one run of a test to the next.
var ticks atomic.Int64

var tick = kind.Spec{
	Name:    "tick",
	Summary: "Write how many tick nodes ran in the process.",
	New: func(b kind.Builder) kind.Node {
		b.Writes("n", b.Settings().Block())
		return kind.Func(func(context.Context, kind.State) (kind.Update, error) {
			return kind.Update{{Field: "n", Value: int(ticks.Add(1))}}, nil
		})
	},
}

const tickFlow = `version: 1
name: ticks
state:
  schema:
    type: object
    properties:
      n: {type: integer, default: 0}
      more: {type: boolean, default: false}
      list: {type: array, items: {type: integer}, default: []}
  reducers: {list: append}
nodes:
  tick: {kind: tick}
  steady: {kind: set, set: {list: "[len(state.list)]", more: "len(state.list) < 2"}}
edges:
  - {from: START, to: steady}
  - from: steady
    bound: 3
    branch:
      - {when: state.more, to: steady}
      - else: tick
  - {from: tick, to: END}
`

// runReload runs the tests of a test file over the tick flow.
func runReload(t *testing.T, tests string, reload bool) []testfile.Result {
	t.Helper()
	dir := t.TempDir()
	for name, body := range map[string]string{"ticks.yaml": tickFlow, "ticks.test.yaml": "flow: ticks.yaml\ntests:\n" + tests} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, err := testfile.Load(filepath.Join(dir, "ticks.test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	reg := kind.NewSet(tick)
	for _, sp := range kindtest.Registry().Specs() {
		reg.Register(*sp)
	}
	results, err := testfile.RunFileWith(context.Background(), f, reg, testfile.Options{Reload: reload})
	if err != nil {
		t.Fatal(err)
	}
	return results
}

// With reload, each test runs twice, the second time with its state read
// back between steps, and the two must agree: a node whose writes differ
// from run to run is caught, field by field, unless the test scripts it;
// a test that asks for reload gets it without the option; a flow that
// runs alike passes.
func TestReloadComparesTheRuns(t *testing.T) {
	const tests = `
  - name: unscripted
    runs:
      - expect: {path: [steady, steady, steady, tick]}
  - name: scripted
    script:
      tick: [{set: {n: 7}}]
    runs:
      - expect: {state: ["state.n == 7", "state.list == [0, 1, 2]"]}
`
	results := runReload(t, tests, true)
	if len(results) != 2 {
		t.Fatalf("%d results", len(results))
	}
	if f := results[0].Failures; len(f) != 1 || !strings.Contains(f[0], "run 1: state.n differs when the state is read back between steps") {
		t.Errorf("unscripted: %q", f)
	}
	if !results[1].Passed() {
		t.Errorf("scripted: %q", results[1].Failures)
	}
	// without the option, only a test that asks is run twice
	results = runReload(t, tests+"    reload: true\n", false)
	if !results[0].Passed() || !results[1].Passed() {
		t.Errorf("without reload: %q %q", results[0].Failures, results[1].Failures)
	}
	results = runReload(t, strings.Replace(tests, "  - name: scripted", "    reload: true\n  - name: scripted", 1), false)
	if len(results[0].Failures) != 1 || !results[1].Passed() {
		t.Errorf("a test that asks for reload: %q %q", results[0].Failures, results[1].Failures)
	}
}
