// What a run's commits carry besides its state: the events the caller
// attaches, and the release of the thread's lease.

package engine_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/memory"
)

// Attach sees each checkpoint a Sync run commits before its commit, and
// hears how each commit ended, a panicking one too; Async and Exit runs
// never call it.
func TestAttachHearsEachCommit(t *testing.T) {
	g := compile(t, `
version: 1
name: attached
state:
	schema:
		type: object
		properties:
			i: {type: integer, default: 0}
input: []
nodes:
	step: {kind: set, set: {i: "state.i + 1"}}
edges:
	- {from: START, to: step}
	- from: step
	  bound: 10
	  branch:
	    - {when: "state.i < 3", to: step}
	    - else: END
`)
	ctx := context.Background()
	for _, d := range []engine.Durability{engine.Sync, engine.Async, engine.Exit} {
		var seen []uint64
		var ended []error
		req := engine.Request{Thread: "t", Durability: d, Attach: func(cp *store.Checkpoint) func(error) {
			seen = append(seen, cp.Seq)
			return func(err error) { ended = append(ended, err) }
		}}
		res, err := engine.New(memory.New()).Run(ctx, g, req)
		if err != nil {
			t.Fatal(err)
		}
		if d != engine.Sync {
			if len(seen) != 0 {
				t.Fatalf("%s: Attach called for %v", d, seen)
			}
			continue
		}
		if len(seen) == 0 || seen[len(seen)-1] != res.Checkpoint || len(ended) != len(seen) || slices.ContainsFunc(ended, func(err error) bool { return err != nil }) {
			t.Fatalf("%s: attached %v, ended %v; want every commit through %d, ended without error", d, seen, ended, res.Checkpoint)
		}
	}
	// a commit that panics is heard as failed
	var ended []error
	st := &panicking{Store: memory.New()}
	func() {
		defer func() { recover() }()
		engine.New(st).Run(ctx, g, engine.Request{Thread: "p", Attach: func(*store.Checkpoint) func(error) {
			return func(err error) { ended = append(ended, err) }
		}})
	}()
	if len(ended) == 0 || ended[len(ended)-1] == nil {
		t.Fatalf("a panicking commit ended %v; want an error heard", ended)
	}
}

// panicking is a store whose second commit panics.
type panicking struct {
	store.Store
	n int
}

func (p *panicking) Commit(ctx context.Context, cp *store.Checkpoint) error {
	if p.n++; p.n == 2 {
		panic("a store with a bug")
	}
	return p.Store.Commit(ctx, cp)
}

// countsReleases counts the releases of leases apart from commits.
type countsReleases struct {
	*memory.Store
	n int
}

func (c *countsReleases) Release(ctx context.Context, thread, owner string) error {
	c.n++
	return c.Store.Release(ctx, thread, owner)
}

// A Sync run's last checkpoint releases its lease in its commit: no write
// of its own, and another engine takes the thread at once. A run that
// commits later (Async) releases it apart, after.
func TestLastCommitReleasesTheLease(t *testing.T) {
	g := compile(t, loop)
	ctx := context.Background()
	for _, d := range []engine.Durability{engine.Sync, engine.Async} {
		st := &countsReleases{Store: memory.New()}
		if _, err := engine.New(st).Run(ctx, g, engine.Request{Thread: "t", Input: map[string]any{"until": 3}, Durability: d}); err != nil {
			t.Fatal(err)
		}
		want := 0
		if d == engine.Async {
			want = 1
		}
		if st.n != want {
			t.Fatalf("%s: %d releases apart from commits, want %d", d, st.n, want)
		}
		if err := st.Acquire(ctx, "t", "another", time.Minute); err != nil {
			t.Fatalf("%s: the thread after its run: %v", d, err)
		}
	}
}
