package flows_test

import (
	"context"
	"testing"

	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/store/memory"
)

// The peer workloads as YAML flows. Each invocation is a whole run on a
// fresh thread: input, supersteps, per-step validation of the changed
// fields, checkpoints in the in-memory store, and an event stream with no
// subscriber. Compare with the hand-written floor and the peers by running
// the same workloads in one session (see Makefile target bench).

func benchFlow(b *testing.B, path string, check func(map[string]any) bool) {
	g, dl := flow.Load(path, all.Registry())
	if g == nil {
		b.Fatal(dl)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		res, err := engine.New(memory.New()).Run(ctx, g, engine.Request{Thread: "t"})
		if err != nil {
			b.Fatal(err)
		}
		if !check(res.State) {
			b.Fatalf("wrong result %v", res.State)
		}
	}
}

func BenchmarkW1Linear(b *testing.B) {
	benchFlow(b, "bench/w1_linear.yaml", func(s map[string]any) bool {
		return s["counter"] == 10 && len(s["list"].([]any)) == 10
	})
}

func BenchmarkW2FanOut(b *testing.B) {
	benchFlow(b, "bench/w2_fanout.yaml", func(s map[string]any) bool {
		return s["iter"] == 5 && s["sum"] == 123
	})
}

func BenchmarkW3Loop1000(b *testing.B) {
	benchFlow(b, "bench/w3_loop.yaml", func(s map[string]any) bool { return s["counter"] == 1000 })
}
