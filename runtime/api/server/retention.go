package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/store"
)

// Retention is what a server deletes and compacts by itself, on a
// schedule, so that the store keeps what is in use and little more. Its
// zero value keeps every thread and event; the records of idempotency
// keys are deleted once they expire (store.RequestExpiry) whatever it
// says.
type Retention struct {
	// Idle deletes the threads not written for this long, each with
	// everything of it (its checkpoints, child flows' threads, record,
	// runs, events and voice sessions), as DELETE /v1/threads/{id} does
	// (0: threads are kept until deleted).
	Idle time.Duration
	// Events is how long a run's whole event stream, tokens included, is
	// kept after the run ends, for clients to resume streams; after it
	// the run keeps its node-level events (run, node and state events:
	// starts, ends, errors, writes), and its tokens as Tokens says, packed
	// in one compressed record (0: every event is kept as it was).
	Events time.Duration
	// Tokens is what becomes of a run's tokens (node_output events) once
	// Events has passed: TokensMerge (the default) keeps one node_output
	// per node's attempt with its whole text, numbered as its last
	// token; TokensDrop drops them.
	Tokens string
	// Every is how often a sweep runs (default: a minute).
	Every time.Duration
	// Share is the part of the time a sweep may work (default 0.1): it
	// works in small batches, each one short transaction, and after a
	// batch that took d rests d·(1−Share)/Share, so that the runs have
	// the store the rest of the time.
	Share float64
}

// What becomes of a run's tokens once its events are compacted.
const (
	TokensMerge = "merge"
	TokensDrop  = "drop"
)

// Check reports a setting out of its range.
func (r Retention) Check() error {
	switch {
	case r.Idle < 0 || r.Events < 0 || r.Every < 0:
		return errors.New("retention: a duration is positive, or 0 for none")
	case r.Tokens != "" && r.Tokens != TokensMerge && r.Tokens != TokensDrop:
		return fmt.Errorf("retention of tokens %q: want %s or %s", r.Tokens, TokensMerge, TokensDrop)
	case r.Share < 0 || r.Share > 1:
		return fmt.Errorf("retention share %g: want the part of the time a sweep may work, above 0 and at most 1", r.Share)
	}
	return nil
}

// packBatch is how many runs' events one transaction packs.
const packBatch = 32

// A sweep behind works more: its share of the time grows with the work
// it has left, from Retention.Share (a batch or less of runs to pack, or
// of threads to delete) to catchUpShare once catchUpBatches batches wait,
// so that a backlog is worked through while the runs still have the
// store most of the time; the time a batch takes is what it cost the
// store (on SQLite, the time its write held the store's writer, and the
// time it read), not the time it waited behind the runs' writes.
const (
	catchUpShare   = 0.5
	catchUpBatches = 50
)

// sweepLease names the lease the servers sharing a store take to sweep:
// one sweeps at a time. No thread can have this id (store.CheckThreadID).
const sweepLease = "#retention"

// retention runs a server's sweeps.
type retention struct {
	s *Server
	// mu guards cfg, which tests change
	mu     sync.Mutex
	cfg    Retention
	pace   store.Pacer
	cancel context.CancelFunc
	done   chan struct{}
	// metrics
	threads, runs, events, kept, pages prometheus.Counter
	requests                           prometheus.Counter
	work                               prometheus.Counter
	sweeps                             *prometheus.CounterVec
	sweeping                           prometheus.Gauge
	// batched, when set, hears of each batch a sweep works through (the
	// tests')
	batched func(kind string, n int)
	// now, when set, is the sweeps' present (the tests'; guarded by mu)
	now func() time.Time
	// backlog is the work left, as last counted (see backlog)
	backlogMu    sync.Mutex
	backlogAt    time.Time
	backlogCount [2]int // threads, runs
}

// startRetention starts the server's sweeps: the idle threads and the
// events its configuration asks to delete and pack, and always the
// idempotency keys that have expired.
func (s *Server) startRetention() *retention {
	cfg := s.cfg.Retention
	r := s.newRetention(cfg, s.metrics.reg)
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go r.loop(ctx)
	return r
}

// newRetention makes the retention of cfg, its metrics in reg, not yet
// sweeping.
func (s *Server) newRetention(cfg Retention, reg *prometheus.Registry) *retention {
	if cfg.Every == 0 {
		cfg.Every = time.Minute
	}
	if cfg.Share == 0 {
		cfg.Share = 0.1
	}
	if cfg.Tokens == "" {
		cfg.Tokens = TokensMerge
	}
	r := &retention{s: s, cfg: cfg, pace: store.Pacer{Share: cfg.Share, MaxRest: 10 * time.Second}, done: make(chan struct{})}
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: "trellis_retention_" + name, Help: help})
		reg.MustRegister(c)
		return c
	}
	r.threads = counter("threads_deleted_total", "Idle threads the retention deleted, each with everything of it.")
	r.runs = counter("runs_packed_total", "Runs whose events the retention packed (their streams' time to be resumed had passed).")
	r.events = counter("events_packed_total", "Events the retention packed (each a row before).")
	r.kept = counter("events_kept_total", "Events kept in the packs (node-level events, and tokens merged).")
	r.pages = counter("pages_returned_total", "Pages of the SQLite file the retention returned to the file system (incremental vacuum).")
	r.requests = counter("requests_expired_total", "Idempotency keys' records the retention deleted once they expired (24 hours after their first request).")
	r.work = counter("work_seconds_total", "Time the retention's batches took (the rests between them left out); on SQLite, the time they held the store's writer, not the time they queued for it.")
	r.sweeps = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_retention_sweeps_total",
		Help: "Retention sweeps by outcome: done, failed, or skipped while another server sharing the store sweeps."}, []string{"outcome"})
	r.sweeping = prometheus.NewGauge(prometheus.GaugeOpts{Name: "trellis_retention_sweeping", Help: "1 while a retention sweep runs on this server."})
	reg.MustRegister(r.sweeps, r.sweeping)
	if _, ok := s.eng().Store.(store.Backlog); ok {
		for i, kind := range []string{"threads", "runs"} {
			reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "trellis_retention_backlog",
				Help:        "The retention's work left: idle threads to delete (kind threads), ended runs whose events are to be packed (kind runs); -1 when the store did not answer.",
				ConstLabels: prometheus.Labels{"kind": kind}}, func() float64 { return float64(r.backlog(context.Background())[i]) }))
		}
	}
	return r
}

// config is the retention's configuration as it is now.
func (r *retention) config() Retention {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cfg
}

// clock is the sweeps' present: now, or the tests' time.
func (r *retention) clock() time.Time {
	r.mu.Lock()
	now := r.now
	r.mu.Unlock()
	if now != nil {
		return now()
	}
	return time.Now()
}

// stop ends the sweeps and waits for the one under way to stop.
func (r *retention) stop() {
	if r == nil {
		return
	}
	r.cancel()
	<-r.done
}

func (r *retention) loop(ctx context.Context) {
	defer close(r.done)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
		r.sweep(ctx)
		t.Reset(r.config().Every)
	}
}

// sweep deletes the idle threads, packs the events whose time to be
// resumed has passed and, on SQLite, returns the space freed, holding
// the store's sweep lease: servers sharing a store sweep one at a time.
func (r *retention) sweep(ctx context.Context) {
	st := r.s.eng().Store
	cfg := r.config()
	ttl := max(2*cfg.Every, time.Minute)
	owner := r.s.ID()
	if err := st.Acquire(ctx, sweepLease, owner, ttl); err != nil {
		if errors.Is(err, store.ErrLeased) {
			r.sweeps.WithLabelValues("skipped").Inc()
			return
		}
		r.failed(ctx, "take the sweep's lease", err)
		return
	}
	defer st.Release(context.WithoutCancel(ctx), sweepLease, owner)
	r.sweeping.Set(1)
	defer r.sweeping.Set(0)
	held := time.Now()
	// pace rests after a batch that took took, working share of the
	// time, and keeps the lease while the sweep goes on (or stops it,
	// when another server took the lease over)
	pace := func(ctx context.Context, took time.Duration, share float64) error {
		r.work.Add(took.Seconds())
		p := r.pace
		p.Share = share
		if err := p.Rest(ctx, took); err != nil {
			return err
		}
		if time.Since(held) > ttl/3 {
			if err := st.Acquire(ctx, sweepLease, owner, ttl); err != nil {
				return fmt.Errorf("keep the sweep's lease: %w", err)
			}
			held = time.Now()
		}
		return nil
	}
	start := time.Now()
	// the idle threads and the runs to pack, a batch of each in turn:
	// neither waits for the other's whole backlog
	var idle *store.IdleSweep
	if cfg.Idle > 0 {
		idle = store.NewIdleSweep(st, store.IdleOptions{TTL: cfg.Idle, Now: r.clock(), Deleted: func(string) { r.threads.Inc() }})
	}
	var pack *packer
	if cfg.Events > 0 {
		pack = &packer{cat: r.s.cat, before: r.clock().Add(-cfg.Events), tokens: cfg.Tokens}
	}
	left := r.countBacklog(ctx)
	for idle != nil || pack != nil {
		if idle != nil {
			b, err := idle.Step(ctx)
			if err != nil {
				r.failed(ctx, "delete idle threads", err)
				return
			}
			left[0] -= b.Deleted
			if r.batched != nil && b.Batch {
				r.batched("threads", b.Deleted)
			}
			if !b.More {
				idle = nil
			}
			if b.Batch {
				if err := pace(ctx, b.Took, r.share(cfg, left[0])); err != nil {
					r.failed(ctx, "delete idle threads", err)
					return
				}
			}
		}
		if pack != nil {
			b, more, err := pack.step(ctx)
			if err != nil {
				r.failed(ctx, "pack events", err)
				return
			}
			r.runs.Add(float64(b.Runs))
			r.events.Add(float64(b.Events))
			r.kept.Add(float64(b.Kept))
			left[1] -= b.Runs
			if r.batched != nil && b.Runs > 0 {
				r.batched("runs", b.Runs)
			}
			if !more {
				pack = nil
			}
			if err := pace(ctx, b.Took, r.share(cfg, left[1])); err != nil {
				r.failed(ctx, "pack events", err)
				return
			}
		}
	}
	// what the configured retention's batches rest after, working share
	// of the time
	paced := func(ctx context.Context, took time.Duration) error { return pace(ctx, took, cfg.Share) }
	if rq, ok := store.RequestsOf(st); ok {
		if err := r.expireRequests(ctx, rq, paced); err != nil {
			r.failed(ctx, "delete expired idempotency keys", err)
			return
		}
	}
	if v, ok := st.(store.SpaceReturner); ok {
		if err := r.returnSpace(ctx, v, paced); err != nil {
			r.failed(ctx, "return free space", err)
			return
		}
	}
	r.sweeps.WithLabelValues("done").Inc()
	r.s.log.Debug("retention sweep done", "took", time.Since(start).String())
}

// share is the part of the time a sweep may work with left batches'
// worth of work left (see catchUpShare).
func (r *retention) share(cfg Retention, left int) float64 {
	behind := min(1, float64(max(left, 0))/float64(catchUpBatches*packBatch))
	return max(cfg.Share, cfg.Share+(catchUpShare-cfg.Share)*behind)
}

// countBacklog counts the work a sweep begins with (threads to delete,
// runs to pack), for its pace; unknown counts are 0.
func (r *retention) countBacklog(ctx context.Context) [2]int {
	r.backlogMu.Lock()
	r.backlogAt = time.Time{} // counted again now
	r.backlogMu.Unlock()
	out := r.backlog(ctx)
	for i := range out {
		out[i] = max(out[i], 0)
	}
	return out
}

// backlogEvery is how long a count of the backlog serves the metrics.
const backlogEvery = 10 * time.Second

// backlog counts the idle threads and the runs to pack as the
// configuration says (-1: the store did not answer), at most every
// backlogEvery.
func (r *retention) backlog(ctx context.Context) [2]int {
	r.backlogMu.Lock()
	defer r.backlogMu.Unlock()
	if time.Since(r.backlogAt) < backlogEvery {
		return r.backlogCount
	}
	cfg := r.config()
	bl, ok := r.s.eng().Store.(store.Backlog)
	if !ok {
		return [2]int{}
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var out [2]int
	var err error
	if cfg.Idle > 0 {
		if out[0], err = bl.IdleBacklog(ctx, r.clock().Add(-cfg.Idle)); err != nil {
			out[0] = -1
		}
	}
	if cfg.Events > 0 {
		if out[1], err = bl.PackBacklog(ctx, r.clock().Add(-cfg.Events)); err != nil {
			out[1] = -1
		}
	}
	r.backlogAt, r.backlogCount = time.Now(), out
	return out
}

func (r *retention) failed(ctx context.Context, what string, err error) {
	if ctx.Err() != nil {
		return // the server is stopping
	}
	r.sweeps.WithLabelValues("failed").Inc()
	r.s.log.Error("retention: "+what, "error", err.Error())
}

// PackBatch is one transaction of PackEvents: how many runs it packed,
// how many events they had and kept, and how long it took (what it cost
// the store: see packer).
type PackBatch struct {
	Runs, Events, Kept int
	Took               time.Duration
}

// PackEvents compacts the events of the runs that ended before before
// (see Retention.Events and Retention.Tokens), a few runs per
// transaction; after each, done is told what it did and returns once the
// next may begin (or with an error that stops it). It returns what it
// did in all.
func PackEvents(ctx context.Context, cat store.Catalog, before time.Time, tokens string, done func(context.Context, PackBatch) error) (PackBatch, error) {
	var total PackBatch
	p := &packer{cat: cat, before: before, tokens: tokens}
	for {
		b, more, err := p.step(ctx)
		total.Runs, total.Events, total.Kept, total.Took = total.Runs+b.Runs, total.Events+b.Events, total.Kept+b.Kept, total.Took+b.Took
		if err != nil || b.Runs == 0 && !more {
			return total, err
		}
		if done != nil {
			if err := done(ctx, b); err != nil {
				return total, err
			}
		} else if err := ctx.Err(); err != nil {
			return total, err
		}
		if !more {
			return total, nil
		}
	}
}

// packer packs the events of the runs that ended before before, a batch
// at a time.
type packer struct {
	cat    store.Catalog
	before time.Time
	tokens string
}

// step packs the next batch and reports whether more may be left. The
// batch's Took is what it cost the store: the time it read the runs'
// events, and the time its write held the store's writer (on a store
// that runs one write at a time; on another, the time the write took),
// not the time it waited for the writer behind the runs' writes.
func (p *packer) step(ctx context.Context) (PackBatch, bool, error) {
	start := time.Now()
	ids, err := p.cat.RunsToPack(ctx, p.before, packBatch)
	if err != nil || len(ids) == 0 {
		return PackBatch{}, false, err
	}
	packs := make([]store.EventPack, 0, len(ids))
	var b PackBatch
	all, err := p.cat.RunsEvents(ctx, ids)
	if err != nil {
		return b, false, err
	}
	for _, id := range ids {
		evs := all[id]
		pk := store.EventPack{Run: id, Events: compactEvents(evs, p.tokens)}
		if len(evs) > 0 {
			pk.Through = evs[len(evs)-1].Seq
		}
		b.Events += len(evs)
		b.Kept += len(pk.Events)
		packs = append(packs, pk)
	}
	read := time.Since(start)
	var hold store.Hold
	wrote := time.Now()
	n, err := p.cat.PackEvents(store.WithHold(ctx, &hold), packs)
	if err != nil {
		return b, false, err
	}
	held, ok := hold.Held()
	if !ok {
		held = time.Since(wrote)
	}
	if n < len(packs) {
		// another sweep packed some first: what they had is its to
		// count
		b.Events, b.Kept = b.Events*n/len(packs), b.Kept*n/len(packs)
	}
	b.Runs, b.Took = n, read+held
	return b, len(ids) == packBatch, nil
}

// allEvents reads every event of a run, a page at a time.
func allEvents(ctx context.Context, cat store.Catalog, run string) ([]store.EventRecord, error) {
	var out []store.EventRecord
	for {
		var after int64
		if len(out) > 0 {
			after = out[len(out)-1].Seq
		}
		page, err := cat.Events(ctx, run, after, store.MaxPage)
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if len(page) < store.MaxPage {
			return out, nil
		}
	}
}

// expireBatch is how many idempotency keys' records one transaction
// deletes.
const expireBatch = 500

// expireRequests deletes the records of the idempotency keys that have
// expired, a batch at a time.
func (r *retention) expireRequests(ctx context.Context, rq store.Requests, pace func(context.Context, time.Duration) error) error {
	before := time.Now().Add(-store.RequestExpiry)
	for {
		start := time.Now()
		var hold store.Hold
		n, err := rq.PruneRequests(store.WithHold(ctx, &hold), before, expireBatch)
		if err != nil {
			return err
		}
		r.requests.Add(float64(n))
		if n < expireBatch {
			return nil
		}
		took, ok := hold.Held()
		if !ok {
			took = time.Since(start)
		}
		if err := pace(ctx, took); err != nil {
			return err
		}
	}
}

// returnPages is how many pages of the SQLite file one batch returns.
const returnPages = 256

// returnSpace returns the store's free pages to the file system, a batch
// at a time.
func (r *retention) returnSpace(ctx context.Context, v store.SpaceReturner, pace func(context.Context, time.Duration) error) error {
	for {
		start := time.Now()
		var hold store.Hold
		n, left, err := v.ReturnSpace(store.WithHold(ctx, &hold), returnPages)
		if err != nil {
			return err
		}
		r.pages.Add(float64(n))
		if n == 0 || left == 0 {
			return nil
		}
		took, ok := hold.Held()
		if !ok {
			took = time.Since(start)
		}
		if err := pace(ctx, took); err != nil {
			return err
		}
	}
}

// compactEvents is what a run keeps of its events once its stream's time
// to be resumed has passed: its node-level events (run, node and state
// events) and its tokens (node_output) merged into one event per node's
// attempt (the first token's, with the whole text, numbered as the last
// token) or dropped, as tokens says. What the thread's checkpoints hold
// is not kept twice: a state_update keeps its checkpoint's number, the
// fields it changed and its next nodes but not their values (update and
// appended: the checkpoint's writes), and run_end not the final state (the
// state at the run's checkpoint, which streams send with it: see
// sendable; a run_end is recorded so, but an earlier version's). The
// other events are the bytes recorded, unchanged.
func compactEvents(evs []store.EventRecord, tokens string) []store.EventRecord {
	type group struct {
		at    int // index in out
		first engine.Event
		text  []byte
	}
	out := make([]store.EventRecord, 0, len(evs))
	var groups map[string]*group
	for _, e := range evs {
		switch eventType(e.Data) {
		case string(engine.NodeOutput):
		case string(engine.StateUpdate):
			out = append(out, store.EventRecord{Seq: e.Seq, Data: without(e.Data, "update", "appended")})
			continue
		case string(engine.RunEnd):
			out = append(out, store.EventRecord{Seq: e.Seq, Data: without(e.Data, "state")})
			continue
		default:
			out = append(out, e)
			continue
		}
		if tokens == TokensDrop {
			continue
		}
		var ev engine.Event
		if err := json.Unmarshal(e.Data, &ev); err != nil {
			out = append(out, e) // kept as it is
			continue
		}
		key := fmt.Sprintf("%s\x00%s\x00%d\x00%d", ev.NS, ev.Node, ev.Step, ev.Attempt)
		if groups == nil {
			groups = map[string]*group{}
		}
		g, ok := groups[key]
		if !ok {
			g = &group{first: ev}
			groups[key] = g
		} else {
			out[g.at].Data = nil // moves to this token's place
		}
		g.text = append(g.text, ev.Text...)
		g.at = len(out)
		out = append(out, store.EventRecord{Seq: e.Seq})
	}
	for _, g := range groups {
		ev := g.first
		ev.Text = string(g.text)
		data, err := ev.JSON()
		if err != nil {
			continue
		}
		out[g.at].Data = data
	}
	return slices.DeleteFunc(out, func(e store.EventRecord) bool { return e.Data == nil })
}

// without is an event's JSON without the members named (the event as it
// is when it has none of them, or is not an object); the others keep
// their bytes.
func without(data []byte, members ...string) []byte {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return data
	}
	had := false
	for _, member := range members {
		if _, ok := m[member]; ok {
			had = true
			delete(m, member)
		}
	}
	if !had {
		return data
	}
	b, err := json.Marshal(m)
	if err != nil {
		return data
	}
	return b
}
