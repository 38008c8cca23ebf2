package engine_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/store/memory"
)

// A node that does its work again within an attempt after it streamed
// output (kind.State.Retrying) voids that output: its events tell a
// node_retry, and what it streams next is the next attempt's. The retry
// policy counts the engine's tries, not the attempts the node added.
func TestANodeRetryingWithinAnAttemptVoidsItsOutput(t *testing.T) {
	var mu sync.Mutex
	tries := 0
	reg := kind.NewSet(kind.Spec{Name: "redo", Summary: "Stream, redo, stream; fail the first try.",
		New: func(b kind.Builder) kind.Node {
			b.Writes("out", config.Value{})
			return kind.Func(func(_ context.Context, s kind.State) (kind.Update, error) {
				mu.Lock()
				tries++
				try := tries
				mu.Unlock()
				s.Stream(fmt.Sprint("cut ", try))
				s.Retrying(errors.New("the reply was cut short"), 0)
				s.Stream(fmt.Sprint("whole ", try))
				if try == 1 {
					return nil, errors.New("boom")
				}
				return kind.Update{{Field: "out", Value: "done"}}, nil
			})
		}})
	g := compileWith(t, reg, `version: 1
name: redo
state:
  schema:
    type: object
    properties:
      out: {type: string, default: ""}
nodes:
  work: {kind: redo, retry: {attempts: 2, backoff: 1ms}}
edges:
  - {from: START, to: work}
  - {from: work, to: END}
`)
	var events []engine.Event
	res, err := engine.New(memory.New()).Run(context.Background(), g, engine.Request{Thread: "t",
		Observe: func(e engine.Event) { events = append(events, e) }})
	if err != nil || res.State["out"] != "done" {
		t.Fatalf("the run: %v %v", res, err)
	}
	var got []string
	for _, e := range events {
		switch e.Type {
		case engine.NodeOutput:
			got = append(got, fmt.Sprintf("output %d %s", e.Attempt, e.Text))
		case engine.NodeRetry:
			got = append(got, fmt.Sprintf("retry %d %s", e.Attempt, e.Error))
		case engine.NodeEnd:
			got = append(got, fmt.Sprintf("end %d", e.Attempt))
		}
	}
	want := []string{
		"output 1 cut 1", "retry 1 the reply was cut short", "output 2 whole 1", "retry 2 boom",
		"output 3 cut 2", "retry 3 the reply was cut short", "output 4 whole 2", "end 4",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("events\n%q\nwant\n%q", got, want)
	}
}
