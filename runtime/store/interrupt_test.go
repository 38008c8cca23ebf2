package store_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind/kindtest"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

const pausedFlow = `version: 1
name: approval
input: [amount]
state:
  schema:
    type: object
    properties:
      amount: {type: integer, default: 0}
      log: {type: array, items: {type: string}, default: []}
  reducers:
    log: append
nodes:
  draft: {kind: set, set: {log: "'draft'"}, interrupt_after: true}
  check: {kind: set, set: {log: "'check'"}}
  approve: {kind: set, set: {log: "'approve'"}, interrupt_before: true}
  pay: {kind: set, set: {log: "'pay'"}}
edges:
  - {from: START, to: draft}
  - {from: draft, to: [check, approve]}
  - {from: [check, approve], to: pay}
  - {from: pay, to: END}
`

// interrupt_after and interrupt_before pause a run at a step boundary on
// each store: the run ends interrupted, the thread's next nodes are
// pending, new input is refused until it is resumed, and each resume
// goes on to the next pause and then to the end, never running a node
// twice. A pause before an entry node of a run with no input is resumable
// too.
func TestInterruptBeforeAndAfter(t *testing.T) {
	ctx := context.Background()
	g, dl := flow.LoadSource("approval.yaml", []byte(pausedFlow), kindtest.Registry())
	if g == nil || len(dl) > 0 {
		t.Fatal(dl)
	}
	for name, url := range storetest.URLs(t) {
		t.Run(name, func(t *testing.T) {
			st, err := store.Open(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			eng := engine.New(st)
			res, err := eng.Run(ctx, g, engine.Request{Thread: "t", Input: map[string]any{"amount": 10}})
			if err != nil || res.Interrupt == nil || !slices.Equal(res.Interrupt.After, []string{"draft"}) {
				t.Fatalf("first pause: %+v %v", res, err)
			}
			head, _ := st.Head(ctx, "t")
			if !slices.Equal(head.Next, []string{"approve", "check"}) && !slices.Equal(head.Next, []string{"check", "approve"}) {
				t.Fatalf("pending after the first pause: %v", head.Next)
			}
			if _, err := eng.Run(ctx, g, engine.Request{Thread: "t", Input: map[string]any{"amount": 20}}); !errors.Is(err, engine.ErrUnfinished) {
				t.Fatalf("new input on a paused thread: %v", err)
			}
			// resuming runs draft's successors: approve pauses before
			res, err = eng.Run(ctx, g, engine.Request{Thread: "t", Resume: true})
			if err != nil || res.Interrupt != nil {
				t.Fatalf("the resumed step: %+v %v", res, err)
			}
			if got := res.State["log"]; !slices.Equal(toStrings(got), []string{"draft", "check", "approve", "pay"}) {
				t.Fatalf("log %v", got)
			}
			// a run with no input pausing before its entry node
			g2, dl := flow.LoadSource("approval.yaml", []byte(strings.Replace(pausedFlow, "interrupt_after: true", "interrupt_before: true", 1)), kindtest.Registry())
			if g2 == nil {
				t.Fatal(dl)
			}
			if _, err := eng.Create(ctx, g2, "u", nil); err != nil {
				t.Fatal(err)
			}
			res, err = eng.Run(ctx, g2, engine.Request{Thread: "u"})
			if err != nil || res.Interrupt == nil || !slices.Equal(res.Interrupt.Before, []string{"draft"}) || len(toStrings(res.State["log"])) != 0 {
				t.Fatalf("pause before the entry: %+v %v", res, err)
			}
			res, err = eng.Run(ctx, g2, engine.Request{Thread: "u", Resume: true})
			if err != nil || res.Interrupt == nil || !slices.Equal(res.Interrupt.Before, []string{"approve"}) {
				t.Fatalf("second pause, before approve: %+v %v", res, err)
			}
			if got := toStrings(res.State["log"]); !slices.Equal(got, []string{"draft"}) {
				t.Fatalf("log before approve %v", got)
			}
			res, err = eng.Run(ctx, g2, engine.Request{Thread: "u", Resume: true})
			if err != nil || res.Interrupt != nil || !slices.Equal(toStrings(res.State["log"]), []string{"draft", "check", "approve", "pay"}) {
				t.Fatalf("the end: %+v %v", res, err)
			}
		})
	}
}

func toStrings(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}
