package engine_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/memory"
)

const countFlow = `
version: 1
name: count
input: [add]
state:
	schema:
		type: object
		properties:
			add: {type: array, items: {type: integer}, default: []}
			l: {type: array, items: {type: integer}, default: []}
			n: {type: integer, default: 0}
	reducers: {l: append}
nodes:
	grow: {kind: set, set: {l: "input.add"}}
	count: {kind: set, set: {n: "len(state.l)"}}
edges:
	- {from: START, to: count}
	- {from: count, to: grow}
	- {from: grow, to: END}
`

// A run in reload mode reads its thread as another process does: a value
// a store holds in memory but would hand back otherwise (a nil list an
// older engine kept, which reads back as null) is what its nodes see, so
// it fails where a run of the process that wrote it goes on. On a thread
// the engine wrote, both modes take the same path to the same state.
func TestReloadReadsTheThreadBack(t *testing.T) {
	g := compile(t, countFlow)
	ctx := context.Background()
	held := func() store.Store {
		st := memory.New()
		cp := &store.Checkpoint{Thread: "old", Seq: 1, Source: store.SourceCreate, Time: time.Now(),
			Writes: []store.Write{{Field: "l", Version: 1, Value: []any(nil)}, {Field: "n", Version: 1, Value: 0}, {Field: "add", Version: 1, Value: []any{}}}}
		if err := st.Commit(ctx, cp); err != nil {
			t.Fatal(err)
		}
		return st
	}
	in := map[string]any{"add": []any{}}
	if _, err := engine.New(held()).Run(ctx, g, engine.Request{Thread: "old", Input: in}); err != nil {
		t.Fatalf("in the process that holds the nil list: %v", err)
	}
	if _, err := engine.New(held(), engine.WithReload()).Run(ctx, g, engine.Request{Thread: "old", Input: in}); err == nil {
		t.Fatal("read back, the nil list is null, and len(null) fails: the run did not")
	}
	one, other := engine.New(memory.New()), engine.New(memory.New(), engine.WithReload())
	for _, add := range [][]any{{}, {1, 2}, {}} {
		a, err := one.Run(ctx, g, engine.Request{Thread: "t", Input: map[string]any{"add": add}, RecordPath: true})
		if err != nil {
			t.Fatal(err)
		}
		b, err := other.Run(ctx, g, engine.Request{Thread: "t", Input: map[string]any{"add": add}, RecordPath: true})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a.State, b.State) || !reflect.DeepEqual(a.Path, b.Path) {
			t.Fatalf("in one process %v %v; read back %v %v", a.Path, a.State, b.Path, b.State)
		}
	}
}
