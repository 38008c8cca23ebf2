package server

import (
	"testing"

	"github.com/trellisflow/trellis/nodes/sandbox"
)

// A scrape of /metrics reads the sandbox's statistics without making the
// process's sandbox: a server that never runs code opens no backend (one
// made by a scrape would never be closed).
func TestMetricsDoNotOpenTheSandbox(t *testing.T) {
	t.Setenv("TRELLIS_SANDBOX", "local")
	if err := sandbox.CloseEnv(); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, "sqlite", nil)
	m := scrape(t, h)
	if v, ok := m["trellis_sandbox_running"]; !ok || v != 0 {
		t.Errorf("trellis_sandbox_running %v (%v)", v, ok)
	}
	if sandbox.EnvOpen() {
		t.Error("a scrape of /metrics made the process's sandbox")
	}
}
