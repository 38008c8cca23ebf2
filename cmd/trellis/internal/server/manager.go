package server

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/store"
)

// manager runs the runs this server started: one at a time per thread,
// the others queued behind it, each in the background so it outlives the
// request that started it.
type manager struct {
	s        *Server
	mu       sync.Mutex
	lanes    map[string]*lane    // by thread key
	live     map[string]*liveRun // queued or running here, by run id
	stopping bool
	wg       sync.WaitGroup
	// base is the runs' context: cancelled only when a shutdown has
	// waited too long for runs to reach a step boundary.
	base     context.Context
	hardStop context.CancelFunc
}

// lane is one thread's runs: the one running and those waiting for it.
type lane struct {
	active *liveRun
	queue  []*liveRun
}

// liveRun is a run this server is running or will run.
type liveRun struct {
	m      *manager
	thread string // the thread's key
	flow   *loaded
	input  map[string]any
	resume bool
	policy string
	// abandonFirst: an interrupting run gives up what the run it
	// interrupted left unfinished before it starts.
	abandonFirst bool
	events       *eventLog
	// started receives nil once the run has started, or the error that
	// refused it; done is closed when it has ended and its record says so.
	started chan error
	done    chan struct{}
	stop    chan struct{}

	mu        sync.Mutex
	rec       store.RunRecord
	persisted bool
	cancel    context.CancelFunc
	cancelled string // why the run was cancelled, when it was
	state     map[string]any
}

func newManager(s *Server) *manager {
	base, hard := context.WithCancel(context.Background())
	return &manager{s: s, lanes: map[string]*lane{}, live: map[string]*liveRun{}, base: base, hardStop: hard}
}

// busy reports whether a run is queued or running on the thread here.
func (m *manager) busy(thread string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	ln := m.lanes[thread]
	return ln != nil && (ln.active != nil || len(ln.queue) > 0)
}

// start starts or queues a run as its policy says, and returns once it
// has started or been queued, or with the error that refused it (nothing
// is recorded then).
func (m *manager) start(ctx context.Context, c *caller, thread *store.ThreadRecord, l *loaded, in api.StartRun) (*liveRun, error) {
	policy := in.OnBusy
	switch policy {
	case "":
		policy = api.OnBusyReject
	case api.OnBusyReject, api.OnBusyEnqueue, api.OnBusyInterrupt:
	default:
		return nil, &api.Error{Code: api.CodeInvalidInput, Message: "on_busy is reject, enqueue or interrupt"}
	}
	if in.Resume && len(in.Input) > 0 {
		return nil, &api.Error{Code: api.CodeInvalidInput, Message: "a resumed run takes no input"}
	}
	input, err := plain(in.Input)
	if err != nil {
		return nil, err
	}
	raw, _ := json.Marshal(input)
	lr := &liveRun{m: m, thread: thread.ID, flow: l, input: input, resume: in.Resume, policy: policy,
		started: make(chan error, 1), done: make(chan struct{}), stop: make(chan struct{})}
	lr.rec = store.RunRecord{ID: newID("run"), Tenant: c.tenant, Thread: thread.ID, Flow: l.flow.Name(), FlowVersion: l.version,
		Status: store.RunQueued, Input: raw, Created: time.Now().UTC()}
	lr.events = newEventLog(m.s.cat, lr.rec.ID, publicID(thread.ID))

	m.mu.Lock()
	if m.stopping {
		m.mu.Unlock()
		return nil, errStopping
	}
	ln := m.lanes[thread.ID]
	if ln == nil {
		ln = &lane{}
		m.lanes[thread.ID] = ln
	}
	if ln.active != nil || len(ln.queue) > 0 {
		switch policy {
		case api.OnBusyReject:
			m.mu.Unlock()
			return nil, trellis.ErrBusy
		case api.OnBusyEnqueue:
			ln.queue = append(ln.queue, lr)
		case api.OnBusyInterrupt:
			// the running one stops at its next step boundary; the
			// queued ones give way too
			if ln.active != nil {
				ln.active.interrupt("interrupted by run " + lr.rec.ID)
			}
			for _, q := range ln.queue {
				m.cancelQueued(q, "interrupted by run "+lr.rec.ID)
			}
			lr.abandonFirst = true
			ln.queue = []*liveRun{lr}
		}
		m.live[lr.rec.ID] = lr
		m.mu.Unlock()
		if err := lr.persist(ctx); err != nil {
			return nil, err
		}
		m.s.metrics.queued.Inc()
		return lr, nil
	}
	ln.active = lr
	m.live[lr.rec.ID] = lr
	m.wg.Add(1)
	m.mu.Unlock()
	go m.execute(lr)
	select {
	case err := <-lr.started:
		if err != nil {
			return nil, err
		}
		return lr, nil
	case <-ctx.Done():
		// the caller left; the run goes on
		return lr, ctx.Err()
	}
}

// persist records the run as it stands.
func (lr *liveRun) persist(ctx context.Context) error {
	lr.mu.Lock()
	rec := lr.rec
	first := !lr.persisted
	lr.persisted = true
	lr.mu.Unlock()
	ctx = context.WithoutCancel(ctx)
	if first {
		return lr.m.s.cat.CreateRun(ctx, &rec)
	}
	return lr.m.s.cat.UpdateRun(ctx, &rec)
}

// record returns a copy of the run's record.
func (lr *liveRun) record() store.RunRecord {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	return lr.rec
}

// interrupt stops the run at its next step boundary.
func (lr *liveRun) interrupt(why string) {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	if lr.cancelled == "" {
		lr.cancelled = why
		close(lr.stop)
	}
}

// execute runs lr, then the next run its thread has queued.
func (m *manager) execute(lr *liveRun) {
	defer m.wg.Done()
	defer m.next(lr)
	ctx, cancel := context.WithCancel(m.base)
	defer cancel()
	lr.mu.Lock()
	lr.cancel = cancel
	lr.mu.Unlock()
	rt := m.s.cfg.Runtime
	f := lr.flow.flow
	if lr.abandonFirst {
		if _, err := rt.Abandon(ctx, lr.thread); err != nil && !errors.Is(err, store.ErrNotFound) {
			m.s.log.Warn("abandon before an interrupting run", "thread", lr.thread, "error", err.Error())
		}
	}
	opts := []trellis.RunOption{trellis.WithRunID(lr.rec.ID), trellis.WithStop(lr.stop), trellis.WithObserver(lr.observe)}
	var res *trellis.Result
	var err error
	for {
		if lr.resume {
			res, err = rt.Resume(ctx, f, lr.thread, opts...)
		} else {
			res, err = rt.Run(ctx, f, lr.thread, lr.input, opts...)
		}
		// a run queued behind one on another server waits for it
		if !errors.Is(err, trellis.ErrBusy) || lr.policy == api.OnBusyReject || lr.isStarted() {
			break
		}
		select {
		case <-time.After(250 * time.Millisecond):
			continue
		case <-lr.stop:
		case <-ctx.Done():
		}
		break
	}
	lr.finish(ctx, res, err)
}

func (lr *liveRun) isStarted() bool {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	return lr.rec.Status != store.RunQueued
}

// observe receives the run's events: it records the run when it starts,
// and logs every event for the run's streams.
func (lr *liveRun) observe(ev trellis.Event) {
	if ev.Type == trellis.RunStart {
		lr.mu.Lock()
		lr.rec.Status, lr.rec.Started = store.RunRunning, time.Now().UTC()
		lr.mu.Unlock()
		err := lr.persist(context.Background())
		lr.m.s.metrics.active.Inc()
		lr.started <- err
	}
	lr.m.s.metrics.event(lr.flow.flow.Name(), ev)
	lr.events.add(ev)
}

// finish records how the run ended.
func (lr *liveRun) finish(ctx context.Context, res *trellis.Result, err error) {
	m := lr.m
	lr.mu.Lock()
	started := lr.rec.Status == store.RunRunning
	why := lr.cancelled
	lr.mu.Unlock()
	if !started {
		// refused before it started: the caller hears why, and only a
		// run already recorded (queued) records it
		select {
		case lr.started <- err:
		default:
		}
		lr.events.close()
		lr.mu.Lock()
		persisted := lr.persisted
		lr.rec.Status, lr.rec.Finished = store.RunFailed, time.Now().UTC()
		if why != "" {
			lr.rec.Status = store.RunCancelled
		}
		if err != nil {
			lr.rec.Error = toAPIError(err).Message
		}
		if why != "" {
			lr.rec.Error = why
		}
		lr.mu.Unlock()
		if persisted {
			_ = lr.persist(ctx)
		}
		close(lr.done)
		return
	}
	m.s.metrics.active.Dec()
	status, msg := store.RunSucceeded, ""
	switch {
	case err == nil:
	case why != "" && (errors.Is(err, trellis.ErrStopped) || errors.Is(err, context.Canceled)):
		status, msg = store.RunCancelled, why
	default:
		status, msg = store.RunFailed, err.Error()
	}
	lr.events.close()
	lr.mu.Lock()
	lr.rec.Status, lr.rec.Error, lr.rec.Finished = status, msg, time.Now().UTC()
	if res != nil {
		lr.rec.Checkpoint, lr.state = res.Checkpoint, res.State
	} else if head, herr := m.s.cfg.Runtime.State(context.WithoutCancel(ctx), lr.thread); herr == nil {
		lr.rec.Checkpoint = head.Seq
	}
	lr.mu.Unlock()
	if perr := lr.persist(ctx); perr != nil {
		m.s.log.Error("recording a run's end", "run", lr.rec.ID, "error", perr.Error())
	}
	m.s.metrics.runs.WithLabelValues(lr.flow.flow.Name(), string(status)).Inc()
	m.s.log.Info("run ended", "run", lr.rec.ID, "thread", lr.thread, "flow", lr.flow.flow.Name(), "status", string(status))
	close(lr.done)
}

// next starts the run queued behind lr on its thread, if any.
func (m *manager) next(lr *liveRun) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.live, lr.rec.ID)
	ln := m.lanes[lr.thread]
	if ln == nil {
		return
	}
	if ln.active == lr {
		ln.active = nil
	}
	if len(ln.queue) == 0 || m.stopping {
		if ln.active == nil && len(ln.queue) == 0 {
			delete(m.lanes, lr.thread)
		}
		return
	}
	nx := ln.queue[0]
	ln.queue = ln.queue[1:]
	ln.active = nx
	m.s.metrics.queued.Dec()
	m.wg.Add(1)
	go m.execute(nx)
}

// cancelQueued ends a queued run without running it. The caller holds
// m.mu.
func (m *manager) cancelQueued(lr *liveRun, why string) {
	lr.mu.Lock()
	lr.cancelled = why
	lr.mu.Unlock()
	delete(m.live, lr.rec.ID)
	m.s.metrics.queued.Dec()
	go lr.finish(context.Background(), nil, nil)
}

// cancel cancels a run of this server: a queued one is dropped, a running
// one is stopped now (its nodes' contexts are cancelled), leaving the
// thread with an unfinished run to resume. It returns false when the run
// is not this server's.
func (m *manager) cancel(id string) (*liveRun, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	lr, ok := m.live[id]
	if !ok {
		return nil, false
	}
	ln := m.lanes[lr.thread]
	if ln != nil && ln.active != lr {
		if i := slices.Index(ln.queue, lr); i >= 0 {
			ln.queue = slices.Delete(ln.queue, i, i+1)
			m.cancelQueued(lr, "cancelled")
			return lr, true
		}
	}
	lr.mu.Lock()
	if lr.cancelled == "" {
		lr.cancelled = "cancelled"
	}
	cancel := lr.cancel
	lr.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	return lr, true
}

// get returns a run of this server.
func (m *manager) get(id string) *liveRun {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.live[id]
}

// shutdown stops taking runs, drops the queued ones, stops the running
// ones at their next step boundary and waits for them; when ctx ends
// first, it cancels them.
func (m *manager) shutdown(ctx context.Context) {
	m.mu.Lock()
	m.stopping = true
	for _, ln := range m.lanes {
		for _, q := range ln.queue {
			m.cancelQueued(q, "the server stopped before the run started")
		}
		ln.queue = nil
		if ln.active != nil {
			ln.active.interrupt("the server stopped between steps; resume the thread to finish the run")
		}
	}
	m.mu.Unlock()
	done := make(chan struct{})
	go func() { m.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		m.hardStop()
		<-done
	}
}

// eventLog holds a run's events in order: streams read it while the run
// goes on, and a writer records each in the store, in order, so that a
// client reconnecting later (or to another server) misses none.
type eventLog struct {
	cat    store.Catalog
	run    string
	thread string // the public thread id the events name

	mu      sync.Mutex
	items   []logged
	closed  bool
	changed chan struct{}
	saved   chan struct{} // closed once every event is recorded
	pending chan logged
}

type logged struct {
	seq  int64
	typ  string
	data []byte
}

func newEventLog(cat store.Catalog, run, thread string) *eventLog {
	l := &eventLog{cat: cat, run: run, thread: thread, changed: make(chan struct{}), saved: make(chan struct{}), pending: make(chan logged, 1024)}
	go l.save()
	return l
}

func (l *eventLog) add(ev trellis.Event) {
	ev.Thread = l.thread
	data, err := json.Marshal(ev)
	if err != nil {
		return
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	it := logged{seq: int64(len(l.items) + 1), typ: string(ev.Type), data: data}
	l.items = append(l.items, it)
	close(l.changed)
	l.changed = make(chan struct{})
	l.mu.Unlock()
	l.pending <- it
}

func (l *eventLog) save() {
	defer close(l.saved)
	for it := range l.pending {
		_ = l.cat.AppendEvent(context.Background(), l.run, it.seq, it.data)
	}
}

// close ends the log once every event is recorded.
func (l *eventLog) close() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		<-l.saved
		return
	}
	l.closed = true
	close(l.changed)
	l.mu.Unlock()
	close(l.pending)
	<-l.saved
}

// since returns the events after seq, whether the log is closed, and a
// channel closed when more arrive.
func (l *eventLog) since(seq int64) ([]logged, bool, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []logged
	if seq < int64(len(l.items)) {
		out = slices.Clone(l.items[max(seq, 0):])
	}
	return out, l.closed, l.changed
}
