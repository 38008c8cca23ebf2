package trellis

import (
	"context"
	"io"
	"io/fs"
	"iter"
	"sync"
	"time"

	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/store"
	_ "github.com/trellisflow/trellis/runtime/store/all" // the built-in stores' schemes
	"github.com/trellisflow/trellis/runtime/versions"
)

// The runtime's types a program works with.
type (
	// Event is one entry of a run's event stream.
	Event = engine.Event
	// EventType names what an Event reports.
	EventType = engine.EventType
	// Result is a finished run: its final state and checkpoint.
	Result = engine.Result
	// Durability is when a run's steps reach the store.
	Durability = engine.Durability
	// Snapshot is a thread's state at one checkpoint.
	Snapshot = store.Snapshot
	// Checkpoint is one committed step of a thread.
	Checkpoint = store.Checkpoint
	// Source says what wrote a checkpoint.
	Source = store.Source
	// HistoryOptions pages and filters History.
	HistoryOptions = store.HistoryOptions
	// ThreadOptions pages Threads.
	ThreadOptions = store.ThreadOptions
	// PruneOptions says what Prune keeps and how it reports progress.
	PruneOptions = store.PruneOptions
	// IdleOptions says which threads PruneIdleThreads deletes, and how
	// fast.
	IdleOptions = store.IdleOptions
	// ThreadInfo describes one thread.
	ThreadInfo = store.ThreadInfo
	// Store persists threads and their checkpoints.
	Store = store.Store
	// Diagnostic is one problem found in a flow's files.
	Diagnostic = diag.Diagnostic
	// Ask is a question a paused run asked (an interrupt node's, or an
	// llm node's whose tool call waits for approval, at any depth inside
	// subflows and map items): its ID, its Path and what it asks.
	Ask = engine.Ask
	// InputError refuses a run's input or a thread's values: which field
	// and why.
	InputError = engine.InputError
	// Tracer opens a span around each run and each node (see
	// runtime/telemetry).
	Tracer = engine.Tracer
	// Late counts what runs gave up on: attempts abandoned at their
	// timeout or cancellation, those left behind because they did not
	// return, and what they produced afterwards, dropped.
	Late = engine.Late
)

// The events of a run, in the order they occur.
const (
	RunStart    = engine.RunStart
	NodeStart   = engine.NodeStart
	NodeRetry   = engine.NodeRetry
	NodeOutput  = engine.NodeOutput
	ToolStart   = engine.ToolStart
	ToolEnd     = engine.ToolEnd
	NodeEnd     = engine.NodeEnd
	NodeFailed  = engine.NodeFailed
	StateUpdate = engine.StateUpdate
	RunEnd      = engine.RunEnd
	RunError    = engine.RunError
)

// StepChanges is the new values of the fields a step changed, from its
// state_update and the node events of its step before it (a field one
// node wrote with the replace reducer is told by that node's node_end
// alone), given the state before the step; it reads the older shape of
// state_update (every changed field in Update) too.
func StepChanges(before map[string]any, nodes []Event, update Event) map[string]any {
	return engine.StepChanges(before, nodes, update)
}

// When a run's steps are committed.
const (
	// Sync commits each step before the next starts (the default).
	Sync = engine.Sync
	// Async commits steps in the background, in order.
	Async = engine.Async
	// Exit commits one checkpoint when the run ends.
	Exit = engine.Exit
)

// What wrote a checkpoint.
const (
	SourceCreate = store.SourceCreate
	SourceFork   = store.SourceFork
	SourceInput  = store.SourceInput
	SourceStep   = store.SourceStep
	SourceRun    = store.SourceRun
	SourceUpdate = store.SourceUpdate
	SourceBase   = store.SourceBase
	// SourceAbandon marks an unfinished run given up with Abandon.
	SourceAbandon = store.SourceAbandon
)

// Errors a run returns.
var (
	// ErrBusy: another run holds the thread.
	ErrBusy = engine.ErrBusy
	// ErrUnfinished: the thread's last run stopped part way; Resume or
	// Abandon it.
	ErrUnfinished = engine.ErrUnfinished
	// ErrStopped: the run was stopped between steps (WithStop).
	ErrStopped = engine.ErrStopped
	// ErrNotFound: no such thread or checkpoint.
	ErrNotFound = store.ErrNotFound
)

// BusyError is ErrBusy when another process holds the thread's lease:
// who holds it and until when.
type BusyError = engine.BusyError

// PanicError ends a run whose own code (the engine's, a store's, an
// observer's) panicked: the value and the stack where it was recovered.
// A node's panic is that node's error instead.
type PanicError = engine.PanicError

// Flow is a loaded, validated and compiled flow, ready to run. It is
// immutable and safe to share between runs and goroutines.
type Flow struct {
	graph    *flow.Graph
	warnings diag.List
	sources  diag.Sources
	// inFS: the sources are named in a file system, not on the disk
	inFS bool
	// vf is the flow as the versions package knows it (see versions.go)
	vOnce sync.Once
	vf    *versions.Flow
}

// Name is the flow's name.
func (f *Flow) Name() string { return f.graph.Name }

// Child is the flow a child thread of a thread of f runs: the one under
// namespace ns (NODE:SEQ, NODE[INDEX]:SEQ, levels joined by |, as
// a child's events and questions name it). ok is false when no node of f
// runs a flow there.
func (f *Flow) Child(ns string) (child *Flow, ok bool) {
	g, ok := engine.ChildFlow(f.graph, ns)
	if !ok {
		return nil, false
	}
	return &Flow{graph: g, sources: f.sources, inFS: f.inFS}, true
}

// Path is the file the flow was loaded from.
func (f *Flow) Path() string { return f.graph.Path }

// Graph is the compiled graph, for tools that draw or inspect it.
func (f *Flow) Graph() *flow.Graph { return f.graph }

// Warnings lists the problems that did not stop the flow compiling.
func (f *Flow) Warnings() []Diagnostic { return f.warnings }

// Sources holds the text of every file the flow was compiled from, by
// name, for printing diagnostics with their lines.
func (f *Flow) Sources() diag.Sources { return f.sources }

// Inputs lists the fields a run may set.
func (f *Flow) Inputs() []string { return f.graph.InputNames() }

// Conversation describes how a person talks with a conversational flow.
type Conversation struct {
	// Input is the input field a person's message goes to; Output the
	// state field holding the reply.
	Input, Output string
	// Attachments maps an attachment's name to the input field receiving
	// a file's content.
	Attachments map[string]string
}

// Conversation returns the flow's conversation block, or nil when the flow
// declares none.
func (f *Flow) Conversation() *Conversation {
	c := f.graph.Conversation
	if c == nil {
		return nil
	}
	return &Conversation{Input: c.Input, Output: c.Output, Attachments: c.Attachments}
}

// Output renders the flow's declared result (its output block) over a
// run's final state; ok is false when the flow declares none.
func (f *Flow) Output(state map[string]any) (text string, ok bool, err error) {
	o := f.graph.Output
	if o == nil {
		return "", false, nil
	}
	text, err = o.Render(state)
	return text, true, err
}

// Finished reports whether a conversation is over in state: whether the
// flow's conversation.until condition holds. A flow without one never
// finishes.
func (f *Flow) Finished(state map[string]any) (bool, error) { return f.graph.Finished(state) }

// LoadError is a flow that does not compile: every problem found in its
// files, and their text for printing the lines they point at.
type LoadError struct {
	Diagnostics []Diagnostic
	Sources     diag.Sources
}

func (e *LoadError) Error() string { return (&diag.ListError{List: e.Diagnostics}).Error() }

// Print writes every problem as `file:line:col: error[CODE]: message`
// with its source line and a caret under the spot.
func (e *LoadError) Print(w io.Writer) error { return diag.WriteText(w, e.Diagnostics, e.Sources) }

// Option adjusts how a flow is loaded.
type Option func(*options)

type options struct {
	kinds kind.Registry
}

// WithKinds builds nodes from reg instead of the built-in kinds.
func WithKinds(reg kind.Registry) Option { return func(o *options) { o.kinds = reg } }

// Offline builds llm nodes with no model, whatever the environment says:
// they write their prompts' fallbacks. Flow tests run this way.
func Offline() Option { return func(o *options) { o.kinds = all.Offline() } }

// Load reads, validates and compiles the flow file at path.
func Load(path string, opts ...Option) (*Flow, error) {
	return compile(nil, path, nil, opts)
}

// LoadFS is Load for a flow in fsys: the flow file and every file it names
// (prompts, schemas) are read from there.
func LoadFS(fsys fs.FS, path string, opts ...Option) (*Flow, error) {
	return compile(config.FS(fsys), path, nil, opts)
}

// LoadSource compiles a flow held in memory. name names it in diagnostics
// and locates the files it names on the disk.
func LoadSource(name string, src []byte, opts ...Option) (*Flow, error) {
	return compile(nil, name, src, opts)
}

// LoadSourceFS compiles a flow held in memory whose named files (prompts,
// schemas) are read from fsys, as if the flow were the file name in it;
// nothing outside fsys is read.
func LoadSourceFS(fsys fs.FS, name string, src []byte, opts ...Option) (*Flow, error) {
	return compile(config.FS(fsys), name, src, opts)
}

// resolve applies opts over the defaults.
func resolve(opts []Option) options {
	o := options{kinds: all.Registry()}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

func compile(files *config.Files, path string, src []byte, opts []Option) (*Flow, error) {
	o := resolve(opts)
	g, dl, sources := flow.Compile(files, path, src, o.kinds)
	if g == nil {
		return nil, &LoadError{Diagnostics: dl, Sources: sources}
	}
	return &Flow{graph: g, warnings: dl, sources: sources, inFS: files != nil}, nil
}

// DefaultStore is the store Open uses for an empty address: a SQLite file
// in .trellis/ under the working directory.
const DefaultStore = store.Default

// DefaultPruneBatch is how many checkpoints one pruning transaction
// deletes unless PruneOptions.Batch says otherwise.
const DefaultPruneBatch = store.DefaultPruneBatch

// OpenStore opens a checkpoint store by address: "memory", "sqlite:PATH"
// or a postgres:// URL (or the scheme of a store package of your own that
// called store.Register), creating or migrating its database as needed.
func OpenStore(ctx context.Context, addr string) (Store, error) {
	if addr == "" {
		addr = DefaultStore
	}
	return store.Open(ctx, addr)
}

// Runtime runs flows against a store. It is safe for concurrent use.
type Runtime struct {
	eng   *engine.Engine
	owned bool
}

// RuntimeOption is a setting of a runtime, given to Open or New and fixed
// from then on.
type RuntimeOption = engine.Option

// WithLeaseTTL says how long a run's hold on its thread outlives a process
// that stopped renewing it, such as one that died (default 15s).
func WithLeaseTTL(d time.Duration) RuntimeOption { return engine.WithLeaseTTL(d) }

// WithTracer traces runs and nodes with t (package runtime/telemetry
// builds an OpenTelemetry one).
func WithTracer(t Tracer) RuntimeOption { return engine.WithTracer(t) }

// WithGrace says how long a run waits for a node's attempt it gave up on,
// at the node's timeout or when the run is cancelled, before it goes on
// without it (default 1s). Whatever the attempt does afterwards is
// dropped: no event of a run follows its end.
func WithGrace(d time.Duration) RuntimeOption { return engine.WithGrace(d) }

// WithStoreWait says how long, in all, a run waits for its store through
// outages (its connections lost, its server restarting, its disk full)
// before it fails with the store's error (default one minute; negative:
// a run does not wait); its events say when the store went
// (store_unavailable) and came back (store_back).
func WithStoreWait(d time.Duration) RuntimeOption { return engine.WithStoreWait(d) }

// Open opens the store at addr (see OpenStore) and returns a runtime over
// it with the settings opts give; Close closes the store.
func Open(ctx context.Context, addr string, opts ...RuntimeOption) (*Runtime, error) {
	st, err := OpenStore(ctx, addr)
	if err != nil {
		return nil, err
	}
	return &Runtime{eng: engine.New(st, opts...), owned: true}, nil
}

// New returns a runtime over an open store, which Close leaves open, with
// the settings opts give.
func New(st Store, opts ...RuntimeOption) *Runtime { return &Runtime{eng: engine.New(st, opts...)} }

// Store is the runtime's store.
func (rt *Runtime) Store() Store { return rt.eng.Store }

// Engine is the engine the runtime runs flows on. Its settings are given
// to Open or New; changing them once it runs is a data race.
func (rt *Runtime) Engine() *engine.Engine { return rt.eng }

// Late counts what the runtime's runs gave up on since it was opened.
func (rt *Runtime) Late() Late { return rt.eng.Late() }

// Close closes the store when Open opened it.
func (rt *Runtime) Close() error {
	if rt.owned {
		return rt.eng.Store.Close()
	}
	return nil
}

// Create makes a thread with the state schema's defaults overlaid by
// values (which may set read-only fields). The input fields the schema
// requires may be left out: the thread's first run brings them as input
// (a run without them is refused). A run on a thread that does not exist
// creates it from the defaults alone.
func (rt *Runtime) Create(ctx context.Context, f *Flow, thread string, values map[string]any) (*Snapshot, error) {
	return rt.eng.Create(ctx, f.graph, thread, values)
}

// RunOption adjusts one run.
type RunOption func(*engine.Request)

// WithDurability says when the run's steps reach the store.
func WithDurability(d Durability) RunOption {
	return func(r *engine.Request) { r.Durability = d }
}

// WithObserver sends the run's events to fn, synchronously and in order.
func WithObserver(fn func(Event)) RunOption {
	return func(r *engine.Request) { r.Observe = fn }
}

// WithStop stops the run at its next step boundary once stop is closed:
// the step in progress is committed and the run returns ErrStopped,
// leaving an unfinished run to Resume or Abandon.
func WithStop(stop <-chan struct{}) RunOption { return func(r *engine.Request) { r.Stop = stop } }

// WithHeld runs fn once the run holds its thread, before it reads it:
// an error refuses the run, which then writes nothing. What fn checks
// cannot change before the run ends where every change holds the thread
// too (as Runtime.Move does).
func WithHeld(fn func(ctx context.Context) error) RunOption {
	return func(r *engine.Request) { r.Held = fn }
}

// WithRunID names the run in its checkpoints and events.
func WithRunID(id string) RunOption { return func(r *engine.Request) { r.ID = id } }

// WithPath records the nodes of every step in Result.Path.
func WithPath() RunOption { return func(r *engine.Request) { r.RecordPath = true } }

// ChildThread is the thread of the child flow (a subflow) that a node of
// thread ran under namespace ns (NODE:SEQ, as the child's events name
// it): its history and states are read, and it is forked, as any
// thread's.
func ChildThread(thread, ns string) string { return engine.ChildThread(thread, ns) }

// IsNamespace reports whether ns has the form of a child flow's namespace.
func IsNamespace(ns string) bool { return engine.IsNamespace(ns) }

// WithConfig sets the run's configuration: values of the flow's config
// block, which expressions read as config.NAME. Values not marked secret
// are recorded with the run, so a resumed run has them again; secret
// ones are never recorded, and a Resume is given them again.
func WithConfig(cfg map[string]any) RunOption { return func(r *engine.Request) { r.Config = cfg } }

// WithValues gives a thread the run creates its initial values, as Create
// does, checked together with the input (a required field may come from
// either, and a refused input leaves no thread); a thread that exists
// ignores them.
func WithValues(values map[string]any) RunOption {
	return func(r *engine.Request) { r.Values = values }
}

// WithAnswers answers the questions a paused run asked (Result.Interrupt
// .Asks), each by its id or its path, for the Resume that goes on; the
// questions left unanswered are asked again.
func WithAnswers(answers map[string]any) RunOption {
	return func(r *engine.Request) { r.Answers = answers }
}

// Run runs one turn of f on thread with input (the fields the flow
// declares as inputs; anything else is refused) and returns the final
// state.
func (rt *Runtime) Run(ctx context.Context, f *Flow, thread string, input map[string]any, opts ...RunOption) (*Result, error) {
	req := engine.Request{Thread: thread, Input: input}
	for _, opt := range opts {
		opt(&req)
	}
	return rt.eng.Run(ctx, f.graph, req)
}

// Resume finishes the thread's unfinished run, one that stopped after a
// checkpoint with nodes still to run (its process died, say). Nodes whose
// updates were saved are not run again.
func (rt *Runtime) Resume(ctx context.Context, f *Flow, thread string, opts ...RunOption) (*Result, error) {
	req := engine.Request{Thread: thread, Resume: true}
	for _, opt := range opts {
		opt(&req)
	}
	return rt.eng.Run(ctx, f.graph, req)
}

// Stream runs like Run and yields the run's events as they happen, with a
// nil error: RunStart first, then RunEnd (with the final state) or
// RunError last. When the run fails, a last item carries its error; a run
// refused before it starts (a busy thread, an input the flow refuses)
// yields that error alone. Stopping the iteration early cancels the run.
// The run ends before the iteration does: no event follows the last, not
// even from a node given up at its timeout.
func (rt *Runtime) Stream(ctx context.Context, f *Flow, thread string, input map[string]any, opts ...RunOption) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		events := make(chan Event, 64)
		// gone is closed when the loop stops reading before the run's
		// end (a break, a panic): the run is stopped and its events go
		// nowhere; until then, every event is yielded
		gone := make(chan struct{})
		done := make(chan error, 1)
		req := engine.Request{Thread: thread, Input: input}
		for _, opt := range opts {
			opt(&req)
		}
		inner := req.Observe
		req.Observe = func(ev Event) {
			if inner != nil {
				inner(ev)
			}
			select {
			case events <- ev:
			case <-gone:
			}
		}
		go func() {
			_, err := rt.eng.Run(ctx, f.graph, req)
			close(events)
			done <- err
		}()
		ended := false
		defer func() {
			if !ended {
				// the run ends before Stream returns, whatever ended the loop
				close(gone)
				cancel()
				<-done
			}
		}()
		for ev := range events {
			if !yield(ev, nil) {
				return
			}
		}
		ended = true
		if err := <-done; err != nil {
			yield(Event{}, err)
		}
	}
}

// Abandon gives up the thread's unfinished run, recording it in the
// history (SourceAbandon), so the thread takes new input again.
func (rt *Runtime) Abandon(ctx context.Context, thread string) (*Snapshot, error) {
	return rt.eng.Abandon(ctx, thread)
}

// State returns the thread's newest state.
func (rt *Runtime) State(ctx context.Context, thread string) (*Snapshot, error) {
	return rt.eng.Store.Head(ctx, thread)
}

// StateAt returns the thread's state as of checkpoint seq.
func (rt *Runtime) StateAt(ctx context.Context, thread string, seq uint64) (*Snapshot, error) {
	return rt.eng.Store.StateAt(ctx, thread, seq)
}

// History lists the thread's checkpoints, newest first.
func (rt *Runtime) History(ctx context.Context, thread string, opts HistoryOptions) ([]*Checkpoint, error) {
	return rt.eng.Store.History(ctx, thread, opts)
}

// Threads lists threads, most recently updated first.
func (rt *Runtime) Threads(ctx context.Context, opts ThreadOptions) ([]ThreadInfo, error) {
	return rt.eng.Store.Threads(ctx, opts)
}

// Fork starts thread to from the state of thread from at checkpoint seq,
// with the run that checkpoint left unfinished, if any: Resume on the
// fork runs the nodes that were next there.
func (rt *Runtime) Fork(ctx context.Context, from string, seq uint64, to string) (*Snapshot, error) {
	return store.Fork(ctx, rt.eng.Store, from, seq, to)
}

// Replay re-runs thread from checkpoint seq on a new thread to: a fork
// that holds the model replies the thread was told, whose unfinished run
// it resumes with opts. A node that sends what it sent then is told the
// same again, with no model (one that sends anything else asks the model,
// if any, or uses its fallback). It returns the fork's state, and a nil
// Result when the checkpoint left nothing to run.
func (rt *Runtime) Replay(ctx context.Context, f *Flow, from string, seq uint64, to string, opts ...RunOption) (*Snapshot, *Result, error) {
	snap, err := store.ForkReplaying(ctx, rt.eng.Store, from, seq, to)
	if err != nil || len(snap.Next) == 0 {
		return snap, nil, err
	}
	res, err := rt.Resume(ctx, f, to, opts...)
	return snap, res, err
}

// Update writes values to a thread as if node had written them: through
// the fields' reducers, checked against the node's writes and the schema.
func (rt *Runtime) Update(ctx context.Context, f *Flow, thread, node string, values map[string]any) (*Snapshot, error) {
	return rt.eng.Update(ctx, f.graph, thread, node, values)
}

// UpdateAt is Update over the state of checkpoint at (0: the newest): at
// an older checkpoint, a branch that goes on from there. The checkpoint's
// unfinished run, if any, is kept, and Resume continues it over the edit.
func (rt *Runtime) UpdateAt(ctx context.Context, f *Flow, thread string, at uint64, node string, values map[string]any) (*Snapshot, error) {
	return rt.eng.UpdateAt(ctx, f.graph, thread, at, node, values)
}

// Delete removes a thread and everything the store keeps of it, in one
// transaction: its checkpoints, the threads of the child flows it ran,
// and a served thread's record, runs, events and voice sessions. A thread
// a run holds (in any process) is ErrBusy, as is a served thread with a
// queued or running run (store.ErrBusy).
func (rt *Runtime) Delete(ctx context.Context, thread string) error {
	return rt.eng.Delete(ctx, thread)
}

// Asks lists the questions the thread's unfinished run waits on (its
// interrupt nodes', inside its subflows and map items too), to be
// answered with WithAnswers on Resume.
func (rt *Runtime) Asks(ctx context.Context, f *Flow, thread string) ([]Ask, error) {
	return rt.eng.Asks(ctx, f.graph, thread)
}

// Prune keeps the thread's newest opts.Keep checkpoints and folds the
// older ones into a base; it returns how many it removed. It works in
// batches, reporting to opts.Progress, and may be stopped between them
// (through ctx) without harm: the next prune goes on.
func (rt *Runtime) Prune(ctx context.Context, thread string, opts PruneOptions) (int, error) {
	return rt.eng.Store.Prune(ctx, thread, opts)
}

// PruneIdle deletes the threads not updated for ttl, each as Delete
// does, and returns how many; a thread a run holds is left.
func (rt *Runtime) PruneIdle(ctx context.Context, ttl time.Duration) (int, error) {
	return store.PruneIdle(ctx, rt.eng.Store, ttl)
}

// PruneIdleThreads is PruneIdle with a pace and a report of each thread
// deleted (see IdleOptions).
func (rt *Runtime) PruneIdleThreads(ctx context.Context, opts IdleOptions) (int, error) {
	return store.PruneIdleThreads(ctx, rt.eng.Store, opts)
}
