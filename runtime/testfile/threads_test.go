package testfile_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/testfile"
)

// note is a test kind that remembers the thread's label in the run's
// memory and writes how many labels are remembered.
var note = kind.Spec{
	Name:    "note",
	Summary: "Remember the label; count the labels remembered.",
	New: func(b kind.Builder) kind.Node {
		b.Writes("seen", b.Settings().Block())
		return kind.Func(func(ctx context.Context, s kind.State) (kind.Update, error) {
			m, ok := kind.MemoryOf(ctx)
			if !ok {
				return nil, kind.ErrNoMemory
			}
			label, _ := s.Get("label").(string)
			if _, err := m.Put(ctx, []string{"labels"}, label, label, kind.PutOptions{}); err != nil {
				return nil, err
			}
			found, err := m.Search(ctx, []string{"labels"}, "", 100)
			if err != nil {
				return nil, err
			}
			return kind.Update{{Field: "seen", Value: len(found)}}, nil
		})
	},
}

const notesFlow = `version: 1
name: notes
state:
  schema:
    type: object
    properties:
      label: {type: string, default: "first"}
      seen: {type: integer, default: 0}
nodes:
  note: {kind: note}
edges:
  - {from: START, to: note}
  - {from: note, to: END}
`

// A test's runs may go to several threads, created with values of their
// own; the threads share the test's store and what it remembers, and
// each test has a store of its own.
func TestRunsOnSeveralThreads(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"notes.yaml": notesFlow,
		"notes.test.yaml": `flow: notes.yaml
tests:
  - name: two threads
    runs:
      - expect: {state: ["state.seen == 1"]}
      - thread: second
        with: {label: second}
        expect: {state: ["state.seen == 2", "state.label == 'second'"]}
      - expect: {state: ["state.label == 'first'", "state.seen == 2"]}
      - thread: third
        expect: {state: ["state.label == 'first'", "state.seen == 2"]}
    expect:
      visits: {note: 4}
  - name: a store of its own
    runs:
      - expect: {state: ["state.seen == 1"]}
  - name: with on a thread that exists
    runs:
      - {}
      - with: {label: again}
  - name: with of the wrong type
    runs:
      - thread: other
        with: {label: 3}
`,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, err := testfile.Load(filepath.Join(dir, "notes.test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	results, err := testfile.RunFile(context.Background(), f, kind.NewSet(note), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 4 {
		t.Fatalf("%d results", len(results))
	}
	for _, r := range results[:2] {
		if !r.Passed() {
			t.Errorf("%s: %q", r.Name, r.Failures)
		}
	}
	if f := results[2].Failures; len(f) != 1 || !strings.Contains(f[0], `notes.test.yaml:20:9: with: thread "test" exists`) {
		t.Errorf("with on a thread that exists: %q", f)
	}
	if f := results[3].Failures; len(f) != 1 || !strings.Contains(f[0], "thread other: with:") || !strings.Contains(f[0], "label") {
		t.Errorf("with of the wrong type: %q", f)
	}
}
