package subflow_test

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

// The flows of the pause tests: a hiring flow whose review (a subflow)
// runs a check (a subflow of the subflow) that asks a person to approve.
// Every node but the asker is a gate, which counts its runs.

const pauseRoot = `version: 1
name: hiring
input: [resume]
state:
  schema:
    type: object
    properties:
      resume: {type: string, default: ""}
      verdict: {type: string, default: ""}
      log: {type: array, items: {type: string}, default: []}
  reducers:
    log: append
nodes:
  prepare: {kind: gate, set: {log: "'prepared ' + input.resume"}}
  review:
    kind: subflow
    flow: review.yaml
    input: {resume: "state.resume"}
    writes: {verdict: "output.verdict", log: "output.notes"}
  close: {kind: gate, set: {log: "'closed: ' + state.verdict"}}
edges:
  - {from: START, to: prepare}
  - {from: prepare, to: review}
  - {from: review, to: close}
  - {from: close, to: END}
`

const pauseReview = `version: 1
name: review
input: [resume]
state:
  schema:
    type: object
    required: [resume]
    properties:
      resume: {type: string}
      verdict: {type: string, default: ""}
      notes: {type: array, items: {type: string}, default: []}
  reducers:
    notes: append
nodes:
  read: {kind: gate, set: {notes: "'read ' + input.resume"}}
  inner:
    kind: subflow
    flow: check.yaml
    input: {subject: "state.resume"}
    writes: {verdict: "output.verdict"}
  judge: {kind: gate, set: {notes: "'judged ' + state.verdict"}}
edges:
  - {from: START, to: read}
  - {from: read, to: inner}
  - {from: inner, to: judge}
  - {from: judge, to: END}
`

const pauseCheck = `version: 1
name: check
input: [subject]
state:
  schema:
    type: object
    required: [subject]
    properties:
      subject: {type: string}
      verdict: {type: string, default: ""}
      seen: {type: integer, default: 0}
nodes:
  scan: {kind: gate, set: {seen: "len(input.subject)"}}
  approve:
    kind: interrupt
    ask: "{'approve': state.subject, 'seen': state.seen}"
    writes: {verdict: "string(answer)"}
  sign: {kind: gate, set: {verdict: "state.verdict + ' (signed)'"}}
edges:
  - {from: START, to: scan}
  - {from: scan, to: approve}
  - {from: approve, to: sign}
  - {from: sign, to: END}
`

func loadPauseFlows(t *testing.T, gt *gate, files map[string]string, root string) *flow.Graph {
	t.Helper()
	dir := t.TempDir()
	for name, src := range files {
		write(t, dir, name, src)
	}
	g, dl := flow.Load(filepath.Join(dir, root), gt.registry())
	if g == nil || dl.HasErrors() {
		t.Fatalf("the flows do not load:\n%v", dl)
	}
	return g
}

// counts is every node's runs, in the form a test compares.
func (g *gate) counts() map[string]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := map[string]int{}
	for k, v := range g.runs {
		out[k] = v
	}
	return out
}

func paths(in *engine.Interrupt) []string {
	var out []string
	if in != nil {
		for _, a := range in.Asks {
			out = append(out, a.Path)
		}
	}
	slices.Sort(out)
	return out
}

// An interrupt two subflows down pauses the root run: the pause names its
// path (review/inner/approve) and an id under the children's namespaces;
// the thread's run lists it; each child's thread is paused where it
// stopped. A new engine on the store opened anew answers it by its id (or
// by its path), and the run completes with every node having run once:
// no node of the children that finished runs again, nor any of the
// parent's. On each store.
func TestInterruptTwoSubflowsDown(t *testing.T) {
	ctx := context.Background()
	for name, url := range storetest.URLs(t) {
		for _, by := range []string{"id", "path"} {
			thread := "cand-" + by
			t.Run(name+"/by "+by, func(t *testing.T) {
				gt := &gate{runs: map[string]int{}}
				g := loadPauseFlows(t, gt, map[string]string{"hiring.yaml": pauseRoot, "review.yaml": pauseReview, "check.yaml": pauseCheck}, "hiring.yaml")
				st, err := store.Open(ctx, url)
				if err != nil {
					t.Fatal(err)
				}
				res, err := engine.New(st).Run(ctx, g, engine.Request{Thread: thread, Input: map[string]any{"resume": "go"}})
				if err != nil || res.Interrupt == nil || len(res.Interrupt.Asks) != 1 {
					t.Fatalf("the first run: %+v %v", res, err)
				}
				ask := res.Interrupt.Asks[0]
				if ask.Path != "review/inner/approve" || !reflect.DeepEqual(ask.Payload, map[string]any{"approve": "go", "seen": 2}) {
					t.Fatalf("the question: %+v", ask)
				}
				var rs, is uint64
				if n, _ := fmt.Sscanf(strings.ReplaceAll(ask.ID, "|", " "), "review:%d inner:%d approve", &rs, &is); n != 2 {
					t.Fatalf("the question's id %q", ask.ID)
				}
				if !slices.Equal(res.Interrupt.Before, []string{"review/inner/approve"}) {
					t.Fatalf("paused before %v", res.Interrupt.Before)
				}
				head, _ := st.Head(ctx, thread)
				child := engine.ChildThread(thread, fmt.Sprintf("review:%d", rs))
				ch, err := st.Head(ctx, child)
				if err != nil || !slices.Equal(head.Next, []string{"review"}) || !slices.Equal(ch.Next, []string{"inner"}) {
					t.Fatalf("the threads' next nodes: %v, %+v %v", head.Next, ch, err)
				}
				gch, err := st.Head(ctx, engine.ChildThread(child, fmt.Sprintf("inner:%d", is)))
				if err != nil || !slices.Equal(gch.Next, []string{"approve"}) || gch.Values["seen"] != 2 {
					t.Fatalf("the grandchild: %+v %v", gch, err)
				}
				if name != "memory" {
					// a new process: the memory store lives in this one
					st.Close()
					if st, err = store.Open(ctx, url); err != nil {
						t.Fatal(err)
					}
				}
				defer st.Close()
				eng := engine.New(st)
				asks, err := eng.Asks(ctx, g, thread)
				if err != nil || len(asks) != 1 || !reflect.DeepEqual(asks[0], ask) {
					t.Fatalf("the thread's questions: %+v %v", asks, err)
				}
				key := ask.ID
				if by == "path" {
					key = ask.Path
				}
				res, err = eng.Run(ctx, g, engine.Request{Thread: thread, Resume: true, Answers: map[string]any{key: "yes"}})
				if err != nil || res.Interrupt != nil {
					t.Fatalf("the resumed run: %+v %v", res, err)
				}
				want := []any{"prepared go", "read go", "judged yes (signed)", "closed: yes (signed)"}
				if !reflect.DeepEqual(res.State["log"], want) {
					t.Fatalf("log %v", res.State["log"])
				}
				if got := gt.counts(); !reflect.DeepEqual(got, map[string]int{"prepare": 1, "read": 1, "scan": 1, "sign": 1, "judge": 1, "close": 1}) {
					t.Fatalf("runs %v", got)
				}
			})
		}
	}
}

const claimsRoot = `version: 1
name: expenses
input: [claims]
state:
  schema:
    type: object
    properties:
      claims:
        type: array
        default: []
        items: {type: object, properties: {who: {type: string}, amount: {type: integer}}, required: [who, amount]}
      outcomes: {type: array, items: {type: string}, default: []}
      log: {type: array, items: {type: string}, default: []}
  reducers:
    outcomes: append
    log: append
nodes:
  each:
    kind: map
    items: "state.claims"
    max_concurrency: 2
    node:
      kind: subflow
      flow: claim.yaml
      input: {who: "item.who", amount: "item.amount"}
      writes: {outcomes: "[output.outcome]"}
  total: {kind: gate, set: {log: "'total ' + string(len(state.outcomes))"}}
edges:
  - {from: START, to: each}
  - {from: each, to: total}
  - {from: total, to: END}
`

const claimFlow = `version: 1
name: claim
input: [who, amount]
state:
  schema:
    type: object
    required: [who, amount]
    properties:
      who: {type: string}
      amount: {type: integer}
      large: {type: boolean, default: false}
      outcome: {type: string, default: ""}
nodes:
  assess: {kind: gate, set: {large: "input.amount >= 100"}}
  approve:
    kind: interrupt
    ask: "state.who + ' claims ' + string(state.amount)"
    writes: {outcome: "state.who + ': ' + string(answer)"}
  auto: {kind: gate, set: {outcome: "state.who + ': auto'"}}
edges:
  - {from: START, to: assess}
  - from: assess
    branch:
      - {when: "state.large", to: approve}
      - else: auto
  - {from: approve, to: END}
  - {from: auto, to: END}
`

// A map of five items, three of which pause (their child flow asks):
// each paused item has its own question, with its own id and path; the
// answers come one resume at a time, in the order third, first, second,
// each resuming only its item while the others stay paused; the map's
// join waits for all of them, and each answer is in its own item's
// outcome. Nothing that completed runs again. On each store.
func TestMapItemsPauseAndResumeInAnyOrder(t *testing.T) {
	ctx := context.Background()
	claims := []any{
		map[string]any{"who": "ann", "amount": 150}, map[string]any{"who": "bob", "amount": 20},
		map[string]any{"who": "cy", "amount": 300}, map[string]any{"who": "di", "amount": 40},
		map[string]any{"who": "ed", "amount": 500},
	}
	for name, url := range storetest.URLs(t) {
		t.Run(name, func(t *testing.T) {
			gt := &gate{runs: map[string]int{}}
			g := loadPauseFlows(t, gt, map[string]string{"expenses.yaml": claimsRoot, "claim.yaml": claimFlow}, "expenses.yaml")
			st, err := store.Open(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			res, err := engine.New(st).Run(ctx, g, engine.Request{Thread: "q", Input: map[string]any{"claims": claims}})
			if err != nil {
				t.Fatal(err)
			}
			want := []string{"each[0]/approve", "each[2]/approve", "each[4]/approve"}
			if got := paths(res.Interrupt); !slices.Equal(got, want) {
				t.Fatalf("paused at %v", got)
			}
			ids := map[string]string{}
			for _, a := range res.Interrupt.Asks {
				ids[a.Path] = a.ID
				item := strings.TrimSuffix(strings.TrimPrefix(a.Path, "each["), "]/approve")
				if !strings.HasPrefix(a.ID, "each["+item+"]:") || !strings.HasSuffix(a.ID, "|approve") {
					t.Fatalf("the id of %s: %q", a.Path, a.ID)
				}
			}
			if len(ids) != 3 || ids[want[0]] == ids[want[1]] || ids[want[1]] == ids[want[2]] {
				t.Fatalf("ids %v", ids)
			}
			// third, first, second: by id twice, by path once
			for i, answer := range []struct {
				key, value string
				left       []string
			}{
				{ids[want[2]], "ok", want[:2]},
				{want[0], "fine", want[1:2]},
				{ids[want[1]], "sure", nil},
			} {
				res, err = engine.New(st).Run(ctx, g, engine.Request{Thread: "q", Resume: true, Answers: map[string]any{answer.key: answer.value}})
				if err != nil {
					t.Fatalf("answer %d: %v", i+1, err)
				}
				if got := paths(res.Interrupt); !slices.Equal(got, answer.left) {
					t.Fatalf("after answer %d: paused at %v, want %v", i+1, got, answer.left)
				}
				if gt.count("total") != 0 && answer.left != nil {
					t.Fatalf("the join ran before every item was answered")
				}
				if answer.left != nil {
					asks, err := engine.New(st).Asks(ctx, g, "q")
					if err != nil || !slices.Equal(paths(&engine.Interrupt{Asks: asks}), answer.left) {
						t.Fatalf("the thread's questions after answer %d: %+v %v", i+1, asks, err)
					}
				}
			}
			wantOut := []any{"ann: fine", "bob: auto", "cy: sure", "di: auto", "ed: ok"}
			if !reflect.DeepEqual(res.State["outcomes"], wantOut) || !reflect.DeepEqual(res.State["log"], []any{"total 5"}) {
				t.Fatalf("state %v", res.State)
			}
			if got := gt.counts(); !reflect.DeepEqual(got, map[string]int{"assess": 5, "auto": 2, "total": 1}) {
				t.Fatalf("runs %v", got)
			}
		})
	}
}

const twinRoot = `version: 1
name: twins
state:
  schema:
    type: object
    properties:
      left: {type: string, default: ""}
      right: {type: string, default: ""}
nodes:
  start: {kind: gate, set: {}}
  left:
    kind: subflow
    flow: check.yaml
    input: {subject: "'left'"}
    writes: {left: "output.verdict"}
  right:
    kind: subflow
    flow: check.yaml
    input: {subject: "'right'"}
    writes: {right: "output.verdict"}
edges:
  - {from: START, to: start}
  - {from: start, to: [left, right]}
  - {from: [left, right], to: END}
`

// Two interrupts in one superstep, of the same node of the same child
// flow, have distinct ids; each answer lands in its own child, whether
// they come together or apart, in either order. On each store.
func TestTwoInterruptsOfOneStepHaveTheirOwnIDs(t *testing.T) {
	ctx := context.Background()
	for name, url := range storetest.URLs(t) {
		t.Run(name, func(t *testing.T) {
			gt := &gate{runs: map[string]int{}}
			g := loadPauseFlows(t, gt, map[string]string{"twins.yaml": twinRoot, "check.yaml": pauseCheck}, "twins.yaml")
			st, err := store.Open(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			for _, order := range [][]string{{"left", "right"}, {"right", "left"}, {"both"}} {
				thread := "t-" + strings.Join(order, "-")
				res, err := engine.New(st).Run(ctx, g, engine.Request{Thread: thread})
				if err != nil || res.Interrupt == nil || len(res.Interrupt.Asks) != 2 {
					t.Fatalf("%s: %+v %v", thread, res, err)
				}
				ids := map[string]string{}
				for _, a := range res.Interrupt.Asks {
					ids[strings.TrimSuffix(a.Path, "/approve")] = a.ID
					side := strings.TrimSuffix(a.Path, "/approve")
					if !reflect.DeepEqual(a.Payload, map[string]any{"approve": side, "seen": len(side)}) {
						t.Fatalf("%s: the question of %s: %v", thread, side, a.Payload)
					}
				}
				if ids["left"] == "" || ids["right"] == "" || ids["left"] == ids["right"] {
					t.Fatalf("%s: ids %v", thread, ids)
				}
				if order[0] == "both" {
					res, err = engine.New(st).Run(ctx, g, engine.Request{Thread: thread, Resume: true,
						Answers: map[string]any{ids["left"]: "L", ids["right"]: "R"}})
				} else {
					res, err = engine.New(st).Run(ctx, g, engine.Request{Thread: thread, Resume: true, Answers: map[string]any{ids[order[0]]: order[0][:1]}})
					if err != nil || !slices.Equal(paths(res.Interrupt), []string{order[1] + "/approve"}) {
						t.Fatalf("%s: after %s: %+v %v", thread, order[0], res, err)
					}
					res, err = engine.New(st).Run(ctx, g, engine.Request{Thread: thread, Resume: true, Answers: map[string]any{ids[order[1]]: order[1][:1]}})
				}
				if err != nil || res.Interrupt != nil {
					t.Fatalf("%s: the end: %+v %v", thread, res, err)
				}
				if res.State["left"] != "l (signed)" && res.State["left"] != "L (signed)" || res.State["right"] != "r (signed)" && res.State["right"] != "R (signed)" {
					t.Fatalf("%s: state %v", thread, res.State)
				}
			}
			if got := gt.counts(); !reflect.DeepEqual(got, map[string]int{"start": 3, "scan": 6, "sign": 6}) {
				t.Fatalf("runs %v", got)
			}
		})
	}
}

// childFlow is the graph of the subflow node name of g runs.
func childFlow(t *testing.T, g *flow.Graph, name string) *flow.Graph {
	t.Helper()
	n, ok := g.Node(name)
	if !ok {
		t.Fatalf("no node %s", name)
	}
	return n.Impl.(kind.Composite).Parts().Flow.Graph.(*flow.Graph)
}

// History, update and fork work on a run paused two subflows down: the
// paused child's thread has its history; an update of the paused child,
// and one of the root, keep the run where it stopped (the same children,
// the same question); a fork of the root forks the children with it, and
// its answer resumes the fork's children where they stopped, while the
// original stays paused for its own. Nothing that finished runs again, on
// either thread. On each store.
func TestPausedChildHistoryUpdateAndFork(t *testing.T) {
	ctx := context.Background()
	for name, url := range storetest.URLs(t) {
		t.Run(name, func(t *testing.T) {
			gt := &gate{runs: map[string]int{}}
			g := loadPauseFlows(t, gt, map[string]string{"hiring.yaml": pauseRoot, "review.yaml": pauseReview, "check.yaml": pauseCheck}, "hiring.yaml")
			review := childFlow(t, g, "review")
			st, err := store.Open(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			eng := engine.New(st)
			res, err := eng.Run(ctx, g, engine.Request{Thread: "t", Input: map[string]any{"resume": "go"}})
			if err != nil || len(res.Interrupt.Asks) != 1 {
				t.Fatalf("%+v %v", res, err)
			}
			id := res.Interrupt.Asks[0].ID
			ns, _, _ := strings.Cut(id, "|")
			child := engine.ChildThread("t", ns)
			// the paused child's history: created, its run's input, then
			// read, waiting on inner
			cps, err := st.History(ctx, child, store.HistoryOptions{})
			if err != nil || len(cps) != 3 || cps[1].Source != store.SourceInput ||
				cps[0].Writers[0].Node != "read" || !slices.Equal(cps[0].Next, []string{"inner"}) {
				t.Fatalf("the child's history: %+v %v", cps, err)
			}
			// an update of the paused child, and one of the paused root
			if _, err := eng.Update(ctx, review, child, "read", map[string]any{"notes": []any{"child edit"}}); err != nil {
				t.Fatal(err)
			}
			if _, err := eng.Update(ctx, g, "t", "prepare", map[string]any{"log": []any{"root edit"}}); err != nil {
				t.Fatal(err)
			}
			asks, err := eng.Asks(ctx, g, "t")
			if err != nil || len(asks) != 1 || asks[0].ID != id {
				t.Fatalf("the question after the updates: %+v %v (was %s)", asks, err, id)
			}
			// a fork of the paused root, with its children
			if _, err := store.Fork(ctx, st, "t", mustHead(t, st, "t"), "f"); err != nil {
				t.Fatal(err)
			}
			fasks, err := eng.Asks(ctx, g, "f")
			if err != nil || len(fasks) != 1 || fasks[0].ID != id || fasks[0].Path != "review/inner/approve" {
				t.Fatalf("the fork's question: %+v %v", fasks, err)
			}
			res, err = eng.Run(ctx, g, engine.Request{Thread: "f", Resume: true, Answers: map[string]any{"review/inner/approve": "fork"}})
			if err != nil || res.Interrupt != nil {
				t.Fatalf("the fork's resume: %+v %v", res, err)
			}
			want := []any{"prepared go", "root edit", "read go", "child edit", "judged fork (signed)", "closed: fork (signed)"}
			if !reflect.DeepEqual(res.State["log"], want) {
				t.Fatalf("the fork's log %v", res.State["log"])
			}
			// the original is still paused, and goes on with its own answer
			res, err = eng.Run(ctx, g, engine.Request{Thread: "t", Resume: true, Answers: map[string]any{id: "orig"}})
			if err != nil || res.Interrupt != nil {
				t.Fatalf("the original's resume: %+v %v", res, err)
			}
			want = []any{"prepared go", "root edit", "read go", "child edit", "judged orig (signed)", "closed: orig (signed)"}
			if !reflect.DeepEqual(res.State["log"], want) {
				t.Fatalf("the original's log %v", res.State["log"])
			}
			if got := gt.counts(); !reflect.DeepEqual(got, map[string]int{"prepare": 1, "read": 1, "scan": 1, "sign": 2, "judge": 2, "close": 2}) {
				t.Fatalf("runs %v", got)
			}
		})
	}
}

func mustHead(t *testing.T, st store.Store, thread string) uint64 {
	t.Helper()
	h, err := st.Head(context.Background(), thread)
	if err != nil {
		t.Fatal(err)
	}
	return h.Seq
}

// A run that does not commit each step (async, exit) pauses inside its
// subflows as one that does: once its checkpoints are in, the thread
// names the paused step, keeps what the step completed, and lists the
// questions; the answers resume each child where it stopped. On each
// store.
func TestPauseInsideWithEachDurability(t *testing.T) {
	ctx := context.Background()
	for name, url := range storetest.URLs(t) {
		t.Run(name, func(t *testing.T) {
			st, err := store.Open(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			for _, d := range []engine.Durability{engine.Async, engine.Exit} {
				gt := &gate{runs: map[string]int{}}
				g := loadPauseFlows(t, gt, map[string]string{"hiring.yaml": pauseRoot, "review.yaml": pauseReview, "check.yaml": pauseCheck}, "hiring.yaml")
				thread := "t-" + string(d)
				res, err := engine.New(st).Run(ctx, g, engine.Request{Thread: thread, Input: map[string]any{"resume": "go"}, Durability: d})
				if err != nil || !slices.Equal(paths(res.Interrupt), []string{"review/inner/approve"}) {
					t.Fatalf("%s: %+v %v", d, res, err)
				}
				asks, err := engine.New(st).Asks(ctx, g, thread)
				if err != nil || len(asks) != 1 || asks[0].ID != res.Interrupt.Asks[0].ID {
					t.Fatalf("%s: the thread's questions %+v %v", d, asks, err)
				}
				res, err = engine.New(st).Run(ctx, g, engine.Request{Thread: thread, Resume: true, Durability: d,
					Answers: map[string]any{"review/inner/approve": "ok"}})
				if err != nil || res.Interrupt != nil || res.State["verdict"] != "ok (signed)" {
					t.Fatalf("%s: the resume: %+v %v", d, res, err)
				}
				if got := gt.counts(); !reflect.DeepEqual(got, map[string]int{"prepare": 1, "read": 1, "scan": 1, "sign": 1, "judge": 1, "close": 1}) {
					t.Fatalf("%s: runs %v", d, got)
				}
			}
		})
	}
}

const firstOuter = `version: 1
name: outer
state:
  schema:
    type: object
    properties:
      v: {type: string, default: ""}
nodes:
  mid:
    kind: subflow
    flow: first_mid.yaml
    input: {}
    writes: {v: "output.v"}
edges:
  - {from: START, to: mid}
  - {from: mid, to: END}
`

const firstMid = `version: 1
name: first_mid
state:
  schema:
    type: object
    properties:
      v: {type: string, default: ""}
nodes:
  leaf:
    kind: subflow
    flow: first_leaf.yaml
    input: {}
    writes: {v: "output.v"}
edges:
  - {from: START, to: leaf}
  - {from: leaf, to: END}
`

const firstLeaf = `version: 1
name: first_leaf
state:
  schema:
    type: object
    properties:
      v: {type: string, default: ""}
nodes:
  ask: {kind: interrupt, ask: "'v?'", writes: {v: "string(answer)"}}
  done: {kind: gate, set: {v: "state.v + '!'"}}
edges:
  - {from: START, to: ask}
  - {from: ask, to: done}
  - {from: done, to: END}
`

// Runs that take no input and pause in their first step, each at a
// child's first node: the checkpoint that names the paused step keeps
// what the step recorded (each child's namespace), so the answer goes to
// the one grandchild that asked, which completes; no other is started.
// On each store.
func TestPauseInTheFirstStepOfChildren(t *testing.T) {
	ctx := context.Background()
	for name, url := range storetest.URLs(t) {
		t.Run(name, func(t *testing.T) {
			gt := &gate{runs: map[string]int{}}
			g := loadPauseFlows(t, gt, map[string]string{"outer.yaml": firstOuter, "first_mid.yaml": firstMid, "first_leaf.yaml": firstLeaf}, "outer.yaml")
			st, err := store.Open(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			res, err := engine.New(st).Run(ctx, g, engine.Request{Thread: "f"})
			if err != nil || !slices.Equal(paths(res.Interrupt), []string{"mid/leaf/ask"}) {
				t.Fatalf("the first run: %+v %v", res, err)
			}
			id := res.Interrupt.Asks[0].ID
			res, err = engine.New(st).Run(ctx, g, engine.Request{Thread: "f", Resume: true, Answers: map[string]any{id: "hi"}})
			if err != nil || res.Interrupt != nil || res.State["v"] != "hi!" {
				t.Fatalf("the answered run: %+v %v", res, err)
			}
			threads, err := st.Threads(ctx, store.ThreadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var leaves []string
			for _, th := range threads {
				if strings.Count(th.ID, "|") == 2 {
					leaves = append(leaves, th.ID)
				}
			}
			if len(leaves) != 1 || gt.count("done") != 1 {
				t.Fatalf("grandchildren %v, done ran %d times", leaves, gt.count("done"))
			}
		})
	}
}
