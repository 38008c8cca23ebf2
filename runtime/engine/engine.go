// Package engine executes compiled flows in Pregel-style supersteps.
//
// A run loads its thread's newest state, applies the caller's input through
// the reducers, then repeats: every triggered node runs concurrently on the
// same snapshot; at the barrier their updates merge through the reducers in
// node declaration order (so the result never depends on goroutine timing);
// the changed fields are validated against their compiled sub-schemas; the
// step is committed as a checkpoint; edges pick the next triggered set from
// the new state. The run stops when nothing is triggered, at an error, or at
// a limit.
package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/expression"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/schema"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/value"
)

// Engine runs flows against a store. It is safe for concurrent use; runs on
// one thread never overlap.
type Engine struct {
	Store store.Store
	// LeaseTTL is how long a run's hold on its thread outlives a holder
	// that stopped renewing it, such as a process that died (default
	// DefaultLeaseTTL).
	LeaseTTL time.Duration
	mu       sync.Mutex
	busy     map[string]bool // threads with a run in progress
	// owner names the engine's leases. Runs of one engine on one thread
	// never overlap (busy), so a run may take over a lease an earlier run
	// of the engine could not release, when the store was unreachable:
	// the thread is not locked out until the lease expires.
	owner string
}

// New returns an engine over st.
func New(st store.Store) *Engine { return &Engine{Store: st} }

// ErrBusy is returned when a run is started on a thread that is running.
var ErrBusy = errors.New("thread is busy with another run")

// Request starts one run.
type Request struct {
	// Thread to run on; created from the schema defaults when missing.
	Thread string
	// Input sets input fields; any other key is refused.
	Input map[string]any
	// Observe receives the run's events.
	Observe Observer
	// RecordPath keeps the nodes of every step in Result.Path.
	RecordPath bool
	// Durability says when steps reach the store: Sync (the default),
	// Async or Exit.
	Durability Durability
	// Resume continues the thread's unfinished run (one that stopped
	// after a checkpoint with nodes still to run, such as a crashed
	// process's). Input must be empty. Nodes whose updates were saved as
	// pending writes are not run again.
	Resume bool
}

// Durability is when a run's steps are committed.
type Durability string

const (
	// Sync commits each step before the next one starts: a crash loses
	// nothing that completed.
	Sync Durability = "sync"
	// Async commits steps in order in the background while the run goes
	// on, and waits for them before the run returns: a crash can lose the
	// last steps.
	Async Durability = "async"
	// Exit commits one checkpoint when the run ends, holding everything
	// the run changed (for append fields only the appended items): a crash
	// loses the run.
	Exit Durability = "exit"
)

// ErrUnfinished refuses a new run on a thread whose previous run did not
// finish; resume it first.
var ErrUnfinished = errors.New("thread has an unfinished run; resume it first")

// DefaultLeaseTTL is the default Engine.LeaseTTL.
const DefaultLeaseTTL = 15 * time.Second

// Result is a finished run.
type Result struct {
	Run    string
	Thread string
	// State is the final state; Checkpoint its sequence number.
	State      map[string]any
	Checkpoint uint64
	// Steps counts supersteps.
	Steps int
	// Path lists each step's nodes (with Request.RecordPath).
	Path [][]string

	g      *flow.Graph
	visits []int
}

// Visits counts how often each node ran.
func (r *Result) Visits() map[string]int {
	m := map[string]int{}
	for i, n := range r.visits {
		if n > 0 {
			m[r.g.Nodes[i].Name] = n
		}
	}
	return m
}

// InputError refuses a run input.
type InputError struct {
	Field      string
	Reason     string
	Suggestion string
}

func (e *InputError) Error() string {
	msg := fmt.Sprintf("input %q: %s", e.Field, e.Reason)
	if e.Suggestion != "" {
		msg += fmt.Sprintf("; did you mean %q?", e.Suggestion)
	}
	return msg
}

// NodeError is a node's failure, located in its flow file.
type NodeError struct {
	Node string
	Kind string
	Pos  diag.Pos
	Err  error
}

func (e *NodeError) Error() string {
	return fmt.Sprintf("node %q (%s) at %s: %v", e.Node, e.Kind, e.Pos, e.Err)
}

func (e *NodeError) Unwrap() error { return e.Err }

// LimitError is a run stopped by its superstep limit or an edge bound.
type LimitError struct {
	Limit int
	Loop  []string
	// Edge is the bounded edge's position, for bound errors.
	Edge *diag.Pos
}

func (e *LimitError) Error() string {
	loop := strings.Join(e.Loop, " → ")
	if e.Edge != nil {
		return fmt.Sprintf("edge at %s exceeded its bound of %d in loop %s", e.Edge, e.Limit, loop)
	}
	if loop == "" {
		return fmt.Sprintf("run exceeded its limit of %d supersteps", e.Limit)
	}
	return fmt.Sprintf("run exceeded its limit of %d supersteps in loop %s", e.Limit, loop)
}

// Create makes a new thread with the schema defaults overlaid by values.
// Read-only fields can only be set here.
func (e *Engine) Create(ctx context.Context, g *flow.Graph, thread string, values map[string]any) (*store.Snapshot, error) {
	state, err := e.create(ctx, g, thread, values)
	if err != nil {
		return nil, err
	}
	versions := map[string]uint64{}
	for k := range state {
		versions[k] = 1
	}
	return &store.Snapshot{Thread: thread, Seq: 1, Values: maps.Clone(state), Versions: versions}, nil
}

// create commits a thread's first checkpoint and returns its state, every
// field of which is at version 1.
func (e *Engine) create(ctx context.Context, g *flow.Graph, thread string, values map[string]any) (map[string]any, error) {
	state := make(map[string]any, len(g.Fields))
	cp := &store.Checkpoint{Thread: thread, Seq: 1, Source: store.SourceCreate, Time: time.Now()}
	for _, f := range g.Fields {
		if f.HasDefault {
			state[f.Name] = f.Default
		}
	}
	for _, k := range sortedKeys(values) {
		f, ok := g.Field(k)
		if !ok {
			return nil, &InputError{Field: k, Reason: "not a state field", Suggestion: diag.Suggest(k, fieldNames(g))}
		}
		v, err := value.Normalize(values[k])
		if err != nil {
			return nil, &InputError{Field: k, Reason: err.Error()}
		}
		state[k] = schema.Coerce(f.Shape, v)
	}
	if err := g.Root().Validate(state); err != nil {
		return nil, fmt.Errorf("initial state of thread %q: %w", thread, err)
	}
	cp.Writes = make([]store.Write, 0, len(state))
	for _, f := range g.Fields {
		if v, ok := state[f.Name]; ok {
			cp.Writes = append(cp.Writes, store.Write{Field: f.Name, Version: 1, Value: v})
		}
	}
	if err := e.Store.Commit(ctx, cp); err != nil {
		return nil, fmt.Errorf("create thread %q: %w", thread, err)
	}
	return state, nil
}

func fieldNames(g *flow.Graph) []string {
	names := make([]string, len(g.Fields))
	for i, f := range g.Fields {
		names[i] = f.Name
	}
	return names
}

func (e *Engine) leaseTTL() time.Duration {
	if e.LeaseTTL > 0 {
		return e.LeaseTTL
	}
	return DefaultLeaseTTL
}

// claim makes thread busy in this engine and takes its lease in the
// store, for one writer per thread across processes; free ends the busy
// mark (the caller releases the lease). A thread another run holds is
// ErrBusy.
func (e *Engine) claim(ctx context.Context, thread string) (owner string, free func(), err error) {
	e.mu.Lock()
	if e.busy[thread] {
		e.mu.Unlock()
		return "", nil, ErrBusy
	}
	if e.busy == nil {
		e.busy, e.owner = map[string]bool{}, runID()
	}
	e.busy[thread] = true
	owner = e.owner
	e.mu.Unlock()
	free = func() {
		e.mu.Lock()
		delete(e.busy, thread)
		e.mu.Unlock()
	}
	if err := e.Store.Acquire(ctx, thread, owner, e.leaseTTL()); err != nil {
		free()
		if errors.Is(err, store.ErrLeased) {
			return "", nil, ErrBusy
		}
		return "", nil, fmt.Errorf("lease thread: %w", err)
	}
	return owner, free, nil
}

// Run executes one run of g on req.Thread.
func (e *Engine) Run(ctx context.Context, g *flow.Graph, req Request) (*Result, error) {
	owner, free, err := e.claim(ctx, req.Thread)
	if err != nil {
		return nil, err
	}
	defer free()
	hold := &lease{st: e.Store, thread: req.Thread, owner: owner, ttl: e.leaseTTL(), renewed: time.Now()}
	defer hold.release(ctx)
	head, err := e.Store.Head(ctx, req.Thread)
	if errors.Is(err, store.ErrNotFound) {
		var state map[string]any
		if state, err = e.create(ctx, g, req.Thread, nil); err == nil {
			head = &store.Snapshot{Thread: req.Thread, Seq: 1, Values: state}
		}
	}
	if err != nil {
		return nil, err
	}
	switch req.Durability {
	case "", Sync, Async, Exit:
	default:
		return nil, fmt.Errorf("unknown durability %q (sync, async, exit)", req.Durability)
	}
	switch {
	case req.Resume && len(req.Input) > 0:
		return nil, &InputError{Field: sortedKeys(req.Input)[0], Reason: "a resumed run takes no input"}
	case !req.Resume && len(head.Next) > 0:
		return nil, ErrUnfinished
	case req.Resume && len(head.Next) == 0:
		// nothing to resume: the thread's newest run finished
		return &Result{Thread: req.Thread, State: head.Values, Checkpoint: head.Seq, g: g, visits: make([]int, len(g.Nodes))}, nil
	}
	r := newRun(e, g, req, head)
	r.lease = hold
	if req.Resume {
		if err := r.restore(ctx, head); err != nil {
			r.release()
			return nil, err
		}
	}
	res, err := r.execute(ctx)
	r.release()
	return res, err
}

// run is the state of one executing run.
type run struct {
	e        *Engine
	g        *flow.Graph
	req      Request
	id       string
	values   map[string]any
	versions []uint64
	seq      uint64
	input    map[string]any
	step     int
	visits   []int
	bounds   []int    // times each edge was taken
	joins    []uint64 // arrivals per join slot
	writer   []int    // per field: index of the node that wrote it this step, -1 none
	mark     []bool   // per node: triggered for the next step
	marked   bool     // some node is marked
	path     [][]string
	emitMu   sync.Mutex
	started  time.Time
	// vars are the expression variables of the current snapshot. They are
	// updated in place between steps, unless a timed-out node may still be
	// reading them (abandoned): then every step gets fresh ones.
	vars       map[string]any
	machine    expression.Machine // for edge conditions and routes
	now        time.Time          // last clock reading, see clock
	sinceClock int
	abandoned  atomic.Bool
	outs       []outcome
	outsBuf    [2]outcome
	words      []uint64
	lease      *lease
	async      *committer               // Async durability
	deferred   []*store.Checkpoint      // Exit durability
	resumed    []*flow.Node             // the next nodes of a resumed run
	pending    map[string][]store.Write // their saved updates
	nextBuf    [2][4]*flow.Node
	changed    []*flow.Field
	oldLen     []int // per append field: its length before this step
	// lists holds, per append field, the list this run last appended to,
	// with its spare capacity. State, events and checkpoints only ever see
	// it capped at its length, so appending in place beyond that length
	// changes nothing anyone can read: a run appends in amortised constant
	// time instead of copying the list every step.
	lists [][]any
	// cur mirrors the state map by field index, so the step loop reads
	// and writes field values without hashing their names.
	cur   []any
	slabs slabs // parts of step checkpoints
	next  [2][]*flow.Node
	flip  int
}

func newRun(e *Engine, g *flow.Graph, req Request, head *store.Snapshot) *run {
	nf, nn, ne := len(g.Fields), len(g.Nodes), len(g.Edges)
	ints := make([]int, nn+ne+2*nf)
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
	r.e, r.g, r.req, r.id = e, g, req, runID()
	r.values, r.seq, r.input, r.step, r.path = head.Values, head.Seq, nil, 0, nil
	r.words, r.versions, r.joins = words, words[:nf:nf], words[nf:]
	r.visits, r.bounds = ints[:nn:nn], ints[nn:nn+ne:nn+ne]
	r.writer, r.oldLen = ints[nn+ne:nn+ne+nf:nn+ne+nf], ints[nn+ne+nf:]
	r.mark, r.started, r.now, r.sinceClock, r.flip = mark, time.Now(), time.Time{}, 0, 0
	r.changed = r.changed[:0]
	if cap(r.lists) < nf {
		r.lists = make([][]any, nf)
	}
	r.lists = r.lists[:nf]
	if cap(r.cur) < nf {
		r.cur = make([]any, nf)
	}
	r.cur = r.cur[:nf]
	r.resumed, r.pending, r.lease, r.async, r.deferred = nil, nil, nil, nil, nil
	for i, f := range g.Fields {
		if head.Versions == nil {
			// a thread created by this run: every present field is new
			if _, ok := head.Values[f.Name]; ok {
				r.versions[i] = 1
			}
		} else {
			r.versions[i] = head.Versions[f.Name]
		}
		r.writer[i] = -1
	}
	if r.outs == nil {
		r.outs = r.outsBuf[:0]
		r.next[0], r.next[1] = r.nextBuf[0][:0], r.nextBuf[1][:0]
	}
	return r
}

// runs recycles run structs: their node views (each with a virtual
// machine), buffers and variable map survive from run to run.
var runs = sync.Pool{New: func() any { return new(run) }}

// release returns r to the pool, unless a timed-out node may still hold
// its variables.
func (r *run) release() {
	if r.abandoned.Load() {
		return
	}
	all := r.outs[:cap(r.outs)]
	for i := range all {
		o := &all[i]
		o.node, o.update, o.err, o.route = nil, nil, nil, nil
		o.view.reset(nil, "", 0)
	}
	clear(r.next[0][:cap(r.next[0])])
	clear(r.lists)
	clear(r.cur)
	clear(r.next[1][:cap(r.next[1])])
	r.e, r.g, r.values, r.input, r.path, r.req = nil, nil, nil, nil, nil, Request{}
	if r.vars != nil {
		clear(r.vars)
	}
	runs.Put(r)
}

var (
	runPrefix = expression.NewID()[:8]
	runSeq    atomic.Uint64
)

// runID names a run uniquely: a per-process random prefix and a counter.
func runID() string {
	return runPrefix + "-" + strconv.FormatUint(runSeq.Add(1), 36)
}

// runNodes runs a superstep's nodes: each node that may block on a
// goroutine of its own, inline nodes one after another on this goroutine.
func (r *run) runNodes(ctx context.Context, triggered []*flow.Node, vars map[string]any, outs []outcome) {
	blocking := 0
	for _, n := range triggered {
		if !n.Inline {
			blocking++
		}
	}
	if blocking <= 1 {
		for i, n := range triggered {
			r.exec(ctx, n, vars, &outs[i])
		}
		return
	}
	var wg sync.WaitGroup
	for i, n := range triggered {
		if !n.Inline {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.exec(ctx, n, vars, &outs[i])
				outs[i].saveErr = r.savePending(ctx, &outs[i])
			}()
		}
	}
	for i, n := range triggered {
		if n.Inline {
			r.exec(ctx, n, vars, &outs[i])
		}
	}
	wg.Wait()
}

// lease is a run's hold on its thread. Runs of inline nodes renew it at
// step boundaries when it is due; once a step runs a node that may block,
// a goroutine renews it until the run ends.
type lease struct {
	st            store.Store
	thread, owner string
	ttl           time.Duration
	renewed       time.Time
	stop          context.CancelFunc
	done          chan struct{}
}

// keepAlive starts renewing in the background, once.
func (l *lease) keepAlive(ctx context.Context) {
	if l.stop != nil {
		return
	}
	ctx, l.stop = context.WithCancel(ctx)
	l.done = make(chan struct{})
	go func() {
		defer close(l.done)
		t := time.NewTicker(l.ttl / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				_ = l.st.Acquire(ctx, l.thread, l.owner, l.ttl)
			}
		}
	}()
}

// renewIfDue renews from the run's own goroutine when a third of the
// lease has passed.
func (l *lease) renewIfDue(ctx context.Context, now time.Time) {
	if l.stop == nil && now.Sub(l.renewed) > l.ttl/3 {
		if l.st.Acquire(ctx, l.thread, l.owner, l.ttl) == nil {
			l.renewed = now
		}
	}
}

func (l *lease) release(ctx context.Context) {
	if l.stop != nil {
		l.stop()
		<-l.done
	}
	_ = l.st.Release(context.WithoutCancel(ctx), l.thread, l.owner)
}

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
// step, join arrivals, input, next nodes and pending writes.
func (r *run) restore(ctx context.Context, head *store.Snapshot) error {
	r.step = head.Step
	copy(r.joins, head.Joins)
	if cps, err := r.e.Store.History(ctx, r.req.Thread, store.HistoryOptions{Run: head.Run, Source: store.SourceInput, Limit: 1}); err == nil && len(cps) == 1 {
		r.input = map[string]any{}
		for _, w := range cps[0].Writes {
			if w.Append {
				r.input[w.Field] = w.Items
			} else {
				r.input[w.Field] = w.Value
			}
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
	r.bindVars()
	return nil
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

// bindVars builds fresh expression variables for the current state.
func (r *run) bindVars() {
	if r.vars == nil || r.abandoned.Load() {
		r.vars = make(map[string]any, len(r.g.Fields)+len(r.input)+2)
	} else {
		clear(r.vars)
	}
	r.vars["state"], r.vars["input"] = r.values, r.input
	for i, f := range r.g.Fields {
		v, ok := r.values[f.Name]
		r.cur[i] = v
		if ok {
			r.vars[f.Var] = v
		}
		if v, ok := r.input[f.Name]; ok {
			r.vars[f.InputVar] = v
		}
	}
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
	r.req.Observe(ev)
	r.emitMu.Unlock()
}

func (r *run) execute(ctx context.Context) (res *Result, err error) {
	observe := r.req.Observe != nil
	if observe {
		r.emit(Event{Type: RunStart})
		defer func() {
			if err != nil {
				r.emit(Event{Type: RunError, Step: r.step, Error: err.Error(), Duration: time.Since(r.started)})
			} else {
				r.emit(Event{Type: RunEnd, Step: r.step, State: res.State, Duration: time.Since(r.started)})
			}
		}()
	}
	defer func() {
		if ferr := r.flush(ctx, err == nil); err == nil && ferr != nil {
			res, err = nil, ferr
		}
		if res != nil {
			res.Checkpoint = r.seq
		}
	}()
	var triggered []*flow.Node
	if r.resumed != nil {
		triggered = r.resumed
	} else {
		cp, err := r.applyInput()
		if err != nil {
			return nil, err
		}
		r.bindVars()
		if triggered, err = r.route(r.vars, nil); err != nil {
			return nil, err
		}
		if cp != nil {
			// the input checkpoint names the entry nodes, so a run that
			// dies before its first step can be resumed
			for _, n := range triggered {
				cp.Next = append(cp.Next, n.Name)
			}
			if err := r.commit(ctx, cp); err != nil {
				return nil, fmt.Errorf("commit input: %w", err)
			}
			r.seq = cp.Seq
		}
	}
	for len(triggered) > 0 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		r.step++
		if r.step > r.g.MaxSteps {
			return nil, r.limitError(triggered)
		}
		triggered, err = r.superstep(ctx, triggered)
		if err != nil {
			return nil, err
		}
	}
	res = &Result{Run: r.id, Thread: r.req.Thread, State: r.values, Checkpoint: r.seq, Steps: r.step, Path: r.path,
		g: r.g, visits: r.visits}
	return res, nil
}

// applyInput validates the input and applies it through the reducers. It
// returns the input checkpoint, for the caller to commit once it knows
// the entry nodes, or nil when there is no input.
func (r *run) applyInput() (*store.Checkpoint, error) {
	if len(r.req.Input) == 0 {
		return nil, nil
	}
	next := maps.Clone(r.values)
	r.input = make(map[string]any, len(r.req.Input))
	cp := &store.Checkpoint{Thread: r.req.Thread, Seq: r.seq + 1, Parent: r.seq, Run: r.id, Source: store.SourceInput, Time: time.Now()}
	for _, k := range sortedKeys(r.req.Input) {
		f, ok := r.g.Field(k)
		if !ok || !f.Input {
			var names []string
			for _, in := range r.g.Inputs {
				names = append(names, in.Name)
			}
			reason := "not an input of this flow"
			if len(names) > 0 {
				reason += " (inputs: " + strings.Join(names, ", ") + ")"
			}
			return nil, &InputError{Field: k, Reason: reason, Suggestion: diag.Suggest(k, names)}
		}
		v, err := value.Normalize(r.req.Input[k])
		if err != nil {
			return nil, &InputError{Field: k, Reason: err.Error()}
		}
		v = schema.Coerce(f.Shape, v)
		r.input[k] = v
		nv, err := f.Reducer.Reduce(next[k], v)
		if err != nil {
			return nil, &InputError{Field: k, Reason: err.Error()}
		}
		if err := validateField(f, nv, v); err != nil {
			return nil, &InputError{Field: k, Reason: err.Error()}
		}
		next[k] = nv
		r.versions[f.Index]++
		cp.Writes = append(cp.Writes, writeOf(f, r.versions[f.Index], nv, v))
	}
	if r.g.FullValidation {
		if err := r.g.Root().Validate(next); err != nil {
			return nil, &InputError{Field: cp.Writes[0].Field, Reason: err.Error()}
		}
	}
	r.values = next
	return cp, nil
}

func writeOf(f *flow.Field, version uint64, value, update any) store.Write {
	if f.Reducer.Appends {
		return store.Write{Field: f.Name, Version: version, Items: flow.AsItems(update), Append: true}
	}
	return store.Write{Field: f.Name, Version: version, Value: value}
}

// validateField checks a field's new value: only the appended items when
// the field's schema allows that, else the whole value.
func validateField(f *flow.Field, value, update any) error {
	if f.Items != nil && f.Reducer.Appends {
		for i, it := range flow.AsItems(update) {
			if err := f.Items.Validate(it); err != nil {
				return fmt.Errorf("appended item %d: %w", i, err)
			}
		}
		return nil
	}
	if f.Validator == nil {
		return nil
	}
	return f.Validator.Validate(value)
}

// outcome is one node's result in a superstep.
type outcome struct {
	node     *flow.Node
	view     view
	update   kind.Update
	err      error
	attempts int
	took     time.Duration
	route    *flow.Node // on_error route taken
	degraded string     // why the update is a fallback
	// saveErr is the store's failure to save the node's update as a
	// pending write: the run's failure, not the node's, so on_error does
	// not apply to it.
	saveErr error
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

func (r *run) superstep(ctx context.Context, triggered []*flow.Node) ([]*flow.Node, error) {
	observe := r.req.Observe != nil
	vars := r.vars
	if cap(r.outs) < len(triggered) {
		r.outs = make([]outcome, len(triggered))
	}
	outs := r.outs[:len(triggered)]
	for i := range outs {
		outs[i].update, outs[i].err, outs[i].route, outs[i].saveErr = nil, nil, nil, nil
	}
	if observe {
		for _, n := range triggered {
			r.emit(Event{Type: NodeStart, Step: r.step, Node: n.Name, Kind: n.Kind})
		}
	}
	if r.lease != nil {
		for _, n := range triggered {
			if !n.Inline {
				r.lease.keepAlive(ctx)
				break
			}
		}
	}
	r.runNodes(ctx, triggered, vars, outs)
	for i := range outs {
		if err := outs[i].saveErr; err != nil {
			return nil, err
		}
	}
	// saved updates belong to the first superstep of a resumed run only
	r.pending = nil
	if r.req.RecordPath {
		names := make([]string, len(triggered))
		for i, n := range triggered {
			names[i] = n.Name
		}
		r.path = append(r.path, names)
	}
	next, changed, err := r.barrier(ctx, outs, vars)
	if err != nil {
		return nil, err
	}
	cp := &take(&r.slabs.cps, 1)[0]
	cp.Thread, cp.Seq, cp.Parent, cp.Run, cp.Step, cp.Source = r.req.Thread, r.seq+1, r.seq, r.id, r.step, store.SourceStep
	if len(changed) > 0 {
		// one write per changed field; an append field records only the
		// items this step appended (several writers fold in order)
		writes := take(&r.slabs.writes, len(changed))[:0]
		for _, f := range changed {
			r.versions[f.Index]++
			w := store.Write{Field: f.Name, Version: r.versions[f.Index]}
			if f.Reducer.Appends {
				list := r.cur[f.Index].([]any)
				w.Items, w.Append = list[r.oldLen[f.Index]:len(list):len(list)], true
			} else {
				w.Value = r.cur[f.Index]
			}
			writes = append(writes, w)
		}
		cp.Writes = writes
		if r.g.FullValidation {
			if err := r.g.Root().Validate(next); err != nil {
				return nil, fmt.Errorf("step %d: state rejected: %w", r.step, err)
			}
		}
		r.values = next
	}
	writers := take(&r.slabs.writers, len(outs))[:0]
	for i := range outs {
		writers = append(writers, store.NodeWrites{Node: outs[i].node.Name, Fields: writtenFields(outs[i].node, outs[i].update)})
	}
	cp.Writers = writers
	// routing on the post-barrier state
	if r.abandoned.Load() {
		r.bindVars()
	} else {
		for _, f := range changed {
			expression.BindField(r.vars, f.Var, r.cur[f.Index])
		}
	}
	following, err := r.route(r.vars, outs)
	if err != nil {
		return nil, err
	}
	cp.Time = r.clock(outs)
	if len(following) > 0 {
		names := take(&r.slabs.names, len(following))[:0]
		for _, n := range following {
			names = append(names, n.Name)
		}
		cp.Next = names
		cp.Joins = r.runState()
	}
	if err := r.commit(ctx, cp); err != nil {
		return nil, fmt.Errorf("commit step %d: %w", r.step, err)
	}
	r.seq = cp.Seq
	if r.lease != nil && r.sinceClock == 0 {
		r.lease.renewIfDue(ctx, cp.Time)
	}
	if observe {
		upd := make(map[string]any, len(cp.Writes))
		for _, w := range cp.Writes {
			upd[w.Field] = r.values[w.Field]
		}
		r.emit(Event{Type: StateUpdate, Step: r.step, Update: upd, Checkpoint: cp.Seq, Next: cp.Next})
	}
	return following, nil
}

// appendOwned appends an update to an append field. When the current list
// is the one this run last produced, the items go in place into its spare
// capacity; otherwise (the list came from the store, or the field was
// replaced) it is copied once into a list this run owns.
func (r *run) appendOwned(f *flow.Field, cur, upd any) (any, error) {
	cl, ok := cur.([]any)
	if !ok && cur != nil {
		return f.Reducer.Reduce(cur, upd)
	}
	full := r.lists[f.Index]
	if len(full) != len(cl) || len(cl) > 0 && &full[0] != &cl[0] {
		full = append(make([]any, 0, max(2*len(cl), 8)), cl...)
	}
	switch u := upd.(type) {
	case nil:
	case []any:
		full = append(full, u...)
	default:
		full = append(full, u)
	}
	if full == nil {
		full = []any{}
	}
	r.lists[f.Index] = full
	return full[:len(full):len(full)], nil
}

// barrier merges the step's updates through the reducers in node
// declaration order and validates every changed field. It returns the new
// state (nil when nothing changed) and the changed fields in write order.
func (r *run) barrier(ctx context.Context, outs []outcome, vars map[string]any) (map[string]any, []*flow.Field, error) {
	r.changed = r.changed[:0]
	next, err := r.merge(ctx, outs, vars)
	changed := r.changed
	for _, f := range changed {
		r.writer[f.Index] = -1
	}
	if err != nil {
		return nil, nil, err
	}
	return next, changed, nil
}

// merge is barrier's work; it lists the changed fields in r.changed.
func (r *run) merge(ctx context.Context, outs []outcome, vars map[string]any) (map[string]any, error) {
	observe := r.req.Observe != nil
	var next map[string]any
	for i := range outs {
		o := &outs[i]
		n := o.node
		r.visits[n.Index]++
		if o.err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if !n.OnError.Handled {
				if observe {
					r.emit(Event{Type: NodeFailed, Step: r.step, Node: n.Name, Kind: n.Kind, Attempt: o.attempts, Duration: o.took, Error: o.err.Error()})
				}
				return nil, &NodeError{Node: n.Name, Kind: n.Kind, Pos: n.Pos, Err: o.err}
			}
			upd, err := r.fallback(n, vars, o.err)
			if err != nil {
				return nil, &NodeError{Node: n.Name, Kind: n.Kind, Pos: n.Pos, Err: fmt.Errorf("on_error: %w (after: %v)", err, o.err)}
			}
			if observe {
				r.emit(Event{Type: NodeFailed, Step: r.step, Node: n.Name, Kind: n.Kind, Attempt: o.attempts, Duration: o.took, Error: o.err.Error(), Handled: true, Update: upd.Map()})
			}
			o.update, o.route = upd, n.OnError.Route
		} else if observe {
			r.emit(Event{Type: NodeEnd, Step: r.step, Node: n.Name, Kind: n.Kind, Attempt: o.attempts, Duration: o.took, Update: o.update.Map(), Degraded: o.degraded})
		}
		if len(o.update) == 0 {
			continue
		}
		if next == nil {
			// The run owns its state map: it came from the store as a copy
			// and nodes are done reading it. Only when a timed-out node may
			// still read it does the step work on a copy.
			next = r.values
			if r.abandoned.Load() {
				next = maps.Clone(r.values)
			}
		}
		fail := func(format string, args ...any) error {
			return &NodeError{Node: n.Name, Kind: n.Kind, Pos: n.Pos, Err: fmt.Errorf(format, args...)}
		}
		for j, fv := range o.update {
			f := declared(n, fv.Field)
			if f == nil {
				var ok bool
				if f, ok = r.g.Field(fv.Field); !ok {
					return nil, fail("wrote %q, which is not a state field", fv.Field)
				}
			}
			if !n.WriteMask[f.Index] {
				return nil, fail("wrote field %q, which the node does not declare", f.Name)
			}
			if _, dup := o.update[:j].Get(f.Name); dup {
				return nil, fail("wrote field %q twice in one update", f.Name)
			}
			if w := r.writer[f.Index]; w >= 0 && !f.Reducer.Concurrent {
				return nil, fail("field %q was also written by %q in this superstep and its reducer is replace", f.Name, r.g.Nodes[w].Name)
			}
			v, err := normalizeFor(f, fv.Value)
			if err != nil {
				return nil, fail("field %q: %w", f.Name, err)
			}
			var merged any
			if f.Reducer.Appends {
				merged, err = r.appendOwned(f, r.cur[f.Index], v)
			} else {
				merged, err = f.Reducer.Reduce(r.cur[f.Index], v)
			}
			if err == nil {
				err = validateField(f, merged, v)
			}
			if err != nil {
				return nil, fail("update of field %q rejected: %w", f.Name, err)
			}
			if r.writer[f.Index] < 0 {
				r.changed = append(r.changed, f)
				if f.Reducer.Appends {
					old, _ := r.cur[f.Index].([]any)
					r.oldLen[f.Index] = len(old)
				}
			}
			next[f.Name] = merged
			r.cur[f.Index] = merged
			r.writer[f.Index] = n.Index
		}
	}
	return next, nil
}

// declared returns the node's declared field called name, or nil.
func declared(n *flow.Node, name string) *flow.Field {
	for i, w := range n.WriteList {
		if w == name {
			return n.WriteFields[i]
		}
	}
	return nil
}

// writtenFields lists the fields of upd in field order, sharing the node's
// own list when it wrote every field it declares.
func writtenFields(n *flow.Node, upd kind.Update) []string {
	if len(upd) == 0 {
		return nil
	}
	if len(upd) == len(n.WriteList) {
		return n.WriteList
	}
	fs := make([]string, 0, len(upd))
	for _, f := range n.WriteList {
		if _, ok := upd.Get(f); ok {
			fs = append(fs, f)
		}
	}
	return fs
}

func (r *run) resetWriters() {
	for i := range r.writer {
		r.writer[i] = -1
	}
}

func normalizeFor(f *flow.Field, v any) (any, error) {
	n, err := value.Normalize(v)
	if err != nil {
		return nil, err
	}
	return schema.Coerce(f.Shape, n), nil
}

// fallback evaluates a node's on_error.set.
func (r *run) fallback(n *flow.Node, vars map[string]any, cause error) (kind.Update, error) {
	if len(n.OnError.Set) == 0 {
		return nil, nil
	}
	ev := maps.Clone(vars)
	ev["error"] = cause.Error()
	upd := make(kind.Update, 0, len(n.OnError.Set))
	for _, f := range n.OnError.SetOrder {
		v, err := n.OnError.Set[f].Eval(ev)
		if err != nil {
			return nil, fmt.Errorf("set %s: %w", f, err)
		}
		upd = append(upd, kind.FieldValue{Field: f, Value: v})
	}
	return upd, nil
}

// exec runs one node with its retry and timeout policy.
func (r *run) exec(ctx context.Context, n *flow.Node, vars map[string]any, o *outcome) {
	if ws, ok := r.pending[n.Name]; ok {
		// completed before the run stopped: take its saved update
		upd := make(kind.Update, len(ws))
		for i, w := range ws {
			upd[i] = kind.FieldValue{Field: w.Field, Value: w.Value}
		}
		o.node, o.update, o.err, o.attempts, o.took, o.degraded = n, upd, nil, 0, 0, ""
		return
	}
	o.view.stream = nil
	if r.req.Observe != nil {
		step := r.step
		o.view.stream = func(text string) {
			r.emit(Event{Type: NodeOutput, Step: step, Node: n.Name, Kind: n.Kind, Text: text})
		}
	}
	r.attempt(ctx, n, vars, o)
}

// commit sends a checkpoint to the store as the run's durability says.
func (r *run) commit(ctx context.Context, cp *store.Checkpoint) error {
	switch r.req.Durability {
	case Async:
		if r.async == nil {
			r.async = &committer{ch: make(chan *store.Checkpoint, 64), done: make(chan struct{})}
			go r.async.loop(context.WithoutCancel(ctx), r.e.Store)
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
	return r.e.Store.Commit(ctx, cp)
}

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
		Source: store.SourceRun, Time: last.Time}
	pos := map[string]int{}
	for _, cp := range cps {
		merged.Writers = append(merged.Writers, cp.Writers...)
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
				merged.Writes[i] = store.Write{Field: w.Field, Version: w.Version, Value: r.values[w.Field]}
			}
		}
	}
	if err := r.e.Store.Commit(ctx, merged); err != nil {
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

func (c *committer) loop(ctx context.Context, st store.Store) {
	defer close(c.done)
	for cp := range c.ch {
		if c.failed() != nil {
			continue
		}
		if err := st.Commit(ctx, cp); err != nil {
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
// that a run resumed after a crash does not run it again.
func (r *run) savePending(ctx context.Context, o *outcome) error {
	if o.err != nil || o.attempts == 0 || (r.req.Durability != "" && r.req.Durability != Sync) {
		return nil
	}
	ws := make([]store.Write, len(o.update))
	for i, fv := range o.update {
		v, err := value.Normalize(fv.Value)
		if err != nil {
			return nil // the barrier reports it
		}
		ws[i] = store.Write{Field: fv.Field, Value: v}
	}
	if err := r.e.Store.PutPending(ctx, r.req.Thread, r.seq, o.node.Name, ws); err != nil {
		return fmt.Errorf("step %d: save the update of node %q: %w", r.step, o.node.Name, err)
	}
	return nil
}

func (r *run) attempt(ctx context.Context, n *flow.Node, vars map[string]any, o *outcome) {
	st := &o.view
	var start time.Time
	timed := r.req.Observe != nil
	if timed {
		start = time.Now()
	}
	o.node, o.update, o.err, o.took, o.degraded = n, nil, nil, 0, ""
	backoff := n.Retry.Backoff
attempts:
	for attempt := 1; ; attempt++ {
		o.attempts = attempt
		st.reset(vars, n.Name, attempt)
		upd, err := r.call(ctx, n, st)
		if err == nil {
			o.update, o.degraded = upd, st.degraded
			break
		}
		if ctx.Err() != nil || attempt >= n.Retry.Attempts || kind.IsPermanent(err) {
			if fb, ok := n.Impl.(kind.Fallback); ok && ctx.Err() == nil {
				upd, ferr := fb.Fallback(ctx, st, err)
				if ferr == nil {
					o.update, o.degraded = upd, err.Error()
					break
				}
				err = fmt.Errorf("%w; fallback: %v", err, ferr)
			}
			o.err = err
			break
		}
		if r.req.Observe != nil {
			r.emit(Event{Type: NodeRetry, Step: r.step, Node: n.Name, Kind: n.Kind, Attempt: attempt, Error: err.Error(), Duration: backoff})
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			o.err = ctx.Err()
			break attempts
		case <-t.C:
		}
		backoff = min(time.Duration(float64(backoff)*n.Retry.Factor), n.Retry.MaxBackoff)
	}
	if timed {
		o.took = time.Since(start)
	}
}

// call runs one attempt, turning a panic into an error and enforcing the
// node's timeout.
func (r *run) call(ctx context.Context, n *flow.Node, st kind.State) (upd kind.Update, err error) {
	if n.Timeout <= 0 {
		return safeRun(ctx, n, st)
	}
	tctx, cancel := context.WithTimeout(ctx, n.Timeout)
	defer cancel()
	type result struct {
		upd kind.Update
		err error
	}
	done := make(chan result, 1)
	go func() {
		u, e := safeRun(tctx, n, st)
		done <- result{u, e}
	}()
	select {
	case res := <-done:
		if res.err != nil && errors.Is(tctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
			return nil, fmt.Errorf("timed out after %s", n.Timeout)
		}
		return res.upd, res.err
	case <-tctx.Done():
		// the attempt goes on in the background until it notices; it may
		// still read this step's variables
		r.abandoned.Store(true)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("timed out after %s", n.Timeout)
	}
}

func safeRun(ctx context.Context, n *flow.Node, st kind.State) (upd kind.Update, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return n.Impl.Run(ctx, st)
}

// route fires the edges of the nodes that ran (or START's edges when outs
// is nil) and returns the next triggered set in declaration order.
func (r *run) route(vars map[string]any, outs []outcome) ([]*flow.Node, error) {
	r.marked = false
	if outs == nil {
		for _, e := range r.g.Entry {
			if err := r.fire(e, nil, vars); err != nil {
				return nil, err
			}
		}
	}
	for i := range outs {
		n := outs[i].node
		if outs[i].route != nil {
			r.mark[outs[i].route.Index], r.marked = true, true
			continue
		}
		for _, e := range n.Out {
			if err := r.fire(e, n, vars); err != nil {
				return nil, err
			}
		}
	}
	if !r.marked {
		return nil, nil
	}
	r.flip ^= 1
	next := r.next[r.flip][:0]
	for i, m := range r.mark {
		if m {
			next = append(next, r.g.Nodes[i])
			r.mark[i] = false
		}
	}
	r.next[r.flip] = next
	return next, nil
}

func (r *run) fire(e *flow.Edge, from *flow.Node, vars map[string]any) error {
	var targets []*flow.Node
	switch {
	case e.Join >= 0:
		for i, s := range e.From {
			if s == from {
				r.joins[e.Join] |= 1 << i
			}
		}
		if r.joins[e.Join] != 1<<len(e.From)-1 {
			return nil
		}
		r.joins[e.Join] = 0
		targets = e.To
	case e.Cases != nil:
		matched := false
		for _, c := range e.Cases {
			ok := c.When == nil
			if !ok {
				var err error
				ok, err = r.machine.EvalBool(c.When, vars)
				if err != nil {
					return fmt.Errorf("branch at %s: %q: %w", e.Pos, c.When.Source(), err)
				}
			}
			if ok {
				targets, matched = c.To, true
				break
			}
		}
		if !matched {
			return fmt.Errorf("branch at %s: no case matched and there is no else", e.Pos)
		}
	case e.Route != nil:
		v, err := r.machine.Eval(e.Route, vars)
		if err != nil {
			return fmt.Errorf("route at %s: %q: %w", e.Pos, e.Route.Source(), err)
		}
		name, _ := v.(string)
		n, ok := e.Choices[name]
		switch {
		case ok:
			if n != nil {
				targets = []*flow.Node{n}
			}
		case e.HasDefault:
			if e.Default != nil {
				targets = []*flow.Node{e.Default}
			}
		default:
			return fmt.Errorf("route at %s yielded %v, which is not one of its choices (%s)", e.Pos, v, strings.Join(slices.Sorted(maps.Keys(e.Choices)), ", "))
		}
	default:
		targets = e.To
	}
	if len(targets) == 0 {
		return nil
	}
	if e.Bound > 0 {
		r.bounds[e.Index]++
		if r.bounds[e.Index] > e.Bound {
			pos := e.Pos
			return &LimitError{Limit: e.Bound, Loop: loopNames(r.g, targets[0]), Edge: &pos}
		}
	}
	for _, n := range targets {
		r.mark[n.Index] = true
	}
	r.marked = true
	return nil
}

func (r *run) limitError(triggered []*flow.Node) error {
	for _, n := range triggered {
		if loop := loopNames(r.g, n); loop != nil {
			return &LimitError{Limit: r.g.MaxSteps, Loop: loop}
		}
	}
	return &LimitError{Limit: r.g.MaxSteps}
}

func loopNames(g *flow.Graph, n *flow.Node) []string {
	loop := g.Loop(n)
	if loop == nil {
		return nil
	}
	names := make([]string, len(loop))
	for i, m := range loop {
		names[i] = m.Name
	}
	return names
}

// Update writes values to a thread as if node had written them: through
// the fields' reducers, checked against the node's declared writes and the
// schema, and committed as a checkpoint with source "update". It is how a
// person corrects a thread (time travel) between runs.
func (e *Engine) Update(ctx context.Context, g *flow.Graph, thread, node string, values map[string]any) (*store.Snapshot, error) {
	n, ok := g.Node(node)
	if !ok {
		var names []string
		for _, m := range g.Nodes {
			names = append(names, m.Name)
		}
		return nil, &InputError{Field: node, Reason: "not a node of this flow", Suggestion: diag.Suggest(node, names)}
	}
	owner, free, err := e.claim(ctx, thread)
	if err != nil {
		return nil, err
	}
	defer free()
	defer e.Store.Release(context.WithoutCancel(ctx), thread, owner)
	head, err := e.Store.Head(ctx, thread)
	if err != nil {
		return nil, err
	}
	if len(head.Next) > 0 {
		return nil, ErrUnfinished
	}
	next := maps.Clone(head.Values)
	versions := maps.Clone(head.Versions)
	cp := &store.Checkpoint{Thread: thread, Seq: head.Seq + 1, Parent: head.Seq, Run: runID(), Source: store.SourceUpdate, Time: time.Now()}
	for _, k := range sortedKeys(values) {
		f, ok := g.Field(k)
		if !ok {
			return nil, &InputError{Field: k, Reason: "not a state field", Suggestion: diag.Suggest(k, fieldNames(g))}
		}
		if !n.Writes[k] {
			return nil, &InputError{Field: k, Reason: fmt.Sprintf("node %q does not write it", node)}
		}
		v, err := normalizeFor(f, values[k])
		if err != nil {
			return nil, &InputError{Field: k, Reason: err.Error()}
		}
		merged, err := f.Reducer.Reduce(next[k], v)
		if err == nil {
			err = validateField(f, merged, v)
		}
		if err != nil {
			return nil, &InputError{Field: k, Reason: err.Error()}
		}
		next[k] = merged
		versions[k]++
		cp.Writes = append(cp.Writes, writeOf(f, versions[k], merged, v))
	}
	if g.FullValidation {
		if err := g.Root().Validate(next); err != nil {
			return nil, fmt.Errorf("update rejected: %w", err)
		}
	}
	cp.Writers = []store.NodeWrites{{Node: node, Fields: sortedKeys(values)}}
	if err := e.Store.Commit(ctx, cp); err != nil {
		return nil, err
	}
	return &store.Snapshot{Thread: thread, Seq: cp.Seq, Values: next, Versions: versions}, nil
}
