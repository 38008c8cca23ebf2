package flows_test

import (
	"context"
	"testing"

	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/store/memory"
)

// A step of inline nodes takes its checkpoint's parts, its write id
// included, from blocks the run allocates now and then, and takes its
// replies without a lock when no node recorded any: the W3 loop (1,000
// steps of one assign node, on a new thread in a new store) allocates
// less than once per step, everything the run and its thread need
// included. What is left per step is the counter's value above 255,
// which Go boxes.
func TestLoopAllocations(t *testing.T) {
	g, dl := flow.Load("bench/w3_loop.yaml", all.Registry())
	if g == nil {
		t.Fatal(dl)
	}
	ctx := context.Background()
	var failed error
	allocs := testing.AllocsPerRun(5, func() {
		res, err := engine.New(memory.New()).Run(ctx, g, engine.Request{Thread: "t"})
		switch {
		case err != nil:
			failed = err
		case res.State["counter"] != 1000:
			t.Errorf("counter %v, want 1000", res.State["counter"])
		}
	})
	if failed != nil {
		t.Fatal(failed)
	}
	if allocs >= 1000 {
		t.Fatalf("a run of 1,000 steps allocated %.0f times, want fewer than once per step", allocs)
	}
	t.Logf("%.0f allocations for 1,000 steps", allocs)
}
