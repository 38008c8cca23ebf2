package server

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trellisflow/trellis/nodes/all/alltest"
)

// A program's own collectors are reported with the server's metrics; one
// that takes a name of the server's is refused as the server is made.
func TestProgramMetrics(t *testing.T) {
	gauge := func(name string) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: "A program's own gauge."}, func() float64 { return 7 })
	}
	s := serve(t, openRuntime(t, "memory"), stepFlows(t, 1), "", func(c *Config) { c.Metrics = []prometheus.Collector{gauge("program_things")} })
	if m := scrapeURL(t, s.base); m["program_things"] != 7 || m["trellis_active_runs"] != 0 {
		t.Errorf("program_things %v", m["program_things"])
	}
	_, err := New(Config{Runtime: openRuntime(t, "memory"), FlowsDir: stepFlows(t, 1), Kinds: alltest.WithTestKinds(),
		Metrics: []prometheus.Collector{gauge("trellis_active_runs")}})
	if err == nil || !strings.Contains(err.Error(), "metrics") {
		t.Errorf("a collector of the server's name: %v", err)
	}
}
