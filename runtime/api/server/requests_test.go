package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/store"
)

// raw sends a request with the acme key (and an idempotency key when
// given) and returns the answer's status, headers and body.
func raw(t *testing.T, s *served, method, path, idemKey, body string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, s.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.acme.Key)
	req.Header.Set("Content-Type", "application/json")
	if idemKey != "" {
		req.Header.Set(api.IdempotencyKeyHeader, idemKey)
	}
	resp, err := s.acme.HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

func bodyCode(t *testing.T, body []byte) api.Code {
	t.Helper()
	var eb api.ErrorBody
	if err := json.Unmarshal(body, &eb); err != nil || eb.Error == nil {
		t.Fatalf("not an error body: %s", body)
	}
	return eb.Error.Code
}

// A creating request sent again with its idempotency key is answered as
// the first was, from the store, and makes nothing twice: a thread, a
// schedule, a memory document, a correction; the same key with another
// body or route is refused, and a malformed key too.
func TestIdempotentCreates(t *testing.T) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			s := serve(t, openRuntime(t, storeAddr(t, backend)), stepFlows(t, 1), "")
			// a thread with no id given: the key names the one made
			body := `{"flow": "steps", "metadata": {"by": "retry"}}`
			st1, h1, b1 := raw(t, s, "POST", "/v1/threads", "thread-key", body)
			if st1 != 201 || h1.Get(api.IdempotentReplayedHeader) != "" {
				t.Fatalf("first create: %d %s %v", st1, b1, h1)
			}
			// the same request, its members in another order and spacing
			st2, h2, b2 := raw(t, s, "POST", "/v1/threads", "thread-key", `{"metadata":{"by":"retry"},"flow":"steps"}`)
			if st2 != 201 || !bytes.Equal(b1, b2) || h2.Get(api.IdempotentReplayedHeader) != "true" {
				t.Fatalf("the create sent again: %d %s (replayed %q), want the first answer %s", st2, b2, h2.Get(api.IdempotentReplayedHeader), b1)
			}
			list, err := s.acme.Threads(ctx, api.ThreadQuery{})
			if err != nil || len(list.Threads) != 1 {
				t.Fatalf("threads after the create sent twice: %+v %v", list, err)
			}
			var th api.Thread
			_ = json.Unmarshal(b1, &th)
			// the key with another body, or on another route: refused
			if st, _, b := raw(t, s, "POST", "/v1/threads", "thread-key", `{"flow": "steps"}`); st != 422 || bodyCode(t, b) != api.CodeIdempotencyKeyReused {
				t.Fatalf("the key with another body: %d %s", st, b)
			}
			if st, _, b := raw(t, s, "PUT", "/v1/memory/items", "thread-key", body); st != 422 || bodyCode(t, b) != api.CodeIdempotencyKeyReused {
				t.Fatalf("the key on another route: %d %s", st, b)
			}
			for _, bad := range []string{strings.Repeat("k", api.MaxIdempotencyKey+1), "two words", "é"} {
				if st, _, b := raw(t, s, "POST", "/v1/threads", bad, `{"flow": "steps"}`); st != 400 || bodyCode(t, b) != api.CodeBadRequest {
					t.Errorf("key %q: %d %s, want 400", bad, st, b)
				}
			}
			// a correction: its checkpoint is written once
			upd := `{"as": "one", "values": {"n": 5}}`
			for i := range 2 {
				if st, _, b := raw(t, s, "POST", "/v1/threads/"+th.ID+"/update", "update-key", upd); st != 200 {
					t.Fatalf("update %d: %d %s", i, st, b)
				}
			}
			state, err := s.acme.State(ctx, th.ID, 0)
			if err != nil || fmt.Sprint(state.Values["n"]) != "5" {
				t.Fatalf("state after the update sent twice: %+v %v", state, err)
			}
			hist, err := s.acme.History(ctx, th.ID, nil)
			if err != nil || len(hist) != 2 {
				t.Fatalf("history after the update sent twice: %d checkpoints %v, want 2 (the thread's and one update)", len(hist), err)
			}
			// a memory document and a schedule
			put := `{"namespace": ["a"], "key": "k", "value": {"v": 1}}`
			st1, _, m1 := raw(t, s, "PUT", "/v1/memory/items", "memory-key", put)
			st2, h2, m2 := raw(t, s, "PUT", "/v1/memory/items", "memory-key", put)
			if st1 != 200 || st2 != 200 || !bytes.Equal(m1, m2) || h2.Get(api.IdempotentReplayedHeader) != "true" {
				t.Fatalf("memory put twice: %d %s / %d %s", st1, m1, st2, m2)
			}
			sched := `{"flow": "steps", "cron": "0 0 1 1 *", "input": {"said": "hi"}}`
			st1, _, s1 := raw(t, s, "POST", "/v1/schedules", "schedule-key", sched)
			st2, _, s2 := raw(t, s, "POST", "/v1/schedules", "schedule-key", sched)
			if st1 != 201 || st2 != 201 || !bytes.Equal(s1, s2) {
				t.Fatalf("schedule created twice: %d %s / %d %s", st1, s1, st2, s2)
			}
			if scs, err := s.acme.Schedules(ctx, "", 0); err != nil || len(scs.Schedules) != 1 {
				t.Fatalf("schedules after the create sent twice: %+v %v", scs, err)
			}
			// a new API key's secret is shown once: never kept
			admin := s.acme.Key
			if _, key, err := CreateKey(ctx, s.srv.cat, "acme", "", true); err == nil {
				s.acme.Key = key
				if st, _, b := raw(t, s, "POST", "/v1/keys", "key-key", `{"tenant": "acme"}`); st != 400 {
					t.Errorf("a key created with an idempotency key: %d %s, want 400", st, b)
				}
			}
			s.acme.Key = admin
		})
	}
}

// A run started with an idempotency key is made once: the request sent
// again waits for (or streams) the same run; a request refused before it
// made anything (the thread busy) leaves the key free, so that the same
// request sent again once the thread is free starts the run.
func TestIdempotentRuns(t *testing.T) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			// steps of a millisecond; slow's of two seconds, for a run that
			// holds its thread while the test needs it
			flows := flowsWith(t, map[string]string{"steps": strings.ReplaceAll(stepsFlow, `"MS"`, `"1"`),
				"slow": strings.ReplaceAll(strings.ReplaceAll(stepsFlow, `"MS"`, `"2000"`), "name: steps", "name: slow")})
			s := serve(t, openRuntime(t, storeAddr(t, backend)), flows, "")
			if _, err := s.acme.CreateThread(ctx, api.CreateThread{ID: "t", Flow: "steps"}); err != nil {
				t.Fatal(err)
			}
			body := `{"input": {"said": "once"}}`
			st1, _, w1 := raw(t, s, "POST", "/v1/threads/t/runs/wait", "turn-1", body)
			st2, h2, w2 := raw(t, s, "POST", "/v1/threads/t/runs/wait", "turn-1", body)
			var r1, r2 api.Run
			_ = json.Unmarshal(w1, &r1)
			_ = json.Unmarshal(w2, &r2)
			if st1 != 200 || st2 != 200 || r1.ID == "" || r1.ID != r2.ID || h2.Get(api.IdempotentReplayedHeader) != "true" {
				t.Fatalf("runs/wait twice: %d %s / %d %s", st1, w1, st2, w2)
			}
			runs, err := s.acme.Runs(ctx, "t")
			if err != nil || len(runs) != 1 {
				t.Fatalf("runs after runs/wait sent twice: %d %v", len(runs), err)
			}
			if n := r2.State["n"]; fmt.Sprint(n) != "3" {
				t.Fatalf("n after one turn sent twice: %v, want 3", n)
			}
			// the key's run on another route: refused
			if st, _, b := raw(t, s, "POST", "/v1/threads/t/runs", "turn-1", body); st != 422 || bodyCode(t, b) != api.CodeIdempotencyKeyReused {
				t.Fatalf("the key on runs: %d %s", st, b)
			}

			// a run holds the thread: a keyed run that rejects a busy
			// thread is refused, having made nothing
			if _, err := s.acme.CreateThread(ctx, api.CreateThread{ID: "held", Flow: "slow"}); err != nil {
				t.Fatal(err)
			}
			holder, err := s.acme.StartRun(ctx, "held", api.StartRun{Input: map[string]any{"said": "holds"}})
			if err != nil {
				t.Fatal(err)
			}
			busy := `{"input": {"said": "later"}}`
			if st, _, b := raw(t, s, "POST", "/v1/threads/held/runs", "turn-2", busy); st != 409 || bodyCode(t, b) != api.CodeThreadBusy {
				t.Fatalf("a keyed run on a busy thread: %d %s", st, b)
			}
			if done, err := s.acme.Join(ctx, "held", holder.ID); err != nil || done.Status != api.RunSucceeded {
				t.Fatalf("the run holding the thread: %+v %v", done, err)
			}
			// refused, it made nothing: the same request now starts the run
			st, _, b := raw(t, s, "POST", "/v1/threads/held/runs", "turn-2", busy)
			var started api.Run
			_ = json.Unmarshal(b, &started)
			if st != 202 || started.ID == "" || started.ID == holder.ID {
				t.Fatalf("the keyed run once the thread is free: %d %s", st, b)
			}
			// its stream, by the key: the same run from its first event
			events := 0
			for ev, err := range s.acme.StreamRun(api.WithIdempotencyKey(ctx, "turn-3"), "t", api.StartRun{Input: map[string]any{"said": "streamed"}, OnBusy: api.OnBusyEnqueue}) {
				if err != nil {
					t.Fatal(err)
				}
				events++
				_ = ev
			}
			var again int
			var runID string
			for ev, err := range s.acme.StreamRun(api.WithIdempotencyKey(ctx, "turn-3"), "t", api.StartRun{Input: map[string]any{"said": "streamed"}, OnBusy: api.OnBusyEnqueue}) {
				if err != nil {
					t.Fatal(err)
				}
				again++
				runID = ev.Run
			}
			if events == 0 || again != events {
				t.Fatalf("the keyed stream sent again: %d events, the first %d", again, events)
			}
			runs, err = s.acme.Runs(ctx, "t")
			if err != nil || len(runs) != 2 {
				t.Fatalf("runs: %d %v, want 2 (the waited one, the streamed one)", len(runs), err)
			}
			if runID == "" || runs[0].ID != runID {
				t.Fatalf("the stream sent again followed run %q; the newest run is %q", runID, runs[0].ID)
			}
		})
	}
}

// While the first request with a key is handled, the same request is
// refused (in use, with Retry-After); once its lock has lapsed (its
// server died before it answered), the same request takes it over.
func TestIdempotencyKeyInUse(t *testing.T) {
	s := serve(t, openRuntime(t, storeAddr(t, "sqlite")), stepFlows(t, 1), "")
	rq, _ := store.RequestsOf(s.rt.Store())
	body := `{"id": "taken", "flow": "steps"}`
	req, _ := http.NewRequest("POST", s.base+"/v1/threads", strings.NewReader(body))
	now := time.Now().UTC()
	// the record a request being handled (on another server) keeps
	held := &store.RequestRecord{Tenant: "acme", Key: "busy", Fingerprint: fingerprint(req, []byte(body)), Ref: "abc", Owner: "req_elsewhere",
		Locked: now.Add(time.Hour), Created: now}
	if _, fresh, err := rq.ReserveRequest(ctx, held, time.Time{}); err != nil || !fresh {
		t.Fatal(fresh, err)
	}
	st, h, b := raw(t, s, "POST", "/v1/threads", "busy", body)
	if st != 409 || bodyCode(t, b) != api.CodeIdempotencyKeyInUse || h.Get("Retry-After") == "" {
		t.Fatalf("the key in use: %d %s %v", st, b, h)
	}
	if _, err := s.acme.Thread(ctx, "taken"); !api.IsCode(err, api.CodeNotFound) {
		t.Fatalf("a request refused as in use made the thread: %v", err)
	}
	// its server died: the lock lapses, and the request is taken over
	if err := rq.TakeRequest(ctx, "acme", "busy", "req_elsewhere", "req_dead", now.Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	st, _, b = raw(t, s, "POST", "/v1/threads", "busy", body)
	if st != 201 {
		t.Fatalf("the request taken over: %d %s", st, b)
	}
	st, h, b2 := raw(t, s, "POST", "/v1/threads", "busy", body)
	if st != 201 || !bytes.Equal(b, b2) || h.Get(api.IdempotentReplayedHeader) != "true" {
		t.Fatalf("after the take-over: %d %s", st, b2)
	}
}

// Two servers sharing a store share its idempotency keys: a request
// answered by one is answered the same by the other.
func TestIdempotencyAcrossServers(t *testing.T) {
	addr := storeAddr(t, "postgres")
	flows := stepFlows(t, 1)
	a := serve(t, openRuntime(t, addr), flows, "")
	b := serve(t, openRuntime(t, addr), flows, a.acme.Key)
	body := `{"id": "shared", "flow": "steps"}`
	st1, _, b1 := raw(t, a, "POST", "/v1/threads", "k", body)
	st2, h2, b2 := raw(t, b, "POST", "/v1/threads", "k", body)
	if st1 != 201 || st2 != 201 || !bytes.Equal(b1, b2) || h2.Get(api.IdempotentReplayedHeader) != "true" {
		t.Fatalf("the create on two servers: %d %s / %d %s", st1, b1, st2, b2)
	}
}

// A body that stalls is answered 408 request_timeout once the body
// deadline has passed, and nothing is made; the connection is closed.
func TestStalledBodyIsATimeout(t *testing.T) {
	s := serve(t, openRuntime(t, "memory"), stepFlows(t, 1), "", func(c *Config) { c.BodyTimeout = 300 * time.Millisecond })
	for _, keyed := range []bool{false, true} {
		conn, err := net.Dial("tcp", strings.TrimPrefix(s.base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		// generous, against a hang only: the verdict is the answer
		_ = conn.SetDeadline(time.Now().Add(time.Minute))
		head := "POST /v1/threads HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + s.acme.Key + "\r\nContent-Type: application/json\r\nContent-Length: 100\r\n"
		if keyed {
			head += "Idempotency-Key: stalled\r\n"
		}
		if _, err := io.WriteString(conn, head+"\r\n"+`{"id": "stalled", "fl`); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("no answer to a stalled body: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestTimeout || bodyCode(t, b) != api.CodeRequestTimeout || !resp.Close {
			t.Fatalf("a stalled body: %d %s (close %v)", resp.StatusCode, b, resp.Close)
		}
		// the connection is closed: nothing more is read from it
		if n, err := conn.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
			t.Errorf("the connection after a 408: %d %v, want it closed", n, err)
		}
		conn.Close()
	}
	if _, err := s.acme.Thread(ctx, "stalled"); !api.IsCode(err, api.CodeNotFound) {
		t.Fatalf("a stalled request made its thread: %v", err)
	}
	if !strings.Contains(s.log.String(), "status=408") {
		t.Errorf("the stalled requests are not logged as 408:\n%s", s.log.String())
	}
	// a body that comes in time, on a route that then waits longer than
	// the body deadline: the deadline is lifted once the body is read
	if _, err := s.acme.CreateThread(ctx, api.CreateThread{ID: "slow", Flow: "steps"}); err != nil {
		t.Fatal(err)
	}
	slow := serve(t, s.rt, stepFlows(t, 400), s.acme.Key, func(c *Config) { c.BodyTimeout = 300 * time.Millisecond })
	if _, err := slow.acme.CreateThread(ctx, api.CreateThread{ID: "waits", Flow: "steps"}); err != nil {
		t.Fatal(err)
	}
	run, err := slow.acme.RunWait(ctx, "waits", api.StartRun{Input: map[string]any{"said": "hi"}})
	if err != nil || run.Status != api.RunSucceeded {
		t.Fatalf("a run waited for past the body deadline: %+v %v", run, err)
	}
}

// A request whose headers stall is dropped once the header deadline has
// passed.
func TestStalledHeadersAreDropped(t *testing.T) {
	s := serve(t, openRuntime(t, "memory"), stepFlows(t, 1), "", func(c *Config) { c.HeaderTimeout = 300 * time.Millisecond })
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Minute))
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n"); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(conn)
	if err != nil || len(b) > 0 && !strings.HasPrefix(string(b), "HTTP/1.1 408") {
		t.Fatalf("stalled headers: %q %v, want the connection closed", b, err)
	}
}

// A replay and a flow test sent again with their idempotency key are
// answered as the first were: one fork and one run for the replay, and a
// saved flow test is not refused for the files its first request wrote
// (as the same save sent without a key is).
func TestIdempotentReplayAndFlowTest(t *testing.T) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			s := serve(t, openRuntime(t, storeAddr(t, backend)), stepFlows(t, 1), "")
			if st, _, b := raw(t, s, "POST", "/v1/threads", "", `{"flow": "steps", "id": "orig"}`); st != 201 {
				t.Fatalf("thread: %d %s", st, b)
			}
			if st, _, b := raw(t, s, "POST", "/v1/threads/orig/runs/wait", "", `{"input": {"said": "hi"}}`); st != 200 {
				t.Fatalf("run: %d %s", st, b)
			}
			before, err := s.acme.Threads(ctx, api.ThreadQuery{})
			if err != nil {
				t.Fatal(err)
			}
			body := `{"at": 2, "replies": "recorded"}`
			st1, h1, b1 := raw(t, s, "POST", "/v1/threads/orig/replay", "replay-key", body)
			if st1 != 201 || h1.Get(api.IdempotentReplayedHeader) != "" {
				t.Fatalf("first replay: %d %s", st1, b1)
			}
			st2, h2, b2 := raw(t, s, "POST", "/v1/threads/orig/replay", "replay-key", `{"replies":"recorded","at":2}`)
			if st2 != 201 || !bytes.Equal(b1, b2) || h2.Get(api.IdempotentReplayedHeader) != "true" {
				t.Fatalf("the replay sent again: %d %s (replayed %q), want the first answer %s", st2, b2, h2.Get(api.IdempotentReplayedHeader), b1)
			}
			var rp api.Replayed
			if err := json.Unmarshal(b1, &rp); err != nil || rp.Run == nil {
				t.Fatalf("the replay's answer: %v %s", err, b1)
			}
			after, err := s.acme.Threads(ctx, api.ThreadQuery{})
			if err != nil || len(after.Threads) != len(before.Threads)+1 {
				t.Fatalf("threads after the replay sent twice: %d, before %d (%v)", len(after.Threads), len(before.Threads), err)
			}
			if runs, err := s.acme.Runs(ctx, rp.Thread.ID); err != nil || len(runs) != 1 {
				t.Fatalf("the replay's runs: %d %v", len(runs), err)
			}
			if st, _, b := raw(t, s, "POST", "/v1/threads/orig/replay", "replay-key", `{"at": 1}`); st != 422 || bodyCode(t, b) != api.CodeIdempotencyKeyReused {
				t.Fatalf("the replay's key with another body: %d %s", st, b)
			}

			// a flow test saved beside the flow (an admin's key saves)
			_, admin, err := CreateKey(ctx, s.srv.cat, "acme", "", true)
			if err != nil {
				t.Fatal(err)
			}
			own := s.acme.Key
			s.acme.Key = admin
			defer func() { s.acme.Key = own }()
			save := `{"save": true}`
			st1, _, f1 := raw(t, s, "POST", "/v1/threads/orig/flow-test", "test-key", save)
			st2, h2, f2 := raw(t, s, "POST", "/v1/threads/orig/flow-test", "test-key", save)
			if st1 != 200 || st2 != 200 || !bytes.Equal(f1, f2) || h2.Get(api.IdempotentReplayedHeader) != "true" {
				t.Fatalf("the flow test saved twice with its key: %d %s / %d %s", st1, f1, st2, f2)
			}
			var ft api.FlowTest
			if err := json.Unmarshal(f1, &ft); err != nil || !ft.Saved {
				t.Fatalf("the flow test: %v %s", err, f1)
			}
			if st, _, b := raw(t, s, "POST", "/v1/threads/orig/flow-test", "", save); st == 200 {
				t.Fatalf("the same save without a key was not refused for the file it would write over: %s", b)
			}
		})
	}
}
