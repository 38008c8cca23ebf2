package server

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/store"
)

// metrics are the server's Prometheus metrics, in a registry of its own.
type metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	runs     *prometheus.CounterVec
	nodes    *prometheus.HistogramVec
	degraded *prometheus.CounterVec
	usage    *prometheus.CounterVec
	commits  prometheus.Histogram
	active   prometheus.Gauge
	panics   prometheus.Counter
	voice    *prometheus.CounterVec
	// storeWaits counts the runs' waits for the store by why (unavailable,
	// full); reclaimed the runs run again whose end went unrecorded
	storeWaits *prometheus.CounterVec
	reclaimed  prometheus.Counter
	handler    http.Handler
}

func newMetrics(st store.Store, cat store.Catalog) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_http_requests_total",
		Help: "HTTP requests by route and status (499: the client left before it was answered)."}, []string{"route", "status"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "trellis_http_request_duration_seconds",
		Help: "HTTP request latency by route (streams: until they end).", Buckets: prometheus.DefBuckets}, []string{"route"})
	m.runs = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_runs_total",
		Help: "Runs that ended, by flow and outcome."}, []string{"flow", "outcome"})
	m.nodes = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "trellis_node_duration_seconds",
		Help: "Node attempts' duration by node kind.", Buckets: []float64{.0001, .001, .01, .1, .5, 1, 2.5, 5, 10, 30, 60}}, []string{"kind"})
	m.degraded = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_node_fallbacks_total",
		Help: "Nodes that wrote a fallback (a model that did not answer), by kind."}, []string{"kind"})
	m.active = prometheus.NewGauge(prometheus.GaugeOpts{Name: "trellis_active_runs", Help: "Runs running on this server."})
	m.panics = prometheus.NewCounter(prometheus.CounterOpts{Name: "trellis_run_panics_total",
		Help: "Runs that panicked on this server (each failed; its stack is in the log)."})
	m.usage = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_node_usage_total",
		Help: "Work nodes measured, by kind and measure: the llm kind's calls, input_tokens and output_tokens."}, []string{"kind", "measure"})
	m.commits = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "trellis_store_commit_seconds",
		Help: "How long the store took to commit a run's step (with the steps held before it).", Buckets: []float64{.0002, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1}})
	queued := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "trellis_queued_runs",
		Help: "Runs in the store's queue, waiting for a server or for their thread (-1: the store did not answer)."}, func() float64 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		n, err := cat.QueueDepth(ctx)
		if err != nil {
			return -1
		}
		return float64(n)
	})
	m.storeWaits = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_store_waits_total",
		Help: "Times a run found the store unavailable (or its disk full) and waited for it, by why."}, []string{"why"})
	m.reclaimed = prometheus.NewCounter(prometheus.CounterOpts{Name: "trellis_runs_reclaimed_total",
		Help: "Runs run again on this server because their end (or start) could not be recorded while the store was unavailable."})
	m.voice = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_voice_sessions_total",
		Help: "Voice sessions opened, by whether the agent was dispatched or already present."}, []string{"agent"})
	if wc, ok := st.(store.WriteCounter); ok {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "trellis_store_write_transactions_total",
			Help: "Write transactions the store committed for this process (steps, events, the run queue, leases)."}, func() float64 {
			return float64(wc.WriteTransactions())
		}))
	}
	m.reg.MustRegister(m.requests, m.latency, m.runs, m.nodes, m.degraded, m.usage, m.commits, m.active, m.panics, m.voice, queued,
		m.storeWaits, m.reclaimed,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.handler = promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
	return m
}

// add registers a program's own collectors; a metric of the server's
// name, or another's twice, is an error.
func (m *metrics) add(cs []prometheus.Collector) error {
	for _, c := range cs {
		if err := m.reg.Register(c); err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
	}
	return nil
}

// watchSecrets counts the runs whose secret configuration the server
// keeps (secrets tells how many): a number that grows without bound is a
// leak of secrets.
func (m *metrics) watchSecrets(secrets func() int) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "trellis_run_secrets",
		Help: "Runs whose secret configuration this server keeps, until they end or run elsewhere."}, func() float64 { return float64(secrets()) }))
}

func (m *metrics) request(route string, status int, took time.Duration) {
	m.requests.WithLabelValues(route, strconv.Itoa(status)).Inc()
	m.latency.WithLabelValues(route).Observe(took.Seconds())
}

func (m *metrics) event(_ string, ev engine.Event) {
	switch ev.Type {
	case engine.NodeEnd, engine.NodeFailed:
		if ev.Attempt > 0 {
			m.nodes.WithLabelValues(ev.Kind).Observe(ev.Duration.Seconds())
		}
		if ev.Degraded != "" {
			m.degraded.WithLabelValues(ev.Kind).Inc()
		}
		for name, n := range ev.Usage {
			m.usage.WithLabelValues(ev.Kind, name).Add(float64(n))
		}
	}
}

// timeCommits wraps a run's Attach (nil: none), so that each commit the
// run makes is timed, from its start to its end, committed.
func (m *metrics) timeCommits(attach func(*store.Checkpoint) func(error)) func(*store.Checkpoint) func(error) {
	return func(cp *store.Checkpoint) func(error) {
		start := time.Now()
		var done func(error)
		if attach != nil {
			done = attach(cp)
		}
		return func(err error) {
			if err == nil {
				m.commits.Observe(time.Since(start).Seconds())
			}
			if done != nil {
				done(err)
			}
		}
	}
}

func (s *Server) metricsHandler(w http.ResponseWriter, r *http.Request, _ *caller) error {
	s.metrics.handler.ServeHTTP(w, r)
	return nil
}

func (s *Server) openapi(w http.ResponseWriter, r *http.Request, _ *caller) error {
	doc, err := servedDocument(r)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/yaml")
	_, err = w.Write(doc)
	return err
}
