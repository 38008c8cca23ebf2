package all_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/store/memory"
)

// The differential check holds the validator to the engine: a random
// flow (state schema, reducers, expressions, templates, edges) that
// validates with no diagnostic at all must run, on random input, without
// a failure the validator could have known of: an update its field's
// schema refuses, an expression or template that fails on a value of the
// type it was checked against, a read of a field nothing wrote (a
// template rendering "<no value>"). What only the data decides (an
// integer overflow, a bound or step limit reached) is not such a failure.
// And the flow runs alike with its state read back between steps: after
// every step the state held in the process is the one a store hands back
// (see readsBackAlike).
// `make fuzz` runs it for a bounded count; the fuzzer shrinks what it
// finds, and testdata/fuzz/FuzzDifferential keeps it.
func FuzzDifferential(f *testing.F) {
	for i := range 24 {
		seed := make([]byte, 64)
		for j := range seed {
			seed[j] = byte((i*131 + j*29 + i*j*7) % 251)
		}
		f.Add(seed)
	}
	reg := all.Offline()
	// a tool's calls answer at once: what is checked is that the calls a
	// clean flow makes are the calls its tools take
	ctx := kind.WithToolMock(context.Background(), func(context.Context, *kind.Call) (any, bool, error) { return "ok", true, nil })
	f.Fuzz(func(t *testing.T, data []byte) {
		g := newGen(data)
		src := g.flow()
		graph, dl := flow.LoadFS(g.files(src), "gen.yaml", reg)
		if graph == nil || len(dl) > 0 {
			return // not clean: the validator spoke
		}
		if g.tool != nil {
			src += "# gen.prompt:\n" + g.prompt()
			if g.flowTool {
				src += "# child.yaml:\n" + g.child()
			}
		}
		eng := engine.New(memory.New())
		defer eng.Store.Close()
		var inputs []map[string]any
		for run := range 2 {
			inputs = append(inputs, g.input())
			res, err := eng.Run(ctx, graph, engine.Request{Thread: "t", Input: inputs[run], RecordPath: true})
			if err != nil {
				if excused(err) {
					return
				}
				t.Fatalf("run %d of a flow that validated clean failed: %v\n%s", run+1, err, src)
			}
			for name, v := range res.State {
				if s, ok := v.(string); ok && strings.Contains(s, "<no value>") {
					t.Fatalf("run %d of a flow that validated clean rendered a value no way wrote into %s: %q\n%s", run+1, name, s, src)
				}
			}
		}
		// and the state a process holds is the one another reads back
		readsBackAlikeIn(ctx, t, graph, nil, inputs, src)
	})
}

// excused reports whether a run failed for a reason only the data
// decides, which no validator can know.
func excused(err error) bool {
	var le *engine.LimitError
	if errors.As(err, &le) {
		return true
	}
	var ie *engine.InputError
	if errors.As(err, &ie) {
		return true // the generated input was refused: not the flow's failure
	}
	msg := err.Error()
	for _, data := range []string{"integer overflow", "outside the 64-bit integer range", "integer divide by zero"} {
		if strings.Contains(msg, data) {
			return true
		}
	}
	return false
}

// The generator's flows reach the tools: among flows made from a fixed
// stream of bytes, some declare a tool, validate clean and make its calls
// when they run (the fuzzer's budget is not spent on flows the validator
// refuses, or that never call one).
func TestDifferentialCoversTools(t *testing.T) {
	reg := all.Offline()
	calls := 0
	ctx := kind.WithToolMock(context.Background(), func(context.Context, *kind.Call) (any, bool, error) {
		calls++
		return "ok", true, nil
	})
	rng := rand.New(rand.NewPCG(1, 2))
	withTool, clean, ran, flows := 0, 0, 0, 0
	for range 1500 {
		data := make([]byte, 96)
		for i := range data {
			data[i] = byte(rng.IntN(256))
		}
		g := newGen(data)
		src := g.flow()
		if g.tool == nil {
			continue
		}
		withTool++
		graph, dl := flow.LoadFS(g.files(src), "gen.yaml", reg)
		if graph == nil || len(dl) > 0 {
			continue
		}
		clean++
		before := calls
		eng := engine.New(memory.New())
		if _, err := eng.Run(ctx, graph, engine.Request{Thread: "t", Input: g.input()}); err == nil && calls > before {
			ran++
			if g.flowTool {
				flows++
			}
		}
		eng.Store.Close()
	}
	t.Logf("%d flows with a tool, %d clean, %d ran calling it (%d a flow tool)", withTool, clean, ran, flows)
	if ran < 10 || flows < 4 {
		t.Fatalf("only %d of %d generated flows with a tool ran calling it (%d clean, %d a flow tool)", ran, withTool, clean, flows)
	}
}
