// The store's outages, as a server lives through them: its connections
// lost, its server restarting, its disk full.
//
// A run waits for the store (store.Retrier, within Config.StoreWait): its
// steps, its events and what it reads are tried again with backoff, and
// its events say so (store_unavailable, store_back). A write tried again
// after a failure that may have come after it committed recognises its
// own work (its write id, its events' bytes) instead of taking it for
// another server's. A run the store keeps away longer than that is
// queued again, not failed: it goes on once the store is back. Its end
// too is tried again; a run whose end still cannot be recorded stays
// recorded as running here, and once it is no longer live here the
// sweep of orphans runs it again (a named run finds itself ended, or
// goes on where it stopped) and records its end: on this server, with no
// restart and no other server needed.
//
// A request that finds the store unavailable is answered 503
// (unavailable) at once, and one that finds its disk full 507
// (store_full), nothing of it committed. The beat, a write every second,
// tells /readyz and the metrics whether the store takes writes.

package server

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/store"
)

// DefaultStoreWait is Config.StoreWait's default.
const DefaultStoreWait = time.Minute

// requestWait bounds how long a request waits for a write that may have
// been committed before its reply was lost (a run queued), to read it
// back: the caller hears what was done.
const requestWait = 3 * time.Second

// requestRetrier is the Retrier of a request's write.
func requestRetrier() *store.Retrier { return &store.Retrier{Budget: requestWait} }

// storeDown is told by the run's Retrier that the store went away.
func (lr *liveRun) storeDown(err error) {
	m := lr.m
	m.s.metrics.storeWaits.WithLabelValues(store.Classify(err).String()).Inc()
	m.s.log.Warn("the store is unavailable: the run waits for it", "run", lr.rec.ID, "error", err.Error())
	if lr.isStarted() {
		lr.events.note(engine.Event{Type: engine.StoreUnavailable, Run: lr.rec.ID, Time: time.Now().UTC(), Error: err.Error()})
	}
}

// storeBack is told by the run's Retrier that the store came back.
func (lr *liveRun) storeBack(lasted time.Duration) {
	lr.m.s.log.Info("the store is back: the run goes on", "run", lr.rec.ID, "waited", lasted.String())
	if lr.isStarted() {
		lr.events.note(engine.Event{Type: engine.StoreBack, Run: lr.rec.ID, Time: time.Now().UTC(), Duration: lasted})
	}
}

// reclaimEvery is how often the sweep of orphans looks for them when no
// run's end is known to have gone unrecorded: a safety net.
const reclaimEvery = 30 * time.Second

// reclaim runs again the runs recorded as running on this server that
// are not live here (orphans): those whose end or start it could not
// record while the store was unavailable. It looks when one is known
// to be, and every reclaimEvery.
func (m *manager) reclaim(ctx context.Context) {
	due := m.unended.Load() > 0 || time.Since(m.reclaimedAt) >= reclaimEvery
	if !due || m.s.health.down() {
		return
	}
	m.reclaimedAt = time.Now()
	n := m.unended.Load()
	recs, err := m.s.cat.ServerRuns(ctx, m.id)
	if err != nil {
		return
	}
	m.unended.Add(-n)
	for _, rec := range recs {
		m.mu.Lock()
		orphan := m.live[rec.ID] == nil && !m.claiming[rec.ID]
		m.mu.Unlock()
		if !orphan {
			continue
		}
		if !m.room() {
			m.unended.Add(1) // once a run here ends
			continue
		}
		// read again now that it is not live: a run that ended here
		// since the list was read recorded its end before it left
		cur, err := m.s.cat.Run(ctx, rec.Tenant, rec.ID)
		if err != nil || cur.Status != store.RunRunning || cur.Server != m.id {
			if err != nil && store.Classify(err) != store.Permanent {
				m.unended.Add(1) // look again once the store answers
			}
			continue
		}
		rec = cur
		m.s.metrics.reclaimed.Inc()
		m.s.log.Warn("running again a run whose end this server could not record", "run", rec.ID, "thread", rec.Thread)
		m.launch(rec, launch{adopted: true})
	}
}

// storeHealth is whether the store takes writes, as the server's beat
// (a write every second) last found it.
type storeHealth struct {
	mu    sync.Mutex
	class store.Class // of the last beat's error; Permanent: it succeeded
	err   error
	since time.Time
	ready prometheus.Gauge
}

func newStoreHealth(reg *prometheus.Registry) *storeHealth {
	h := &storeHealth{ready: prometheus.NewGauge(prometheus.GaugeOpts{Name: "trellis_store_ready",
		Help: "1 while the store takes writes (the server's heartbeat, written every second, succeeded), 0 while it is unavailable or its disk is full."})}
	h.ready.Set(1)
	reg.MustRegister(h.ready)
	return h
}

// beat notes the result of a beat, and logs the store's going and coming
// back once each.
func (h *storeHealth) beat(err error, log *slog.Logger) {
	class := store.Permanent
	if err != nil {
		class = store.Classify(err)
		if class == store.Permanent {
			return // not the store's state: the beat's own trouble
		}
	}
	h.mu.Lock()
	was, since := h.class, h.since
	h.class, h.err = class, err
	if was != class {
		h.since = time.Now()
	}
	h.mu.Unlock()
	if was == class {
		return
	}
	if class == store.Permanent {
		h.ready.Set(1)
		log.Warn("the store is back", "after", time.Since(since).Round(time.Millisecond).String())
		return
	}
	h.ready.Set(0)
	log.Warn("the store does not take writes: runs wait for it, requests are answered "+map[store.Class]string{store.Unavailable: "unavailable (503)", store.Full: "store_full (507)"}[class], "error", err.Error())
}

// state is the class of the last beat's error (Permanent: the store took
// it), and the error.
func (h *storeHealth) state() (store.Class, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.class, h.err
}

// down reports whether the last beat found the store unavailable or
// full.
func (h *storeHealth) down() bool {
	c, _ := h.state()
	return c != store.Permanent
}
