package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/schedule"
	"github.com/trellisflow/trellis/runtime/store"
)

// scheduler starts the runs of the store's schedules that are due. Every
// server sharing the store looks; a tick's run has an id made of the
// schedule's and the tick's, so that of the servers firing one tick only
// one queues its run (the others find it exists: the run queue's unique
// key), and the schedule's next tick moves by compare-and-set, so that
// a server that died between the two leaves the tick to another, which
// finds its run queued and moves on.
type scheduler struct {
	store store.Schedules
	// kick wakes the loop: a schedule was made or resumed here
	kick chan struct{}
}

// nudge wakes the loop to look again.
func (sc *scheduler) nudge() {
	select {
	case sc.kick <- struct{}{}:
	default:
	}
}

// startSchedules starts looking for due schedules, until ctx ends (a
// store without schedules: never).
func (s *Server) startSchedules(ctx context.Context) {
	st, ok := store.SchedulesOf(s.eng().Store)
	s.sched = &scheduler{store: st, kick: make(chan struct{}, 1)}
	if !ok {
		return
	}
	go s.scheduleLoop(ctx)
}

// scheduleLoop fires the schedules that are due. It reads those due
// within a horizon ahead (ten polls) and sleeps until the first of them:
// an idle server does not read the store every poll. A schedule made or
// resumed here wakes it at once; one made or resumed on another server
// sharing the store is fired there, and seen here within the horizon
// (should that server stop first).
func (s *Server) scheduleLoop(ctx context.Context) {
	horizon := 10 * s.cfg.PollEvery
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.stopping:
			return
		case <-t.C:
		case <-s.sched.kick:
		}
		t.Reset(s.fireDue(ctx, horizon))
	}
}

// fireDue fires the schedules due now and says how long to wait before
// looking again: until the next one within the horizon, a poll after a
// fired one (its next tick may be sooner than the horizon), or at once
// when more were due than one read returns and all of them moved on (a
// schedule the store would not move stays due: looking again at once
// would spin on it).
func (s *Server) fireDue(ctx context.Context, horizon time.Duration) time.Duration {
	const page = 100
	now := s.now()
	soon, err := s.sched.store.DueSchedules(ctx, now.Add(horizon), page)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("schedules", "error", err.Error())
		}
		return s.cfg.PollEvery
	}
	wait := horizon
	fired, failed := 0, false
	for _, sc := range soon {
		if sc.Next.After(now) {
			// in order of their next tick: the rest are later still
			wait = min(wait, sc.Next.Sub(now))
			break
		}
		fired++
		if err := s.fire(ctx, sc, s.now()); err != nil {
			failed = true
			if ctx.Err() == nil {
				s.log.Warn("schedule", "schedule", sc.ID, "error", err.Error())
			}
		}
	}
	switch {
	case fired == page && !failed:
		return 0
	case fired > 0:
		return min(wait, s.cfg.PollEvery)
	}
	return wait
}

// fire decides what a due schedule does now, starts its tick's run when
// it fires one, and moves it to its next tick.
func (s *Server) fire(ctx context.Context, sc *store.Schedule, now time.Time) error {
	tick := store.ScheduleTick{LastTick: sc.LastTick, LastRun: sc.LastRun, LastError: sc.LastError}
	at := now.UTC()
	spec, err := schedule.Parse(sc.Cron, sc.Zone)
	if err != nil {
		// recorded by an older server, or a zone this one lacks: stop it
		tick.LastError = err.Error()
		tick.History = []store.TickRecord{{Tick: sc.Next, At: at, Status: store.TickFailed, Error: tick.LastError}}
		_, err := s.advance(ctx, sc, tick)
		return err
	}
	if now.Sub(sc.Next) > sc.Grace {
		// its run queued by a server that died before it moved the
		// schedule on: that tick was not missed
		id := tickRunID(sc.ID, sc.Next)
		if _, err := s.cat.Run(ctx, sc.Tenant, id); err == nil {
			tick.LastTick, tick.LastRun, tick.Next = sc.Next, id, spec.Next(sc.Next)
			tick.History = []store.TickRecord{{Tick: sc.Next, At: at, Status: store.TickStarted, Run: id}}
			_, err := s.advance(ctx, sc, tick)
			return err
		}
	}
	d := schedule.Decide(spec, sc.Next, now, sc.Grace, sc.Missed)
	tick.Next = d.Next
	if !d.MissedFrom.IsZero() {
		tick.LastError = fmt.Sprintf("ticks missed from %s to %s: %s", d.MissedFrom.Format(time.RFC3339), d.MissedTo.Format(time.RFC3339), policyDone(sc.Missed))
		// kept in the tick history: the ticks after it do not wipe it
		tick.History = append(tick.History, store.TickRecord{Tick: d.MissedTo, At: at, Status: store.TickMissed, Error: tick.LastError,
			MissedFrom: d.MissedFrom, MissedTo: d.MissedTo})
	}
	if d.Fire {
		id := tickRunID(sc.ID, d.Tick)
		err := s.startTick(ctx, sc, d.Tick, id)
		switch {
		case err == nil, errors.Is(err, store.ErrExists):
			// started here, or by another server first
			tick.LastTick, tick.LastRun = d.Tick, id
			if d.MissedFrom.IsZero() {
				tick.LastError = ""
			}
			tick.History = append(tick.History, store.TickRecord{Tick: d.Tick, At: at, Status: store.TickStarted, Run: id})
		default:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			tick.LastTick, tick.LastRun, tick.LastError = d.Tick, "", "the run did not start: "+apiMessage(err)
			tick.History = append(tick.History, store.TickRecord{Tick: d.Tick, At: at, Status: store.TickFailed, Error: tick.LastError})
		}
	}
	moved, err := s.advance(ctx, sc, tick)
	if moved && !d.MissedFrom.IsZero() {
		// logged once the store took it: a server whose decision lost to
		// another's (their clocks, or their pace, disagree on how late
		// the tick is) did not miss those ticks
		s.log.Info("schedule: ticks missed", "schedule", sc.ID, "from", d.MissedFrom, "to", d.MissedTo, "missed", string(sc.Missed))
	}
	return err
}

func policyDone(p store.MissedPolicy) string {
	if p == store.MissedRunOnce {
		return "run once for all of them"
	}
	return "skipped"
}

func apiMessage(err error) string {
	if ae := toAPIError(err); ae.Code != api.CodeInternal {
		return ae.Message
	}
	return err.Error()
}

// advance moves a schedule on from the tick it was due at, recording
// what its tick did; moved says whether this server's move took (not
// when another server moved it first, or it was deleted).
func (s *Server) advance(ctx context.Context, sc *store.Schedule, tick store.ScheduleTick) (moved bool, err error) {
	err = s.sched.store.AdvanceSchedule(ctx, sc.ID, sc.Next, tick)
	if errors.Is(err, store.ErrClaimLost) || errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// now reads the server's clock (the schedules' ticks come by it).
func (s *Server) now() time.Time {
	if s.cfg.clock != nil {
		return s.cfg.clock()
	}
	return time.Now()
}

// tickRunID is the id of a schedule's run for a tick: the same on every
// server.
func tickRunID(schedule string, tick time.Time) string {
	return fmt.Sprintf("run_%s_%d", schedule, tick.Unix())
}

// startTick starts the run of a tick: on the schedule's thread (queued
// behind the thread's runs), or on a new thread named after the schedule
// and the tick. store.ErrExists: the run exists (another server started
// it).
func (s *Server) startTick(ctx context.Context, sc *store.Schedule, tick time.Time, id string) error {
	c := &caller{tenant: sc.Tenant}
	key := sc.Thread
	if key == "" {
		key = threadKey(c, fmt.Sprintf("%s-%d", sc.ID, tick.Unix()))
		if err := s.createTickThread(ctx, sc, key); err != nil {
			return err
		}
	}
	th, err := s.cat.Thread(ctx, sc.Tenant, key)
	if err != nil {
		return fmt.Errorf("thread %q: %w", publicID(key), err)
	}
	l, err := s.threadFlow(ctx, sc.Tenant, th.ID, th.Flow)
	if err != nil {
		return err
	}
	in := api.StartRun{Input: storedValues(sc.Input), OnBusy: api.OnBusyEnqueue, Webhook: sc.Webhook}
	_, _, err = s.runs.startAs(ctx, c, th, l, in, id)
	return err
}

// createTickThread creates the new thread of a tick, unless another
// server did.
func (s *Server) createTickThread(ctx context.Context, sc *store.Schedule, key string) error {
	if _, err := s.cat.Thread(ctx, sc.Tenant, key); err == nil {
		return nil
	}
	l, err := s.newThreadFlow(ctx, sc.Flow)
	if err != nil {
		return err
	}
	if _, err := s.eng().Create(ctx, l.flow.Graph(), key, storedValues(sc.Values)); err != nil && !errors.Is(err, store.ErrExists) {
		return err
	}
	md := map[string]string{"schedule": sc.ID}
	for k, v := range sc.Metadata {
		md[k] = v
	}
	err = s.cat.CreateThread(ctx, &store.ThreadRecord{ID: key, Tenant: sc.Tenant, Flow: l.flow.Name(), Metadata: md, Created: time.Now().UTC()})
	if errors.Is(err, store.ErrExists) {
		return nil
	}
	if err != nil {
		return err
	}
	// the thread runs this version until it is moved
	if err := s.pinNew(ctx, sc.Tenant, key, l); err != nil && !errors.Is(err, store.ErrPinChanged) {
		return err
	}
	return nil
}

func (s *Server) scheduleRoutes() []route {
	return []route{
		{method: "POST", path: "/v1/schedules", access: tenant, idempotence: keyedAnswer, handle: s.createSchedule},
		{method: "GET", path: "/v1/schedules", access: tenant, handle: s.listSchedules},
		{method: "GET", path: "/v1/schedules/{schedule}", access: tenant, handle: s.getSchedule},
		{method: "DELETE", path: "/v1/schedules/{schedule}", access: tenant, handle: s.deleteSchedule},
		{method: "POST", path: "/v1/schedules/{schedule}/pause", access: tenant, handle: s.pauseSchedule},
		{method: "POST", path: "/v1/schedules/{schedule}/resume", access: tenant, handle: s.resumeSchedule},
		{method: "GET", path: "/v1/schedules/{schedule}/ticks", access: tenant, handle: s.scheduleTicks},
	}
}

// schedules is the store's schedules, or the answer that it keeps none.
func (s *Server) schedules() (store.Schedules, error) {
	if s.sched == nil || s.sched.store == nil {
		return nil, &api.Error{Code: api.CodeNotFound, Message: "this server's store keeps no schedules"}
	}
	return s.sched.store, nil
}

func scheduleInfo(sc *store.Schedule) api.Schedule {
	out := api.Schedule{ID: sc.ID, Flow: sc.Flow, Thread: publicID(sc.Thread), Cron: sc.Cron, Zone: sc.Zone, Input: storedValues(sc.Input),
		Values: storedValues(sc.Values), Metadata: sc.Metadata, Missed: string(sc.Missed), GraceMS: sc.Grace.Milliseconds(), Webhook: sc.Webhook, Paused: sc.Paused,
		LastRun: sc.LastRun, LastError: sc.LastError, Created: sc.Created}
	if len(out.Metadata) == 0 {
		out.Metadata = nil
	}
	if !sc.Paused && !sc.Next.IsZero() {
		t := sc.Next
		out.Next = &t
	}
	if !sc.LastTick.IsZero() {
		t := sc.LastTick
		out.LastTick = &t
	}
	return out
}

// ScheduleLimits bound what a tenant's schedules may ask of the server.
type ScheduleLimits struct {
	// PerTenant is how many schedules a tenant may have (default 100;
	// negative: no limit).
	PerTenant int
	// MinInterval is the shortest time a schedule's ticks may be apart
	// (default 1s, the finest a cron expression gives).
	MinInterval time.Duration
}

func (l ScheduleLimits) withDefaults() ScheduleLimits {
	if l.PerTenant == 0 {
		l.PerTenant = 100
	}
	if l.MinInterval == 0 {
		l.MinInterval = time.Second
	}
	return l
}

// scheduleLimits refuses a new schedule that fires more often than the
// server allows; the store refuses one more than its tenant may have (see
// createSchedule).
func (s *Server) scheduleLimits(sc *store.Schedule) error {
	lim := s.cfg.Schedules.withDefaults()
	if spec, err := schedule.Parse(sc.Cron, sc.Zone); err == nil {
		if gap := spec.Shortest(sc.Next.Add(-time.Nanosecond), 500); gap > 0 && gap < lim.MinInterval {
			return &api.Error{Code: api.CodeInvalidInput, Details: map[string]string{"field": "cron"},
				Message: fmt.Sprintf("cron %q fires %v apart at its most frequent: this server takes schedules at least %v apart", sc.Cron, gap, lim.MinInterval)}
		}
	}
	return nil
}

func (s *Server) createSchedule(w http.ResponseWriter, r *http.Request, c *caller) error {
	st, err := s.schedules()
	if err != nil {
		return err
	}
	var in api.CreateSchedule
	if err := readJSON(r, &in); err != nil {
		return err
	}
	if in.ID == "" {
		in.ID = newRef(r, "sched")
	}
	input, err := plain("input", in.Input)
	if err != nil {
		return err
	}
	values, err := plain("values", in.Values)
	if err != nil {
		return err
	}
	sc := &store.Schedule{ID: in.ID, Tenant: c.tenant, Flow: in.Flow, Cron: in.Cron, Zone: in.Zone, Metadata: in.Metadata,
		Missed: store.MissedPolicy(in.Missed), Webhook: in.Webhook, Paused: in.Paused, Created: time.Now().UTC()}
	if len(input) > 0 {
		sc.Input = recordValues(input)
	}
	if len(values) > 0 {
		sc.Values = recordValues(values)
	}
	invalid := func(field, msg string) error {
		return &api.Error{Code: api.CodeInvalidInput, Message: msg, Details: map[string]string{"field": field}}
	}
	if g := in.GraceMS; g != nil {
		if *g < 1000 || *g > 86_400_000 {
			return invalid("grace_ms", "grace_ms is from 1000 to 86400000 (none: 10000)")
		}
		sc.Grace = time.Duration(*g) * time.Millisecond
	}
	if field, err := schedule.Check(sc, time.Now()); err != nil {
		return invalid(field, err.Error())
	}
	if err := s.scheduleLimits(sc); err != nil {
		return err
	}
	if in.Thread != "" {
		if len(values) > 0 {
			return invalid("values", "values are a new thread's initial values: a schedule of a thread takes none (give flow for a new thread each time)")
		}
		if in.Flow != "" || len(in.Metadata) > 0 {
			return invalid("thread", "a schedule of a thread runs the thread's flow: give thread, or flow (and metadata) for a new thread each time")
		}
		if checkThreadID(in.Thread) != nil {
			return invalid("thread", fmt.Sprintf("no thread %q", in.Thread))
		}
		th, err := s.cat.Thread(r.Context(), c.tenant, threadKey(c, in.Thread))
		if errors.Is(err, store.ErrNotFound) || err == nil && th.Deleting {
			return invalid("thread", fmt.Sprintf("no thread %q", in.Thread))
		}
		if err != nil {
			return err
		}
		sc.Thread, sc.Flow = th.ID, th.Flow
	} else if in.Flow == "" {
		return invalid("flow", "give the flow each tick starts a new thread of, or the thread every run goes to")
	}
	var l *loaded
	if sc.Thread != "" {
		l, err = s.threadFlow(r.Context(), c.tenant, sc.Thread, sc.Flow)
	} else {
		l, err = s.newThreadFlow(r.Context(), sc.Flow)
	}
	if err != nil {
		if ae, ok := err.(*api.Error); ok && ae.Code == api.CodeNotFound {
			return invalid("flow", ae.Message)
		}
		return err
	}
	if field, err := checkTick(l.flow.Graph(), sc.Thread == "", values, input); err != nil {
		return invalid(field, err.Error())
	}
	if sc.Webhook != "" {
		if s.hooks.sender == nil {
			return invalid("webhook", "this server sends no webhooks (its allow-list is empty)")
		}
		if err := s.hooks.cfg.Allow.CheckURL(sc.Webhook); err != nil {
			return invalid("webhook", "the webhook "+sc.Webhook+": "+err.Error())
		}
	}
	// the tenant's count and the insert are one transaction of the
	// store's: creates at once do not go past the cap
	lim := s.cfg.Schedules.withDefaults()
	if err := st.CreateSchedule(r.Context(), sc, max(lim.PerTenant, 0)); err != nil {
		if errors.Is(err, store.ErrExists) {
			return &api.Error{Code: api.CodeScheduleExists, Message: fmt.Sprintf("schedule %q exists", sc.ID)}
		}
		if errors.Is(err, store.ErrScheduleLimit) {
			return &api.Error{Code: api.CodeLimitReached, Details: map[string]any{"limit": lim.PerTenant, "what": "schedules"},
				Message: fmt.Sprintf("the tenant has %d schedules, as many as this server keeps for a tenant: delete one first", lim.PerTenant)}
		}
		return err
	}
	made(r, sc.Thread)
	s.sched.nudge()
	writeJSON(w, http.StatusCreated, scheduleInfo(sc))
	return nil
}

// checkTick checks a schedule's values and input against its flow, g, as
// each tick's run will be checked: the values and the input of a run on
// a new thread (newThread), or the input alone, each value on its own,
// as the state of the schedule's thread is not known yet. It returns
// the field of the schedule at fault (values or input) and why.
func checkTick(g *flow.Graph, newThread bool, values, input map[string]any) (string, error) {
	var err error
	if newThread {
		err = engine.CheckNew(g, values, input)
	} else {
		err = engine.CheckInput(g, input)
	}
	if err == nil {
		return "", nil
	}
	field := "values"
	var ie *engine.InputError
	if errors.As(err, &ie) {
		f, isField := g.Field(ie.Field)
		if _, ok := input[ie.Field]; ok || !newThread || isField && f.ReadAt != nil {
			// given as input, or an input the flow reads, which the
			// schedule's input lacks
			field = "input"
		}
	}
	return field, fmt.Errorf("each tick's run would be refused: %w", err)
}

func (s *Server) getSchedule(w http.ResponseWriter, r *http.Request, c *caller) error {
	st, err := s.schedules()
	if err != nil {
		return err
	}
	sc, err := st.Schedule(r.Context(), c.tenant, r.PathValue("schedule"))
	if errors.Is(err, store.ErrNotFound) {
		return noSchedule(r)
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, scheduleInfo(sc))
	return nil
}

func noSchedule(r *http.Request) error {
	return &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("no schedule %q", r.PathValue("schedule"))}
}

func (s *Server) listSchedules(w http.ResponseWriter, r *http.Request, c *caller) error {
	st, err := s.schedules()
	if err != nil {
		return err
	}
	limit, err := queryInt(r, "limit", 1, 500, 100)
	if err != nil {
		return err
	}
	q := store.ScheduleQuery{Tenant: c.tenant, After: r.URL.Query().Get("after"), Limit: int(limit)}
	if th := r.URL.Query().Get("thread"); th != "" {
		q.Thread = threadKey(c, th)
	}
	list, err := st.ListSchedules(r.Context(), q)
	if err != nil {
		return err
	}
	out := api.Schedules{Schedules: []api.Schedule{}}
	for _, sc := range list {
		out.Schedules = append(out.Schedules, scheduleInfo(sc))
	}
	if len(list) == int(limit) {
		out.Next = list[len(list)-1].ID
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) pauseSchedule(w http.ResponseWriter, r *http.Request, c *caller) error {
	return s.setPaused(w, r, c, true)
}

func (s *Server) resumeSchedule(w http.ResponseWriter, r *http.Request, c *caller) error {
	return s.setPaused(w, r, c, false)
}

// setPaused pauses a schedule, or resumes it at its next tick from now:
// the ticks that passed while it was paused do not fire.
func (s *Server) setPaused(w http.ResponseWriter, r *http.Request, c *caller, paused bool) error {
	st, err := s.schedules()
	if err != nil {
		return err
	}
	var next time.Time
	if !paused {
		sc, err := st.Schedule(r.Context(), c.tenant, r.PathValue("schedule"))
		if errors.Is(err, store.ErrNotFound) {
			return noSchedule(r)
		}
		if err != nil {
			return err
		}
		spec, err := schedule.Parse(sc.Cron, sc.Zone)
		if err != nil {
			return &api.Error{Code: api.CodeInvalidInput, Message: err.Error()}
		}
		next = spec.Next(time.Now())
	}
	sc, err := st.PauseSchedule(r.Context(), c.tenant, r.PathValue("schedule"), paused, next)
	if errors.Is(err, store.ErrNotFound) {
		return noSchedule(r)
	}
	if err != nil {
		return err
	}
	s.sched.nudge()
	writeJSON(w, http.StatusOK, scheduleInfo(sc))
	return nil
}

func (s *Server) deleteSchedule(w http.ResponseWriter, r *http.Request, c *caller) error {
	st, err := s.schedules()
	if err != nil {
		return err
	}
	err = st.DeleteSchedule(r.Context(), c.tenant, r.PathValue("schedule"))
	if errors.Is(err, store.ErrNotFound) {
		return noSchedule(r)
	}
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// scheduleTicks lists what a schedule's last ticks did, the newest first,
// each started run with where it stands now.
func (s *Server) scheduleTicks(w http.ResponseWriter, r *http.Request, c *caller) error {
	st, err := s.schedules()
	if err != nil {
		return err
	}
	sc, err := st.Schedule(r.Context(), c.tenant, r.PathValue("schedule"))
	if errors.Is(err, store.ErrNotFound) {
		return noSchedule(r)
	}
	if err != nil {
		return err
	}
	out := api.ScheduleTicks{Schedule: sc.ID, Ticks: make([]api.ScheduleTick, 0, len(sc.Ticks))}
	for _, t := range sc.Ticks {
		x := api.ScheduleTick{Tick: t.Tick, At: t.At, Status: string(t.Status), Run: t.Run, Error: t.Error}
		if !t.MissedFrom.IsZero() {
			from, to := t.MissedFrom, t.MissedTo
			x.MissedFrom, x.MissedTo = &from, &to
		}
		if t.Run != "" {
			// the run's record, while it is kept (a thread deleted takes it)
			if run, err := s.cat.Run(r.Context(), c.tenant, t.Run); err == nil {
				x.RunStatus, x.Thread = string(run.Status), publicID(run.Thread)
			} else if !errors.Is(err, store.ErrNotFound) {
				return err
			}
		}
		out.Ticks = append(out.Ticks, x)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
