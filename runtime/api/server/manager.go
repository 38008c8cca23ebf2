package server

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/store"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// manager runs runs from the store's queue (store.Catalog), which every
// server on one store shares: a run is queued first, then whichever server
// claims it runs it, one run at a time per thread, in the order they were
// queued. A server beats a heartbeat; the runs of a server whose beat
// stopped (it died) are adopted by another, which resumes them from their
// last checkpoint once the dead server's lease on the thread expires. The
// store's clock judges the beats, so servers whose clocks disagree do not
// take each other's runs.
//
// Every change of a run's record is conditional on the record as the
// server last saw it (store.Catalog.UpdateRun): a server that finds it
// changed (another server cancelled, interrupted or adopted the run) reads
// it again and decides again, so that no change overwrites another.
//
// A shutdown stops claiming runs, asks the running ones to stop at their
// next step boundary and queues them again to resume (here after a
// restart, or on another server); it waits as long as they take, up to
// the stop timeout, then cancels them, and after a short grace gives up
// on any that still do not end, so that it always returns.
type manager struct {
	s    *Server
	id   string // this server's name in the queue
	mu   sync.Mutex
	live map[string]*liveRun // running here
	// secrets are the secret configuration values of the runs this
	// server accepted, by run: never written anywhere, so only a run
	// this server executes has them (another server's gets the
	// defaults). They are forgotten once the run ends, or runs
	// elsewhere.
	secrets map[string]secretConfig
	// claiming are the runs a request is queueing to run here: recorded
	// running on this server before they are live
	claiming map[string]bool
	// unended counts the runs whose end this server could not record
	// (the store was unavailable): the sweep of orphans finishes them
	unended atomic.Int64
	// reclaimedAt is when the sweep of orphans last looked (the
	// dispatcher's)
	reclaimedAt time.Time
	stopping    bool
	wg          sync.WaitGroup // the runs running here
	starting    sync.WaitGroup // the requests starting runs
	kick        chan struct{}
	// stopsDue says the stop requests recorded for this server's runs
	// may have changed: the dispatcher reads them at its next turn
	stopsDue atomic.Bool
	quit     chan struct{} // closed when the shutdown is over
	loopDone chan struct{}
	beatDone chan struct{}
	shutDone chan struct{}
	// runCtx is the runs' context: cancelled when a shutdown has waited
	// its stop timeout for runs to reach a step boundary.
	runCtx     context.Context
	cancelRuns context.CancelFunc
	// records is the context of what the runs record in the store (their
	// events and ends) and of the dispatcher's store calls: cancelled
	// when a shutdown gives up on runs that do not end.
	records context.Context
	giveUp  context.CancelFunc
	// abandoned is closed when a shutdown gave up on runs still going:
	// their waiters are answered.
	abandoned chan struct{}
}

// Timing of the dispatcher.
const (
	beatEvery = time.Second
	capacity  = 256 // runs at once per server
	// stopGrace is how long a shutdown waits for the runs it cancelled at
	// its stop timeout before it gives up on them.
	stopGrace = 3 * time.Second
)

// The stops a server asks of its runs itself, never recorded: its
// shutdown's (at their next step boundary, to be queued again), and the
// one of a run another server took over (now: the run is the other's).
const (
	stopShutdown  store.StopReason = "shutdown"
	stopTakenOver store.StopReason = "taken over"
)

// launch says how a run claimed by this server came to it.
type launch struct {
	// waiting: a caller waits to hear whether the run starts (its thread
	// was free when it was queued): a run refused before it starts is
	// then forgotten, and the caller hears why.
	waiting bool
	// refuseBusy: that caller asked on_busy reject, so another process
	// holding the thread refuses the run rather than delaying it.
	refuseBusy bool
	// adopted: the run was taken over from a server that stopped beating.
	adopted bool
	// fresh: the run was queued by the caller, claimed as it was, and
	// has no event yet (none of another server's: an adoption would take
	// its record, and with it the events, from this one)
	fresh bool
	// parent is the trace context of the request that started the run.
	parent trace.SpanContext
	// leasedAt is when the run's thread lease was asked for with its
	// claim (the record's Lease says whether it was taken).
	leasedAt time.Time
	// flow is the thread's flow as its caller read it just before
	// queueing the run (nil: read when it runs). The version is checked
	// again as the engine claims the thread (onVersion), so a move in
	// between is seen there.
	flow *loaded
}

func newManager(s *Server) *manager {
	runCtx, cancelRuns := context.WithCancel(context.Background())
	records, giveUp := context.WithCancel(context.Background())
	m := &manager{s: s, id: newID("server"), live: map[string]*liveRun{}, secrets: map[string]secretConfig{}, claiming: map[string]bool{}, kick: make(chan struct{}, 1),
		quit: make(chan struct{}), loopDone: make(chan struct{}), beatDone: make(chan struct{}), shutDone: make(chan struct{}),
		runCtx: runCtx, cancelRuns: cancelRuns, records: records, giveUp: giveUp, abandoned: make(chan struct{})}
	go m.loop()
	go m.beat()
	return m
}

// now reads the server's clock, for the times it records for people to
// read; times that servers compare are the store's.
func (m *manager) now() time.Time {
	if m.s.cfg.clock != nil {
		return m.s.cfg.clock().UTC()
	}
	return time.Now().UTC()
}

func (m *manager) nudge() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// nudgeStops wakes the dispatcher to pass on the stop requests recorded
// for this server's runs too (read at every poll, and otherwise only
// when one may have come: reading them at each run's end would cost
// every live run a row each time).
func (m *manager) nudgeStops() {
	m.stopsDue.Store(true)
	m.nudge()
}

// loop claims queued runs, passes stop requests on to the runs they name,
// adopts the runs of servers that died and forgets the secrets of runs
// that will not run here. During a shutdown it only passes stop requests
// on.
func (m *manager) loop() {
	defer close(m.loopDone)
	poll := time.NewTimer(m.s.notes.pollEvery())
	defer poll.Stop()
	var lastAdopt time.Time
	for {
		polled := false
		select {
		case <-m.quit:
			return
		case <-m.kick:
		case <-poll.C:
			polled = true
		}
		poll.Reset(m.s.notes.pollEvery())
		ctx := m.records
		if time.Since(lastAdopt) >= beatEvery {
			lastAdopt = time.Now()
			m.adopt(ctx)
			m.reclaim(ctx)
			m.forgetSecrets(ctx)
		}
		if m.stopsDue.Swap(false) || polled {
			m.passStops(ctx)
		}
		for m.room() {
			rec, err := m.s.cat.ClaimRun(ctx, m.id, "", m.now())
			if err != nil {
				// an outage of the store's is told by the beat
				if !errors.Is(err, store.ErrNotFound) && ctx.Err() == nil && store.Classify(err) == store.Permanent {
					m.s.log.Warn("claiming runs", "error", err.Error())
				}
				break
			}
			m.launch(rec, launch{})
		}
	}
}

// beat records that this server is alive, on its own goroutine so that a
// busy dispatcher does not make it look dead, until its shutdown is over
// (its runs are its own until they have stopped).
func (m *manager) beat() {
	defer close(m.beatDone)
	t := time.NewTicker(beatEvery)
	defer t.Stop()
	var swept time.Time
	for {
		m.s.health.beat(m.s.cat.Beat(m.records, m.id), m.s.log)
		if time.Since(swept) >= m.s.cfg.DeadAfter/2 {
			// the keys of a server that died (a studio killed) lapse
			// with it
			swept = time.Now()
			_, _ = m.s.SweepKeys(m.records)
		}
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
func (m *manager) adopt(ctx context.Context) {
	for m.room() {
		rec, err := m.s.cat.AdoptRun(ctx, m.id, m.s.cfg.DeadAfter)
		if err != nil {
			return
		}
		m.s.log.Warn("adopting a run of a server that stopped beating", "run", rec.ID, "thread", rec.Thread)
		m.launch(rec, launch{adopted: true})
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

// launch runs a claimed run on this server. A run claimed as the
// server's shutdown begins is queued again at once instead (nil).
func (m *manager) launch(rec *store.RunRecord, how launch) *liveRun {
	lr := &liveRun{m: m, rec: *rec, how: how,
		started: make(chan error, 1), begun: make(chan struct{}), done: make(chan struct{}), stop: make(chan struct{})}
	lr.retry = &store.Retrier{Budget: m.s.cfg.StoreWait, Down: lr.storeDown, Back: lr.storeBack}
	// the log exists before the run is found by streams; it goes on from
	// the run's last recorded event (one queued again, or adopted)
	var last *store.EventRecord
	var err error
	if !how.fresh {
		err = lr.retry.Do(m.records, func(bool) (err error) {
			last, err = m.s.cat.LastEvent(m.records, rec.ID)
			if errors.Is(err, store.ErrNotFound) {
				last, err = nil, nil
			}
			return err
		})
	}
	if err != nil {
		// numbered from nothing, its events would take others' numbers:
		// the run stays recorded here, for the sweep of orphans
		m.s.log.Warn("reading a run's last event: the run starts once the store answers", "run", rec.ID, "error", err.Error())
		m.unended.Add(1)
		m.releaseLease(rec)
		return nil
	}
	m.mu.Lock()
	if m.stopping {
		m.mu.Unlock()
		m.unclaim(rec, last)
		m.releaseLease(rec)
		return nil
	}
	lr.events = newEventLog(m.records, m.s.cat, m.s.log, m.s.notes, rec.ID, m.id, publicID(rec.Thread), last, lr.retry,
		func() { lr.request(stopTakenOver) })
	lr.events.ends = lr.succeeded
	m.live[rec.ID] = lr
	m.wg.Add(1)
	m.mu.Unlock()
	go m.execute(lr)
	return lr
}

// releaseLease gives up the thread lease a run took with its claim, for
// a run the engine will not run with it.
func (m *manager) releaseLease(rec *store.RunRecord) {
	if rec.Lease == nil || !rec.Lease.Taken {
		return
	}
	rec.Lease.Taken = false
	if err := m.s.eng().Store.Release(m.records, rec.Thread, rec.Lease.Owner); err != nil {
		m.s.log.Warn("releasing a run's thread", "run", rec.ID, "error", err.Error())
	}
}

// unclaim gives back a run this server claimed but will not run (it is
// stopping): queued again as it was, or cancelled when a cancel came.
// When the run has events (last: its last), the one that tells where it
// went goes with it.
func (m *manager) unclaim(rec *store.RunRecord, last *store.EventRecord) {
	out, _, err := m.settle(*rec, func(cur store.RunRecord) (store.RunRecord, []store.EventRecord) {
		if cur.Stop == store.StopCancel || cur.Stop == store.StopInterrupt {
			cur.Status, cur.Error, cur.Finished = store.RunCancelled, cur.Stop.Message(), m.now()
		} else {
			cur.Status, cur.Started = store.RunQueued, time.Time{}
		}
		cur.Server, cur.Stop = "", ""
		var evs []store.EventRecord
		if last != nil && !agrees(eventType(last.Data), cur.Status) {
			evs = []store.EventRecord{{Seq: last.Seq + 1, Data: lastEvent(cur.ID, publicID(cur.Thread), cur.Status, cur.Error)}}
		}
		return cur, evs
	})
	if err != nil {
		m.s.log.Warn("giving back a run at the shutdown", "run", rec.ID, "error", err.Error())
		return
	}
	*rec = out
	m.s.notes.send(m.records, noteQueue)
}

// settle writes a change of a run this server runs, with the events
// that tell it, as decide makes them from the record: when another
// server changed the record first, it reads it again and decides again.
// A run that is no longer this server's (adopted by another, or ended) is
// left as it is (errNotOurs). It returns the record and the events
// written.
func (m *manager) settle(rec store.RunRecord, decide func(cur store.RunRecord) (store.RunRecord, []store.EventRecord)) (store.RunRecord, []store.EventRecord, error) {
	ctx := m.records
	cur := rec
	// the change waits through the store's outages, and one tried again
	// recognises its own by its write id
	retry := &store.Retrier{Budget: m.s.cfg.StoreWait}
	for attempt := 0; ; attempt++ {
		next, evs := decide(cur)
		next.WriteID = store.NewWriteID()
		err := store.UpdateRunOnce(ctx, m.s.cat, retry, &next, cur.State(), evs)
		if err == nil {
			return next, evs, nil
		}
		if !errors.Is(err, store.ErrRunChanged) || attempt == 8 {
			return cur, nil, err
		}
		var fresh *store.RunRecord
		err = retry.Do(ctx, func(bool) (err error) {
			fresh, err = m.s.cat.Run(ctx, rec.Tenant, rec.ID)
			return err
		})
		if err != nil {
			return cur, nil, err
		}
		if fresh.Status != store.RunRunning || fresh.Server != m.id {
			return *fresh, nil, errNotOurs
		}
		cur = *fresh
	}
}

// errNotOurs: a run's record says another server has it, or it ended.
var errNotOurs = errors.New("the run's record says another server has it, or it ended")

// start queues a run as its policy says and, when its thread was free,
// runs it here at once and returns once it has started, or with the error
// that refused it (the run is then forgotten: nothing is recorded). A run
// queued behind others is returned queued.
func (m *manager) start(ctx context.Context, c *caller, thread *store.ThreadRecord, l *loaded, in api.StartRun) (store.RunRecord, *liveRun, error) {
	return m.startAs(ctx, c, thread, l, in, newID("run"))
}

// startAs is start with the run's id given.
func (m *manager) startAs(ctx context.Context, c *caller, thread *store.ThreadRecord, l *loaded, in api.StartRun, id string) (store.RunRecord, *liveRun, error) {
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
	input, err := plain("input", in.Input)
	if err != nil {
		return store.RunRecord{}, nil, err
	}
	answers, err := plain("answers", in.Answers)
	if err != nil {
		return store.RunRecord{}, nil, err
	}
	if len(answers) > 0 {
		// answers that name no question of the paused run, or that its
		// node cannot take, are refused now, not by the run once queued
		if _, err := m.s.eng().ResolveAnswers(ctx, l.flow.Graph(), thread.ID, answers); err != nil && !errors.Is(err, store.ErrNotFound) {
			return store.RunRecord{}, nil, err
		}
	}
	cfg, err := plain("config", in.Config)
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
	// a shutdown waits for the starts under way: a run claimed as it
	// begins is queued again before it returns
	m.mu.Lock()
	if m.stopping {
		m.mu.Unlock()
		return store.RunRecord{}, nil, errStopping
	}
	m.starting.Add(1)
	m.mu.Unlock()
	defer m.starting.Done()
	raw := recordValues(input)
	rec := &store.RunRecord{ID: id, Tenant: c.tenant, Thread: thread.ID, Flow: l.flow.Name(), FlowVersion: l.version,
		Input: raw, Created: m.now(), Resume: in.Resume, Interrupt: policy == api.OnBusyInterrupt, Server: m.id}
	rec.Trace = traceparent(ctx)
	// claimed as it is queued, the run takes its thread's lease for the
	// engine in the same transaction, where the engine's store is the
	// catalog's (an interrupting run gives up the run it interrupted
	// first, holding the thread itself)
	eng := m.s.eng()
	var leasedAt time.Time
	if c, ok := eng.Store.(store.Catalog); ok && c == m.s.cat && policy != api.OnBusyInterrupt {
		claim := eng.Lease()
		rec.Lease, leasedAt = &claim, time.Now()
	}
	if len(answers) > 0 {
		rec.Answers = recordValues(answers)
	}
	if len(recorded) > 0 {
		rec.Config = recordValues(recorded)
	}
	if len(secret) > 0 {
		m.keepSecret(rec.ID, c.tenant, secret)
	}
	// the webhook's delivery is recorded before the run, so that the
	// run's end is delivered whichever server ends it, whenever
	if err := m.s.addDelivery(ctx, rec, in.Webhook); err != nil {
		m.dropSecret(rec.ID)
		return store.RunRecord{}, nil, err
	}
	// on a free thread the run is claimed here as it is queued, so that no
	// dispatcher (this server's or another's) takes it from under its
	// caller, who then would not hear why it was refused; queued again
	// after a failure that may have come after it was queued, it is found
	// by its id. Until it is live here, the sweep of orphans leaves it.
	m.mu.Lock()
	m.claiming[rec.ID] = true
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.claiming, rec.ID)
		m.mu.Unlock()
	}()
	busy, err := store.EnqueueRunOnce(ctx, m.s.cat, eng.Store, requestRetrier(), rec, store.BusyPolicy(policy))
	if err != nil {
		m.dropSecret(rec.ID)
		if errors.Is(err, store.ErrBusy) {
			return store.RunRecord{}, nil, m.busy(ctx, rec)
		}
		if errors.Is(err, store.ErrNotFound) {
			return store.RunRecord{}, nil, &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("no thread %q", publicID(thread.ID))}
		}
		return store.RunRecord{}, nil, err
	}
	m.queued(rec.ID)
	if busy || rec.Status != store.RunRunning {
		if policy == api.OnBusyInterrupt {
			m.s.notes.send(ctx, noteStop) // to the server running the thread's run
			m.closeInterrupted(ctx, rec)
			m.nudgeStops() // this one, maybe
		} else {
			m.nudge()
		}
		return *rec, nil, nil
	}
	lr := m.launch(rec, launch{waiting: true, fresh: true, refuseBusy: policy == api.OnBusyReject, parent: trace.SpanContextFromContext(ctx), leasedAt: leasedAt, flow: l})
	if lr == nil { // the server began stopping: the run is queued again
		return *rec, nil, nil
	}
	select {
	case err := <-lr.started:
		if err != nil {
			<-lr.done
			lr.mu.Lock()
			refusal := lr.refusal
			lr.mu.Unlock()
			if refusal != nil {
				return store.RunRecord{}, nil, refusal
			}
		}
		return lr.record(), lr, nil
	case <-ctx.Done():
		return lr.record(), lr, ctx.Err()
	}
}

// traceparent is the W3C traceparent of ctx's span ("" when it has
// none), to keep on a run's record.
func traceparent(ctx context.Context) string {
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	return carrier["traceparent"]
}

// busy is the refusal of a run on a thread another run holds, naming that
// run (running, or the first queued) for the caller to wait on or cancel.
func (m *manager) busy(ctx context.Context, refused *store.RunRecord) error {
	return m.heldBy(ctx, refused.Tenant, refused.Thread, "wait for it, or start the run with on_busy enqueue or interrupt")
}

// heldBy is thread_busy naming the run that holds the thread, with what
// to do about it.
func (m *manager) heldBy(ctx context.Context, tenant, thread, advice string) error {
	runs, err := m.s.cat.Runs(ctx, store.RunQuery{Tenant: tenant, Thread: thread})
	if err != nil {
		return engine.ErrBusy
	}
	var holder *store.RunRecord
	for _, r := range runs { // newest first: the running one, else the first queued
		if r.Status == store.RunRunning || r.Status == store.RunQueued && (holder == nil || holder.Status != store.RunRunning) {
			holder = r
		}
	}
	if holder == nil { // it ended meanwhile
		return engine.ErrBusy
	}
	return &api.Error{Code: api.CodeThreadBusy,
		Message: fmt.Sprintf("run %s (%s) holds the thread; %s", holder.ID, holder.Status, advice),
		Details: map[string]string{"run": holder.ID, "status": string(holder.Status)}}
}

// closeInterrupted gives the queued runs an interrupting run cancelled
// the last event their records call for.
func (m *manager) closeInterrupted(ctx context.Context, by *store.RunRecord) {
	runs, err := m.s.cat.Runs(ctx, store.RunQuery{Tenant: by.Tenant, Thread: by.Thread})
	if err != nil {
		return
	}
	for _, r := range runs {
		if r.Status == store.RunCancelled && r.Error == "interrupted by run "+by.ID {
			if err := closeLog(ctx, m.s.cat, m.s.notes, r); err != nil {
				m.s.log.Warn("ending the events of an interrupted run", "run", r.ID, "error", err.Error())
			}
		}
	}
}

// runPanic is a run that panicked.
type runPanic struct{ value any }

func (p *runPanic) Error() string { return fmt.Sprintf("panic: %v", p.value) }

// execute runs a claimed run and records how it ended.
func (m *manager) execute(lr *liveRun) {
	defer m.wg.Done()
	defer func() {
		m.mu.Lock()
		delete(m.live, lr.rec.ID)
		delete(m.secrets, lr.rec.ID)
		m.mu.Unlock()
		if lr.unended {
			// no longer live: the sweep of orphans takes it from here
			m.unended.Add(1)
		}
		m.nudge() // the thread's next run may be waiting
		m.s.kickWebhooks()
	}()
	res, err := m.run(lr)
	var p *runPanic
	if !lr.isStarted() && err != nil && lr.stopReason() == "" && lr.how.waiting && !errors.As(err, &p) {
		lr.refuse(err)
		return
	}
	lr.finish(res, err)
}

// run runs the run, recovering from a panic in it: that run fails (its
// stack goes to the log), and the server and its other runs go on.
func (m *manager) run(lr *liveRun) (res *engine.Result, err error) {
	ctx, cancel := context.WithCancel(m.runCtx)
	defer cancel()
	defer func() {
		if v := recover(); v != nil {
			m.s.metrics.panics.Inc()
			m.s.log.Error("a run panicked: it fails", "run", lr.rec.ID, "thread", lr.rec.Thread, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			res, err = nil, &runPanic{value: v}
		}
		// the engine recovered a panic of the run's own code: as above
		var pe *engine.PanicError
		if errors.As(err, &pe) {
			m.s.metrics.panics.Inc()
			m.s.log.Error("a run panicked: it fails", "run", lr.rec.ID, "thread", lr.rec.Thread, "panic", fmt.Sprint(pe.Value), "stack", string(pe.Stack))
		}
	}()
	if lr.how.parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, lr.how.parent)
	}
	lr.mu.Lock()
	lr.cancel = cancel
	if lr.why == store.StopCancel || lr.why == stopTakenOver {
		cancel()
	}
	rec := lr.rec
	lr.mu.Unlock()
	// the lease taken with the claim goes to the run's first start; a
	// run that never starts gives it up
	defer m.releaseLease(&rec)
	if !lr.how.parent.IsValid() && rec.Trace != "" {
		// claimed later, or adopted: the trace of the request that queued it
		ctx = propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": rec.Trace})
	}
	l := lr.how.flow
	if l == nil {
		if l, err = m.s.threadFlow(ctx, rec.Tenant, rec.Thread, rec.Flow); err != nil {
			return nil, err
		}
	}
	lr.flow = l
	lr.mu.Lock()
	lr.rec.FlowVersion = l.version
	lr.mu.Unlock()
	eng := m.s.eng()
	// the run's memory nodes remember for its tenant alone
	ctx = m.s.withTenantMemory(ctx, rec.Tenant)
	resume := rec.Resume
	// A run that another server began (it died, or seemed to) is started
	// again under its name: the engine runs a named run once, so it only
	// continues where the other left it, or finds it finished.
	abandon := rec.Interrupt
	// numbers as they were sent: an integer beyond 2^53 is not rounded
	// through float64
	input, answers := storedValues(rec.Input), storedValues(rec.Answers)
	req := engine.Request{Thread: rec.Thread, ID: rec.ID, Stop: lr.stop, Observe: lr.observe, Retry: lr.retry}
	var attach func(*store.Checkpoint) func(error)
	if c, ok := eng.Store.(store.Catalog); ok && c == m.s.cat {
		// a step's events are recorded with it, and the run's end with
		// its last step
		attach = lr.events.attach
		req.EndsWithCommit = true
	}
	req.Attach = m.s.metrics.timeCommits(attach)
	cfg := storedValues(rec.Config)
	m.mu.Lock()
	if secret := m.secrets[rec.ID]; len(secret.values) > 0 {
		if cfg == nil {
			cfg = map[string]any{}
		}
		maps.Copy(cfg, secret.values)
	}
	m.mu.Unlock()
	if cfg != nil {
		req.Config = cfg
	}
	req.Held = m.s.onVersion(rec.Tenant, rec.Thread, &l)
	for {
		err = nil
		if abandon {
			// an interrupting run gives up what the run it interrupted
			// left unfinished (not its own progress, when it is taken over)
			var head *store.Snapshot
			if head, err = eng.Store.Head(ctx, rec.Thread); err == nil && head.Run != rec.ID && len(head.Next) > 0 {
				_, err = eng.Abandon(ctx, rec.Thread)
			}
			if err == nil {
				abandon = false
			}
		}
		switch {
		case err != nil:
		case resume:
			r := m.leased(req, &rec, lr.how)
			r.Resume, r.Answers = true, answers
			res, err = eng.Run(ctx, l.flow.Graph(), r)
		default:
			r := m.leased(req, &rec, lr.how)
			r.Input = input
			res, err = eng.Run(ctx, l.flow.Graph(), r)
		}
		if errors.Is(err, errMoved) {
			// moved as the run began: it runs the version moved to
			if l, err = m.s.threadFlow(ctx, rec.Tenant, rec.Thread, rec.Flow); err != nil {
				return nil, err
			}
			lr.flow = l
			lr.mu.Lock()
			lr.rec.FlowVersion = l.version
			lr.mu.Unlock()
			continue
		}
		// another process holds the thread (a server that died, until
		// its lease expires): wait for it, unless a caller waits to hear
		if !errors.Is(err, engine.ErrBusy) || lr.how.refuseBusy || lr.isStarted() {
			return res, err
		}
		select {
		case <-time.After(250 * time.Millisecond):
			continue
		case <-lr.stop:
		case <-ctx.Done():
		}
		return res, err
	}
}

// leased is req holding the thread lease rec's claim took, which it
// hands over: the engine's run holds it from then, or, when the engine
// already runs the thread (so holds its lease), leaves it to that run.
func (m *manager) leased(req engine.Request, rec *store.RunRecord, how launch) engine.Request {
	if rec.Lease != nil && rec.Lease.Taken {
		req.Leased, req.LeasedAt = true, how.leasedAt
		rec.Lease.Taken = false
	}
	return req
}

// get returns a run running on this server.
func (m *manager) get(id string) *liveRun {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.live[id]
}
