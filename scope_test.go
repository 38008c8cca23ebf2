package trellis_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/nodes/all/alltest"
	"github.com/trellisflow/trellis/runtime/kind/kindtest"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

// A map whose node outlasts the map's timeout: eight items that honour
// cancellation, stopped at 5ms.
const timedOutMap = `version: 1
name: timed_out_map
state:
  schema:
    type: object
    properties:
      items: {type: array, default: [1, 2, 3, 4, 5, 6, 7, 8]}
      out: {type: array, default: []}
  reducers:
    out: append
nodes:
  each:
    kind: map
    items: "state.items"
    timeout: 5ms
    node: {kind: sleep, ms: 200, set: {out: "1"}}
edges:
  - {from: START, to: each}
  - {from: each, to: END}
`

// Streaming a run whose map times out, many times over: the items the
// timeout stops end after the map's attempt was given up, and nothing
// they do reaches the stream after the run is over (an event then was
// a send on the stream's closed channel: a crash). Each run ends in
// run_error, last, with the map's timeout.
func TestStreamOfATimedOutMapEndsCleanly(t *testing.T) {
	ctx := context.Background()
	f, err := trellis.LoadSource("timed_out_map.yaml", []byte(timedOutMap), trellis.WithKinds(alltest.WithTestKinds()))
	if err != nil {
		t.Fatal(err)
	}
	rt, err := trellis.Open(ctx, "memory")
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	for i := range 300 {
		var last trellis.Event
		var runErr error
		n := 0
		for ev, err := range rt.Stream(ctx, f, "t", nil) {
			if err != nil {
				runErr = err
				continue
			}
			if last.Type == trellis.RunError || last.Type == trellis.RunEnd {
				t.Fatalf("run %d: %s after the run's end", i, ev.Type)
			}
			last = ev
			n++
		}
		if last.Type != trellis.RunError || runErr == nil || !strings.Contains(runErr.Error(), "timed out after 5ms") {
			t.Fatalf("run %d: %d events, the last %s (%s), error %v", i, n, last.Type, last.Error, runErr)
		}
	}
	// every map was given up at its timeout (unless it returned just as
	// its time ran out), and waited for: the items honour cancellation
	if late := rt.Late(); late.Abandoned < 100 || late.Detached != 0 {
		t.Fatalf("late %+v after 300 runs", late)
	}
}

func TestMain(m *testing.M) { os.Exit(storetest.MainNoLeaks(m)) }

// A stream whose context the caller cancels still yields every event of
// the run, in order, ending in its run_error, and then the cancellation.
func TestStreamCancelledByItsCallerYieldsTheRunsEnd(t *testing.T) {
	f, err := trellis.LoadSource("slow.yaml", []byte(slow), trellis.WithKinds(kindtest.Registry()))
	if err != nil {
		t.Fatal(err)
	}
	rt, err := trellis.Open(context.Background(), "memory")
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	for i := range 20 {
		ctx, cancel := context.WithCancel(context.Background())
		var types []trellis.EventType
		var last error
		for ev, err := range rt.Stream(ctx, f, "t"+strconv.Itoa(i), nil) {
			if err != nil {
				last = err
				continue
			}
			types = append(types, ev.Type)
			if ev.Type == trellis.NodeStart {
				cancel()
			}
		}
		cancel()
		if len(types) != 3 || types[2] != trellis.RunError || !errors.Is(last, context.Canceled) {
			t.Fatalf("run %d: events %v, error %v; want run_start, node_start, run_error and the cancellation", i, types, last)
		}
	}
}
