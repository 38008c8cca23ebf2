package server

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/runtime/api"
)

// A reconnect to the stream of a run that has ended, from its last
// event, is answered 204 with no body, which tells an EventSource to
// stop reconnecting (an empty 200 has it reconnect every few seconds for
// ever); from an earlier event it gets the rest, and with no
// Last-Event-ID the whole recorded stream.
func TestEndedStreamTellsClientsToStop(t *testing.T) {
	h := newHarness(t, "sqlite", nil)
	interviewless(t, h, "s1")
	run, err := h.acme.RunWait(ctx, "s1", api.StartRun{Input: map[string]any{"name": "Ada"}})
	if err != nil {
		t.Fatal(err)
	}
	get := func(last string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", h.base+"/v1/threads/s1/runs/"+run.ID+"/stream", nil)
		req.Header.Set("Authorization", "Bearer "+h.acme.Key)
		req.Header.Set("Accept", "text/event-stream")
		if last != "" {
			req.Header.Set("Last-Event-ID", last)
		}
		resp, err := h.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, all := get("")
	if code != 200 || !strings.Contains(all, "event: run_end") {
		t.Fatalf("the whole stream: %d %q", code, all)
	}
	ids := 0
	for _, line := range strings.Split(all, "\n") {
		if strings.HasPrefix(line, "id: ") {
			ids++
		}
	}
	last := strconv.Itoa(ids)
	if code, body := get(last); code != http.StatusNoContent || body != "" {
		t.Fatalf("a reconnect after the last event: %d %q", code, body)
	}
	if code, body := get(strconv.Itoa(ids - 1)); code != 200 || strings.Count(body, "id: ") != 1 || !strings.Contains(body, "event: run_end") {
		t.Fatalf("a reconnect before the last event: %d %q", code, body)
	}
	n := 0
	for _, err := range h.acme.JoinStream(ctx, "s1", run.ID, last) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 0 {
		t.Fatalf("the client read %d events after the last", n)
	}
}
