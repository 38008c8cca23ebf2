package store_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind/kindtest"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/value"
)

const numbersFlow = `version: 1
name: numbers
input: [n]
state:
  schema:
    type: object
    properties:
      n: {type: integer, default: 0}
      twice: {type: integer, default: 0}
      list: {type: array, items: {type: integer}, default: []}
  reducers:
    list: append
nodes:
  double: {kind: set, set: {twice: "state.n * 2 + 1", list: "state.n + 1"}}
edges:
  - {from: START, to: double}
  - {from: double, to: END}
`

// An integer field holds exact 64-bit integers end to end: input beyond
// 2^53, arithmetic on it, the commit and a reload from the store. An
// operation that overflows fails naming the node and the field, and a
// number outside the 64-bit range (1e23 reads as an integer to JSON
// Schema) is refused as input; neither commits a value.
func TestIntegersAreExact(t *testing.T) {
	ctx := context.Background()
	g, dl := flow.LoadSource("numbers.yaml", []byte(numbersFlow), kindtest.Registry())
	if g == nil || len(dl) > 0 {
		t.Fatal(dl)
	}
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			st, err := store.Open(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			eng := engine.New(st)
			const big = 1<<61 + 3 // beyond float64's exact integers
			if _, err := eng.Run(ctx, g, engine.Request{Thread: "t", Input: map[string]any{"n": big}}); err != nil {
				t.Fatal(err)
			}
			head, err := st.Head(ctx, "t")
			if err != nil {
				t.Fatal(err)
			}
			if head.Values["n"] != big || head.Values["twice"] != 2*big+1 || head.Values["list"].([]any)[0] != big+1 {
				t.Fatalf("reloaded %#v", head.Values)
			}
			// overflow: the step fails and commits nothing of it
			_, err = eng.Run(ctx, g, engine.Request{Thread: "u", Input: map[string]any{"n": math.MaxInt / 2}})
			if err != nil {
				t.Fatal(err)
			}
			_, err = eng.Run(ctx, g, engine.Request{Thread: "v", Input: map[string]any{"n": math.MaxInt/2 + 1}})
			if err == nil || !strings.Contains(err.Error(), `node "double"`) || !strings.Contains(err.Error(), "twice") || !strings.Contains(err.Error(), "overflow") {
				t.Fatalf("overflow: %v", err)
			}
			head, err = st.Head(ctx, "v")
			if err != nil {
				t.Fatal(err)
			}
			if head.Values["twice"] != 0 || len(head.Values["list"].([]any)) != 0 {
				t.Fatalf("committed after an overflow: %#v", head.Values)
			}
			// out of range input, as JSON decodes it: refused, no thread
			wide, err := value.Decode([]byte(`99999999999999999999999`))
			if err != nil {
				t.Fatal(err)
			}
			_, err = eng.Run(ctx, g, engine.Request{Thread: "w", Input: map[string]any{"n": wide}})
			if err == nil || !strings.Contains(err.Error(), "64-bit integer range") {
				t.Fatalf("input 1e23: %v", err)
			}
			if _, err := st.Head(ctx, "w"); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("a thread after refused input: %v", err)
			}
		})
	}
}
