package testfile_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind/kindtest"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/memory"
	"github.com/trellisflow/trellis/runtime/testfile"
)

const deskFlow = `version: 1
name: desk
input: [item]
state:
  schema:
    type: object
    properties:
      item: {type: string, default: ""}
      owner: {type: string, default: ""}
      items: {type: array, items: {type: string}, default: []}
      count: {type: integer, default: 0}
      id: {type: string, default: ""}
      note: {type: string, default: ""}
  reducers:
    items: append
nodes:
  take: {kind: set, set: {items: "[input.item]", id: "uuid()"}}
  tally: {kind: set, set: {count: "state.count + 1"}}
  check: {kind: set, set: {note: "state.owner + ' checked ' + string(state.count)"}, interrupt_before: true}
  [left, right]: ~
edges:
  - {from: START, to: take}
  - {from: take, to: tally}
  - {from: tally, to: check}
  - {from: check, to: END}
`

// A thread's runs, pauses, resumes and corrections, and a fork of it,
// made into flow tests: each loads, passes as made, and fails when the
// flow no longer does what the thread did; a random id is left
// unasserted.
func TestFromThread(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	src := strings.Replace(deskFlow, "  [left, right]: ~\n", "", 1)
	flowPath := filepath.Join(dir, "desk.yaml")
	if err := os.WriteFile(flowPath, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	g, dl := flow.Load(flowPath, kindtest.Registry())
	if g == nil {
		t.Fatal(dl)
	}
	st := memory.New()
	eng := engine.New(st)
	if _, err := eng.Create(ctx, g, "t", map[string]any{"owner": "ada"}); err != nil {
		t.Fatal(err)
	}
	must := func(res *engine.Result, err error) *engine.Result {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	must(eng.Run(ctx, g, engine.Request{Thread: "t", Input: map[string]any{"item": "a"}}))
	must(eng.Run(ctx, g, engine.Request{Thread: "t", Resume: true}))
	// a correction as tally stands for a step that ran it: check is next,
	// and the thread is resumed before it takes new input
	if snap, err := eng.Update(ctx, g, "t", "tally", map[string]any{"count": 10}); err != nil || !slices.Equal(snap.Next, []string{"check"}) {
		t.Fatalf("update as tally: %v %+v", err, snap)
	}
	must(eng.Run(ctx, g, engine.Request{Thread: "t", Resume: true}))
	must(eng.Run(ctx, g, engine.Request{Thread: "t", Input: map[string]any{"item": "b"}}))
	must(eng.Run(ctx, g, engine.Request{Thread: "t", Resume: true}))

	made, err := testfile.FromThread(ctx, st, g, kindtest.Registry(), "t", filepath.Join(dir, "t.test.yaml"), "desk.yaml")
	if err != nil {
		t.Fatal(err)
	}
	text := string(made.Text)
	for _, want := range []string{
		"owner: ada",
		"item: a",
		"paused: [check]",
		"resume: true",
		"update:",
		"as: tally",
		"count: 10",
		"path: [take, tally]",
		"path: [check]",
		`state.note == "ada checked 11"`,
		`json(state.items) == "[\"a\",\"b\"]"`,
		"# Not asserted: id",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the test lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "state.owner") {
		t.Errorf("a field no run changed is asserted:\n%s", text)
	}
	passes := func(name, text string) []testfile.Result {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := testfile.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		res, err := testfile.RunFile(ctx, f, kindtest.Registry(), "")
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := passes("t.test.yaml", text); len(res) != 1 || !res[0].Passed() {
		t.Fatalf("the test made of the thread: %+v\n%s", res, text)
	}
	// the test fails once the flow does otherwise
	broken := strings.Replace(text, `"ada checked 11"`, `"ada checked 12"`, 1)
	if res := passes("broken.test.yaml", broken); res[0].Passed() {
		t.Error("a test expecting another note passed")
	}

	// a fork of the second run's input checkpoint, resumed: its test
	// follows it back through the thread it was forked from
	hist, _ := st.History(ctx, "t", store.HistoryOptions{Source: store.SourceInput, Limit: 1})
	if _, err := store.Fork(ctx, st, "t", hist[0].Seq, "f"); err != nil {
		t.Fatal(err)
	}
	must(eng.Run(ctx, g, engine.Request{Thread: "f", Resume: true}))
	must(eng.Run(ctx, g, engine.Request{Thread: "f", Resume: true}))
	made, err = testfile.FromThread(ctx, st, g, kindtest.Registry(), "f", filepath.Join(dir, "f.test.yaml"), "desk.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if res := passes("f.test.yaml", string(made.Text)); !res[0].Passed() || !strings.Contains(string(made.Text), "item: b") {
		t.Fatalf("the fork's test: %+v\n%s", res, made.Text)
	}

	// forks edited part way through a run, before its first step and
	// after it: the test stops its run there, edits it and resumes
	for _, tc := range []struct {
		name string
		at   func(h []*store.Checkpoint) uint64
		stop string
	}{
		{"before", func(h []*store.Checkpoint) uint64 { return h[0].Seq }, "stop_after: 0"},
		{"after", func(h []*store.Checkpoint) uint64 { return h[0].Seq + 1 }, "stop_after: 1"},
	} {
		hist, _ := st.History(ctx, "t", store.HistoryOptions{Source: store.SourceInput, Limit: 1})
		at := tc.at(hist)
		if _, err := store.Fork(ctx, st, "t", at, tc.name); err != nil {
			t.Fatal(err)
		}
		if _, err := eng.Update(ctx, g, tc.name, "tally", map[string]any{"count": 50}); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			must(eng.Run(ctx, g, engine.Request{Thread: tc.name, Resume: true}))
		}
		made, err := testfile.FromThread(ctx, st, g, kindtest.Registry(), tc.name, filepath.Join(dir, tc.name+".test.yaml"), "desk.yaml")
		if err != nil {
			t.Fatal(err)
		}
		text := string(made.Text)
		if !strings.Contains(text, tc.stop) || !strings.Contains(text, "count: 50") {
			t.Errorf("the test of a fork edited %s its run's first step:\n%s", tc.name, text)
		}
		if res := passes(tc.name+".test.yaml", text); !res[0].Passed() {
			t.Errorf("the test of a fork edited %s its run's first step: %+v\n%s", tc.name, res, text)
		}
	}
}
