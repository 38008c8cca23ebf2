package all_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/schema"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/memory"
	"github.com/trellisflow/trellis/runtime/value"
)

// readsBackAlike runs g's runs (one input each, on one thread created
// with values) twice: in one process, and with the state encoded, stored
// and decoded between every step (engine.WithReload), as a process that
// picks the thread up reads it. After every step the state the first
// holds is the state a store hands back for it (the same Go values), and
// the two take the same paths to byte-identical states, checkpoint by
// checkpoint, with the same outputs and the same outcome.
func readsBackAlike(t *testing.T, g *flow.Graph, values map[string]any, inputs []map[string]any, about string) {
	t.Helper()
	readsBackAlikeIn(context.Background(), t, g, values, inputs, about)
}

// readsBackAlikeIn is readsBackAlike with the runs made in ctx (a tool
// mock, say).
func readsBackAlikeIn(ctx context.Context, t *testing.T, g *flow.Graph, values map[string]any, inputs []map[string]any, about string) {
	t.Helper()
	one, other := engine.New(memory.New()), engine.New(memory.New(), engine.WithReload())
	defer one.Store.Close()
	defer other.Store.Close()
	for i, in := range inputs {
		a, aerr := one.Run(ctx, g, engine.Request{Thread: "t", Input: in, Values: values, RecordPath: true})
		b, berr := other.Run(ctx, g, engine.Request{Thread: "t", Input: in, Values: values, RecordPath: true})
		if fmt.Sprint(aerr) != fmt.Sprint(berr) {
			t.Fatalf("run %d: in one process %v; read back between steps %v\n%s", i+1, aerr, berr, about)
		}
		if aerr != nil {
			return
		}
		if !reflect.DeepEqual(a.Path, b.Path) || !reflect.DeepEqual(a.Interrupt, b.Interrupt) {
			t.Fatalf("run %d: in one process path %v, pause %+v; read back between steps path %v, pause %+v\n%s", i+1, a.Path, a.Interrupt, b.Path, b.Interrupt, about)
		}
		if !reflect.DeepEqual(a.State, b.State) {
			t.Fatalf("run %d: final state in one process %s\nread back between steps %s\n%s", i+1, value.Show(a.State, 2000), value.Show(b.State, 2000), about)
		}
		if g.Output != nil && a.Interrupt == nil {
			x, xerr := g.Output.Render(a.State)
			y, yerr := g.Output.Render(b.State)
			if x != y || fmt.Sprint(xerr) != fmt.Sprint(yerr) {
				t.Fatalf("run %d: output in one process %q (%v), read back between steps %q (%v)\n%s", i+1, x, xerr, y, yerr, about)
			}
		}
	}
	sameCheckpoints(t, one.Store, other.Store, "t", about)
}

// sameCheckpoints compares a thread's states, checkpoint by checkpoint, in
// the store of a run in one process (one) and in that of a run that read
// its state back between steps (other): each of one's is what a store
// hands back for it, and the two are byte-identical as JSON.
func sameCheckpoints(t *testing.T, one, other store.Store, thread, about string) {
	t.Helper()
	ctx := context.Background()
	cps, err := one.History(ctx, thread, store.HistoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	others, err := other.History(ctx, thread, store.HistoryOptions{})
	if err != nil || len(others) != len(cps) {
		t.Fatalf("%d checkpoints in one process, %d read back between steps (%v)\n%s", len(cps), len(others), err, about)
	}
	for _, cp := range cps {
		a, err := one.StateAt(ctx, thread, cp.Seq)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range slices.Sorted(maps.Keys(a.Values)) {
			back, err := engine.Reload(a.Values[k])
			if err != nil || !reflect.DeepEqual(back, a.Values[k]) {
				t.Fatalf("checkpoint %d (step %d): field %q holds %s in the process, a store hands back %s (%v)\n%s",
					cp.Seq, cp.Step, k, value.Show(a.Values[k], 500), value.Show(back, 500), err, about)
			}
		}
		b, err := other.StateAt(ctx, thread, cp.Seq)
		if err != nil {
			t.Fatal(err)
		}
		aj, _ := json.Marshal(a.Values)
		bj, _ := json.Marshal(b.Values)
		if !bytes.Equal(aj, bj) {
			t.Fatalf("checkpoint %d (step %d): in one process\n%s\nread back between steps\n%s\n%s", cp.Seq, cp.Step, aj, bj, about)
		}
	}
}

// Every flow the project ships, every example and every fixture that
// validates clean runs alike in one process and with its state read back
// between steps: on sample input for each of its inputs, twice on one
// thread, and the reference flows with their example values over several
// turns.
func TestShippedFlowsReadBackAlike(t *testing.T) {
	var files []string
	for _, pattern := range []string{"../../flows/*.yaml", "../../flows/examples/*.yaml", "../../runtime/diag/examples/*.ok.yaml",
		"../../runtime/diag/testdata/patterns/*.yaml", "../../runtime/diag/testdata/cases/*.yaml"} {
		fs, _ := filepath.Glob(pattern)
		files = append(files, fs...)
	}
	ran := 0
	for _, path := range files {
		if strings.HasSuffix(path, ".test.yaml") || strings.HasSuffix(path, ".cassette.yaml") {
			continue
		}
		g, dl := flow.Load(path, all.Offline())
		if g == nil || dl.HasErrors() {
			continue // a file of values, or not a flow
		}
		ran++
		t.Run(filepath.Base(path), func(t *testing.T) {
			in := sampleInput(g)
			readsBackAlike(t, g, nil, []map[string]any{in, in}, path)
		})
	}
	if ran < 20 {
		t.Fatalf("%d flows ran of %d files", ran, len(files))
	}
	turns := []map[string]any{
		{"last_response": ""},
		{"last_response": "I built a cache in Go."},
		{"last_response": "It used an LRU with sharded locks, and I measured the p99 before and after under a replayed production load."},
		{"last_response": "Can we do a technical exercise instead?"},
		{"last_response": "Here it is.", "current_code": "def top_k(words, k):\n    return sorted(words)[:k]\n"},
	}
	for _, c := range []struct {
		flow, values string
		inputs       []map[string]any
	}{
		{"interview.yaml", "", turns},
		{"interview.yaml", "examples/candidate.yaml", turns},
		{"interview.yaml", "examples/candidate_reviewed.yaml", turns[:2]},
		{"resume_review.yaml", "examples/resume.yaml", []map[string]any{{}}},
		{"resume_review.yaml", "examples/resume_strong.yaml", []map[string]any{{}}},
	} {
		t.Run(c.flow+"+"+c.values, func(t *testing.T) {
			g, dl := flow.Load("../../flows/"+c.flow, all.Offline())
			if g == nil || dl.HasErrors() {
				t.Fatal(dl)
			}
			values := map[string]any{"interview_id": "bare", "user_id": "bare"}
			if c.values != "" {
				v, err := schema.ReadFile("../../flows/" + c.values)
				if err != nil {
					t.Fatal(err)
				}
				values = v.(map[string]any)
			}
			readsBackAlike(t, g, values, c.inputs, c.flow+" with "+c.values)
		})
	}
}

// sampleInput gives each input of g a value of its type.
func sampleInput(g *flow.Graph) map[string]any {
	in := map[string]any{}
	for _, f := range g.Inputs {
		s := f.Shape
		switch {
		case s == nil || len(s.Types) == 0:
			in[f.Name] = "sample"
		case len(s.Enum) > 0:
			in[f.Name] = s.Enum[0]
		case s.Allows("string"):
			in[f.Name] = "a sample answer, long enough to count"
		case s.Allows("integer"):
			in[f.Name] = 3
		case s.Allows("number"):
			in[f.Name] = 2.5
		case s.Allows("boolean"):
			in[f.Name] = true
		case s.Allows("array"):
			in[f.Name] = []any{}
		case s.Allows("object"):
			in[f.Name] = map[string]any{}
		}
	}
	return in
}
