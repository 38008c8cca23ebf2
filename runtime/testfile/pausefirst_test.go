package testfile

import (
	"context"
	"sync"
	"testing"

	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind/kindtest"
	"github.com/trellisflow/trellis/runtime/store/memory"
)

// A test's run stopped before its first step pauses that run alone: the
// compiled graph is not written, so runs sharing it at the same time (a
// run stopped at 0 and one that runs through, on one graph) each do what
// they were asked, and the race detector sees no write to the graph.
func TestPauseFirstLeavesTheGraphAlone(t *testing.T) {
	g, dl, _ := flow.Compile(nil, "tally.yaml", []byte(`version: 1
name: tally
state:
  schema:
    type: object
    properties:
      total: {type: integer, default: 0}
nodes:
  one: {kind: set, set: {total: "state.total + 1"}}
  two: {kind: set, set: {total: "state.total + 1"}}
edges:
  - {from: START, to: one}
  - {from: one, to: two}
  - {from: two, to: END}
`), kindtest.Registry())
	if dl.HasErrors() {
		t.Fatal(dl)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for range 16 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			res, err := pauseFirst(ctx, engine.New(memory.New()), g, engine.Request{Thread: "p"})
			if err != nil || res.Interrupt == nil || len(res.Interrupt.Before) != 1 || res.Interrupt.Before[0] != "one" {
				errs <- "the stopped run did not pause before one"
			}
		}()
		go func() {
			defer wg.Done()
			res, err := engine.New(memory.New()).Run(ctx, g, engine.Request{Thread: "r"})
			if err != nil || res.Interrupt != nil || res.State["total"] != int64(2) && res.State["total"] != 2 {
				errs <- "a run sharing the graph paused or did not run through"
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	if g.Pauses {
		t.Fatal("the graph pauses after the runs")
	}
	for _, n := range g.Nodes {
		if n.InterruptBefore {
			t.Fatalf("node %s pauses before it runs after the runs", n.Name)
		}
	}
	// resumed, the stopped run goes on from its first step
	eng := engine.New(memory.New())
	if _, err := pauseFirst(ctx, eng, g, engine.Request{Thread: "p"}); err != nil {
		t.Fatal(err)
	}
	res, err := eng.Run(ctx, g, engine.Request{Thread: "p", Resume: true})
	if err != nil || res.Interrupt != nil || res.State["total"] != int64(2) && res.State["total"] != 2 {
		t.Fatalf("resumed: %+v %v", res, err)
	}
}
