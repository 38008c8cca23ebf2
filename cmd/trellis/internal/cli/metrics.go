package cli

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/trellisflow/trellis/nodes/sandbox"
)

// SandboxMetrics are the gauges of the process's code sandbox that the
// command's servers report at /metrics: executions running and waiting
// for a place (0 with no sandbox). A scrape reads the sandbox's pool if
// a flow has made it, and never makes it.
func SandboxMetrics() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "trellis_sandbox_running",
			Help: "Code sandbox executions running in this process."}, func() float64 {
			r, _ := sandbox.EnvStats()
			return float64(r)
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "trellis_sandbox_queued",
			Help: "Code sandbox executions waiting for a place (TRELLIS_SANDBOX_CONCURRENCY) in this process."}, func() float64 {
			_, q := sandbox.EnvStats()
			return float64(q)
		}),
	}
}
