package trellis_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/runtime/kind/kindtest"
)

const slow = `version: 1
name: slow
state:
  schema: {type: object, properties: {n: {type: integer, default: 0}}}
nodes:
  a: {kind: sleep, ms: 30, set: {n: "state.n + 1"}}
  b: {kind: sleep, ms: 30, set: {n: "state.n + 1"}}
edges:
  - {from: START, to: a}
  - {from: a, to: b}
  - {from: b, to: END}
`

func TestStreamStopsTheRunWhenTheLoopStops(t *testing.T) {
	ctx := context.Background()
	f, err := trellis.LoadSource("slow.yaml", []byte(slow), trellis.WithKinds(kindtest.Registry()))
	if err != nil {
		t.Fatal(err)
	}
	rt, _ := trellis.Open(ctx, "memory")
	defer rt.Close()
	var seen []trellis.EventType
	for ev, err := range rt.Stream(ctx, f, "t", nil) {
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, ev.Type)
		if ev.Type == trellis.NodeStart {
			break
		}
	}
	if len(seen) != 2 || seen[1] != trellis.NodeStart {
		t.Fatalf("events %v", seen)
	}
	// the run was cancelled: it did not reach the second node
	snap, err := rt.State(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if snap.Values["n"] == 2 {
		t.Fatalf("the run went on after the loop stopped: %v", snap.Values)
	}
	// and the thread is free again
	if _, err := rt.Resume(ctx, f, "t"); err != nil {
		t.Fatalf("resume after a stopped stream: %v", err)
	}
}

func TestStreamYieldsAnErrorWhenTheRunCannotStart(t *testing.T) {
	ctx := context.Background()
	f, err := trellis.LoadSource("slow.yaml", []byte(slow), trellis.WithKinds(kindtest.Registry()))
	if err != nil {
		t.Fatal(err)
	}
	rt, _ := trellis.Open(ctx, "memory")
	defer rt.Close()
	var types []trellis.EventType
	var last error
	for ev, err := range rt.Stream(ctx, f, "t", map[string]any{"nope": 1}) {
		types, last = append(types, ev.Type), err
	}
	if last == nil || !strings.Contains(last.Error(), `input "nope"`) || len(types) != 1 {
		t.Fatalf("want the input error alone, got %v %v", types, last)
	}
	// a busy thread fails before the run starts: the error alone
	rt.Engine().Store.Acquire(ctx, "busy", "someone else", time.Minute)
	var items int
	for _, err := range rt.Stream(ctx, f, "busy", nil) {
		items++
		last = err
	}
	if items != 1 || !errors.Is(last, trellis.ErrBusy) {
		t.Fatalf("want ErrBusy alone, got %d items, %v", items, last)
	}
}

func TestLoadErrorPrintsEveryProblem(t *testing.T) {
	fsys := fstest.MapFS{"f.yaml": {Data: []byte("version: 1\nname: f\nstate: {schema: {type: object, properties: {n: {type: integer}}}}\nnodes:\n  a: {kind: asign}\nedges: [{from: START, to: b}]\n")}}
	_, err := trellis.LoadFS(fsys, "f.yaml")
	var le *trellis.LoadError
	if !errors.As(err, &le) || len(le.Diagnostics) < 2 {
		t.Fatalf("want every problem, got %v", err)
	}
	var b bytes.Buffer
	if err := le.Print(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`error[G001]: edge target "b" is not a node`, `f.yaml:5:13: error[K001]: unknown node kind "asign"; did you mean "assign"?`, "  a: {kind: asign}\n", "^^^^^"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, b.String())
		}
	}
}

func TestConversationFinished(t *testing.T) {
	f, err := trellis.Load("flows/interview.yaml", trellis.Offline())
	if err != nil {
		t.Fatal(err)
	}
	c := f.Conversation()
	if c == nil || c.Input == "" || c.Output == "" {
		t.Fatalf("conversation %+v", c)
	}
	if done, err := f.Finished(map[string]any{"phase": "done"}); err != nil || !done {
		t.Fatalf("finished: %v %v", done, err)
	}
	g, _ := trellis.Load("flows/examples/greet.yaml")
	if g.Conversation() != nil {
		t.Fatal("greet has no conversation")
	}
}
