package engine_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/memory"
)

// containedNode is a node that may block and acts on nothing outside the
// run (kind.Contained), as a model's call with no tools.
type containedNode struct{ kind.Node }

func (containedNode) Contained() bool { return true }

// pipeKinds: calc computes inline; ask is contained and calls run (by
// node name) when it runs.
func pipeKinds(run func(ctx context.Context, node string) error) kind.Registry {
	return kind.NewSet(calcSpec,
		kind.Spec{Name: "ask", Summary: "A contained node.",
			New: func(b kind.Builder) kind.Node {
				name := b.Node()
				b.Writes(name, config.Value{})
				return containedNode{kind.Func(func(ctx context.Context, _ kind.State) (kind.Update, error) {
					if err := run(ctx, name); err != nil {
						return nil, err
					}
					return kind.Update{{Field: name, Value: "asked"}}, nil
				})}
			}},
	)
}

const pipeFlow = `version: 1
name: pipe
input: [n]
state:
  schema:
    type: object
    properties:
      n: {type: integer, default: 0}
      a: {type: integer, default: 0}
      q: {type: string, default: ""}
      r: {type: string, default: ""}
nodes:
  a: {kind: calc, set: {a: "state.n + 1"}}
  q: {kind: ask}
  r: {kind: ask}
edges:
  - {from: START, to: a}
  - {from: a, to: [q, r]}
  - {from: [q, r], to: END}
`

// gatedCommits holds the commit of the steps held before the contained
// nodes (the one committing a's step) until gate lets it go, and notes
// what was written before it ended.
type gatedCommits struct {
	*memory.Store
	gate      func()
	committed atomic.Bool // a's step is committed
	early     atomic.Int32
	fail      error
}

func (g *gatedCommits) Commit(ctx context.Context, cp *store.Checkpoint) error {
	for _, c := range cp.Chain() {
		for _, w := range c.Writers {
			if w.Node == "a" {
				g.gate()
				if g.fail != nil {
					return g.fail
				}
				err := g.Store.Commit(ctx, cp)
				g.committed.Store(err == nil)
				return err
			}
		}
	}
	return g.Store.Commit(ctx, cp)
}

func (g *gatedCommits) PutPending(ctx context.Context, thread string, seq uint64, node string, ws []store.Write, owner string) error {
	if !g.committed.Load() {
		g.early.Add(1)
	}
	return g.Store.PutPending(ctx, thread, seq, node, ws, owner)
}

// Contained nodes start while the steps before them are being committed:
// the commit of a's step waits for both of them to have started, so the
// run ends only if they did. What the step writes waits for that commit:
// the pending write of the node that completes first comes after it.
func TestContainedNodesStartBesideTheCommit(t *testing.T) {
	var started sync.WaitGroup
	started.Add(2)
	let := make(chan struct{})
	firstDone := make(chan struct{})
	var once sync.Once
	reg := pipeKinds(func(ctx context.Context, node string) error {
		started.Done()
		if node == "r" {
			select {
			case <-let:
			case <-ctx.Done():
				return ctx.Err()
			}
			return nil
		}
		once.Do(func() { close(firstDone) })
		return nil
	})
	st := &gatedCommits{Store: memory.New()}
	st.gate = func() {
		// both nodes started while this commit waits (a node that waited
		// for it would never start: the guard below ends the wait)
		waited := make(chan struct{})
		go func() { started.Wait(); close(waited) }()
		select {
		case <-waited:
		case <-time.After(pipeGuard):
			t.Error("the contained nodes did not start while the commit before them was under way")
			close(let)
			return
		}
		<-firstDone
		// q completed: its pending write waits for this commit (the
		// pause only gives one that did not wait the time to come first)
		time.Sleep(20 * time.Millisecond)
		close(let)
	}
	g := compileWith(t, reg, pipeFlow)
	res, err := engine.New(st).Run(context.Background(), g, engine.Request{Thread: "t", Input: map[string]any{"n": 1}})
	if err != nil {
		t.Fatal(err)
	}
	if res.State["a"] != 2 || res.State["q"] != "asked" || res.State["r"] != "asked" {
		t.Fatalf("state %v", res.State)
	}
	if n := st.early.Load(); n != 0 {
		t.Fatalf("%d pending writes before the commit of the steps before them", n)
	}
	head, err := st.Head(context.Background(), "t")
	if err != nil || head.Seq != res.Checkpoint || head.Values["q"] != "asked" {
		t.Fatalf("head %+v (%v)", head, err)
	}
}

// pipeGuard bounds a wait that only a broken engine makes long.
var pipeGuard = time.Minute

var errCommit = errors.New("the store refuses the commit")

// A commit that fails beside contained nodes fails the run once they
// have returned: nothing of their step is committed, and the held steps
// are tried again at the run's end (which fails the same way here).
func TestACommitBesideThatFailsFailsTheRun(t *testing.T) {
	var ran atomic.Int32
	reg := pipeKinds(func(context.Context, string) error { ran.Add(1); return nil })
	st := &gatedCommits{Store: memory.New(), gate: func() {}, fail: errCommit}
	g := compileWith(t, reg, pipeFlow)
	_, err := engine.New(st).Run(context.Background(), g, engine.Request{Thread: "t", Input: map[string]any{"n": 1}})
	if !errors.Is(err, errCommit) {
		t.Fatalf("the run: %v, want the commit's failure", err)
	}
	head, err := st.Head(context.Background(), "t")
	if err != nil || head.Values["a"] != 0 || head.Values["q"] != "" {
		t.Fatalf("head %+v (%v): want nothing of a's step or q's", head, err)
	}
	if len(head.Pending) != 0 {
		t.Fatalf("pending writes %v of a step whose steps before it were not committed", head.Pending)
	}
}
