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
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/memory"
)

// countPending counts the pending writes a store saves, by node, and
// calls saved (when set) after each.
type countPending struct {
	*memory.Store
	mu    sync.Mutex
	nodes map[string]int
	saved func(node string)
}

func (c *countPending) PutPending(ctx context.Context, thread string, seq uint64, node string, ws []store.Write, owner string) error {
	if err := c.Store.PutPending(ctx, thread, seq, node, ws, owner); err != nil {
		return err
	}
	c.mu.Lock()
	if c.nodes == nil {
		c.nodes = map[string]int{}
	}
	c.nodes[node]++
	c.mu.Unlock()
	if c.saved != nil {
		c.saved(node)
	}
	return nil
}

func (c *countPending) saves() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for n, k := range c.nodes {
		out[n] = k
	}
	return out
}

// pendingKinds: work writes its field and counts its runs; hold waits
// until its run is cancelled, unless let is closed.
func pendingKinds(runs *sync.Map, let <-chan struct{}) kind.Registry {
	count := func(name string) {
		n, _ := runs.LoadOrStore(name, new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
	}
	return kind.NewSet(
		kind.Spec{Name: "work", Summary: "Write the node's name.",
			New: func(b kind.Builder) kind.Node {
				name := b.Node()
				b.Writes(name, config.Value{})
				return kind.Func(func(context.Context, kind.State) (kind.Update, error) {
					count(name)
					return kind.Update{{Field: name, Value: "done"}}, nil
				})
			}},
		kind.Spec{Name: "hold", Summary: "Wait to be let go.",
			New: func(b kind.Builder) kind.Node {
				name := b.Node()
				b.Writes(name, config.Value{})
				return kind.Func(func(ctx context.Context, _ kind.State) (kind.Update, error) {
					count(name)
					select {
					case <-let:
						return kind.Update{{Field: name, Value: "done"}}, nil
					case <-ctx.Done():
						return nil, ctx.Err()
					}
				})
			}},
	)
}

func compilePending(t *testing.T, reg kind.Registry, nodes string) *flow.Graph {
	t.Helper()
	src := `version: 1
name: pending
state:
  schema:
    type: object
    properties:
      a: {type: string, default: ""}
      b: {type: string, default: ""}
      c: {type: string, default: ""}
      s: {type: string, default: ""}
nodes:
  s: {kind: work}
` + nodes + `
edges:
  - {from: START, to: s}
  - {from: s, to: [a, b, c]}
  - {from: [a, b, c], to: END}
`
	return compileWith(t, reg, src)
}

func runsOf(runs *sync.Map, name string) int {
	n, ok := runs.Load(name)
	if !ok {
		return 0
	}
	return int(n.(*atomic.Int32).Load())
}

// The nodes of a step that complete while another still runs save their
// updates as pending writes; the one that completes last saves none, as
// the step's commit holds it: a step of three nodes that may block saves
// two, whichever order they complete in, and commits all three.
func TestTheLastNodeOfAStepLeavesItsUpdateToTheCommit(t *testing.T) {
	var runs sync.Map
	st := &countPending{Store: memory.New()}
	g := compilePending(t, pendingKinds(&runs, nil), `  a: {kind: work}
  b: {kind: work}
  c: {kind: work}`)
	for i := range 20 {
		thread := "t" + string(rune('a'+i))
		if _, err := run(t, g, engine.New(st), thread, nil); err != nil {
			t.Fatal(err)
		}
		head, err := st.Head(context.Background(), thread)
		if err != nil || head.Values["a"] != "done" || head.Values["b"] != "done" || head.Values["c"] != "done" {
			t.Fatalf("head %+v (%v): want every update committed", head, err)
		}
	}
	total := 0
	for _, n := range st.saves() {
		total += n
	}
	if total != 2*20 {
		t.Fatalf("pending writes %v: want two a step (its last node's update goes with the commit)", st.saves())
	}
}

// A run stopped while a node of the step still runs keeps the updates of
// those that completed, and its resumed run does not run them again;
// the one stopped runs again. (The step before it, s, is committed
// before the step starts: a node that may block follows it.)
func TestAStoppedStepKeepsWhatCompleted(t *testing.T) {
	var runs sync.Map
	let := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var saved atomic.Int32
	st := &countPending{Store: memory.New(), saved: func(string) {
		if saved.Add(1) == 2 {
			cancel() // a and b are saved: stop the run while c holds
		}
	}}
	g := compilePending(t, pendingKinds(&runs, let), `  a: {kind: work}
  b: {kind: work}
  c: {kind: hold}`)
	eng := engine.New(st)
	_, err := eng.Run(ctx, g, engine.Request{Thread: "t"})
	if err == nil || !errors.Is(err, context.Canceled) && !errors.Is(err, engine.ErrStopped) {
		t.Fatalf("want the run stopped, got %v", err)
	}
	if s := st.saves(); s["a"] != 1 || s["b"] != 1 || s["c"] != 0 {
		t.Fatalf("pending writes %v: want a and b's, not the stopped c's", s)
	}
	st.saved = nil
	close(let)
	res, err := eng.Run(context.Background(), g, engine.Request{Thread: "t", Resume: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.State["a"] != "done" || res.State["b"] != "done" || res.State["c"] != "done" {
		t.Fatalf("state %v: want every update", res.State)
	}
	if a, b, c := runsOf(&runs, "a"), runsOf(&runs, "b"), runsOf(&runs, "c"); a != 1 || b != 1 || c != 2 {
		t.Fatalf("runs a %d, b %d, c %d: want a and b once, c again", a, b, c)
	}
}

// A store that saves pending writes quickly (store.QuickPending) gets
// the updates of nodes that complete beside others that way: losing one
// only runs its node again.
func TestPendingWritesGoQuicklyWhereTheStoreCan(t *testing.T) {
	var runs sync.Map
	st := &quickPending{countPending: countPending{Store: memory.New()}}
	g := compilePending(t, pendingKinds(&runs, nil), `  a: {kind: work}
  b: {kind: work}
  c: {kind: work}`)
	if _, err := run(t, g, engine.New(st), "t", nil); err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, n := range st.saves() {
		total += n
	}
	if st.quick.Load() != 2 || total != 2 {
		t.Fatalf("%d quick pending writes of %d (%v): want both", st.quick.Load(), total, st.saves())
	}
}

type quickPending struct {
	countPending
	quick atomic.Int32
}

func (q *quickPending) PutPendingQuick(ctx context.Context, thread string, parent uint64, node string, writes []store.Write, owner string) error {
	q.quick.Add(1)
	return q.PutPending(ctx, thread, parent, node, writes, owner)
}

// takesTheLease hands the thread's lease to another owner once the first
// pending write of a run is saved, and closes second once a second one
// was tried.
type takesTheLease struct {
	*memory.Store
	mu       sync.Mutex
	acquired []string // owners that took the lease
	owners   []string // owners pending writes named
	refused  int
	second   chan struct{}
}

func (s *takesTheLease) Acquire(ctx context.Context, thread, owner string, ttl time.Duration) error {
	s.mu.Lock()
	s.acquired = append(s.acquired, owner)
	s.mu.Unlock()
	return s.Store.Acquire(ctx, thread, owner, ttl)
}

func (s *takesTheLease) PutPending(ctx context.Context, thread string, seq uint64, node string, ws []store.Write, owner string) error {
	// one at a time: a second write tried while the first is saved is
	// tried once the lease changed hands, whichever node completes first
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.Store.PutPending(ctx, thread, seq, node, ws, owner)
	s.owners = append(s.owners, owner)
	if errors.Is(err, store.ErrLeased) {
		s.refused++
	}
	if len(s.owners) == 2 {
		close(s.second)
	}
	if err == nil && len(s.owners) == 1 {
		// another process takes the thread, as after this one's lease
		// ran out
		if rerr := s.Store.Release(ctx, thread, owner); rerr != nil {
			return rerr
		}
		if aerr := s.Store.Acquire(ctx, thread, "another", time.Minute); aerr != nil {
			return aerr
		}
	}
	return err
}

// A run's pending writes name its lease's owner: once another took the
// thread's lease, the run's nodes that complete save nothing, and the
// run fails rather than add to what the new holder read. (c is held
// until a second pending write was tried, so that a and b each complete
// beside a node still running, whatever order the three are scheduled
// in: a node completing last goes with its step and saves no pending
// write.)
func TestPendingWritesAreFencedByTheRunsLease(t *testing.T) {
	var runs sync.Map
	st := &takesTheLease{Store: memory.New(), second: make(chan struct{})}
	g := compilePending(t, pendingKinds(&runs, st.second), `  a: {kind: work}
  b: {kind: work}
  c: {kind: hold}`)
	_, err := engine.New(st).Run(context.Background(), g, engine.Request{Thread: "t"})
	if !errors.Is(err, store.ErrLeased) {
		t.Fatalf("the run: %v, want it refused for the lease", err)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.acquired) != 1 || len(st.owners) != 2 || st.owners[0] != st.acquired[0] || st.owners[1] != st.acquired[0] || st.refused != 1 {
		t.Fatalf("leases taken by %q, pending writes naming %q, %d refused: want both writes to name the run's lease, the second refused", st.acquired, st.owners, st.refused)
	}
	head, err := st.Head(context.Background(), "t")
	if err != nil || len(head.Pending) != 1 {
		t.Fatalf("head %+v %v: want the first write alone", head, err)
	}
}
