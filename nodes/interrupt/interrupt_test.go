package interrupt_test

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/store"
	_ "github.com/trellisflow/trellis/runtime/store/all"
	"github.com/trellisflow/trellis/runtime/store/storetest"
	"go.uber.org/goleak"
)

// TestMain runs the tests with the stores' servers, and fails when a
// goroutine outlives them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(withStores{m}) }

type withStores struct{ *testing.M }

func (m withStores) Run() int { return storetest.Main(m.M) }

const approvals = `version: 1
name: approvals
input: [amount]
state:
  schema:
    type: object
    properties:
      amount: {type: integer, default: 0}
      manager: {type: boolean, default: false}
      finance: {type: string, default: ""}
      rounds: {type: integer, default: 0}
      log: {type: array, items: {type: string}, default: []}
  reducers:
    log: append
nodes:
  draft: {kind: assign, set: {log: "'draft'"}}
  manager:
    kind: interrupt
    ask: "{'question': 'Approve?', 'amount': state.amount}"
    writes: {manager: "answer == true", log: "'manager'"}
  finance:
    kind: interrupt
    ask: "'Which budget pays ' + string(state.amount) + '?'"
    writes: {finance: "string(answer)", log: "'finance'"}
  pay: {kind: assign, set: {log: "'pay'", rounds: "state.rounds + 1"}}
  again:
    kind: interrupt
    ask: "'Another round after ' + string(state.rounds) + '?'"
    writes: {log: "answer == true ? 'again' : 'stop'"}
edges:
  - {from: START, to: draft}
  - {from: draft, to: [manager, finance]}
  - {from: [manager, finance], to: pay}
  - {from: pay, to: again}
  - from: again
    bound: 3
    branch:
      - when: "state.log[len(state.log) - 1] == 'again'"
        to: pay
      - else: END
`

// Two interrupts of one step are asked together, each by its node's name,
// and resumed in either order across separate runs (and a reopened store):
// the answer given first is kept until the other comes. An asker in a loop
// asks again each round: an answer serves one step. On every store.
func TestTwoInterruptsAnsweredInEitherOrder(t *testing.T) {
	ctx := context.Background()
	g, dl := flow.LoadSource("approvals.yaml", []byte(approvals), all.Offline())
	if g == nil || dl.HasErrors() {
		t.Fatal(dl)
	}
	for name, url := range storetest.URLs(t) {
		t.Run(name, func(t *testing.T) {
			st, err := store.Open(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { st.Close() }()
			reopen := func() {
				if name == "memory" {
					return
				}
				st.Close()
				if st, err = store.Open(ctx, url); err != nil {
					t.Fatal(err)
				}
			}
			for thread, order := range map[string][2]string{"mf": {"manager", "finance"}, "fm": {"finance", "manager"}} {
				res, err := engine.New(st).Run(ctx, g, engine.Request{Thread: thread, Input: map[string]any{"amount": 120}})
				if err != nil || res.Interrupt == nil || len(res.Interrupt.Asks) != 2 {
					t.Fatalf("%s: first pause: %+v %v", thread, res, err)
				}
				asks := map[string]any{}
				for _, a := range res.Interrupt.Asks {
					asks[a.ID] = a.Payload
				}
				if !reflect.DeepEqual(asks["manager"], map[string]any{"question": "Approve?", "amount": 120}) || asks["finance"] != "Which budget pays 120?" {
					t.Fatalf("%s: asks %v", thread, asks)
				}
				answer := map[string]any{"manager": true, "finance": "ops"}
				reopen()
				res, err = engine.New(st).Run(ctx, g, engine.Request{Thread: thread, Resume: true, Answers: map[string]any{order[0]: answer[order[0]]}})
				if err != nil || res.Interrupt == nil || len(res.Interrupt.Asks) != 1 || res.Interrupt.Asks[0].ID != order[1] {
					t.Fatalf("%s: after answering %s: %+v %v", thread, order[0], res.Interrupt, err)
				}
				reopen()
				res, err = engine.New(st).Run(ctx, g, engine.Request{Thread: thread, Resume: true, Answers: map[string]any{order[1]: answer[order[1]]}})
				if err != nil || res.Interrupt == nil || len(res.Interrupt.Asks) != 1 || res.Interrupt.Asks[0].Payload != "Another round after 1?" {
					t.Fatalf("%s: after answering both: %+v %v", thread, res, err)
				}
				if res.State["manager"] != true || res.State["finance"] != "ops" {
					t.Fatalf("%s: state %v", thread, res.State)
				}
				// the loop's asker asks each round; its answer serves one step
				res, err = engine.New(st).Run(ctx, g, engine.Request{Thread: thread, Resume: true, Answers: map[string]any{"again": true}})
				if err != nil || res.Interrupt == nil || res.Interrupt.Asks[0].Payload != "Another round after 2?" {
					t.Fatalf("%s: second round: %+v %v", thread, res, err)
				}
				res, err = engine.New(st).Run(ctx, g, engine.Request{Thread: thread, Resume: true, Answers: map[string]any{"again": false}})
				if err != nil || res.Interrupt != nil {
					t.Fatalf("%s: the end: %+v %v", thread, res, err)
				}
				want := []any{"draft", "manager", "finance", "pay", "again", "pay", "stop"}
				if !reflect.DeepEqual(res.State["log"], want) {
					t.Fatalf("%s: log %v", thread, res.State["log"])
				}
				// the run has ended: answers to it are refused, by a node's
				// name too, and change nothing; a resume without answers
				// has nothing to do
				head, err := st.Head(ctx, thread)
				if err != nil {
					t.Fatal(err)
				}
				for _, late := range []map[string]any{{"again": true}, {"manager": false}, {"no-such": 1}} {
					_, err = engine.New(st).Run(ctx, g, engine.Request{Thread: thread, Resume: true, Answers: late})
					var ie *engine.InputError
					if !errors.As(err, &ie) || !strings.HasPrefix(ie.Field, "answers.") {
						t.Fatalf("%s: answers %v to a finished run: %v", thread, late, err)
					}
				}
				res, err = engine.New(st).Run(ctx, g, engine.Request{Thread: thread, Resume: true})
				if err != nil || res.Steps != 0 || res.Checkpoint != head.Seq {
					t.Fatalf("%s: a resume with nothing to resume: %+v %v", thread, res, err)
				}
				if after, err := st.Head(ctx, thread); err != nil || after.Seq != head.Seq {
					t.Fatalf("%s: the refused answers wrote: %d, was %d (%v)", thread, after.Seq, head.Seq, err)
				}
			}
			// an answer to nothing that asks is refused
			_, err = engine.New(st).Run(ctx, g, engine.Request{Thread: "x", Input: map[string]any{"amount": 1}, Answers: map[string]any{"pay": 1}})
			var ie *engine.InputError
			if !errors.As(err, &ie) || ie.Field != "answers.pay" {
				t.Fatalf("an answer to a node that does not ask: %v", err)
			}
		})
	}
}

// Graphs draw a node that asks distinctly.
func TestDrawnDistinctly(t *testing.T) {
	g, dl := flow.LoadSource("approvals.yaml", []byte(approvals), all.Offline())
	if g == nil {
		t.Fatal(dl)
	}
	if m := g.Mermaid(); !strings.Contains(m, `n_manager{{"manager<br/><small>interrupt, asks and waits</small>"}}`) || !strings.Contains(m, `n_pay["pay`) {
		t.Errorf("mermaid:\n%s", m)
	}
	if d := g.DOT(); !strings.Contains(d, `"finance" [label="finance\n(interrupt, asks and waits)", shape=hexagon]`) {
		t.Errorf("dot:\n%s", d)
	}
	if j, _ := g.JSON(); !strings.Contains(string(j), `"asks": true`) {
		t.Errorf("json:\n%s", j)
	}
}

const inputAcrossResumes = `version: 1
name: expenses
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
  first:
    kind: interrupt
    ask: "'first ' + string(input.amount)"
    writes: {log: "'first ' + string(answer) + ' of ' + string(input.amount)"}
  left:
    kind: interrupt
    ask: "'left ' + string(input.amount)"
    writes: {log: "'left ' + string(answer) + ' of ' + string(input.amount)"}
  right:
    kind: interrupt
    ask: "'right ' + string(input.amount)"
    writes: {log: "'right ' + string(answer) + ' of ' + string(input.amount)"}
  sum: {kind: assign, set: {log: "'sum of ' + string(input.amount)"}}
  last:
    kind: interrupt
    ask: "'last ' + string(input.amount)"
    writes: {log: "'last ' + string(answer) + ' of ' + string(input.amount)"}
edges:
  - {from: START, to: first}
  - {from: first, to: [left, right]}
  - {from: [left, right], to: sum}
  - {from: sum, to: last}
  - {from: last, to: END}
`

// A run that pauses again after a resume keeps the input it started
// with: every resume, whichever run made the checkpoint it goes on from,
// reads the input of the run that took it, and asks with it. Answers come
// one at a time, in either order, each run on a store opened anew.
func TestInputKeptAcrossResumes(t *testing.T) {
	ctx := context.Background()
	g, dl := flow.LoadSource("expenses.yaml", []byte(inputAcrossResumes), all.Offline())
	if g == nil || dl.HasErrors() {
		t.Fatal(dl)
	}
	for name, url := range storetest.URLs(t) {
		t.Run(name, func(t *testing.T) {
			mem, err := store.Open(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer mem.Close()
			run := func(req engine.Request) *engine.Result {
				t.Helper()
				st := mem
				if name != "memory" {
					if st, err = store.Open(ctx, url); err != nil {
						t.Fatal(err)
					}
					defer st.Close()
				}
				res, err := engine.New(st).Run(ctx, g, req)
				if err != nil {
					t.Fatalf("%+v: %v", req, err)
				}
				return res
			}
			asked := func(res *engine.Result) []string {
				var out []string
				if res.Interrupt != nil {
					for _, a := range res.Interrupt.Asks {
						out = append(out, a.ID+": "+a.Payload.(string))
					}
				}
				slices.Sort(out)
				return out
			}
			for thread, order := range map[string][2]string{"lr": {"left", "right"}, "rl": {"right", "left"}} {
				res := run(engine.Request{Thread: thread, Input: map[string]any{"amount": 40}})
				if got := asked(res); !slices.Equal(got, []string{"first: first 40"}) {
					t.Fatalf("%s: %v", thread, got)
				}
				res = run(engine.Request{Thread: thread, Resume: true, Answers: map[string]any{"first": "ok"}})
				if got := asked(res); !slices.Equal(got, []string{"left: left 40", "right: right 40"}) {
					t.Fatalf("%s: after the first answer: %v", thread, got)
				}
				res = run(engine.Request{Thread: thread, Resume: true, Answers: map[string]any{order[0]: "yes"}})
				if got := asked(res); !slices.Equal(got, []string{order[1] + ": " + order[1] + " 40"}) {
					t.Fatalf("%s: after %s: %v", thread, order[0], got)
				}
				res = run(engine.Request{Thread: thread, Resume: true, Answers: map[string]any{order[1]: "no"}})
				if got := asked(res); !slices.Equal(got, []string{"last: last 40"}) {
					t.Fatalf("%s: after %s: %v", thread, order[1], got)
				}
				res = run(engine.Request{Thread: thread, Resume: true, Answers: map[string]any{"last": "done"}})
				if res.Interrupt != nil {
					t.Fatalf("%s: the end: %+v", thread, res.Interrupt)
				}
				answer := map[string]string{order[0]: "yes", order[1]: "no"}
				want := []any{"first ok of 40", "left " + answer["left"] + " of 40", "right " + answer["right"] + " of 40", "sum of 40", "last done of 40"}
				if !reflect.DeepEqual(res.State["log"], want) {
					t.Fatalf("%s: log %v", thread, res.State["log"])
				}
			}
		})
	}
}
