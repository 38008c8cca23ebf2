package engine_test

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"testing"

	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/store/memory"
)

// TestAStepsValuesAreToldOnce: a state_update names every field its step
// changed and gives only the values its node events did not: a field one
// node wrote with the replace reducer is in that node's node_end alone, a
// field whose reducer appends gives the appended items, and the others
// (folded from several writers, or reduced) their new value. Read back
// from their JSON, a step's events give the state its checkpoint holds,
// and so does a state_update in the shape recorded before (every changed
// field in update).
func TestAStepsValuesAreToldOnce(t *testing.T) {
	g := compile(t, `
version: 1
name: told
state:
	schema:
		type: object
		properties:
			log: {type: array, items: {type: string}, default: []}
			sum: {type: number, default: 0}
			seen: {type: object, default: {}}
			last: {type: string, default: ""}
			round: {type: integer, default: 0}
			note: {type: string, default: ""}
	reducers: {log: append, sum: add, seen: merge, last: {expr: "update"}}
nodes:
	fan: {kind: set, set: {round: "state.round + 1", note: "'round ' + string(state.round + 1)"}}
	a: {kind: set, set: {log: "'a' + string(state.round)", sum: "0.5", seen: "{a: state.round}", last: "'a'"}}
	b: {kind: set, set: {log: "'b' + string(state.round)", sum: "1", seen: "{b: state.round}", last: "'b'"}}
	join: {kind: set, set: {log: "join(state.log[-2:], '')", note: "'joined'"}}
edges:
	- {from: START, to: fan}
	- {from: fan, to: [a, b]}
	- {from: [a, b], to: join}
	- from: join
	  bound: 3
	  branch:
	    - {when: "state.round < 2", to: fan}
	    - else: END
`)
	ctx := context.Background()
	st := memory.New()
	eng := engine.New(st)
	var evs []engine.Event
	observe := func(ev engine.Event) {
		// what a client reads: the event's JSON
		b, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		var back engine.Event
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		evs = append(evs, back)
	}
	for range 2 {
		if _, err := eng.Run(ctx, g, engine.Request{Thread: "t", Observe: observe}); err != nil {
			t.Fatal(err)
		}
	}
	steps := 0
	var state map[string]any
	var nodes []engine.Event
	for _, ev := range evs {
		switch ev.Type {
		case engine.NodeEnd, engine.NodeFailed:
			nodes = append(nodes, ev)
			continue
		case engine.StateUpdate:
		default:
			continue
		}
		steps++
		before, err := st.StateAt(ctx, "t", ev.Checkpoint-1)
		if err != nil {
			t.Fatal(err)
		}
		after, err := st.StateAt(ctx, "t", ev.Checkpoint)
		if err != nil {
			t.Fatal(err)
		}
		if state == nil || before.Seq != ev.Checkpoint-1 {
			state = maps.Clone(before.Values)
		}
		changes := engine.StepChanges(state, nodes, ev)
		maps.Copy(state, changes)
		if jsonOf(state) != jsonOf(after.Values) {
			t.Fatalf("step %d: the events give\n%s\nthe checkpoint holds\n%s", ev.Step, jsonOf(state), jsonOf(after.Values))
		}
		// nothing told twice: a replace field one node wrote is not in
		// the state_update, an appended list not whole
		for f := range ev.Update {
			if f == "round" || f == "note" || f == "log" {
				t.Fatalf("step %d: state_update repeats %s: %v", ev.Step, f, ev.Update)
			}
		}
		if len(ev.Fields) == 0 || !slices.Equal(ev.Changed(), ev.Fields) {
			t.Fatalf("step %d: fields %v", ev.Step, ev.Fields)
		}
		if items, ok := ev.Appended["log"].([]any); slices.Contains(ev.Fields, "log") && (!ok || len(items) == 0 || len(items) > 2) {
			t.Fatalf("step %d: appended %v", ev.Step, ev.Appended)
		}
		// the shape recorded before: every changed field in update
		old := engine.Event{Type: engine.StateUpdate, Step: ev.Step, Checkpoint: ev.Checkpoint, Update: map[string]any{}}
		for _, f := range ev.Fields {
			old.Update[f] = after.Values[f]
		}
		if got := engine.StepChanges(before.Values, nil, old); jsonOf(got) != jsonOf(old.Update) {
			t.Fatalf("step %d: an event of the old shape gives %s", ev.Step, jsonOf(got))
		}
		if ch := old.Changed(); !slices.Equal(ch, slices.Sorted(slices.Values(ev.Fields))) {
			t.Fatalf("step %d: the old shape's changed fields %v", ev.Step, ch)
		}
		nodes = nodes[:0]
	}
	if steps != 9 {
		t.Fatalf("%d state updates, want 9", steps)
	}
}
