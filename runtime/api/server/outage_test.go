package server

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

// A step whose commit (carrying the run's events) committed but whose
// reply was lost hands its events back to the run's writer, which finds
// their numbers taken: by its own events, not by another server's. The
// run goes on and ends once, its events one sequence, and the server
// logs no takeover.
func TestALostReplyIsNotATakeover(t *testing.T) {
	url, proxy := storetest.PostgresLosingReplies(t)
	var logs logBuffer
	h := newHarness(t, url, nil, func(c *Config) { c.Logger = slog.New(slog.NewJSONHandler(&logs, nil)) })
	cand := values(t, flowsDir+"/examples/candidate.yaml")
	if _, err := h.acme.CreateThread(ctx, api.CreateThread{ID: "ada", Flow: "interview", Values: cand}); err != nil {
		t.Fatal(err)
	}
	// the commit of the run's first checkpoint, with its run_start
	proxy.LoseIf(func(req []byte) bool {
		return bytes.Contains(req, []byte("trellis_commit_event_rows")) && bytes.Contains(req, []byte(`"type":"run_start"`))
	}, "", 1)
	r, err := h.acme.RunWait(ctx, "ada", api.StartRun{})
	if err != nil || r.Status != api.RunSucceeded {
		t.Fatalf("the greeting: %+v %v\n%s", r, err, logs.String())
	}
	if proxy.Lost() != 1 {
		t.Fatalf("the proxy lost %d replies, want 1", proxy.Lost())
	}
	evs, err := h.srv.cat.Events(ctx, r.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	ends := 0
	for i, ev := range evs {
		if ev.Seq != int64(i+1) {
			t.Fatalf("event %d has number %d", i+1, ev.Seq)
		}
		if typ := eventType(ev.Data); typ == "run_end" || typ == "run_error" {
			ends++
		}
	}
	if ends != 1 || eventType(evs[len(evs)-1].Data) != "run_end" {
		t.Fatalf("the run's %d events end %d times, last %s", len(evs), ends, eventType(evs[len(evs)-1].Data))
	}
	if strings.Contains(logs.String(), "taken over") {
		t.Fatalf("the server took its own events for another's:\n%s", logs.String())
	}
}
