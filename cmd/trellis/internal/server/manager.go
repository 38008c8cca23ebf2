package server

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/store"
	"go.opentelemetry.io/otel/trace"
)

// manager runs runs from the store's queue (store.Catalog), which every
// server on one store shares: a run is queued first, then whichever server
// claims it runs it, one run at a time per thread, in the order they were
// queued. A server beats a heartbeat; the runs of a server whose beat
// stopped (it died) are adopted by another, which resumes them from their
// last checkpoint once the dead server's lease on the thread expires.
type manager struct {
	s    *Server
	id   string // this server's name in the queue
	mu   sync.Mutex
	live map[string]*liveRun // running here
	// secrets are the secret configuration values of the runs this
	// server accepted, by run: never written anywhere, so only a run
	// this server executes has them (another server's gets the defaults)
	secrets  map[string]map[string]any
	stopping bool
	wg       sync.WaitGroup
	kick     chan struct{}
	quit     chan struct{}
	loopDone chan struct{}
	// base is the runs' context: cancelled only when a shutdown has
	// waited too long for runs to reach a step boundary.
	base     context.Context
	hardStop context.CancelFunc
}

// Timing of the dispatcher.
const (
	beatEvery = time.Second
	capacity  = 256 // runs at once per server
)

// liveRun is a run running on this server.
type liveRun struct {
	m      *manager
	flow   *loaded
	events *eventLog
	// waiting: a caller waits to hear whether the run starts (its thread
	// was free when it was queued): a run refused before it starts is
	// then forgotten, and the caller hears why. refuseBusy: that caller
	// asked on_busy reject, so another process holding the thread refuses
	// the run rather than delaying it.
	waiting, refuseBusy bool
	adopted             bool
	// parent is the trace context of the request that started the run
	parent trace.SpanContext
	// started receives nil once the run has started, or the error that
	// refused it; done is closed when it has ended and its record says so.
	started chan error
	begun   chan struct{} // closed at run_start
	done    chan struct{}
	stop    chan struct{}

	mu       sync.Mutex
	rec      store.RunRecord
	cancel   context.CancelFunc
	why      string // why the run was stopped, when it was
	shutdown bool   // stopped by this server's shutdown: queued again
	state    map[string]any
	refusal  error // why it was refused before it started
}

func newManager(s *Server) *manager {
	base, hard := context.WithCancel(context.Background())
	m := &manager{s: s, id: newID("server"), live: map[string]*liveRun{}, kick: make(chan struct{}, 1),
		quit: make(chan struct{}), loopDone: make(chan struct{}), base: base, hardStop: hard}
	go m.loop()
	return m
}

func (m *manager) nudge() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// loop claims queued runs, passes stop requests on to the runs they name,
// beats the heartbeat and adopts the runs of servers that died.
func (m *manager) loop() {
	defer close(m.loopDone)
	poll := time.NewTimer(m.s.notes.pollEvery())
	defer poll.Stop()
	go m.beat()
	var lastAdopt time.Time
	for {
		select {
		case <-m.quit:
			return
		case <-m.kick:
		case <-poll.C:
		}
		poll.Reset(m.s.notes.pollEvery())
		ctx := m.base
		now := time.Now()
		if now.Sub(lastAdopt) >= beatEvery {
			lastAdopt = now
			m.adopt(ctx, now)
		}
		m.passStops(ctx)
		for m.room() {
			rec, err := m.s.cat.ClaimRun(ctx, m.id, "", time.Now().UTC())
			if err != nil {
				if !errors.Is(err, store.ErrNotFound) {
					m.s.log.Warn("claiming runs", "error", err.Error())
				}
				break
			}
			m.launch(rec, false, false, false, trace.SpanContext{})
		}
	}
}

// beat records that this server is alive, on its own goroutine so that a
// busy dispatcher does not make it look dead.
func (m *manager) beat() {
	t := time.NewTicker(beatEvery)
	defer t.Stop()
	for {
		_ = m.s.cat.Beat(m.base, m.id, time.Now())
		select {
		case <-m.quit:
			return
		case <-t.C:
		}
	}
}

// room reports whether this server takes another run.
func (m *manager) room() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return !m.stopping && len(m.live) < capacity
}

// adopt takes over the runs of servers whose heartbeat stopped.
func (m *manager) adopt(ctx context.Context, now time.Time) {
	for m.room() {
		rec, err := m.s.cat.AdoptRun(ctx, m.id, now.Add(-m.s.cfg.DeadAfter))
		if err != nil {
			return
		}
		m.s.log.Warn("adopting a run of a server that stopped beating", "run", rec.ID, "thread", rec.Thread)
		m.launch(rec, false, false, true, trace.SpanContext{})
	}
}

// passStops passes the stop requests other servers recorded for this
// server's runs on to them.
func (m *manager) passStops(ctx context.Context) {
	m.mu.Lock()
	n := len(m.live)
	m.mu.Unlock()
	if n == 0 {
		return
	}
	recs, err := m.s.cat.ServerRuns(ctx, m.id)
	if err != nil {
		return
	}
	for _, rec := range recs {
		if rec.Stop == "" {
			continue
		}
		if lr := m.get(rec.ID); lr != nil {
			lr.request(rec.Stop)
		}
	}
}

// launch runs a claimed run on this server.
func (m *manager) launch(rec *store.RunRecord, waiting, refuseBusy, adopted bool, parent trace.SpanContext) *liveRun {
	lr := &liveRun{m: m, rec: *rec, waiting: waiting, refuseBusy: refuseBusy, adopted: adopted, parent: parent,
		started: make(chan error, 1), begun: make(chan struct{}), done: make(chan struct{}), stop: make(chan struct{})}
	// the log exists before the run is found by streams; an adopted run's
	// events go on after those already recorded
	var after int64
	if adopted {
		if evs, err := m.s.cat.Events(m.base, rec.ID, 0); err == nil && len(evs) > 0 {
			after = evs[len(evs)-1].Seq
		}
	}
	lr.events = newEventLog(m.s.cat, m.s.log, m.s.notes, rec.ID, publicID(rec.Thread), after)
	m.mu.Lock()
	m.live[rec.ID] = lr
	m.wg.Add(1)
	m.mu.Unlock()
	go m.execute(lr)
	return lr
}

// busy reports whether the thread has a queued or running run.
func (m *manager) busy(ctx context.Context, c *caller, thread string) (bool, error) {
	runs, err := m.s.cat.Runs(ctx, c.tenant, thread, 0)
	if err != nil {
		return false, err
	}
	for _, r := range runs {
		if !r.Status.Done() {
			return true, nil
		}
	}
	return false, nil
}

// start queues a run as its policy says and, when its thread was free,
// runs it here at once and returns once it has started, or with the error
// that refused it (the run is then forgotten: nothing is recorded). A run
// queued behind others is returned queued.
func (m *manager) start(ctx context.Context, c *caller, thread *store.ThreadRecord, l *loaded, in api.StartRun) (store.RunRecord, *liveRun, error) {
	policy := in.OnBusy
	switch policy {
	case "":
		policy = api.OnBusyReject
	case api.OnBusyReject, api.OnBusyEnqueue, api.OnBusyInterrupt:
	default:
		return store.RunRecord{}, nil, &api.Error{Code: api.CodeInvalidInput, Message: "on_busy is reject, enqueue or interrupt"}
	}
	if in.Resume && len(in.Input) > 0 {
		return store.RunRecord{}, nil, &api.Error{Code: api.CodeInvalidInput, Message: "a resumed run takes no input"}
	}
	if !in.Resume && len(in.Answers) > 0 {
		return store.RunRecord{}, nil, &api.Error{Code: api.CodeInvalidInput, Message: "answers go with resume: true"}
	}
	input, err := plain(in.Input)
	if err != nil {
		return store.RunRecord{}, nil, err
	}
	answers, err := plain(in.Answers)
	if err != nil {
		return store.RunRecord{}, nil, err
	}
	cfg, err := plain(in.Config)
	if err != nil {
		return store.RunRecord{}, nil, err
	}
	recorded, secret := map[string]any{}, map[string]any{}
	for k, v := range cfg {
		if f, ok := l.flow.Graph().ConfigField(k); ok && f.Secret {
			secret[k] = v
		} else {
			recorded[k] = v
		}
	}
	m.mu.Lock()
	stopping := m.stopping
	m.mu.Unlock()
	if stopping {
		return store.RunRecord{}, nil, errStopping
	}
	raw, _ := json.Marshal(input)
	rec := &store.RunRecord{ID: newID("run"), Tenant: c.tenant, Thread: thread.ID, Flow: l.flow.Name(), FlowVersion: l.version,
		Input: raw, Created: time.Now().UTC(), Resume: in.Resume, Interrupt: policy == api.OnBusyInterrupt, Server: m.id}
	if len(answers) > 0 {
		rec.Answers, _ = json.Marshal(answers)
	}
	if len(recorded) > 0 {
		rec.Config, _ = json.Marshal(recorded)
	}
	if len(secret) > 0 {
		m.mu.Lock()
		if m.secrets == nil {
			m.secrets = map[string]map[string]any{}
		}
		m.secrets[rec.ID] = secret
		m.mu.Unlock()
	}
	// on a free thread the run is claimed here as it is queued, so that no
	// dispatcher (this server's or another's) takes it from under its
	// caller, who then would not hear why it was refused
	busy, err := m.s.cat.EnqueueRun(ctx, rec, store.BusyPolicy(policy))
	if errors.Is(err, store.ErrBusy) {
		return store.RunRecord{}, nil, trellis.ErrBusy
	}
	if err != nil {
		return store.RunRecord{}, nil, err
	}
	if busy || rec.Status != store.RunRunning {
		if policy == api.OnBusyInterrupt {
			m.s.notes.send(ctx, "stop") // to the server running the thread's run
		}
		m.nudge()
		return *rec, nil, nil
	}
	lr := m.launch(rec, true, policy == api.OnBusyReject, false, trace.SpanContextFromContext(ctx))
	select {
	case err := <-lr.started:
		if err != nil {
			<-lr.done
			return store.RunRecord{}, nil, err
		}
		return lr.record(), lr, nil
	case <-ctx.Done():
		return lr.record(), lr, ctx.Err()
	}
}

// record returns a copy of the run's record.
func (lr *liveRun) record() store.RunRecord {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	return lr.rec
}

// request stops the run: "cancel" now, anything else (an interrupt, a
// shutdown) at its next step boundary.
func (lr *liveRun) request(why string) {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	if lr.why != "" && why != "cancel" {
		return
	}
	first := lr.why == ""
	lr.why = why
	if why == "cancel" && lr.cancel != nil {
		lr.cancel()
	}
	if first {
		close(lr.stop)
	}
}

// execute runs a claimed run and records how it ended.
func (m *manager) execute(lr *liveRun) {
	defer m.wg.Done()
	defer func() {
		m.mu.Lock()
		delete(m.live, lr.rec.ID)
		delete(m.secrets, lr.rec.ID)
		m.mu.Unlock()
		m.nudge() // the thread's next run may be waiting
	}()
	ctx, cancel := context.WithCancel(m.base)
	defer cancel()
	if lr.parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, lr.parent)
	}
	lr.mu.Lock()
	lr.cancel = cancel
	if lr.why == "cancel" {
		cancel()
	}
	rec := lr.rec
	lr.mu.Unlock()
	l, err := m.s.flows.get(rec.Flow)
	if err != nil {
		if lr.waiting {
			lr.refuse(ctx, err)
		} else {
			lr.finish(ctx, nil, err)
		}
		return
	}
	lr.flow = l
	lr.mu.Lock()
	lr.rec.FlowVersion = l.version
	lr.mu.Unlock()
	rt := m.s.cfg.Runtime
	// the run's memory nodes remember for its tenant alone
	ctx = rt.WithTenantMemory(ctx, rec.Tenant)
	resume := rec.Resume
	// A run that another server began (it died, or seemed to) is started
	// again under its name: the engine runs a named run once, so it only
	// continues where the other left it, or finds it finished.
	abandon := rec.Interrupt
	// numbers as they were sent: an integer beyond 2^53 is not rounded
	// through float64
	input, answers := storedValues(rec.Input), storedValues(rec.Answers)
	opts := []trellis.RunOption{trellis.WithRunID(rec.ID), trellis.WithStop(lr.stop), trellis.WithObserver(lr.observe)}
	cfg := storedValues(rec.Config)
	m.mu.Lock()
	if secret := m.secrets[rec.ID]; len(secret) > 0 {
		if cfg == nil {
			cfg = map[string]any{}
		}
		maps.Copy(cfg, secret)
	}
	m.mu.Unlock()
	if cfg != nil {
		opts = append(opts, trellis.WithConfig(cfg))
	}
	var res *trellis.Result
	for {
		err = nil
		if abandon {
			// an interrupting run gives up what the run it interrupted
			// left unfinished (not its own progress, when it is taken over)
			var head *trellis.Snapshot
			if head, err = rt.State(ctx, rec.Thread); err == nil && head.Run != rec.ID && len(head.Next) > 0 {
				_, err = rt.Abandon(ctx, rec.Thread)
			}
			if err == nil {
				abandon = false
			}
		}
		switch {
		case err != nil:
		case resume:
			res, err = rt.Resume(ctx, l.flow, rec.Thread, append(opts, trellis.WithAnswers(answers))...)
		default:
			res, err = rt.Run(ctx, l.flow, rec.Thread, input, opts...)
		}
		// another process holds the thread (a server that died, until
		// its lease expires): wait for it, unless a caller waits to hear
		if !errors.Is(err, trellis.ErrBusy) || lr.refuseBusy || lr.isStarted() {
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
	if !lr.isStarted() && err != nil && lr.stopReason() == "" && lr.waiting {
		lr.refuse(ctx, err)
		return
	}
	lr.finish(ctx, res, err)
}

func (lr *liveRun) isStarted() bool {
	select {
	case <-lr.begun:
		return true
	default:
		return false
	}
}

func (lr *liveRun) stopReason() string {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	return lr.why
}

// observe receives the run's events: it signals the start, and logs every
// event for the run's streams.
func (lr *liveRun) observe(ev trellis.Event) {
	if ev.Type == trellis.RunStart {
		close(lr.begun)
		lr.m.s.metrics.active.Inc()
		lr.started <- nil
	}
	lr.m.s.metrics.event(lr.rec.Flow, ev)
	lr.events.add(ev)
}

// refuse forgets a run refused before it started: nothing of it stays
// recorded, and its caller hears why.
func (lr *liveRun) refuse(ctx context.Context, err error) {
	lr.events.close()
	if derr := lr.m.s.cat.DeleteRun(context.WithoutCancel(ctx), lr.rec.ID); derr != nil {
		lr.m.s.log.Warn("forgetting a refused run", "run", lr.rec.ID, "error", derr.Error())
	}
	lr.mu.Lock()
	lr.refusal = err
	lr.rec.Status, lr.rec.Error = store.RunFailed, toAPIError(err).Message
	lr.mu.Unlock()
	lr.started <- err
	close(lr.done)
}

// finish records how the run ended. A run this server's shutdown stopped
// between steps is queued again to resume, here after a restart or on
// another server.
func (lr *liveRun) finish(ctx context.Context, res *trellis.Result, err error) {
	m := lr.m
	if lr.isStarted() {
		m.s.metrics.active.Dec()
	}
	// every event is recorded before the run's end is, and streams hear
	// the last event only once the run is recorded as ended, so that a
	// client may start the thread's next run as soon as it hears it
	lr.events.flush()
	defer lr.events.close()
	why := lr.stopReason()
	lr.mu.Lock()
	shutdown := lr.shutdown
	lr.mu.Unlock()
	if err != nil && !lr.isStarted() {
		// a run taken over from a server that died may have finished
		// there before it could say so: the thread's checkpoints tell
		if head, herr := m.s.cfg.Runtime.State(context.WithoutCancel(ctx), lr.rec.Thread); herr == nil &&
			head.Run == lr.rec.ID && len(head.Next) == 0 {
			res, err = &trellis.Result{State: head.Values, Checkpoint: head.Seq}, nil
		}
	}
	status, msg := store.RunSucceeded, ""
	switch {
	case err == nil:
	case shutdown && (errors.Is(err, trellis.ErrStopped) || !lr.isStarted()):
		status = store.RunQueued
	case why != "" && !lr.isStarted():
		// stopped while it waited for its thread
		status, msg = store.RunCancelled, why
	case why != "" && (errors.Is(err, trellis.ErrStopped) || errors.Is(err, context.Canceled)):
		status, msg = store.RunCancelled, why
		if why == "cancel" {
			msg = "cancelled"
		}
	default:
		status, msg = store.RunFailed, err.Error()
	}
	lr.mu.Lock()
	lr.rec.Status, lr.rec.Error, lr.rec.Stop = status, msg, ""
	if status == store.RunQueued {
		lr.rec.Resume, lr.rec.Server, lr.rec.Interrupt = true, "", false
	} else {
		lr.rec.Finished = time.Now().UTC()
	}
	if res != nil {
		lr.rec.Checkpoint = res.Checkpoint
		lr.state = res.State
	} else {
		lr.state = nil
		if head, herr := m.s.cfg.Runtime.State(context.WithoutCancel(ctx), lr.rec.Thread); herr == nil {
			lr.rec.Checkpoint = head.Seq
		}
	}
	rec := lr.rec
	lr.mu.Unlock()
	if perr := m.s.cat.UpdateRun(context.WithoutCancel(ctx), &rec); perr != nil {
		m.s.log.Error("recording a run's end", "run", rec.ID, "error", perr.Error())
	}
	m.s.notes.send(ctx, "run "+rec.ID)
	m.s.notes.send(ctx, "queue")
	if status != store.RunQueued {
		m.s.metrics.runs.WithLabelValues(rec.Flow, string(status)).Inc()
	}
	m.s.log.Info("run ended", "run", rec.ID, "thread", rec.Thread, "flow", rec.Flow, "status", string(status))
	select {
	case lr.started <- err:
	default:
	}
	close(lr.done)
}

// result is the run's record and final state, after it has ended.
func (lr *liveRun) result() (store.RunRecord, map[string]any) {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	return lr.rec, lr.state
}

// get returns a run running on this server.
func (m *manager) get(id string) *liveRun {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.live[id]
}

// cancel cancels a run wherever it runs: a queued one now, a running one
// through its server (now, when it runs here). It returns the run's
// record once the run has ended, or as it is when ctx ends first.
func (m *manager) cancel(ctx context.Context, tenant, id string) (*store.RunRecord, error) {
	woken, release := m.s.notes.wait(id)
	defer func() { release() }()
	rec, err := m.s.cat.RequestStop(ctx, tenant, id, "cancel")
	if err != nil {
		return nil, err
	}
	if lr := m.get(id); lr != nil {
		lr.request("cancel")
		<-lr.done
		out := lr.record()
		return &out, nil
	}
	if !rec.Status.Done() && rec.Status != store.RunQueued {
		m.s.notes.send(ctx, "stop")
	}
	for !rec.Status.Done() && rec.Status != store.RunQueued {
		select {
		case <-woken:
		case <-ctx.Done():
			return rec, nil
		}
		release()
		woken, release = m.s.notes.wait(id)
		if rec, err = m.s.cat.Run(ctx, tenant, id); err != nil {
			return nil, err
		}
	}
	return rec, nil
}

// shutdown stops claiming runs and stops the running ones at their next
// step boundary, queueing them again to resume; when ctx ends first, it
// cancels them.
func (m *manager) shutdown(ctx context.Context) {
	m.mu.Lock()
	if m.stopping {
		m.mu.Unlock()
		return
	}
	m.stopping = true
	live := slices.Collect(func(yield func(*liveRun) bool) {
		for _, lr := range m.live {
			if !yield(lr) {
				return
			}
		}
	})
	m.mu.Unlock()
	close(m.quit)
	<-m.loopDone
	for _, lr := range live {
		lr.mu.Lock()
		lr.shutdown = true
		lr.mu.Unlock()
		lr.request("the server stopped")
	}
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
	log    *slog.Logger
	notes  *notifier
	run    string
	thread string // the public thread id the events name
	first  int64  // the seq before this log's first event

	mu      sync.Mutex
	items   []logged
	held    []logged // the run's last events, shown to streams on close
	flushed bool     // no more events come
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

func newEventLog(cat store.Catalog, log *slog.Logger, notes *notifier, run, thread string, after int64) *eventLog {
	l := &eventLog{cat: cat, log: log, notes: notes, run: run, thread: thread, first: after, changed: make(chan struct{}), saved: make(chan struct{}), pending: make(chan logged, 1024)}
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
	if l.flushed {
		l.mu.Unlock()
		return
	}
	it := logged{seq: l.first + int64(len(l.items)+len(l.held)) + 1, typ: string(ev.Type), data: data}
	if ev.Type == trellis.RunEnd || ev.Type == trellis.RunError || len(l.held) > 0 {
		l.held = append(l.held, it)
	} else {
		l.items = append(l.items, it)
		close(l.changed)
		l.changed = make(chan struct{})
	}
	l.mu.Unlock()
	l.pending <- it
}

// Events are recorded in batches: at most saveBatch in one write, and a
// write waits up to saveWait after its first event for the others of the
// burst it came in (a step's node and state events, a reply's tokens).
// Streams on this server do not wait for it: they read the log.
const (
	saveBatch = 256
	saveWait  = 5 * time.Millisecond
)

// save records the events in order.
func (l *eventLog) save() {
	defer close(l.saved)
	batch := make([]store.EventRecord, 0, saveBatch)
	wait := time.NewTimer(saveWait)
	for it := range l.pending {
		batch = append(batch[:0], store.EventRecord{Seq: it.seq, Data: it.data})
		wait.Reset(saveWait)
	more:
		for len(batch) < saveBatch {
			select {
			case it, ok := <-l.pending:
				if !ok {
					break more
				}
				batch = append(batch, store.EventRecord{Seq: it.seq, Data: it.data})
			case <-wait.C:
				break more
			}
		}
		wait.Stop()
		if err := l.cat.AppendEvents(context.Background(), l.run, batch); err != nil {
			l.log.Warn("recording a run's events", "run", l.run, "error", err.Error())
		}
		l.notes.send(context.Background(), "run "+l.run)
	}
}

// flush takes no more events and returns once every event is recorded.
func (l *eventLog) flush() {
	l.mu.Lock()
	first := !l.flushed
	l.flushed = true
	l.mu.Unlock()
	if first {
		close(l.pending)
	}
	<-l.saved
}

// close flushes the log and ends it: streams get its last events and
// return.
func (l *eventLog) close() {
	l.flush()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.closed = true
	l.items = append(l.items, l.held...)
	l.held = nil
	close(l.changed)
}

// since returns the events after seq, whether the log is closed, and a
// channel closed when more arrive. Events before the log's first (an
// adopted run's) are not in it: the caller reads them from the store.
func (l *eventLog) since(seq int64) ([]logged, bool, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []logged
	if i := seq - l.first; i < int64(len(l.items)) {
		out = slices.Clone(l.items[max(i, 0):])
	}
	return out, l.closed, l.changed
}
