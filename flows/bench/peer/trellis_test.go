//go:build ignore

// Package trellis runs the peer workloads (W1-W3) as Trellis YAML flows
// inside the peer benchmark suite, so that every implementation is
// measured in one session. `make peerbench` copies it there; it is not
// part of this module's build.
package trellis

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"peerbench/internal/cpumeter"

	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/store/memory"
)

// bench runs one flow per invocation on a fresh thread in a fresh
// in-memory store, as flows/bench_test.go does.
func bench(b *testing.B, file string) {
	g, dl := flow.Load(filepath.Join(os.Getenv("TRELLIS_FLOWS"), file), all.Registry())
	if g == nil {
		b.Fatal(dl)
	}
	ctx := context.Background()
	cpumeter.Run(b, func() error {
		_, err := engine.New(memory.New()).Run(ctx, g, engine.Request{Thread: "t"})
		return err
	})
}

func BenchmarkW1Linear(b *testing.B)   { bench(b, "w1_linear.yaml") }
func BenchmarkW2FanOut(b *testing.B)   { bench(b, "w2_fanout.yaml") }
func BenchmarkW3Loop1000(b *testing.B) { bench(b, "w3_loop.yaml") }
