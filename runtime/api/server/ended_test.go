package server

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

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

// A run whose end is recorded stays registered with its server a moment
// after its waiters are answered: a reconnect from its last event in
// that moment is answered 204 too, as the end recorded says, not an
// empty 200 (the run held registered here for as long as the test
// needs, as it is between its end and its removal).
func TestEndedStreamWhileStillRegistered(t *testing.T) {
	s := serve(t, openRuntime(t, storeAddr(t, "sqlite")), stepFlows(t, 300), "")
	if _, err := s.acme.CreateThread(ctx, api.CreateThread{ID: "t1", Flow: "steps"}); err != nil {
		t.Fatal(err)
	}
	run, err := s.acme.StartRun(ctx, "t1", api.StartRun{Input: map[string]any{"said": "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	var lr *liveRun
	for lr == nil {
		if lr = s.srv.runs.get(run.ID); lr == nil {
			if ended, err := s.acme.Run(ctx, "t1", run.ID); err != nil || ended.Status != "running" && ended.Status != "queued" {
				t.Fatalf("the run ended before it was seen registered (its steps sleep): %v %+v", err, ended)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if _, err := s.acme.Join(ctx, "t1", run.ID); err != nil {
		t.Fatal(err)
	}
	<-lr.done
	// as between the end and the removal
	s.srv.runs.mu.Lock()
	s.srv.runs.live[run.ID] = lr
	s.srv.runs.mu.Unlock()
	defer func() {
		s.srv.runs.mu.Lock()
		delete(s.srv.runs.live, run.ID)
		s.srv.runs.mu.Unlock()
	}()
	stream := func(last string) (int, string) {
		t.Helper()
		st, _, b := rawStream(t, s, "/v1/threads/t1/runs/"+run.ID+"/stream", last)
		return st, b
	}
	code, all := stream("")
	if code != 200 || !strings.Contains(all, "event: run_end") {
		t.Fatalf("the whole stream: %d %q", code, all)
	}
	ids := strings.Count(all, "\nid: ") + map[bool]int{true: 1}[strings.HasPrefix(all, "id: ")]
	if code, body := stream(strconv.Itoa(ids)); code != http.StatusNoContent || body != "" {
		t.Fatalf("a reconnect after the last event while the run is still registered: %d %q", code, body)
	}
	if code, body := stream(strconv.Itoa(ids - 1)); code != 200 || !strings.Contains(body, "event: run_end") || strings.Count(body, "id: ") != 1 {
		t.Fatalf("a reconnect before the last event while the run is still registered: %d %q", code, body)
	}
}

// rawStream GETs a stream with the acme key and a Last-Event-ID (none
// when last is "").
func rawStream(t *testing.T, s *served, path, last string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", s.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.acme.Key)
	req.Header.Set("Accept", "text/event-stream")
	if last != "" {
		req.Header.Set("Last-Event-ID", last)
	}
	resp, err := s.acme.HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}
