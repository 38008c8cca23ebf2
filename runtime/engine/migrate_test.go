package engine_test

import (
	"context"
	"errors"
	"testing"

	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/memory"
)

const counter = `version: 1
name: counter
state:
	schema: {type: object, properties: {n: {type: integer, default: 0}, log: {type: array, items: {type: string}, default: []}}}
	reducers: {log: append}
nodes:
	a: {kind: set, set: {n: "state.n + 1", log: "'a'"}}
edges:
	- {from: START, to: a}
	- {from: a, to: END}
`

// Held runs while the run holds the thread, before it reads it: a move
// cannot happen then, and its error refuses the run, which writes
// nothing.
func TestHeldRefusesARunBeforeItReadsTheThread(t *testing.T) {
	ctx := context.Background()
	g := compile(t, counter)
	eng := engine.New(memory.New())
	before := mustRun(t, g, eng, "t", nil).Checkpoint
	refused := errors.New("moved meanwhile")
	var moveErr error
	_, err := eng.Run(ctx, g, engine.Request{Thread: "t", Held: func(ctx context.Context) error {
		_, moveErr = eng.Migrate(ctx, g, "t", engine.Move{})
		return refused
	}})
	if !errors.Is(err, refused) || !errors.Is(moveErr, engine.ErrBusy) {
		t.Fatalf("run %v, a move while it held the thread %v", err, moveErr)
	}
	head, err := eng.Store.Head(ctx, "t")
	if err != nil || head.Seq != before || head.Values["n"] != 1 {
		t.Fatalf("a refused run wrote: %+v %v", head, err)
	}
}

// A move writes its values whole, whatever the fields' reducers, and
// records itself in the thread's history even with no values.
func TestMigrateReplacesFieldsWhole(t *testing.T) {
	ctx := context.Background()
	g := compile(t, counter)
	eng := engine.New(memory.New())
	mustRun(t, g, eng, "t", nil)
	mustRun(t, g, eng, "t", nil)
	snap, err := eng.Migrate(ctx, g, "t", engine.Move{Values: func(state map[string]any) (map[string]any, error) {
		return map[string]any{"log": []any{"kept"}, "n": state["n"].(int) * 10}, nil
	}, Note: map[string]any{"to_version": "v2"}})
	if err != nil {
		t.Fatal(err)
	}
	head, err := eng.Store.Head(ctx, "t")
	if err != nil || head.Seq != snap.Seq || head.Values["n"] != 20 || len(head.Values["log"].([]any)) != 1 {
		t.Fatalf("after the move: %+v %v", head, err)
	}
	if _, err := eng.Migrate(ctx, g, "t", engine.Move{}); err != nil {
		t.Fatal(err)
	}
	hist, err := eng.Store.History(ctx, "t", store.HistoryOptions{Source: store.SourceMigrate})
	if err != nil || len(hist) != 2 || hist[1].Config["to_version"] != "v2" {
		t.Fatalf("the moves in the history: %+v %v", hist, err)
	}
	if _, err := eng.Migrate(ctx, g, "t", engine.Move{Values: func(map[string]any) (map[string]any, error) {
		return map[string]any{"n": "many"}, nil
	}}); err == nil {
		t.Fatal("a value the field's schema refuses was written")
	}
}
