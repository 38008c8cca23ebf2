package engine_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/memory"
)

// Every checkpoint a run commits carries a write id of its own: ids are
// handed out in blocks, and none is given twice, across a block's end,
// across runs and threads, and across engines of one process.
func TestWriteIDsUnique(t *testing.T) {
	g := compile(t, `
version: 1
name: loop
state:
	schema:
		type: object
		properties:
			n: {type: integer, default: 0}
nodes:
	inc: {kind: set, set: {n: "state.n + 1"}}
edges:
	- {from: START, to: inc}
	- from: inc
		bound: 99
		branch:
			- when: "state.n < 45"
				to: inc
			- else: END
`)
	ctx := context.Background()
	seen := map[string]string{}
	st := memory.New()
	for i, eng := range []*engine.Engine{engine.New(st), engine.New(st), engine.New(st)} {
		for _, thread := range []string{"a", "b"} {
			thread = fmt.Sprint(thread, i)
			if _, err := eng.Run(ctx, g, engine.Request{Thread: thread}); err != nil {
				t.Fatal(err)
			}
			hist, err := st.History(ctx, thread, store.HistoryOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(hist) != 46 {
				t.Fatalf("thread %s: %d checkpoints, want 46", thread, len(hist))
			}
			for _, cp := range hist {
				if cp.Source == store.SourceCreate {
					continue
				}
				at := fmt.Sprintf("%s@%d", thread, cp.Seq)
				if cp.WriteID == "" {
					t.Fatalf("checkpoint %d of %s has no write id", cp.Seq, thread)
				}
				if other, dup := seen[cp.WriteID]; dup {
					t.Fatalf("write id %q given twice (%s, %s)", cp.WriteID, other, at)
				}
				seen[cp.WriteID] = at
			}
		}
	}
}
