package server

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/schemas"
)

// metrics are the server's Prometheus metrics, in a registry of its own.
type metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	runs     *prometheus.CounterVec
	nodes    *prometheus.HistogramVec
	degraded *prometheus.CounterVec
	active   prometheus.Gauge
	queued   prometheus.Gauge
	handler  http.Handler
}

func newMetrics() *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_http_requests_total",
		Help: "HTTP requests by route and status."}, []string{"route", "status"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "trellis_http_request_duration_seconds",
		Help: "HTTP request latency by route (streams: until they end).", Buckets: prometheus.DefBuckets}, []string{"route"})
	m.runs = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_runs_total",
		Help: "Runs that ended, by flow and outcome."}, []string{"flow", "outcome"})
	m.nodes = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "trellis_node_duration_seconds",
		Help: "Node attempts' duration by node kind.", Buckets: []float64{.0001, .001, .01, .1, .5, 1, 2.5, 5, 10, 30, 60}}, []string{"kind"})
	m.degraded = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_node_fallbacks_total",
		Help: "Nodes that wrote a fallback (a model that did not answer), by kind."}, []string{"kind"})
	m.active = prometheus.NewGauge(prometheus.GaugeOpts{Name: "trellis_active_runs", Help: "Runs running on this server."})
	m.queued = prometheus.NewGauge(prometheus.GaugeOpts{Name: "trellis_queued_runs", Help: "Runs waiting for their thread on this server."})
	m.reg.MustRegister(m.requests, m.latency, m.runs, m.nodes, m.degraded, m.active, m.queued,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.handler = promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
	return m
}

func (m *metrics) request(route string, status int, took time.Duration) {
	m.requests.WithLabelValues(route, strconv.Itoa(status)).Inc()
	m.latency.WithLabelValues(route).Observe(took.Seconds())
}

func (m *metrics) event(_ string, ev trellis.Event) {
	switch ev.Type {
	case trellis.NodeEnd, trellis.NodeFailed:
		if ev.Attempt > 0 {
			m.nodes.WithLabelValues(ev.Kind).Observe(ev.Duration.Seconds())
		}
		if ev.Degraded != "" {
			m.degraded.WithLabelValues(ev.Kind).Inc()
		}
	}
}

func (s *Server) metricsHandler(w http.ResponseWriter, r *http.Request, _ *caller) error {
	s.metrics.handler.ServeHTTP(w, r)
	return nil
}

func (s *Server) openapi(w http.ResponseWriter, _ *http.Request, _ *caller) error {
	w.Header().Set("Content-Type", "application/yaml")
	_, err := w.Write(schemas.OpenAPI)
	return err
}
