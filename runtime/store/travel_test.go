package store_test

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind/kindtest"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

const travelFlow = `version: 1
name: travel
input: [by]
state:
  schema:
    type: object
    properties:
      i: {type: integer, default: 0}
      by: {type: integer, default: 1}
      log: {type: array, items: {type: string}, default: []}
  reducers:
    log: append
limits: {max_steps: 50}
nodes:
  split: {kind: set, set: {log: "'split'"}}
  left: {kind: set, set: {log: "'left'"}}
  right: {kind: set, set: {log: "'right'"}}
  slow: {kind: set, set: {log: "'slow'"}}
  join: {kind: set, set: {i: "state.i + input.by", log: "'join ' + string(state.i + input.by)"}}
edges:
  - {from: START, to: split}
  - {from: split, to: [left, right]}
  - {from: right, to: slow}
  - {from: [left, slow], to: join}
  - from: join
    bound: 10
    branch:
      - when: "state.i < 6"
        to: split
      - else: END
`

// On each store, a fork at any checkpoint of a run that has nodes to run
// continues the run where it was (its input and join arrivals with it)
// and takes the original's path from there; an update at an older
// checkpoint branches from it and resumes over the edit.
func TestForkAndBranchContinue(t *testing.T) {
	ctx := context.Background()
	g, dl := flow.LoadSource("travel.yaml", []byte(travelFlow), kindtest.Registry())
	if g == nil || len(dl) > 0 {
		t.Fatal(dl)
	}
	for name, url := range storetest.URLs(t) {
		t.Run(name, func(t *testing.T) {
			st, err := store.Open(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			eng := engine.New(st)
			orig, err := eng.Run(ctx, g, engine.Request{Thread: "t", Input: map[string]any{"by": 2}, RecordPath: true})
			if err != nil || orig.State["i"] != 6 {
				t.Fatalf("the run: %v %v", err, orig)
			}
			hist, err := st.History(ctx, "t", store.HistoryOptions{})
			if err != nil {
				t.Fatal(err)
			}
			forks := 0
			for _, cp := range hist {
				if len(cp.Next) == 0 {
					continue
				}
				to := fmt.Sprintf("t-at-%d", cp.Seq)
				if _, err := store.Fork(ctx, st, "t", cp.Seq, to); err != nil {
					t.Fatal(err)
				}
				res, err := eng.Run(ctx, g, engine.Request{Thread: to, Resume: true, RecordPath: true})
				if err != nil {
					t.Fatalf("resume the fork at %d: %v", cp.Seq, err)
				}
				if !reflect.DeepEqual(res.Path, orig.Path[cp.Step:]) || !reflect.DeepEqual(res.State, orig.State) {
					t.Errorf("the fork at %d went %v to %v; the original went %v to %v", cp.Seq, res.Path, res.State, orig.Path[cp.Step:], orig.State)
				}
				forks++
			}
			if forks < 10 {
				t.Fatalf("only %d checkpoints had nodes to run", forks)
			}
			// the input checkpoint (2), edited: a branch
			snap, err := eng.UpdateAt(ctx, g, "t", 2, "join", map[string]any{"i": 3})
			if err != nil || !slices.Equal(snap.Next, []string{"split"}) {
				t.Fatalf("the branch: %v %+v", err, snap)
			}
			top, err := st.History(ctx, "t", store.HistoryOptions{Limit: 1})
			if err != nil || top[0].Base != 2 || top[0].Parent != hist[0].Seq {
				t.Fatalf("the branch's checkpoint: %v %+v", err, top)
			}
			res, err := eng.Run(ctx, g, engine.Request{Thread: "t", Resume: true, RecordPath: true})
			if err != nil || res.State["i"] != 7 || !reflect.DeepEqual(res.Path, orig.Path[:8]) {
				t.Fatalf("the branch resumed: %v %v", err, res)
			}
		})
	}
}
