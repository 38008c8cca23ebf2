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
//
// The code follows a run through its files:
//
//	engine.go   the API: Engine, Request, Result, Run
//	errors.go   the errors a run returns
//	lease.go    a run's hold on its thread, in this process and in the store
//	run.go      the state of one run, in parts, and its pooling
//	step.go     the step loop: execute, applyInput, superstep
//	node.go     running nodes: goroutines, retries, timeouts, fallbacks
//	merge.go    the barrier: reducers, single writers, validation
//	route.go    edges: joins, branches, routes and bounds
//	persist.go  commits by durability, pending writes, resuming
//	update.go   threads outside runs: Create and Update
//	compose.go  nested nodes (a map's items), child flows, run configuration
//	view.go     the kind.State a node runs on
//	scope.go    a run's lifetime: attempts given up, their gates, the grace
//	event.go    the event stream
//	reload.go   reading a run's state back between steps (WithReload)
package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/store"
)

// Engine runs flows against a store. It is safe for concurrent use; runs on
// one thread never overlap. Its settings are given to New and fixed from
// then on.
type Engine struct {
	Store store.Store
	// LeaseTTL is how long a run's hold on its thread outlives a holder
	// that stopped renewing it, such as a process that died (default
	// DefaultLeaseTTL).
	//
	// Deprecated: give it to New with WithLeaseTTL. Setting it on an engine
	// that runs flows is a data race.
	LeaseTTL time.Duration
	// Tracer, when set, traces runs and nodes.
	//
	// Deprecated: give it to New with WithTracer. Setting it on an engine
	// that runs flows is a data race.
	Tracer Tracer
	// grace is how long an attempt given up on is waited for (see
	// WithGrace).
	grace time.Duration
	// storeWait is how long a run waits for its store through outages
	// (see WithStoreWait).
	storeWait time.Duration
	mu        sync.Mutex
	// one and busy are the threads with a run in progress: one of them
	// in one (when holdsOne), any others in busy, so that an engine
	// running one thread at a time makes no map
	one      string
	holdsOne bool
	busy     map[string]bool
	// owner names the engine's leases. Runs of one engine on one thread
	// never overlap (busy), so a run may take over a lease an earlier run
	// of the engine could not release, when the store was unreachable:
	// the thread is not locked out until the lease expires.
	owner string
	// late counts what the engine's runs gave up on (see Late).
	late lateCounts
	// reload: runs read their state back between steps (WithReload)
	reload bool
}

// New returns an engine over st with the settings opts give.
func New(st store.Store, opts ...Option) *Engine {
	e := &Engine{Store: st}
	for _, opt := range opts {
		opt(e)
	}
	return e
}

// Option is a setting of an engine, given to New.
type Option func(*Engine)

// WithLeaseTTL says how long a run's hold on its thread outlives a holder
// that stopped renewing it, such as a process that died (default
// DefaultLeaseTTL).
func WithLeaseTTL(d time.Duration) Option { return func(e *Engine) { e.LeaseTTL = d } }

// WithTracer traces runs and nodes with t.
func WithTracer(t Tracer) Option { return func(e *Engine) { e.Tracer = t } }

// WithGrace says how long the engine waits for an attempt it gave up on
// (at its node's timeout, or when the run is cancelled) to return before
// it goes on without it (DefaultGrace when d is not positive); see Late.
func WithGrace(d time.Duration) Option {
	return func(e *Engine) {
		if d > 0 {
			e.grace = d
		}
	}
}

// WithStoreWait says how long, in all, a run waits for its store
// through outages (its connections lost, its server restarting, its disk
// full) before it fails with the store's error (default
// store.DefaultWait; negative: a run does not wait): a step's commit, a
// pending write, the thread's lease and reads that find the store
// unavailable are tried again with backoff, and the run's events say so
// (store_unavailable, store_back). A Request may bring its own
// store.Retrier instead.
func WithStoreWait(d time.Duration) Option { return func(e *Engine) { e.storeWait = d } }

// DefaultGrace is the default of WithGrace: long enough for a node that
// honours its context (a request to a model, a container being stopped)
// to return, short enough that a cancelled run ends promptly when one
// does not.
const DefaultGrace = time.Second

func (e *Engine) graceTime() time.Duration {
	if e.grace > 0 {
		return e.grace
	}
	return DefaultGrace
}

// Request starts one run.
type Request struct {
	// Thread to run on; created from the schema defaults when missing.
	Thread string
	// Input sets input fields; any other key is refused.
	Input map[string]any
	// Values are the initial values of a thread that does not exist yet,
	// as Create takes them (read-only fields too), checked together with
	// the input: a required field may come from either. A thread that
	// exists ignores them.
	Values map[string]any
	// Observe receives the run's events.
	Observe Observer
	// Attach, when set, is called before each checkpoint the run commits
	// at once (Sync durability): events it sets on the checkpoint
	// (Checkpoint.Events, the run's events observed so far) are recorded
	// in the commit's transaction, and the function it returns, if any,
	// hears how the commit ended.
	Attach func(cp *store.Checkpoint) (committed func(error))
	// EndsWithCommit, with Attach, has a run's run_end emitted before the
	// commit of its last step (after that step's state_update), so that
	// Attach records the run's end in that commit's transaction: a commit
	// that checkpoints no next node and releases the thread
	// (Checkpoint.Release) follows the run_end of a run that ends there.
	// Should that commit fail, run_error follows the run_end, and is the
	// run's end.
	EndsWithCommit bool
	// RecordPath keeps the nodes of every step in Result.Path.
	RecordPath bool
	// Durability says when steps reach the store: Sync (the default),
	// Async or Exit.
	Durability Durability
	// Leased says the thread's lease is this engine's already (Lease),
	// taken at LeasedAt by whoever queued the run (the catalog's claim,
	// store.LeaseClaim): the run holds it without taking it again, and
	// renews and releases it as its own.
	Leased   bool
	LeasedAt time.Time
	// Held, when set, runs once the run holds the thread, before it reads
	// it: an error refuses the run, which writes nothing. A caller checks
	// there what must not change until the run ends (the version of the
	// flow the thread runs: a move holds the thread too).
	Held func(ctx context.Context) error
	// Stop, when closed, stops the run at its next step boundary: the step
	// in progress completes and is committed, and if nodes remain to run
	// the run returns ErrStopped, leaving an unfinished run to Resume (or
	// Abandon); a run whose last step is in progress just finishes.
	// Cancelling the context instead stops the nodes in progress too.
	Stop <-chan struct{}
	// ID names the run in its checkpoints and events (default: a new
	// unique id). A named run runs once: started again on a thread whose
	// newest checkpoint is already its own, it returns the thread's state
	// when it had finished, and continues where it stopped when it had
	// not, without applying its input again.
	ID string
	// Resume continues the thread's unfinished run (one that stopped
	// after a checkpoint with nodes still to run, such as a crashed
	// process's). Input must be empty. Nodes whose updates were saved as
	// pending writes are not run again.
	Resume bool
	// Answers are the answers to the questions a paused run asked (see
	// Interrupt.Asks), each by the question's id or its path (an asking
	// node of the run by its name); they go with Resume. Answering some
	// of the questions resumes those: the others are asked again, and
	// what the answered ones completed is kept.
	Answers map[string]any
	// Retry, when set, is how the run waits for its store through
	// outages: its store calls that find the store unavailable or full
	// are tried again within the Retrier's budget, which the caller may
	// share with its own writes of the run; its Down and Back are the
	// caller's to report. When nil, the run waits as WithStoreWait says
	// and its events report the outage (store_unavailable, store_back).
	Retry *store.Retrier
	// Replies, when set, are the replies a replayed thread's nodes were
	// told (kind.State.Recorded): a node asking what it asked then is
	// told the same again, instead of asking a model.
	Replies *Replies
	// StandIns run in place of nodes of the graph, for this run alone (a
	// flow test's scripted nodes), by the node they stand for (a map's
	// nested node too): the compiled graph, which other runs may share,
	// is not changed. A stand-in that is a kind.Fallback is the node's
	// fallback too.
	StandIns map[*flow.Node]StandIn
	// PauseFirst pauses the run before its first step, whichever nodes
	// that step runs, as though each had interrupt_before (a flow test's
	// run stopped before it starts). It is the run's own: the compiled
	// graph, which other runs may share, is not changed.
	PauseFirst bool
	// Config sets the run's configuration (the flow's config block):
	// expressions read config.NAME. Values not marked secret are recorded
	// with the run, so a resumed run has them again; secret ones are
	// never recorded and a resume is given them again.
	Config map[string]any

	// child marks a child flow's run, whose thread id is made by the
	// runtime (see ChildThread).
	child bool
}

// StandIn is what runs in place of a node (Request.StandIns).
type StandIn struct {
	Node kind.Node
	// NoBackoff retries the node's failures at once, not after its
	// retry's backoff (a scripted failure needs no waiting).
	NoBackoff bool
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
	// Interrupt, when set, says the run paused at a node's
	// interrupt_before or interrupt_after, or before a step whose askers
	// wait for answers: the thread's run is unfinished (its next nodes are
	// pending) and a Resume goes on.
	Interrupt *Interrupt

	// Late counts what the run's own attempts gave up on, as of when Run
	// returned (a child flow's count in its engine's, see Engine.Late).
	Late Late

	g      *flow.Graph
	visits []int
}

func isAsker(n *flow.Node) bool {
	_, ok := n.Impl.(kind.Asker)
	return ok
}

// Ask is a question a run paused on, asked anywhere in its tree: its id
// (what its answer is given by), its path (where it was asked) and what
// it asks (see kind.Question).
type Ask = kind.Question

// Interrupt names where a run paused: before nodes (they run when the
// thread is resumed), or after them; and the questions it waits on, to be
// answered by the resume. A pause inside a node (a map's item, a child
// flow) is named by its path (review/approve, items[2]/approve): the step
// of the node did not commit, and the resume runs the node again, which
// goes on where it stopped.
type Interrupt struct {
	Before []string `json:"before,omitempty"`
	After  []string `json:"after,omitempty"`
	Asks   []Ask    `json:"asks,omitempty"`
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

// Run executes one run of g on req.Thread.
func (e *Engine) Run(ctx context.Context, g *flow.Graph, req Request) (*Result, error) {
	ctx = e.withMemory(ctx)
	if e.Tracer != nil {
		return e.traced(ctx, g, req)
	}
	return e.run(ctx, g, req)
}

// traced is Run, traced.
func (e *Engine) traced(ctx context.Context, g *flow.Graph, req Request) (_ *Result, err error) {
	if req.ID == "" {
		req.ID = runID()
	}
	var end func(error)
	ctx, end = e.Tracer.StartRun(ctx, g.Name, req.Thread, req.ID)
	defer func() { end(err) }()
	return e.run(ctx, g, req)
}

// run holds the thread for the run start makes and executes.
func (e *Engine) run(ctx context.Context, g *flow.Graph, req Request) (*Result, error) {
	renewed := time.Now()
	rt, watch := req.Retry, (*storeWatch)(nil)
	if rt == nil {
		watch = &storeWatch{}
		rt = watch.retrier(e.storeWait)
		req.Retry = rt
	}
	owner, err := e.claim(ctx, req.Thread, req.Leased, rt)
	if err != nil {
		return nil, err
	}
	defer e.free(req.Thread)
	if req.Leased {
		renewed = req.LeasedAt
	}
	hold := &lease{st: e.Store, thread: req.Thread, owner: owner, ttl: e.leaseTTL(), renewed: renewed}
	defer hold.release(ctx)
	if req.Held != nil {
		if err := req.Held(ctx); err != nil {
			return nil, err
		}
	}
	return e.start(ctx, g, req, hold, watch)
}

// start reads the thread (or makes a new one's first state), checks the
// request against it and executes the run.
func (e *Engine) start(ctx context.Context, g *flow.Graph, req Request, hold *lease, watch *storeWatch) (*Result, error) {
	var head *store.Snapshot
	err := req.Retry.Do(ctx, func(bool) (err error) {
		head, err = e.Store.Head(ctx, req.Thread)
		return err
	})
	var creating *store.Checkpoint // a new thread, committed once the input is accepted
	if errors.Is(err, store.ErrNotFound) {
		var state map[string]any
		// checked with the input (applyInput): a required input has no
		// default
		if state, creating, err = initial(g, req.Thread, req.Values, false, req.child); err == nil {
			head = &store.Snapshot{Thread: req.Thread, Seq: 1, Values: state}
		}
	}
	if err == nil && e.reload && creating == nil {
		head, err = reloadHead(head)
	}
	if err != nil {
		return nil, err
	}
	switch req.Durability {
	case "", Sync, Async, Exit:
	default:
		return nil, fmt.Errorf("unknown durability %q (sync, async, exit)", req.Durability)
	}
	resuming := req.Resume && !req.child // as the caller asked
	if req.child && creating == nil {
		// a child's thread runs one run, the step's that started it
		// (its namespace names the step): it is finished, or continued
		// where it stopped, whichever run made its newest checkpoint (a
		// fork of its parent's forks it too)
		req.Resume, req.Input = true, nil
	}
	if req.ID != "" && !req.Resume && head.Run == req.ID {
		// a named run runs once: the thread's newest checkpoint is already
		// this run's, so it ran (or began) before, in this process or in
		// one that died; it is finished, or continued where it stopped
		req.Resume, req.Input = true, nil
	}
	switch {
	case req.Resume && len(req.Input) > 0:
		return nil, &InputError{Field: sortedKeys(req.Input)[0], Reason: "a resumed run takes no input"}
	case !req.Resume && len(head.Next) > 0:
		return nil, ErrUnfinished
	case resuming && len(head.Next) == 0 && len(req.Answers) > 0 && (req.ID == "" || head.Run != req.ID):
		// answers to nothing: no run waits on them (a run answered by
		// its asking nodes' names is a new run, not a resume)
		return nil, &InputError{Field: "answers." + sortedKeys(req.Answers)[0],
			Reason: "the thread's run has finished and waits on no answer: answers go with a resume of a run that asks, or with a new run"}
	case req.Resume && len(head.Next) == 0:
		// nothing to resume: the thread's newest run finished
		return &Result{Thread: req.Thread, State: head.Values, Checkpoint: head.Seq, g: g, visits: make([]int, len(g.Nodes))}, nil
	}
	answers := req.Answers
	if !req.child {
		// a child's answers are the ones its parent was given for it
		if answers, err = e.resolveAnswers(ctx, g, head, req.Answers); err != nil {
			return nil, err
		}
	}
	var input, recorded map[string]any
	if req.Resume {
		input, recorded = runInput(ctx, e.Store, req.Retry, req.Thread, head.Seq)
		if e.reload {
			if input, err = reloadMap(input); err == nil {
				recorded, err = reloadMap(recorded)
			}
			if err != nil {
				return nil, err
			}
		}
		if req.Replies == nil {
			req.Replies = forkReplies(ctx, e.Store, req.Thread)
		}
	}
	cfg, record, err := resolveConfig(g, recorded, req.Config)
	if err != nil {
		return nil, err
	}
	r := newRun(e, g, req, head)
	if m, ok := kind.MemoryOf(ctx); ok {
		_, r.stepPuts = m.(tenantMemory)
	}
	r.watch = watch
	r.lease = hold
	r.creating = creating
	r.answers = maps.Clone(answers)
	r.config, r.record = cfg, record
	if r.limit, err = r.maxSteps(); err != nil {
		r.release()
		return nil, err
	}
	if req.Resume {
		if err := r.restore(head, input); err != nil {
			r.release()
			return nil, err
		}
	}
	res, err := r.execute(ctx)
	if res != nil {
		res.Late = r.late.read()
	}
	r.release()
	return res, err
}
