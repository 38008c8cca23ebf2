package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/nodes/llm"
	"github.com/trellisflow/trellis/nodes/llm/llmtest"
	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/schema"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

// TestMain stops the PostgreSQL cluster the tests started, and fails
// them when a goroutine outlives them.
func TestMain(m *testing.M) { os.Exit(storetest.MainNoLeaks(shared{m})) }

// shared runs the tests, then stops what they share.
type shared struct{ m *testing.M }

func (s shared) Run() int {
	code := s.m.Run()
	if fuzzSrv != nil {
		fuzzSrv.Shutdown(context.Background())
		fuzzSrv.cfg.Runtime.(*trellis.Runtime).Close()
	}
	return code
}

const flowsDir = "../../../flows"

// harness is a server on a loopback port over a real store, a scripted
// model server, and clients for three callers: an admin (tenant ops), a
// tenant (acme) and another tenant (globex).
type harness struct {
	t      *testing.T
	srv    *Server
	base   string
	model  *llmtest.Server
	admin  *api.Client
	acme   *api.Client
	globex *api.Client
	// http checks every response against schemas/openapi.yaml.
	http *http.Client
	stop func()
}

// backends are the stores the end-to-end tests run on.
func backends() []struct{ name, addr string } {
	return []struct{ name, addr string }{{"sqlite", "sqlite"}, {"postgres", "postgres"}}
}

func storeAddr(t *testing.T, kind string) string {
	switch kind {
	case "sqlite":
		return "sqlite:" + filepath.Join(t.TempDir(), "trellis.db")
	case "postgres":
		return storetest.Postgres(t)
	}
	if strings.HasPrefix(kind, "sqlite:") || strings.HasPrefix(kind, "postgres:") {
		// a store another harness shares
		return kind
	}
	return "memory"
}

func newHarness(t *testing.T, backend string, rules []llmtest.Rule, opts ...func(*Config)) *harness {
	t.Helper()
	model := llmtest.New(rules...)
	ms := httptest.NewServer(model)
	t.Cleanup(ms.Close)
	reg := all.WithProvider(func() *llm.Provider {
		return &llm.Provider{BaseURL: ms.URL + "/v1", APIKey: "sk-test", Backoff: time.Millisecond, Retries: 1}
	})
	ctx, cancel := context.WithCancel(context.Background())
	rt, err := trellis.Open(ctx, storeAddr(t, backend))
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Runtime: rt, FlowsDir: flowsDir, Kinds: reg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		StopTimeout: 5 * time.Second, Studio: smallPage("studio")}
	for _, opt := range opts {
		opt(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	h := &harness{t: t, srv: srv, base: "http://" + ln.Addr().String(), model: model}
	hc := checkedClient(t)
	h.http = hc
	key := func(tenant string, admin bool) *api.Client {
		_, secret, err := CreateKey(ctx, srv.cat, tenant, tenant+" key", admin)
		if err != nil {
			t.Fatal(err)
		}
		c := api.NewClient(h.base, secret)
		c.HTTP = hc
		return c
	}
	h.admin, h.acme, h.globex = key("ops", true), key("acme", false), key("globex", false)
	h.stop = func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
		rt.Close()
	}
	t.Cleanup(func() {
		select {
		case <-ctx.Done():
		default:
			h.stop()
		}
	})
	return h
}

func readRules(t *testing.T, path string) []llmtest.Rule {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rules []llmtest.Rule
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatal(err)
	}
	return rules
}

func values(t *testing.T, path string) map[string]any {
	v, err := schema.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return v.(map[string]any)
}

var ctx = context.Background()

// interviewTurns is what the candidate says, turn by turn, to the scripted
// model of flows/examples/interview.model.yaml.
var interviewTurns = []struct{ say, code string }{
	{}, // the interviewer speaks first
	{say: "I build data pipelines in Go and PostgreSQL at Northwind."},
	{say: "Backpressure was the hard part; we added bounded queues."},
	{say: "Sorry, what do you mean?"},
	{say: "I meant the indexer's write path: batching and retries."},
	{say: "Could we do a coding exercise?"},
	{say: "Here it is.", code: "def top_k(words, k):\n    return sorted(words)[:k]\n"},
	{say: "It is O(n log n); I would test ties first."},
	{say: "We cut search latency tenfold."},
	{say: "I wrote the cache invalidation myself."},
	{say: "The flag service served forty teams."},
	{say: "Let us wrap up here, please."},
}

// A whole interview through the API: a thread made with a resume, turns
// until closing, one of them streamed and picked up again with
// Last-Event-ID after the connection dropped.
func TestInterviewThroughTheAPI(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			h := newHarness(t, b.addr, readRules(t, flowsDir+"/examples/interview.model.yaml"))
			th, err := h.acme.CreateThread(ctx, api.CreateThread{ID: "ada", Flow: "interview",
				Values: values(t, flowsDir+"/examples/candidate.yaml"), Metadata: map[string]string{"candidate": "ada"}})
			if err != nil {
				t.Fatal(err)
			}
			if th.ID != "ada" || th.Status != api.ThreadIdle || th.Checkpoint != 1 {
				t.Fatalf("thread %+v", th)
			}
			var last *api.Run
			for i, turn := range interviewTurns {
				in := map[string]any{}
				if i > 0 {
					in["last_response"] = turn.say
				}
				if turn.code != "" {
					in["current_code"] = turn.code
				}
				if i == 3 {
					last = streamWithReconnect(t, h, "ada", in)
					continue
				}
				if last, err = h.acme.RunWait(ctx, "ada", api.StartRun{Input: in}); err != nil {
					t.Fatalf("turn %d: %v", i, err)
				}
				if last.Status != api.RunSucceeded {
					t.Fatalf("turn %d: %+v", i, last)
				}
			}
			if last.State["phase"] != "done" || last.State["next_message"] != "Thank you Ada! Overall you scored 4.5 out of 10. Good luck!" {
				t.Fatalf("the interview did not close: %v / %v", last.State["phase"], last.State["next_message"])
			}
			runs, err := h.acme.Runs(ctx, "ada")
			if err != nil || len(runs) != len(interviewTurns) {
				t.Fatalf("%d runs, %v", len(runs), err)
			}
			for _, r := range runs {
				if r.Status != api.RunSucceeded || r.FlowVersion == "" || r.Flow != "interview" {
					t.Fatalf("run %+v", r)
				}
			}
			// every checkpoint of a run names the API's run
			hist, err := h.acme.History(ctx, "ada", map[string][]string{"run": {last.ID}})
			if err != nil || len(hist) < 2 {
				t.Fatalf("history of the last run: %d checkpoints, %v", len(hist), err)
			}
			st, err := h.acme.State(ctx, "ada", 0)
			if err != nil || st.Checkpoint != last.Checkpoint || st.Values["phase"] != "done" {
				t.Fatalf("state %+v %v", st, err)
			}
			for _, c := range h.model.Calls() {
				if !c.Authorized || c.Rule < 0 {
					t.Fatalf("model call unauthorised or unscripted: %+v", c)
				}
			}
			// the metrics count what happened: every run, every model
			// call (the test server's count), tokens and commits
			m := scrape(t, h)
			want := map[string]float64{
				`trellis_runs_total{flow="interview",outcome="succeeded"}`: float64(len(interviewTurns)),
				`trellis_node_usage_total{kind="llm",measure="calls"}`:     float64(len(h.model.Calls())),
				`trellis_queued_runs`: 0,
				`trellis_active_runs`: 0,
			}
			for k, v := range want {
				if got, ok := m[k]; !ok || got != v {
					t.Errorf("%s = %v (reported: %v), want %v", k, got, ok, v)
				}
			}
			for _, k := range []string{`trellis_node_usage_total{kind="llm",measure="input_tokens"}`, `trellis_node_usage_total{kind="llm",measure="output_tokens"}`,
				`trellis_store_commit_seconds_count`, `trellis_node_duration_seconds_count{kind="llm"}`} {
				if m[k] <= 0 {
					t.Errorf("%s = %v, want more than 0", k, m[k])
				}
			}
			// a store that counts its write transactions counts each
			// step's commit among them
			if n, ok := m[`trellis_store_write_transactions_total`]; ok != (b.name == "sqlite") || ok && n < m[`trellis_store_commit_seconds_count`] {
				t.Errorf("write transactions %v (reported: %v), commits %v", n, ok, m[`trellis_store_commit_seconds_count`])
			}
		})
	}
}

// scrape reads the server's metrics in Prometheus's text format: name
// with labels, value.
func scrape(t *testing.T, h *harness) map[string]float64 {
	t.Helper()
	resp, err := h.http.Get(h.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	out := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// streamWithReconnect runs a turn streamed, drops the connection after a
// few events, and reads the rest with Last-Event-ID: every event arrives
// once, in order, and the stream ends with run_end.
func streamWithReconnect(t *testing.T, h *harness, thread string, in map[string]any) *api.Run {
	t.Helper()
	sctx, drop := context.WithCancel(ctx)
	var ids []int
	var run, lastID string
	for ev, err := range h.acme.StreamRun(sctx, thread, api.StartRun{Input: in}) {
		if err != nil {
			t.Fatal(err)
		}
		run, lastID = ev.Run, ev.ID
		n, _ := strconv.Atoi(ev.ID)
		ids = append(ids, n)
		if len(ids) == 3 {
			break
		}
	}
	drop()
	if run == "" {
		t.Fatal("the stream named no run")
	}
	var types []string
	for ev, err := range h.acme.JoinStream(ctx, thread, run, lastID) {
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(ev.ID)
		ids = append(ids, n)
		types = append(types, string(ev.Event.Type))
		if ev.Event.Thread != thread {
			t.Fatalf("event names thread %q", ev.Event.Thread)
		}
	}
	for i, id := range ids {
		if id != i+1 {
			t.Fatalf("event ids %v: not 1..n once each", ids)
		}
	}
	if len(types) == 0 || types[len(types)-1] != "run_end" {
		t.Fatalf("the stream did not end with run_end: %v", types)
	}
	r, err := h.acme.Join(ctx, thread, run)
	if err != nil || r.Status != api.RunSucceeded {
		t.Fatalf("joined run %+v %v", r, err)
	}
	// a finished run's stream is its recorded events
	n := 0
	for _, err := range h.acme.JoinStream(ctx, thread, run, "") {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != len(ids) {
		t.Fatalf("the recorded stream has %d events, the live one %d", n, len(ids))
	}
	return r
}

func TestResumeReviewThroughTheAPI(t *testing.T) {
	h := newHarness(t, "sqlite", nil)
	if _, err := h.acme.CreateThread(ctx, api.CreateThread{ID: "cv", Flow: "resume_review", Values: values(t, flowsDir+"/examples/resume.yaml")}); err != nil {
		t.Fatal(err)
	}
	r, err := h.acme.RunWait(ctx, "cv", api.StartRun{})
	if err != nil || r.Status != api.RunSucceeded {
		t.Fatalf("review %+v %v", r, err)
	}
	if r.State["current_iteration"] == nil || r.State["portfolio"] == nil {
		t.Fatalf("the review did not reach the portfolio: %v", r.State)
	}
}

// slowGreeting makes the interview's first node take a while.
func slowGreeting(d time.Duration) []llmtest.Rule {
	return []llmtest.Rule{{Match: "introduce themselves", Replies: []llmtest.Reply{{Content: "Welcome!", Delay: d}}}}
}

func interviewThread(t *testing.T, h *harness, id string) {
	t.Helper()
	if _, err := h.acme.CreateThread(ctx, api.CreateThread{ID: id, Flow: "interview", Values: values(t, flowsDir+"/examples/candidate.yaml")}); err != nil {
		t.Fatal(err)
	}
}

// waitRunning waits for a background run to start.
func waitRunning(t *testing.T, c *api.Client, thread, run string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		r, err := c.Run(ctx, thread, run)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status == api.RunRunning {
			return
		}
	}
	t.Fatalf("run %s did not start in a minute", run)
}

// A run cancelled mid-step leaves the thread with an unfinished run,
// which a later run resumes.
func TestCancelLeavesAResumableThread(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			h := newHarness(t, b.addr, slowGreeting(2*time.Second))
			interviewThread(t, h, "c1")
			r, err := h.acme.StartRun(ctx, "c1", api.StartRun{})
			if err != nil {
				t.Fatal(err)
			}
			waitRunning(t, h.acme, "c1", r.ID)
			for len(h.model.Calls()) == 0 { // the greeting is in progress
				time.Sleep(5 * time.Millisecond)
			}
			r, err = h.acme.Cancel(ctx, "c1", r.ID)
			if err != nil || r.Status != api.RunCancelled {
				t.Fatalf("cancelled run %+v %v", r, err)
			}
			th, _ := h.acme.Thread(ctx, "c1")
			if th.Status != api.ThreadUnfinished {
				t.Fatalf("thread after the cancel: %+v", th)
			}
			if _, err := h.acme.RunWait(ctx, "c1", api.StartRun{Input: map[string]any{"last_response": "hi"}}); !api.IsCode(err, api.CodeUnfinished) {
				t.Fatalf("new input on an unfinished thread: %v", err)
			}
			r, err = h.acme.RunWait(ctx, "c1", api.StartRun{Resume: true})
			if err != nil || r.Status != api.RunSucceeded || r.State["next_message"] != "Welcome!" {
				t.Fatalf("resumed run %+v %v", r, err)
			}
		})
	}
}

// A busy thread: reject answers 409, enqueue runs after, interrupt stops
// the running one at its step boundary and gives up what it left.
func TestBusyThreadPolicies(t *testing.T) {
	// the greeting and the turn that asks for an exercise take their time,
	// so that later runs find them running
	h := newHarness(t, "sqlite", append(slowGreeting(500*time.Millisecond),
		llmtest.Rule{Match: "Could we do a coding exercise?", Replies: []llmtest.Reply{{Content: "Sure.", Delay: 500 * time.Millisecond}}}))
	interviewThread(t, h, "b1")
	first, err := h.acme.StartRun(ctx, "b1", api.StartRun{})
	if err != nil {
		t.Fatal(err)
	}
	waitRunning(t, h.acme, "b1", first.ID)
	say := map[string]any{"last_response": "I build data pipelines."}
	_, err = h.acme.StartRun(ctx, "b1", api.StartRun{Input: say})
	var busy *api.Error
	if !errors.As(err, &busy) || busy.Code != api.CodeThreadBusy {
		t.Fatalf("reject: %v", err)
	}
	// the refusal names the run that holds the thread, to wait on
	if d, _ := busy.Details.(map[string]any); d["run"] != first.ID || d["status"] != "running" || !strings.Contains(busy.Message, first.ID) {
		t.Fatalf("reject: %v %v", busy, busy.Details)
	}
	// so does the refusal to delete the thread
	if err := h.acme.DeleteThread(ctx, "b1"); !errors.As(err, &busy) || busy.Code != api.CodeThreadBusy {
		t.Fatalf("delete: %v", err)
	} else if d, _ := busy.Details.(map[string]any); d["run"] != first.ID || !strings.Contains(busy.Message, first.ID) {
		t.Fatalf("delete: %v %v", busy, busy.Details)
	}
	queued, err := h.acme.StartRun(ctx, "b1", api.StartRun{Input: say, OnBusy: api.OnBusyEnqueue})
	if err != nil || queued.Status != api.RunQueued {
		t.Fatalf("enqueue: %+v %v", queued, err)
	}
	done, err := h.acme.Join(ctx, "b1", queued.ID)
	if err != nil || done.Status != api.RunSucceeded {
		t.Fatalf("the queued run: %+v %v", done, err)
	}
	if r, _ := h.acme.Run(ctx, "b1", first.ID); r.Status != api.RunSucceeded {
		t.Fatalf("the first run: %+v", r)
	}

	// interrupt: the running turn stops between steps; its remainder is
	// abandoned (recorded) and the new turn runs
	slow, err := h.acme.StartRun(ctx, "b1", api.StartRun{Input: map[string]any{"last_response": "Could we do a coding exercise?"}})
	if err != nil {
		t.Fatal(err)
	}
	waitRunning(t, h.acme, "b1", slow.ID)
	next, err := h.acme.RunWait(ctx, "b1", api.StartRun{Input: say, OnBusy: api.OnBusyInterrupt})
	if err != nil || next.Status != api.RunSucceeded {
		t.Fatalf("interrupting run %+v %v", next, err)
	}
	r, _ := h.acme.Run(ctx, "b1", slow.ID)
	if r.Status != api.RunCancelled && r.Status != api.RunSucceeded {
		t.Fatalf("interrupted run %+v", r)
	}
	if r.Status == api.RunCancelled {
		hist, err := h.acme.History(ctx, "b1", map[string][]string{"source": {"abandon"}})
		if err != nil || len(hist) != 1 {
			t.Fatalf("the interrupted run's remainder was not abandoned: %v %v", hist, err)
		}
	}
}

// A thread another process holds (a trellis run on the same store, or a
// server that died, until its lease ends) is refused naming the holder
// and the lease's end, as the command line does.
func TestBusyThreadNamesTheLeaseHolder(t *testing.T) {
	h := newHarness(t, "sqlite", nil)
	interviewThread(t, h, "held")
	holder := "trellis run (pid 42 on elsewhere)"
	if err := h.srv.cfg.Runtime.(*trellis.Runtime).Store().Acquire(ctx, "acme/held", holder, time.Minute); err != nil {
		t.Fatal(err)
	}
	_, err := h.acme.StartRun(ctx, "held", api.StartRun{})
	var busy *api.Error
	if !errors.As(err, &busy) || busy.Code != api.CodeThreadBusy {
		t.Fatalf("a held thread: %v", err)
	}
	d, _ := busy.Details.(map[string]any)
	until, perr := time.Parse(time.RFC3339, fmt.Sprint(d["until"]))
	if d["holder"] != holder || perr != nil || until.Before(time.Now().Add(30*time.Second)) || until.After(time.Now().Add(2*time.Minute)) ||
		!strings.Contains(busy.Message, holder) {
		t.Fatalf("a held thread: %v %v", busy, busy.Details)
	}
}

// Bad requests get the error shape with the right status.
func TestErrors(t *testing.T) {
	h := newHarness(t, "memory", nil)
	interviewThread(t, h, "e1")
	cases := []struct {
		method, path, ctype, body string
		status                    int
		code                      api.Code
	}{
		{"POST", "/v1/threads", "application/json", `{"flow": "interview", "id": "x",`, 400, api.CodeBadRequest},
		{"POST", "/v1/threads", "application/json", `{"flow": "interview", "nope": 1}`, 400, api.CodeBadRequest},
		{"POST", "/v1/threads", "application/json", `{"flow": 5}`, 400, api.CodeBadRequest},
		{"POST", "/v1/threads", "application/json", `{"flow": "interview"} {}`, 400, api.CodeBadRequest},
		{"POST", "/v1/threads", "text/plain", `{"flow": "interview"}`, 415, api.CodeUnsupportedMedia},
		{"POST", "/v1/threads", "application/json", `{"flow": "nope"}`, 404, api.CodeNotFound},
		{"POST", "/v1/threads", "application/json", `{"flow": "interview", "id": "bad/id"}`, 422, api.CodeInvalidInput},
		{"POST", "/v1/threads", "application/json", `{"flow": "interview", "id": "e1"}`, 409, api.CodeThreadExists},
		{"POST", "/v1/threads", "application/json", `{"flow": "interview", "values": {"max_questions": "many"}}`, 422, api.CodeInvalidInput},
		{"POST", "/v1/threads", "application/json", `{"flow": "interview", "values": {"nope": 1}}`, 422, api.CodeInvalidInput},
		{"POST", "/v1/threads/e1/runs/wait", "application/json", `{"input": {"nope": 1}}`, 422, api.CodeInvalidInput},
		{"POST", "/v1/threads/e1/runs/wait", "application/json", `{"on_busy": "sometimes"}`, 422, api.CodeInvalidInput},
		{"POST", "/v1/threads/e1/runs", "application/json", `{"input": "` + strings.Repeat("a", 5<<20) + `"}`, 413, api.CodeTooLarge},
		{"GET", "/v1/threads/e1/state?at=999", "", ``, 404, api.CodeNotFound},
		{"GET", "/v1/threads/e1/state?at=x", "", ``, 400, api.CodeBadRequest},
		{"GET", "/v1/threads?limit=0", "", ``, 400, api.CodeBadRequest},
		{"GET", "/v1/nothing", "", ``, 404, api.CodeNotFound},
		{"PUT", "/v1/threads/e1", "", ``, 405, api.CodeMethodNotAllowed},
		{"GET", "/v1/flows/interview/graph?format=png", "", ``, 400, api.CodeBadRequest},
	}
	for _, tc := range cases {
		req, _ := http.NewRequest(tc.method, h.base+tc.path, stringsReader(tc.body))
		if tc.ctype != "" {
			req.Header.Set("Content-Type", tc.ctype)
		}
		req.Header.Set("Authorization", "Bearer "+h.acme.Key)
		resp, err := h.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var eb api.ErrorBody
		err = decodeBody(resp, &eb)
		if resp.StatusCode != tc.status || err != nil || eb.Error == nil || eb.Error.Code != tc.code || eb.Error.Message == "" {
			t.Errorf("%s %s %.40s: %d %+v %v; want %d %s", tc.method, tc.path, tc.body, resp.StatusCode, eb.Error, err, tc.status, tc.code)
		}
	}
	// nothing half-made: the refused threads do not exist, in the catalog
	// or the store
	list, err := h.acme.Threads(ctx, api.ThreadQuery{})
	if err != nil || len(list.Threads) != 1 {
		t.Fatalf("threads after refused creations: %+v %v", list, err)
	}
	snaps, _ := h.srv.cfg.Runtime.(*trellis.Runtime).Threads(ctx, store.ThreadOptions{})
	if len(snaps) != 1 {
		t.Fatalf("%d threads in the store", len(snaps))
	}
}

func TestThreadsListForkUpdateDelete(t *testing.T) {
	h := newHarness(t, "sqlite", nil)
	for i := range 5 {
		md := map[string]string{"batch": strconv.Itoa(i % 2)}
		if _, err := h.acme.CreateThread(ctx, api.CreateThread{ID: "t" + strconv.Itoa(i), Flow: "greet", Metadata: md}); err != nil {
			t.Fatal(err)
		}
	}
	var ids []string
	q := api.ThreadQuery{Flow: "greet", Limit: 2}
	for {
		page, err := h.acme.Threads(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, th := range page.Threads {
			ids = append(ids, th.ID)
		}
		if page.Next == "" {
			break
		}
		q.After = page.Next
	}
	if len(ids) != 5 {
		t.Fatalf("paged through %v", ids)
	}
	page, _ := h.acme.Threads(ctx, api.ThreadQuery{Metadata: map[string]string{"batch": "1"}})
	if len(page.Threads) != 2 {
		t.Fatalf("by metadata: %+v", page.Threads)
	}
	if page, _ := h.globex.Threads(ctx, api.ThreadQuery{}); len(page.Threads) != 0 {
		t.Fatalf("another tenant lists %d threads", len(page.Threads))
	}
	// the same id is another tenant's own thread
	if _, err := h.globex.CreateThread(ctx, api.CreateThread{ID: "t0", Flow: "greet"}); err != nil {
		t.Fatalf("globex's t0: %v", err)
	}
	for _, name := range []string{"Ada", "Grace"} {
		if r, err := h.acme.RunWait(ctx, "t0", api.StartRun{Input: map[string]any{"name": name}}); err != nil || r.Status != api.RunSucceeded {
			t.Fatalf("run %+v %v", r, err)
		}
	}
	hist, err := h.acme.History(ctx, "t0", map[string][]string{"source": {"step"}})
	if err != nil || len(hist) != 2 {
		t.Fatalf("history %v %v", hist, err)
	}
	fork, err := h.acme.Fork(ctx, "t0", api.Fork{At: hist[1].Seq, ID: "f0"})
	if err != nil || fork.Flow != "greet" {
		t.Fatalf("fork %+v %v", fork, err)
	}
	st, _ := h.acme.State(ctx, "f0", 0)
	if st.Values["greetings"] != 1 {
		t.Fatalf("forked state %v", st.Values)
	}
	st, err = h.acme.Update(ctx, "f0", api.Update{As: "greet", Values: map[string]any{"greeting": "Hi!"}})
	if err != nil || st.Values["greeting"] != "Hi!" {
		t.Fatalf("update %+v %v", st, err)
	}
	if _, err := h.acme.Update(ctx, "f0", api.Update{As: "nobody", Values: map[string]any{"greeting": "x"}}); !api.IsCode(err, api.CodeInvalidInput) {
		t.Fatalf("update as a node that does not exist: %v", err)
	}
	if err := h.acme.DeleteThread(ctx, "t0"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.acme.Thread(ctx, "t0"); !api.IsCode(err, api.CodeNotFound) {
		t.Fatalf("deleted thread: %v", err)
	}
	if th, err := h.globex.Thread(ctx, "t0"); err != nil || th.ID != "t0" {
		t.Fatalf("globex's t0 after acme's was deleted: %+v %v", th, err)
	}
}

func TestFlowsAndReload(t *testing.T) {
	dir := t.TempDir()
	greet, err := os.ReadFile(flowsDir + "/examples/greet.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "greet.yaml"), greet, 0o644); err != nil {
		t.Fatal(err)
	}
	rt, _ := trellis.Open(ctx, "memory")
	defer rt.Close()
	srv, err := New(Config{Runtime: rt, FlowsDir: dir, Kinds: all.Registry(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(ctx)
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	_, secret, _ := CreateKey(ctx, srv.cat, "ops", "", true)
	c := api.NewClient(ts.URL, secret)
	flows, err := c.Flows(ctx)
	if err != nil || len(flows) != 1 || flows[0].Name != "greet" {
		t.Fatalf("flows %+v %v", flows, err)
	}
	f, err := c.Flow(ctx, "greet")
	if err != nil || f.Source != string(greet) || len(f.StateSchema) == 0 || !slicesEqual(f.Inputs, []string{"name"}) {
		t.Fatalf("flow %+v %v", f, err)
	}
	v1 := f.Version
	// a broken directory keeps the old set and says why
	os.WriteFile(filepath.Join(dir, "broken.yaml"), []byte("version: 1\nname: broken\nnodes: {}\n"), 0o644)
	if _, err := c.ReloadFlows(ctx); !api.IsCode(err, api.CodeInvalidFlow) {
		t.Fatalf("reload of a broken directory: %v", err)
	}
	if flows, _ := c.Flows(ctx); len(flows) != 1 {
		t.Fatalf("flows after a refused reload: %+v", flows)
	}
	os.Remove(filepath.Join(dir, "broken.yaml"))
	os.WriteFile(filepath.Join(dir, "greet.yaml"), append(greet, []byte("\n# changed\n")...), 0o644)
	if _, err := c.ReloadFlows(ctx); err != nil {
		t.Fatal(err)
	}
	if f, _ := c.Flow(ctx, "greet"); f.Version == v1 {
		t.Fatal("the version did not change with the file")
	}
	// validate a posted flow
	val, err := c.Validate(ctx, "x.yaml", greet)
	if err != nil || !val.Valid {
		t.Fatalf("validate %+v %v", val, err)
	}
	_, err = c.Validate(ctx, "x.yaml", []byte("version: 1\nname: x\nstate: {schema: ../../etc/passwd}\nnodes: {a: {kind: noop}}\nedges: [{from: START, to: a}, {from: a, to: END}]\n"))
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeInvalidFlow || ae.Status != 422 {
		t.Fatalf("an invalid flow: %v", err)
	}
}

func slicesEqual(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func stringsReader(s string) io.Reader { return strings.NewReader(s) }

func decodeBody(resp *http.Response, v any) error {
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}

// A path not in its clean form (a "." or ".." element, a doubled slash)
// is answered with the JSON error, 404 not_found naming its clean form,
// whatever its method: never the redirect to the clean path the
// ServeMux would make, which the API's document does not give.
func TestUncleanPathsAreNotFound(t *testing.T) {
	h := newHarness(t, "memory", nil)
	// not the client checking answers against the document: these paths
	// are none of its
	noRedirect := http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	// send sends path as it is written, with an empty JSON body, and
	// reads the answer, following no redirect
	send := func(method, path string) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, h.base+path, strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+h.acme.Key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, b
	}
	for _, c := range []struct{ method, path, clean string }{
		{"DELETE", "/v1/threads/./voice", "/v1/threads/voice"},
		{"GET", "/v1//flows", "/v1/flows"},
		{"GET", "/v1/threads/x/../y", "/v1/threads/y"},
		{"POST", "/v1/threads/%2E%2E/runs", "/v1/runs"},
		{"POST", "/v1/threads/%2e./runs", "/v1/runs"},
		{"GET", "/v1/threads/x//history", "/v1/threads/x/history"},
		{"GET", "/studio/./app.js", "/studio/app.js"},
		{"GET", "/v1/flows/./", "/v1/flows/"},
	} {
		resp, b := send(c.method, c.path)
		var eb api.ErrorBody
		if resp.StatusCode != http.StatusNotFound || resp.Header.Get("Location") != "" || json.Unmarshal(b, &eb) != nil || eb.Error == nil ||
			eb.Error.Code != api.CodeNotFound || !strings.Contains(eb.Error.Message, "("+c.clean+" is its clean form)") {
			t.Errorf("%s %s: %d %v %s", c.method, c.path, resp.StatusCode, resp.Header, b)
		}
	}
	// the clean form is served as ever
	if _, err := h.acme.Flows(ctx); err != nil {
		t.Fatal(err)
	}
	// an escaped slash is part of its element: the route reads the id
	// that holds it, and answers as it does any thread it does not have
	for _, id := range []string{"/x", "x/", "a/b"} {
		_, err := h.acme.Thread(ctx, id)
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Code != api.CodeNotFound || strings.Contains(ae.Message, "clean form") || !strings.Contains(ae.Message, "thread") {
			t.Errorf("the thread %q: %v", id, err)
		}
	}
	// one that is an escaped slash alone, which the ServeMux cannot
	// match, is a value no route takes: 400, documented for every route
	// with a path parameter (404 is not, for a voice grant's)
	for _, p := range []string{"/v1/threads/%2F", "/v1/threads/%2f/voice/grant", "/v1/flows/%2F/versions"} {
		resp, b := send("POST", p)
		var eb api.ErrorBody
		if resp.StatusCode != http.StatusBadRequest || json.Unmarshal(b, &eb) != nil || eb.Error == nil || eb.Error.Code != api.CodeBadRequest ||
			!strings.Contains(eb.Error.Message, "escaped slash alone") {
			t.Errorf("POST %s: %d %s", p, resp.StatusCode, b)
		}
	}
}
