package store_test

import (
	"context"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind/kindtest"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/storetest"
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
	for name, url := range storetest.URLs(t) {
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

const sumsFlow = `version: 1
name: sums
input: [n]
state:
  schema:
    type: object
    properties:
      n: {type: integer, default: 0}
      total: {type: integer, default: 0}
      low: {type: integer, default: 0}
      seen: {type: array, items: {type: integer}, default: []}
  reducers:
    total: add
    low: min
    seen: append
nodes:
  sum: {kind: set, set: {total: "state.n", low: "state.n", seen: "state.n"}}
edges:
  - {from: START, to: sum}
  - {from: sum, to: END}
`

// The extremes of the 64-bit range go through input, reducers, the commit
// and a store opened afresh (no state kept in memory) unchanged, and so
// does a number between 2^53 and 2^63; the add reducer is exact or fails
// as + does, naming the node and the field, committing nothing of the
// step.
func TestIntegerExtremesAndReducers(t *testing.T) {
	ctx := context.Background()
	g, dl := flow.LoadSource("sums.yaml", []byte(sumsFlow), kindtest.Registry())
	if g == nil || len(dl) > 0 {
		t.Fatal(dl)
	}
	for name, url := range storetest.URLs(t) {
		t.Run(name, func(t *testing.T) {
			st, err := store.Open(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { st.Close() }()
			eng := engine.New(st)
			run := func(thread string, n int) error {
				_, err := eng.Run(ctx, g, engine.Request{Thread: thread, Input: map[string]any{"n": n}})
				return err
			}
			for _, n := range []int{math.MaxInt - 7, 7} { // total reaches the largest int
				if err := run("max", n); err != nil {
					t.Fatal(err)
				}
			}
			for _, n := range []int{math.MinInt + 1, -1} { // low reaches the smallest
				if err := run("min", n); err != nil {
					t.Fatal(err)
				}
			}
			const wide = 10000000000000000001 - 1<<63 // 776627963145224193: beyond 2^53
			if err := run("wide", wide); err != nil {
				t.Fatal(err)
			}
			err = run("max", 1)
			if err == nil || !strings.Contains(err.Error(), `node "sum"`) || !strings.Contains(err.Error(), `"total"`) || !strings.Contains(err.Error(), "integer overflow") {
				t.Fatalf("add past the largest int: %v", err)
			}
			err = run("min", -2)
			if err == nil || !strings.Contains(err.Error(), `node "sum"`) || !strings.Contains(err.Error(), `"total"`) || !strings.Contains(err.Error(), "integer overflow") {
				t.Fatalf("add past the smallest int: %v", err)
			}
			// the failed runs' input is committed, as before any step; the
			// step's writes are not
			want := map[string]map[string]any{
				"max":  {"n": 1, "total": math.MaxInt, "low": 0, "seen": []any{math.MaxInt - 7, 7}},
				"min":  {"n": -2, "total": math.MinInt, "low": math.MinInt + 1, "seen": []any{math.MinInt + 1, -1}},
				"wide": {"n": wide, "total": wide, "low": 0, "seen": []any{wide}},
			}
			check := func(st store.Store) {
				t.Helper()
				for thread, values := range want {
					head, err := st.Head(ctx, thread)
					if err != nil {
						t.Fatal(err)
					}
					if !reflect.DeepEqual(head.Values, values) {
						t.Errorf("%s: %#v, want %#v", thread, head.Values, values)
					}
				}
			}
			check(st)
			if name == "memory" {
				return
			}
			st.Close()
			if st, err = store.Open(ctx, url); err != nil {
				t.Fatal(err)
			}
			check(st)
		})
	}
}
