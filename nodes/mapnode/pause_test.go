package mapnode_test

import (
	"context"
	"reflect"
	"testing"

	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

const askEach = `version: 1
name: ask_each
input: [names]
state:
  schema:
    type: object
    properties:
      names: {type: array, items: {type: string}, default: []}
      answers: {type: array, items: {type: string}, default: []}
      asked: {type: integer, default: 0}
  reducers:
    answers: append
nodes:
  each:
    kind: map
    items: "state.names"
    node:
      kind: interrupt
      ask: "'Is ' + item + ' in?'"
      writes: {answers: "item + ': ' + string(answer)"}
  done: {kind: set, set: {asked: "len(state.answers)"}}
edges:
  - {from: START, to: each}
  - {from: each, to: done}
  - {from: done, to: END}
`

// A map whose node is itself an interrupt: every item asks its own
// question (each[INDEX], by id and path alike), listed by the thread; an
// answer completes its item, the others still ask; the node after the
// map waits for all, and each answer is written by its own item, in item
// order. On each store, with the store opened anew between runs.
func TestMapOfAskers(t *testing.T) {
	ctx := context.Background()
	g := load(t, "ask_each", askEach)
	for name, url := range storetest.URLs(t) {
		t.Run(name, func(t *testing.T) {
			mem, err := store.Open(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer mem.Close()
			run := func(req engine.Request) (*engine.Result, []engine.Ask) {
				t.Helper()
				st := mem
				if name != "memory" {
					if st, err = store.Open(ctx, url); err != nil {
						t.Fatal(err)
					}
					defer st.Close()
				}
				res, err := engine.New(st).Run(ctx, g, req)
				if err != nil {
					t.Fatalf("%+v: %v", req, err)
				}
				asks, err := engine.New(st).Asks(ctx, g, "t")
				if err != nil {
					t.Fatal(err)
				}
				return res, asks
			}
			res, asks := run(engine.Request{Thread: "t", Input: map[string]any{"names": []any{"ann", "bob", "cy"}}})
			want := []engine.Ask{{ID: "each[0]", Path: "each[0]", Payload: "Is ann in?"}, {ID: "each[1]", Path: "each[1]", Payload: "Is bob in?"}, {ID: "each[2]", Path: "each[2]", Payload: "Is cy in?"}}
			if res.Interrupt == nil || !reflect.DeepEqual(res.Interrupt.Asks, want) || !reflect.DeepEqual(asks, want) {
				t.Fatalf("the questions: %+v, listed %+v", res.Interrupt, asks)
			}
			res, asks = run(engine.Request{Thread: "t", Resume: true, Answers: map[string]any{"each[2]": "yes", "each[0]": "no"}})
			if res.Interrupt == nil || !reflect.DeepEqual(res.Interrupt.Asks, want[1:2]) || !reflect.DeepEqual(asks, want[1:2]) {
				t.Fatalf("after two answers: %+v, listed %+v", res.Interrupt, asks)
			}
			if res.State["asked"] != 0 {
				t.Fatalf("the node after the map ran: %v", res.State)
			}
			res, asks = run(engine.Request{Thread: "t", Resume: true, Answers: map[string]any{"each[1]": "maybe"}})
			if res.Interrupt != nil || len(asks) != 0 {
				t.Fatalf("after the last answer: %+v, listed %+v", res.Interrupt, asks)
			}
			if !reflect.DeepEqual(res.State["answers"], []any{"ann: no", "bob: maybe", "cy: yes"}) || res.State["asked"] != 3 {
				t.Fatalf("state %v", res.State)
			}
			// every answer the step took, across its resumes, is in its checkpoint
			cps, err := mem.History(ctx, "t", store.HistoryOptions{Node: "each"})
			if err != nil || len(cps) != 1 || !reflect.DeepEqual(cps[0].Answers, map[string]any{"each[0]": "no", "each[1]": "maybe", "each[2]": "yes"}) {
				t.Fatalf("the map's checkpoint: %+v %v", cps, err)
			}
		})
	}
}
