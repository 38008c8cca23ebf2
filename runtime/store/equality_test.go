package store_test

import (
	"context"
	"testing"

	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind/kindtest"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

const equalityFlow = `version: 1
name: equality
state:
  schema:
    type: object
    properties:
      rec: {type: object, properties: {score: {type: number}}, default: {}}
      recs: {type: array, items: {type: object}, default: []}
      seen: {type: array, items: {type: object}, default: []}
      same: {type: boolean, default: false}
      differ: {type: boolean, default: true}
      found: {type: boolean, default: false}
      missing: {type: boolean, default: true}
      kinds: {type: integer, default: 0}
      counted: {type: integer, default: 0}
  reducers:
    seen: union
nodes:
  write:
    kind: set
    set:
      rec: "{score: 1.5 - 1.5}"
      recs: "[{score: 0.0, tags: [1.0, 2]}, {score: 2.5}]"
      seen: "[{score: 0.0}, {score: 0}]"
  compare:
    kind: set
    set:
      same: "state.rec == {score: 0.0} && state.rec == {score: 0} && state.recs[0] == {score: 0, tags: [1, 2.0]}"
      differ: "state.rec != {score: 0.0} || state.recs[1] != {score: 2.5}"
      found: "{score: 2.50} in state.recs && {score: 0.0, tags: [1, 2]} in state.recs && [1.0, 2.0] in map(state.recs, #.tags ?? [])"
      missing: "{score: 0.0, tags: [1, 2]} not in state.recs"
      kinds: "len(uniq(concat(state.recs, [{score: 0, tags: [1.0, 2.0]}, {score: 2.5}])))"
      counted: "count(state.seen, # == {score: 0.0})"
edges:
  - {from: START, to: write}
  - {from: write, to: compare}
  - {from: compare, to: END}
`

// Expressions compare values by value (numbers by their numeric value,
// objects and lists member by member), whether the state was held in the
// run's memory or read back from the store: ==, !=, in, not in, uniq and
// the union reducer answer the same on every store, with and without the
// state read back between steps, and on a second run from the store.
func TestEqualityIsByValueAfterAReload(t *testing.T) {
	ctx := context.Background()
	g, dl := flow.LoadSource("equality.yaml", []byte(equalityFlow), kindtest.Registry())
	if g == nil || dl.HasErrors() {
		t.Fatal(dl)
	}
	want := map[string]any{"same": true, "differ": false, "found": true, "missing": false, "kinds": 2, "counted": 1}
	check := func(t *testing.T, how string, state map[string]any) {
		t.Helper()
		for k, v := range want {
			if got := state[k]; got != v {
				t.Errorf("%s: %s is %v, want %v", how, k, got, v)
			}
		}
		if seen, _ := state["seen"].([]any); len(seen) != 1 {
			t.Errorf("%s: union kept %v, want one item", how, state["seen"])
		}
	}
	for name, url := range storetest.URLs(t) {
		t.Run(name, func(t *testing.T) {
			for _, reload := range []bool{false, true} {
				st, err := store.Open(ctx, url)
				if err != nil {
					t.Fatal(err)
				}
				var opts []engine.Option
				how := "in memory"
				if reload {
					opts, how = append(opts, engine.WithReload()), "read back between steps"
				}
				thread := map[bool]string{false: "held", true: "reloaded"}[reload]
				res, err := engine.New(st, opts...).Run(ctx, g, engine.Request{Thread: thread})
				if err != nil {
					t.Fatal(err)
				}
				check(t, how, res.State)
				st.Close()
				// a second run, in another engine over the store opened
				// again: its first step reads the thread back
				st, err = store.Open(ctx, url)
				if err != nil {
					t.Fatal(err)
				}
				res, err = engine.New(st, opts...).Run(ctx, g, engine.Request{Thread: thread})
				st.Close()
				if err != nil {
					t.Fatal(err)
				}
				check(t, how+", second run", res.State)
			}
		})
	}
}
