package engine

import (
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trellisflow/trellis/runtime/expression"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/store"
)

// run is the state of one executing run: who it is, and its parts, each
// with one job. The parts are embedded, so the step loop reads their
// fields as directly as if they were the run's own.
type run struct {
	e       *Engine
	g       *flow.Graph
	req     Request
	id      string
	step    int
	started time.Time
	// ended says the run's run_end went before its last commit
	// (Request.EndsWithCommit)
	ended bool
	// stepPuts says the run's memory is the engine's own, which writes
	// a node's puts with its step (kind.StepMemory)
	stepPuts bool
	path     [][]string // each step's nodes, with Request.RecordPath
	emitMu   sync.Mutex // serialises events from node goroutines
	// answers are Request.Answers not yet used: an asker's answer serves
	// the first step that runs it
	answers map[string]any
	// config is the run's configuration; record the part its input
	// checkpoint records; limit its superstep limit
	config, record map[string]any
	limit          int
	// nestedMu guards nestedDone: the updates of the nested runs (a
	// map's items) completed in the current step, so that a host's retry
	// does not run them again
	nestedMu   sync.Mutex
	nestedDone map[string]nestedRun
	// late counts what the run gave up on (see scope.go)
	late lateCounts
	// replies are what the step's nodes recorded (kind.State.Record),
	// for its checkpoint
	repliesMu sync.Mutex
	replies   []store.Reply
	// puts are the documents the step's nodes put in memory (see
	// stepPut), for its checkpoint, guarded by repliesMu
	puts []stepPut
	// hasRecords is set once a node of the step records a reply or puts a
	// document, so that a step whose nodes did neither takes none
	// without taking repliesMu (see takeRecords)
	hasRecords atomic.Bool
	// held are the pending writes of a step kept while the run does not
	// commit each step (see keep), guarded by nestedMu
	held []heldWrite

	working
	schedule
	durability
	clockReading

	// outs holds each triggered node's outcome of the current step; its
	// views (each with an expression machine) survive from run to run.
	outs    []outcome
	outsBuf [2]outcome
	// words backs versions and joins, so a run allocates them at once.
	words []uint64
	// records are the graph's shared checkpoint parts
	records *records
	// idBlock holds the write ids of the run's block, idSize bytes
	// each, the first idAt of them used (see writeID)
	idBlock      string
	idSize, idAt int
}

// working is the state a run builds: the values it reads and the changes
// a step makes to them. The barrier changes it; everything else reads it.
//
// The state is cur, a slice indexed by field (see flow.Field.Index), which
// the step loop, the barrier and expressions (through frame) read and
// write without hashing a name. Its map form (values) and the expression
// variables (vars) exist for whoever asks for them: a node that reads
// Vars, an expression the fast path does not cover, the run's result. They
// are made current when asked for (see sync), and not before, so a run
// whose nodes and edges only need the slots never builds them per step.
type working struct {
	cur      []any
	slots    []any    // backs cur and inSlots
	versions []uint64 // per field: its version, as checkpoints record it
	// values is the map form of the state and vars the expression
	// variables of the current snapshot, each current unless its stale
	// flag is set; dirty marks, per field, which of them (a bit each,
	// dirtyValues and dirtyVars) it changed in since they last were
	// made current. They are updated in place, unless a detached attempt
	// may still be reading them: then each is made anew.
	values      map[string]any
	vars        map[string]any
	dirty       []uint8
	staleValues bool
	staleVars   bool
	// frame is what expressions read by slot: cur, and the input by field
	// index (inSlots). Views point at it; a step that copies cur (own)
	// makes a new one, so a detached attempt keeps reading the old.
	frame   *expression.Frame
	input   map[string]any
	inSlots []any
	machine expression.Machine // for edge conditions and routes
	// detached is set once an attempt the run gave up on was not joined
	// (see scope.go): it may still read the run's state and variables, so
	// from then on every step writes a copy of cur
	detached atomic.Bool
	// lists holds, per append field, the list this run last appended to,
	// with its spare capacity. State, events and checkpoints only ever see
	// it capped at its length, so appending in place beyond that length
	// changes nothing anyone can read: a run appends in amortised constant
	// time instead of copying the list every step.
	lists   [][]any
	changed []*flow.Field // the fields this step changed, in write order
	oldLen  []int         // per append field: its length before this step
	writer  []int         // per field: the node that wrote it this step, -1 none
	// told lists the fields this step's node events gave the value they
	// commit with (a replace field's writer's update): its state_update
	// does not repeat them
	told []*flow.Field
	// stagedAt is per field its place in staged while a node's update
	// is staged, -1 none
	stagedAt []int
	staged   []staged // a node's update, checked, before it is applied
	repeats  bool     // the staged update wrote a field more than once
}

// schedule is what decides which nodes run next: the edges' state and the
// triggered set being built. Routing changes it.
type schedule struct {
	visits  []int    // per node: how often it ran
	bounds  []int    // per edge: how often it was taken
	joins   []uint64 // per join slot: the sources that arrived
	mark    []bool   // per node: triggered for the next step
	marked  []int    // the marked nodes, by index
	next    [2][]*flow.Node
	nextBuf [2][4]*flow.Node
	flip    int
	// resumed are the next nodes of a resumed run; pending their saved
	// updates, which the first step takes instead of running them.
	resumed []*flow.Node
	pending map[string][]store.Write
}

// durability is how the run's steps reach the store, and its hold on the
// thread.
type durability struct {
	seq      uint64            // the thread's head: the run's last checkpoint
	creating *store.Checkpoint // a new thread's first, not yet committed
	lease    *lease
	// retry waits through the store's outages (Request.Retry), watch
	// reports them when the engine made retry
	retry    *store.Retrier
	watch    *storeWatch
	async    *committer          // Async durability
	deferred []*store.Checkpoint // Exit durability
	chain    []*store.Checkpoint // Sync durability: steps held (see hold)
	// pipe is the commit of the held steps under way beside the nodes
	// of the step after them (see Pipelined commits)
	pipe  atomic.Pointer[pipe]
	slabs slabs // parts of step checkpoints
	// reuses is set when the run's commits go to the store at once and
	// the store copies them (store.Copier): spare then holds checkpoints
	// committed, zeroed for steps to come, and swap a held chain's
	// buffer once committed (see recycle)
	reuses bool
	spare  []*store.Checkpoint
	swap   []*store.Checkpoint
}

// clockReading is the last reading of the clock, see run.clock.
type clockReading struct {
	now        time.Time
	sinceClock int
}

func newRun(e *Engine, g *flow.Graph, req Request, head *store.Snapshot) *run {
	nf, nn, ne := len(g.Fields), len(g.Nodes), len(g.Edges)
	ints := make([]int, nn+ne+3*nf)
	r := runs.Get().(*run)
	words := r.words[:0]
	if cap(words) < nf+g.Joins {
		words = make([]uint64, nf+g.Joins)
	}
	words = words[:nf+g.Joins]
	clear(words)
	mark := r.mark[:0]
	if cap(mark) < nn {
		mark = make([]bool, nn)
	}
	mark = mark[:nn]
	clear(mark)
	r.e, r.g, r.req, r.id, r.records, r.retry = e, g, req, req.ID, recordsOf(g), req.Retry
	if r.id == "" {
		r.id = runID()
	}
	r.values, r.seq, r.input, r.step, r.path, r.ended, r.stepPuts = head.Values, head.Seq, nil, 0, nil, false, false
	r.words, r.versions, r.joins = words, words[:nf:nf], words[nf:]
	r.visits, r.bounds = ints[:nn:nn], ints[nn:nn+ne:nn+ne]
	r.writer, r.oldLen, r.stagedAt = ints[nn+ne:nn+ne+nf:nn+ne+nf], ints[nn+ne+nf:nn+ne+2*nf:nn+ne+2*nf], ints[nn+ne+2*nf:]
	r.mark, r.now, r.sinceClock, r.flip, r.marked = mark, time.Time{}, 0, 0, r.marked[:0]
	if req.Observe != nil {
		// the run's duration is in its last event
		r.started = time.Now()
	}
	r.changed = r.changed[:0]
	if cap(r.lists) < nf {
		r.lists = make([][]any, nf)
	}
	r.lists = r.lists[:nf]
	if cap(r.slots) < 2*nf {
		r.slots = make([]any, 2*nf)
	}
	r.cur, r.inSlots = r.slots[:nf:nf], r.slots[nf:2*nf:2*nf]
	if cap(r.dirty) < nf {
		r.dirty = make([]uint8, nf)
	}
	r.dirty = r.dirty[:nf]
	r.vars, r.staleValues, r.staleVars = nil, false, true
	r.resumed, r.pending, r.lease, r.async, r.deferred, r.chain = nil, nil, nil, nil, nil, r.chain[:0]
	r.reuses = e != nil && req.Durability != Async && req.Durability != Exit && store.Copies(e.Store)
	r.replies, r.held, r.puts = nil, nil, nil
	r.hasRecords.Store(false)
	r.late.reset()
	for i, f := range g.Fields {
		v, ok := head.Values[f.Name]
		r.cur[i] = v
		if head.Versions == nil {
			// a thread created by this run: every present field is new
			if ok {
				r.versions[i] = 1
			}
		} else {
			r.versions[i] = head.Versions[f.Name]
		}
		r.writer[i], r.stagedAt[i] = -1, -1
	}
	if r.frame == nil {
		r.frame = new(expression.Frame)
	}
	r.frame.State, r.frame.Input = r.cur, r.inSlots
	if r.outs == nil {
		r.outs = r.outsBuf[:0]
		r.next[0], r.next[1] = r.nextBuf[0][:0], r.nextBuf[1][:0]
	}
	return r
}

// runs recycles run structs: their node views (each with a virtual
// machine), buffers and variable map survive from run to run.
var runs = sync.Pool{New: func() any { return new(run) }}

// release returns r to the pool, unless a detached attempt may still
// hold parts of it.
func (r *run) release() {
	if r.detached.Load() {
		return
	}
	all := r.outs[:cap(r.outs)]
	for i := range all {
		o := &all[i]
		o.node, o.update, o.err, o.route, o.host = nil, nil, nil, nil, nil
		if o.view != nil {
			o.view.clear()
		}
	}
	clear(r.next[0][:cap(r.next[0])])
	clear(r.lists)
	clear(r.slots)
	clear(r.dirty)
	clear(r.next[1][:cap(r.next[1])])
	clear(r.chain[:cap(r.chain)])
	r.e, r.g, r.values, r.vars, r.input, r.path, r.req, r.creating, r.answers = nil, nil, nil, nil, nil, nil, Request{}, nil, nil
	r.retry, r.watch = nil, nil
	r.config, r.record, r.nestedDone, r.records, r.replies, r.held, r.puts = nil, nil, nil, nil, nil, nil, nil
	r.frame.State, r.frame.Input = nil, nil
	// the buffers' spare entries too: a pooled run holds no value
	clear(r.staged[:cap(r.staged)])
	clear(r.changed[:cap(r.changed)])
	r.staged, r.changed = r.staged[:0], r.changed[:0]
	runs.Put(r)
}

var (
	runPrefix = expression.NewID()[:8]
	runSeq    atomic.Uint64
)

// runID names a run uniquely: a per-process random prefix and a counter.
func runID() string {
	var b [32]byte
	id := append(append(b[:0], runPrefix...), '-')
	return string(strconv.AppendUint(id, runSeq.Add(1), 36))
}

// clockEvery bounds how many inline-only steps may share one clock reading.
const clockEvery = 64

// clock returns the time for a step's checkpoint. Reading the clock costs
// as much as a whole inline step on some machines, so it is read only when
// time can have passed: after a step that ran a node which may block (or
// retried), and at least every clockEvery steps. A step of inline nodes
// only takes microseconds, so its checkpoint time is off by at most the
// few inline steps since the last reading.
func (r *run) clock(outs []outcome) time.Time {
	r.sinceClock++
	fresh := r.sinceClock >= clockEvery
	for i := range outs {
		if !outs[i].node.Inline || outs[i].attempts > 1 {
			fresh = true
		}
	}
	if fresh || r.now.IsZero() {
		r.now, r.sinceClock = time.Now(), 0
	}
	return r.now
}

// set writes field i of the state: the step loop's only way to change
// it, so that the map form and the variables follow when asked for.
func (r *run) set(i int, v any) {
	r.cur[i] = v
	r.dirty[i] = dirtyValues | dirtyVars
	r.staleValues, r.staleVars = true, true
}

// The bits of working.dirty.
const (
	dirtyValues = 1 << iota
	dirtyVars
)

// own makes cur the run's own before a step writes it, once a detached
// attempt may still read the slots it was given.
func (r *run) own() {
	if r.detached.Load() {
		r.cur = slices.Clone(r.cur)
		r.frame = &expression.Frame{State: r.cur, Input: r.inSlots}
	}
}

// Vars returns the expression variables of the current state, made
// current first (see working). While attempts run on goroutines of their
// own it only reads: the step makes them current before it starts those.
func (r *run) Vars() map[string]any {
	if r.staleVars {
		r.syncVars()
	}
	return r.vars
}

// state returns the map form of the current state.
func (r *run) state() map[string]any {
	if r.staleValues {
		r.syncValues()
	}
	return r.values
}

// syncValues makes values current: in place, or a fresh map when a
// detached attempt may still read the old one.
func (r *run) syncValues() {
	if r.values == nil || r.detached.Load() {
		v := make(map[string]any, len(r.g.Fields))
		for k, x := range r.values {
			v[k] = x
		}
		r.values = v
	}
	for i, d := range r.dirty {
		if d&dirtyValues != 0 {
			r.values[r.g.Fields[i].Name] = r.cur[i]
			r.dirty[i] &^= dirtyValues
		}
	}
	r.staleValues = false
}

// syncVars makes vars current (and values, which they hold): in place,
// or fresh ones when a detached attempt may still read the old ones.
func (r *run) syncVars() {
	fresh := r.vars == nil || r.detached.Load()
	r.state()
	if fresh {
		r.vars = make(map[string]any, 2*len(r.g.Fields)+3)
		r.vars["state"], r.vars["input"] = r.values, r.input
		if r.config != nil {
			r.vars["config"] = r.config
		}
		for _, f := range r.g.Fields {
			if v, ok := r.values[f.Name]; ok {
				r.vars[f.Var] = v
			}
			if v, ok := r.input[f.Name]; ok {
				r.vars[f.InputVar] = v
			}
		}
		for i := range r.dirty {
			r.dirty[i] &^= dirtyVars
		}
	} else {
		for i, d := range r.dirty {
			if d&dirtyVars != 0 {
				r.vars[r.g.Fields[i].Var] = r.cur[i]
				r.dirty[i] &^= dirtyVars
			}
		}
	}
	r.staleVars = false
}

func sortedKeys(m map[string]any) []string {
	if len(m) == 0 {
		return nil
	}
	return slices.Sorted(maps.Keys(m))
}

func (r *run) emit(ev Event) {
	ev.Run, ev.Thread, ev.Time = r.id, r.req.Thread, time.Now()
	r.emitMu.Lock()
	// an observer that panics leaves the next event free to be sent
	defer r.emitMu.Unlock()
	r.req.Observe(ev)
}
