package engine_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/memory"
)

const reuseFlow = `version: 1
name: reuse
limits: {max_steps: 500}
state:
  schema:
    type: object
    properties:
      n: {type: integer, default: 0}
      list: {type: array, items: {type: integer}, default: []}
      seen: {type: integer, default: 0}
  reducers:
    list: append
nodes:
  inc: {kind: calc, set: {n: "state.n + 1", list: "state.n"}}
  probe: {kind: probe}
edges:
  - {from: START, to: inc}
  - from: inc
    bound: 200
    branch:
      - when: "state.n >= 100"
        to: END
      - when: "state.n % 25 == 0"
        to: probe
      - else: inc
  - {from: probe, to: inc}
`

// A run whose store copies its commits (store.Copier) fills the
// checkpoints of committed steps again for later steps, and later runs:
// the thread's history reads back as that of a store that keeps every
// checkpoint it is given (a wrapper, which is no Copier), step by step,
// whether the steps were held and committed together, committed before a
// node that may block, or at the run's end.
func TestReusedCheckpointsReadBack(t *testing.T) {
	ctx := context.Background()
	history := func(st store.Store, eng *engine.Engine) []store.Checkpoint {
		t.Helper()
		g := compileWith(t, heldKinds(st), reuseFlow)
		res, err := eng.Run(ctx, g, engine.Request{Thread: "t"})
		if err != nil {
			t.Fatal(err)
		}
		if res.State["n"] != 100 || len(res.State["list"].([]any)) != 100 || res.State["seen"] == 0 {
			t.Fatalf("the run ended with n %v, %d items, seen %v", res.State["n"], len(res.State["list"].([]any)), res.State["seen"])
		}
		cps, err := st.History(ctx, "t", store.HistoryOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out := make([]store.Checkpoint, len(cps))
		for i, cp := range cps {
			out[i] = *cp
			out[i].Run, out[i].Time, out[i].WriteID, out[i].Release = "", time.Time{}, "", ""
		}
		return out
	}
	kept := &countCommits{Store: memory.New()}
	if store.Copies(kept) {
		t.Fatal("a wrapper of the memory store says it copies")
	}
	want := history(kept, engine.New(kept))
	if len(want) != 104 {
		t.Fatalf("%d checkpoints, want 104", len(want))
	}
	for round := range 3 {
		// later runs fill the checkpoints earlier ones left
		st := memory.New()
		got := history(st, engine.New(st))
		if len(got) != len(want) {
			t.Fatalf("round %d: %d checkpoints, want %d", round, len(got), len(want))
		}
		for i := range got {
			if !reflect.DeepEqual(got[i], want[i]) {
				t.Fatalf("round %d: checkpoint %d reads back\n%+v\nwant\n%+v", round, want[i].Seq, got[i], want[i])
			}
		}
	}
}
