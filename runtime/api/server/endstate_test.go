package server

import (
	"bytes"
	"encoding/json"
	"maps"
	"reflect"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/memory"
)

// endsFlow pauses before its last node, and holds values whose encoding
// could drift: integers past a float's precision, a float with no
// fraction, text beyond ASCII, nesting.
const endsFlow = `version: 1
name: ends
state:
  schema:
    type: object
    properties:
      big: {type: integer, default: 9007199254740993}
      ratio: {type: number, default: 2.0}
      note: {type: string, default: ""}
      log: {type: array, items: {type: object}, default: []}
  reducers:
    log: append
nodes:
  fill:
    kind: assign
    set:
      note: "'é ✓ \u0000 \"quoted\"'"
      log: "[{at: len(state.log), nested: {deep: [1, 2.5, nil, true]}}]"
  finish:
    kind: assign
    interrupt_before: true
    set:
      log: "[{done: true}]"
edges:
  - {from: START, to: fill}
  - {from: fill, to: finish}
  - {from: finish, to: END}
`

// A run's end is recorded without the run's final state (the state is
// its checkpoint's, kept there once), and streamed with it all the same:
// live from the server that ran it, and read back from the store by
// another server, the run's end is the same event, its state the
// thread's state at the run's end, for a run paused at an interrupt and
// for the one that ends the thread's work.
func TestARunsEndIsRecordedWithoutTheStateAndStreamedWithIt(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			addr := storeAddr(t, b.addr)
			flows := flowsWith(t, map[string]string{"ends": endsFlow})
			a := serve(t, openRuntime(t, addr), flows, "")
			other := serve(t, openRuntime(t, addr), flows, a.acme.Key)
			if _, err := a.acme.CreateThread(ctx, api.CreateThread{ID: "t", Flow: "ends"}); err != nil {
				t.Fatal(err)
			}
			for i, start := range []api.StartRun{{}, {Resume: true}} {
				var live []api.StreamEvent
				for ev, err := range a.acme.StreamRun(ctx, "t", start) {
					if err != nil {
						t.Fatal(err)
					}
					live = append(live, ev)
				}
				end := live[len(live)-1]
				if end.Event.Type != engine.RunEnd || (i == 0) != (end.Event.Interrupt != nil) {
					t.Fatalf("run %d ended with %+v", i, end.Event)
				}
				st, err := a.acme.State(ctx, "t", 0)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(end.Event.State, st.Values) {
					t.Fatalf("run %d: the live end's state %v, the thread's %v", i, end.Event.State, st.Values)
				}
				// as recorded: the end without the state
				recorded, err := a.srv.cat.Events(ctx, end.Run, 0, 0)
				if err != nil {
					t.Fatal(err)
				}
				var members map[string]json.RawMessage
				if err := json.Unmarshal(recorded[len(recorded)-1].Data, &members); err != nil || members["type"] == nil || members["state"] != nil {
					t.Fatalf("run %d: the recorded end %s", i, recorded[len(recorded)-1].Data)
				}
				// read back by another server, whole and resumed before the end
				stored := stream(t, other.acme, "t", end.Run, "")
				if len(stored) != len(live) {
					t.Fatalf("run %d: %d events stored, %d live", i, len(stored), len(live))
				}
				for k := range live {
					if stored[k].ID != live[k].ID || !reflect.DeepEqual(stored[k].Event, live[k].Event) {
						t.Fatalf("run %d: event %s read back %+v, live %+v", i, live[k].ID, stored[k].Event, live[k].Event)
					}
				}
				tail := stream(t, other.acme, "t", end.Run, live[len(live)-2].ID)
				if len(tail) != 1 || !reflect.DeepEqual(tail[0].Event, end.Event) {
					t.Fatalf("run %d: resumed before its end: %+v", i, tail)
				}
			}
		})
	}
}

// A run's end recorded without its state and sent with it is the bytes
// the engine encoded for it, every member in its place: numbers past a
// float's precision in a question's payload, times, durations, text.
func TestARunsEndIsSentAsTheEngineEncodedIt(t *testing.T) {
	ev := engine.Event{Type: engine.RunEnd, Run: "run_1", Thread: "t", Step: 7, Time: time.Date(2026, 11, 30, 12, 0, 0, 120, time.UTC),
		Duration: 1500 * time.Microsecond, Interrupt: &engine.Interrupt{Before: []string{"b"}, Asks: []engine.Ask{{ID: "q", Path: "q",
			Payload: map[string]any{"n": json.Number("9223372036854775807"), "f": 2.5, "s": "é \u2028 <>"}}}},
		State: map[string]any{"big": 9007199254740993, "ratio": 2.0, "s": "é \u0000 \"q\"", "list": []any{map[string]any{"a": nil}, true}}}
	want, err := ev.JSON()
	if err != nil {
		t.Fatal(err)
	}
	stored := ev
	stored.State = nil
	data, err := stored.JSON()
	if err != nil {
		t.Fatal(err)
	}
	if got := (&Server{}).sendable(ctx, &store.RunRecord{}, string(engine.RunEnd), data, ev.State); !bytes.Equal(got, want) {
		t.Fatalf("sent %s\nwant %s", got, want)
	}
	// an end recorded with its state, by an earlier version, goes as it is
	if got := (&Server{}).sendable(ctx, &store.RunRecord{}, string(engine.RunEnd), want, map[string]any{"other": 1}); !bytes.Equal(got, want) {
		t.Fatalf("an end recorded with its state sent as %s", got)
	}
}

// The run's end is sent with the state the run ended with, however the
// engine goes on with its map (it updates it in place), and recorded
// without it; an end that is not the log's own is not sent from it.
func TestARunsEndIsSentWithTheStateItEndedWith(t *testing.T) {
	notes := &notifier{log: discard(), every: time.Hour}
	l := newEventLog(ctx, memory.New(), discard(), notes, "r", "", "t", nil, nil, func() {})
	defer func() { l.close(l.lastEvents(store.RunSucceeded, "")) }()
	state := map[string]any{"n": 1, "list": []any{"a", map[string]any{"b": 2.5}}, "s": "é \u2028"}
	end := engine.Event{Type: engine.RunEnd, Run: "r", Thread: "t", Step: 3, Time: time.Date(2026, 11, 30, 12, 0, 0, 7, time.UTC),
		Duration: time.Second, State: maps.Clone(state)}
	want, err := end.JSON()
	if err != nil {
		t.Fatal(err)
	}
	l.add(runEvent("node_start"))
	l.add(end)
	// the engine's next updates, in place
	end.State["n"], end.State["later"] = 2, true
	delete(end.State, "s")
	l.mu.Lock()
	seq, recorded := l.held.seq, l.held.data
	l.mu.Unlock()
	if got := l.sent(seq); !bytes.Equal(got, want) {
		t.Fatalf("sent %s\nwant %s", got, want)
	}
	var rec map[string]any
	if err := json.Unmarshal(recorded, &rec); err != nil || rec["type"] != "run_end" || rec["state"] != nil {
		t.Fatalf("recorded %s (%v)", recorded, err)
	}
	if got := l.sent(seq - 1); got != nil {
		t.Fatalf("the event before the end sent from the log as its end: %s", got)
	}
}
