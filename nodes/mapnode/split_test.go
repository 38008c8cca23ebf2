package mapnode_test

import (
	"context"
	"slices"
	"testing"

	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/store/memory"
)

// A list of one type (split gives strings) is a list of items as any
// other: the validator takes it, so the map runs over it.
func TestMapOverATypedList(t *testing.T) {
	g := load(t, "words", `version: 1
name: words
state:
  schema:
    type: object
    properties:
      text: {type: string, default: "a b c"}
      seen: {type: array, items: {type: string}, default: []}
  reducers: {seen: append}
nodes:
  each:
    kind: map
    items: "split(state.text, ' ')"
    node: {kind: set, set: {seen: "upper(item)"}}
edges:
  - {from: START, to: each}
  - {from: each, to: END}
`)
	res, err := engine.New(memory.New()).Run(context.Background(), g, engine.Request{Thread: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.State["seen"].([]any); !slices.Equal(got, []any{"A", "B", "C"}) {
		t.Fatalf("seen %v", got)
	}
}
