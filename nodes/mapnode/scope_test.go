package mapnode_test

import (
	"bytes"
	"context"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/store/memory"
)

const timedOut = `version: 1
name: timed_out
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
    node: NODE
edges:
  - {from: START, to: each}
  - {from: each, to: END}
`

// waitGoroutinesGone waits until no goroutine's stack names fn, as the
// runtime reports them; a minute's bound against a hang.
func waitGoroutinesGone(t *testing.T, fn string) {
	t.Helper()
	buf := make([]byte, 1<<20)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		n := runtime.Stack(buf, true)
		if !bytes.Contains(buf[:n], []byte(fn)) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("goroutines in %s still running a minute later:\n%s", fn, buf[:n])
		}
	}
}

// afterEnd is an observer counting the events that come after the run
// returned.
type afterEnd struct {
	ended atomic.Bool
	late  atomic.Int64
	first atomic.Value
}

func (a *afterEnd) observe(ev engine.Event) {
	if a.ended.Load() {
		a.late.Add(1)
		a.first.CompareAndSwap(nil, string(ev.Type)+" of "+ev.Node)
	}
}

// A map given up at its timeout, whose items honour cancellation or
// ignore it: the run fails with the timeout, at once, and nothing the
// items do when they notice (or finish) reaches the run's observer after
// Run returned.
func TestTimedOutMapLeavesNothingBehind(t *testing.T) {
	for _, tc := range []struct {
		name, node string
		runs       int
		grace      time.Duration
		detached   bool
	}{
		{"items honour cancellation", `{kind: sleep, ms: 200, set: {out: "item"}}`, 100, engine.DefaultGrace, false},
		// (a second past the grace: a loaded machine's late timer still
		// gives up before they end)
		{"items ignore cancellation", `{kind: sleep, ms: 1000, ignore_cancel: true, set: {out: "item"}}`, 5, 10 * time.Millisecond, true},
		{"items ignore cancellation, within the grace", `{kind: sleep, ms: 20, ignore_cancel: true, set: {out: "item"}}`, 5, engine.DefaultGrace, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := load(t, "timed_out", strings.Replace(timedOut, "NODE", tc.node, 1))
			eng := engine.New(memory.New(), engine.WithGrace(tc.grace))
			for i := range tc.runs {
				var a afterEnd
				start := time.Now()
				_, err := eng.Run(context.Background(), g, engine.Request{Thread: "t" + strconv.Itoa(i), Observe: a.observe})
				a.ended.Store(true)
				took := time.Since(start)
				if err == nil || !strings.Contains(err.Error(), "timed out after 5ms") {
					t.Fatalf("run %d: want the timeout, got %v", i, err)
				}
				if took > time.Minute { // a bound against a hang
					t.Fatalf("run %d took %s", i, took)
				}
				time.Sleep(10 * time.Millisecond)
				if n := a.late.Load(); n > 0 {
					t.Fatalf("run %d: %d events after Run returned, the first %v", i, n, a.first.Load())
				}
			}
			// the maps' attempts were given up; detached when their items
			// outlast the grace, joined otherwise
			late := eng.Late()
			if late.Abandoned < int64(tc.runs) || (late.Detached > 0) != tc.detached {
				t.Fatalf("late %+v after %d runs", late, tc.runs)
			}
			// detached items end on their own: wait for their goroutines
			// to be gone, so none outlives the test (the package's leak
			// check reads every goroutine still running)
			waitGoroutinesGone(t, "kindtest.(*sleepNode).Run")
		})
	}
}
