package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/value"
)

// runState copies the join arrivals an unfinished run needs to resume;
// nil when no join is waiting.
//
// Edge bounds are not carried: a resumed run counts them from where it
// resumes (its superstep count, which max_steps limits, is carried).
func (r *run) runState() []uint64 {
	for _, j := range r.joins {
		if j != 0 {
			return append(take(&r.slabs.joins, len(r.joins))[:0], r.joins...)
		}
	}
	return nil
}

// restore sets a resumed run up from the thread's unfinished run: its
// step, join arrivals, input (as its input checkpoint recorded it), next
// nodes and pending writes.
func (r *run) restore(head *store.Snapshot, input map[string]any) error {
	r.step = head.Step
	copy(r.joins, head.Joins)
	if input != nil {
		r.input = input
		for i, f := range r.g.Fields {
			r.inSlots[i] = input[f.Name]
		}
	}
	for _, name := range head.Next {
		n, ok := r.g.Node(name)
		if !ok {
			return fmt.Errorf("resume: the flow has no node %q (it changed since the run stopped)", name)
		}
		r.resumed = append(r.resumed, n)
	}
	r.pending = head.Pending
	return nil
}

// runInput reads the input of the run a thread's checkpoint seq leaves
// unfinished, and the configuration it recorded (see store.RunInput),
// waiting through the store's outages as rt allows.
func runInput(ctx context.Context, st store.Store, rt *store.Retrier, thread string, seq uint64) (input, config map[string]any) {
	return store.RunInputWith(ctx, st, rt, thread, seq)
}

// records are the parts of step checkpoints that the graph alone decides,
// made once per graph and shared by every checkpoint that has them (a
// checkpoint is never changed once made): per node, the writers of a step
// that ran the node alone and saw it write each field it declares once,
// and the next nodes of a step that triggers it alone.
type records struct {
	alone [][]store.NodeWrites
	only  [][]string
	// merge says per field how an update merges (mergeReplace,
	// mergeAppend, or mergeReduce through the field's reducer)
	merge []uint8
	// defaultsHold is set when the state of the schema's defaults alone
	// is valid, as every new thread given no values starts
	defaultsHold bool
}

// The ways an update merges into a field, see records.merge.
const (
	mergeReduce = iota
	mergeReplace
	mergeAppend
)

type recordsKey struct{}

func recordsOf(g *flow.Graph) *records {
	return g.Memo(recordsKey{}, func(g *flow.Graph) any {
		rs := &records{alone: make([][]store.NodeWrites, len(g.Nodes)), only: make([][]string, len(g.Nodes)), merge: make([]uint8, len(g.Fields))}
		defaults := map[string]any{}
		for _, f := range g.Fields {
			if f.HasDefault {
				defaults[f.Name] = f.Default
			}
		}
		rs.defaultsHold = g.Root() != nil && g.Root().Validate(defaults) == nil
		replace, _ := flow.LookupReducer("replace")
		for i, f := range g.Fields {
			switch {
			case f.Reducer.Appends:
				rs.merge[i] = mergeAppend
			case f.Reducer.Spec == replace:
				rs.merge[i] = mergeReplace
			}
		}
		for i, n := range g.Nodes {
			rs.alone[i] = []store.NodeWrites{{Node: n.Name, Fields: n.WriteList}}
			rs.only[i] = []string{n.Name}
		}
		return rs
	}).(*records)
}

// slabs hand out the parts of step checkpoints from chunks, so a step
// allocates nothing for its checkpoint and each part takes exactly the
// room it needs. What a run leaves over serves the next run.
type slabs struct {
	cps     []store.Checkpoint
	writes  []store.Write
	writers []store.NodeWrites
	names   []string
	joins   []uint64
}

// slabChunk is how many items a slab allocates at a time.
const slabChunk = 64

// take returns n zeroed items of s, capped so that appending to them
// cannot reach the items handed out next.
func take[T any](s *[]T, n int) []T {
	if len(*s) < n {
		*s = make([]T, max(n, slabChunk))
	}
	out := (*s)[:n:n]
	*s = (*s)[n:]
	return out
}

// commit sends a checkpoint to the store as the run's durability says.
func (r *run) commit(ctx context.Context, cp *store.Checkpoint) error {
	switch r.req.Durability {
	case Async:
		if r.async == nil {
			r.async = &committer{ch: make(chan *store.Checkpoint, 64), done: make(chan struct{})}
			go r.async.loop(context.WithoutCancel(ctx), r)
		}
		if err := r.async.failed(); err != nil {
			return err
		}
		r.async.ch <- cp
		return nil
	case Exit:
		r.deferred = append(r.deferred, cp)
		return nil
	}
	return r.commitNow(ctx, cp, r.req.Attach)
}

// Held steps. A run with Sync durability commits each step, but not
// always on its own: a step with nodes still to run is held, and
// committed with the steps after it in one transaction
// (store.Checkpoint.Before), once a step runs a node that may block
// (after its node_start events, which go with the commit), the run
// ends, pauses or fails, or maxHeld steps are held. A step followed by a
// node that may block is held only until the next step emits its
// node_start events: its checkpoint, its events and theirs are one
// write, where they were a commit and, once the node had started, an
// append of the events. A held step's commit is not timed (its
// state_update has no Duration).
//
// What this means after a crash: a held step that was not committed is
// run again by the resumed run, as any step that was not committed is,
// and nothing committed is lost or run again. A node that may block
// never starts before every step before it is committed (but for one
// that only puts documents with its step, kind.PutsWithStep, which
// computes as an inline node does and is held as one); what is held
// while anything else runs is only inline nodes' work, which the
// resumed run computes again the same way from the same state. A step
// that ran nodes that may block (a model's call) is held only while the
// inline steps after it compute (no wait, no call out), or the next
// step's node_start events are emitted, so a crash runs it again only in
// that window, as one just before its commit would. A held step's documents (Checkpoint.Memory) and events go with
// its commit, so none of them is written without its step. Its
// state_update event is emitted when it is held; where the run's events
// are recorded with its commits (Request.Attach), they are recorded, so
// shown, with that commit or after it, never with a step's that fails.
// Flows that pause (interrupt_before/after, askers) and reloading
// engines hold nothing.

// maxHeld bounds the steps held for one commit.
const maxHeld = 32

// holds reports whether the step whose checkpoint names following as its
// next nodes is held (see Held steps).
func (r *run) holds(following []*flow.Node) bool {
	return len(following) > 0 && (r.req.Durability == "" || r.req.Durability == Sync) && !r.g.Pauses && !r.g.Asks &&
		!r.e.reload && len(r.chain) < maxHeld
}

// hold keeps cp to commit with the next step's.
func (r *run) hold(cp *store.Checkpoint) {
	if cp.WriteID == "" {
		// a commit tried again recognises it as its own, and the
		// checkpoint after it is chained to it
		cp.WriteID = r.writeID()
	}
	r.chain = append(r.chain, cp)
}

// takeChain hands the held steps over to the commit of the next.
func (r *run) takeChain() []*store.Checkpoint {
	if len(r.chain) == 0 {
		return nil
	}
	if r.reuses {
		// the chain's buffer comes back with its checkpoints (recycle)
		out := r.chain
		r.chain, r.swap = r.swap[:0], nil
		return out
	}
	out := slices.Clone(r.chain)
	clear(r.chain)
	r.chain = r.chain[:0]
	return out
}

// lead makes the last of the held steps carry the others
// (Checkpoint.Before), to commit them in one transaction.
func lead(held []*store.Checkpoint) *store.Checkpoint {
	last := held[len(held)-1]
	last.Before = held[:len(held)-1]
	return last
}

// putBack holds again the steps whose commit failed.
func (r *run) putBack(held []*store.Checkpoint) {
	held[len(held)-1].Before = nil
	r.chain = append(r.chain[:0], held...)
}

// flushChain commits the held steps, with the run's events.
func (r *run) flushChain(ctx context.Context) error {
	held := r.takeChain()
	if len(held) == 0 {
		return nil
	}
	last := lead(held)
	if err := r.commitNow(ctx, last, r.req.Attach); err != nil {
		// still held: the run's end tries them again (a cancelled
		// run's context ended this try)
		r.putBack(held)
		return fmt.Errorf("commit step %d: %w", last.Step, err)
	}
	r.recycle(held)
	if r.lease != nil {
		r.lease.renewIfDue(ctx, time.Now())
	}
	return nil
}

// checkpoint is a zeroed checkpoint for a step: one committed before
// (see recycle), or one of the slab's.
func (r *run) checkpoint() *store.Checkpoint {
	if n := len(r.spare); n > 0 {
		cp := r.spare[n-1]
		r.spare = r.spare[:n-1]
		return cp
	}
	return &take(&r.slabs.cps, 1)[0]
}

// recycle keeps the checkpoints of held, just committed, for the run's
// steps to come, when the store copied them (r.reuses): zeroed, they hold
// no value. held's buffer, a held chain's, holds the next chain.
func (r *run) recycle(held []*store.Checkpoint) {
	if !r.reuses || len(held) == 0 {
		return
	}
	for _, cp := range held {
		*cp = store.Checkpoint{}
	}
	r.spare = append(r.spare, held...)
	if cap(held) > cap(r.swap) {
		clear(held)
		r.swap = held[:0]
	}
}

// Pipelined commits. The held steps commit before a node that may block
// starts; when every such node of the step is contained (kind.Contained:
// it acts on nothing outside the run but through its State, and reads
// nothing of the thread from the store: a model's call with no tools),
// the step's nodes start while that commit is under way, and the step
// waits for it before anything of its own is written. What this means:
//
//   - Nothing of the step's state reaches the store before the steps
//     before it: its nodes' pending writes and kept work wait for the
//     commit (landed), and the step's own commit comes after it
//     (joinPipe). Its events follow the held steps' in the run's order,
//     recorded as events of a node that runs always are (Request.Attach
//     says how).
//   - A commit that fails fails the run, once the step's nodes have
//     returned: nothing of the step is committed, the held steps are put
//     back for the run's end to try again, as when a commit before the
//     step fails.
//   - After a crash while the commit is under way, the resumed run finds
//     the held steps committed or not, as after a crash just before
//     their commit: the ones not committed run again, and so does the
//     step, whose contained nodes had no effect outside the run.
//   - A step whose held steps put documents (Checkpoint.Memory) waits for
//     their commit before its nodes start, so that a node reading them
//     finds them, as does a step with a node that is not contained.

// pipe is a commit under way beside a step's nodes.
type pipe struct {
	done chan struct{}
	err  error
	held []*store.Checkpoint
}

// beside reports whether the held steps may commit while the nodes of
// the step after them run (see Pipelined commits).
func (r *run) beside(triggered []*flow.Node) bool {
	for _, n := range triggered {
		if n.Inline {
			continue
		}
		if c, ok := n.Impl.(kind.Contained); !ok || !c.Contained() {
			return false
		}
	}
	for _, cp := range r.chain {
		if len(cp.Memory) > 0 {
			return false
		}
	}
	return true
}

// flushBeside starts the commit of the held steps, with the run's
// events, beside the step's nodes; joinPipe ends it.
func (r *run) flushBeside(ctx context.Context) {
	held := r.takeChain()
	if len(held) == 0 {
		return
	}
	last := lead(held)
	p := &pipe{done: make(chan struct{}), held: held}
	r.pipe.Store(p)
	go func() {
		defer close(p.done)
		if err := r.commitNow(ctx, last, r.req.Attach); err != nil {
			p.err = fmt.Errorf("commit step %d: %w", last.Step, err)
		}
	}()
}

// landed waits for the commit under way beside the step's nodes, if one
// is, and returns its error: what the step writes to the store waits for
// it. The step's nodes may call it on goroutines of their own.
func (r *run) landed() error {
	p := r.pipe.Load()
	if p == nil {
		return nil
	}
	<-p.done
	return p.err
}

// joinPipe ends the commit under way beside the step's nodes, once they
// have returned: a commit that failed puts the held steps back, for the
// run's end to try again.
func (r *run) joinPipe(ctx context.Context) error {
	p := r.pipe.Load()
	if p == nil {
		return nil
	}
	<-p.done
	r.pipe.Store(nil)
	if p.err != nil {
		r.putBack(p.held)
		return p.err
	}
	r.recycle(p.held)
	if r.lease != nil {
		r.lease.renewIfDue(ctx, time.Now())
	}
	return nil
}

// mayBlock reports whether one of nodes is not inline.
func (r *run) mayBlock(nodes []*flow.Node) bool {
	for _, n := range nodes {
		if !n.Inline && !r.putsOnly(n) {
			return true
		}
	}
	return false
}

// putsOnly reports whether n only puts documents its step writes, with
// the run's memory the engine's own (see kind.PutsWithStep).
func (r *run) putsOnly(n *flow.Node) bool {
	if !r.stepPuts {
		return false
	}
	p, ok := n.Impl.(kind.PutsWithStep)
	return ok && p.PutsWithStep()
}

// commitNow commits cp at once, with the run's events when attach gives
// it them, waiting through the store's outages (r.retry). A commit tried
// again after a failure that may have come after it committed recognises
// its own checkpoint by its write id (store.Recommitted) instead of
// taking the thread's move for another writer's.
func (r *run) commitNow(ctx context.Context, cp *store.Checkpoint, attach func(*store.Checkpoint) func(error)) error {
	if cp.WriteID == "" {
		cp.WriteID = r.writeID()
	}
	return r.retry.Do(ctx, func(again bool) error { return r.commitOnce(ctx, cp, attach, again) })
}

// commitOnce is one attempt of commitNow.
func (r *run) commitOnce(ctx context.Context, cp *store.Checkpoint, attach func(*store.Checkpoint) func(error), again bool) (err error) {
	var committed func(error)
	cp.Events = nil
	if attach != nil && !again {
		// tried again, the commit carries no events: those of the first
		// attempt went back to the run's writer, which records them
		// once, committed by that attempt or not
		committed = attach(cp)
	}
	if committed != nil {
		// heard also when the commit panics
		err = errNotCommitted
		defer func() { committed(err) }()
	}
	err = r.e.Store.Commit(ctx, cp)
	if again {
		err = store.Recommitted(ctx, r.e.Store, cp, err)
	}
	return err
}

// errNotCommitted is the end of a commit that never returned.
var errNotCommitted = errors.New("the commit did not return")

// flush completes the commits of an Async or Exit run. A failed Exit run
// commits nothing.
func (r *run) flush(ctx context.Context, ok bool) error {
	if r.async != nil {
		close(r.async.ch)
		<-r.async.done
		err := r.async.err
		r.async = nil
		return err
	}
	if len(r.deferred) == 0 {
		return nil
	}
	cps := r.deferred
	r.deferred = nil
	if !ok {
		return nil
	}
	first, last := cps[0], cps[len(cps)-1]
	merged := &store.Checkpoint{Thread: first.Thread, Seq: first.Seq, Parent: first.Parent, Run: r.id, Step: last.Step,
		Source: store.SourceRun, Time: last.Time, Config: first.Config, Next: last.Next, Joins: last.Joins}
	pos := map[string]int{}
	for _, cp := range cps {
		merged.Writers = append(merged.Writers, cp.Writers...)
		merged.Replies = append(merged.Replies, cp.Replies...)
		merged.Memory = append(merged.Memory, cp.Memory...)
		for node, a := range cp.Answers {
			if merged.Answers == nil {
				merged.Answers = map[string]any{}
			}
			merged.Answers[node] = a
		}
		for _, w := range cp.Writes {
			i, seen := pos[w.Field]
			switch {
			case !seen:
				pos[w.Field] = len(merged.Writes)
				merged.Writes = append(merged.Writes, w)
			case w.Append && merged.Writes[i].Append:
				m := &merged.Writes[i]
				m.Items, m.Version = append(slices.Clip(m.Items), w.Items...), w.Version
			default:
				merged.Writes[i] = store.Write{Field: w.Field, Version: w.Version, Value: r.state()[w.Field]}
			}
		}
	}
	if err := r.commitNow(ctx, merged, nil); err != nil {
		return fmt.Errorf("commit run: %w", err)
	}
	r.seq = merged.Seq
	return nil
}

// committer commits an Async run's checkpoints in order.
type committer struct {
	ch   chan *store.Checkpoint
	done chan struct{}
	mu   sync.Mutex
	err  error
}

func (c *committer) loop(ctx context.Context, r *run) {
	defer close(c.done)
	for cp := range c.ch {
		if c.failed() != nil {
			continue
		}
		if err := r.commitNow(ctx, cp, nil); err != nil {
			c.mu.Lock()
			c.err = fmt.Errorf("commit step %d: %w", cp.Step, err)
			c.mu.Unlock()
		}
	}
}

func (c *committer) failed() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// savePending stores a blocking node's update as soon as it completes, so
// that a run resumed after a crash does not run it again: a pending write
// on checkpoint seq, which step follows.
func (r *run) savePending(ctx context.Context, o *outcome, seq uint64, step int) error {
	if o.err != nil || o.attempts == 0 || (r.req.Durability != "" && r.req.Durability != Sync) {
		return nil
	}
	if err := r.landed(); err != nil {
		return err
	}
	ws := make([]store.Write, len(o.update))
	for i, fv := range o.update {
		v, err := value.Normalize(fv.Value)
		if err != nil {
			return nil // the barrier reports it
		}
		ws[i] = store.Write{Field: fv.Field, Value: v}
	}
	if puts := r.putsOf(o.node.Name); len(puts) > 0 {
		// the documents it put go with its update: the step that
		// takes the update puts them
		ws = append(ws, putsWrite(puts))
	}
	put := r.e.Store.PutPending
	if q, ok := r.e.Store.(store.QuickPending); ok {
		// lost only with what the store recorded after it: the node
		// would run again, as one whose update was never saved
		put = q.PutPendingQuick
	}
	if err := r.retry.Do(ctx, func(bool) error { return put(ctx, r.req.Thread, seq, o.node.Name, ws, r.fence()) }); err != nil {
		return fmt.Errorf("step %d: save the update of node %q: %w", step, o.node.Name, err)
	}
	return nil
}
