package llm_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/nodes/llm"
	"github.com/trellisflow/trellis/nodes/llm/llmtest"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/memory"
)

const reviewFlow = `version: 1
name: review
state:
  schema:
    type: object
    properties:
      resume: {type: string, default: "Go engineer, built a queue"}
      feedback:
        type: [object, "null"]
        default: null
      summary: {type: string, default: ""}
nodes:
  review:
    kind: llm
    prompt: review
    vars:
      words: "len(split(state.resume, ' '))"
    writes:
      feedback: output
  summarise:
    kind: llm
    prompt: summary
    writes:
      summary: "upper(output)"
edges:
  - {from: START, to: review}
  - {from: review, to: summarise}
  - {from: summarise, to: END}
`

const reviewPrompt = `---
temperature: 0
output:
  schema:
    type: object
    required: [score, notes]
    additionalProperties: false
    properties:
      score: {type: number, minimum: 0, maximum: 10}
      notes: {type: string}
fallback: {score: 5.0, notes: "review failed: {{.error}}"}
---
Review this resume of {{.vars.words}} words:
{{.state.resume}}
`

const summaryPrompt = `---
system: You summarise reviews.
fallback_expr: "'no summary (' + error + ')'"
---
Summarise: score {{.state.feedback.score}}.
`

// setup writes the flow and its prompts into a temporary directory and
// loads it with the given provider.
func setup(t *testing.T, p *llm.Provider) *flow.Graph {
	t.Helper()
	return setupFlow(t, p, reviewFlow)
}

func setupFlow(t *testing.T, p *llm.Provider, flowSrc string) *flow.Graph {
	t.Helper()
	dir := t.TempDir()
	write := func(name, body string) {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("flows/review.yaml", flowSrc)
	write("prompts/review.prompt", reviewPrompt)
	write("prompts/summary.prompt", summaryPrompt)
	reg := all.WithProvider(func() *llm.Provider { return p })
	g, dl := flow.Load(filepath.Join(dir, "flows/review.yaml"), reg)
	if dl.HasErrors() {
		t.Fatalf("load: %v", dl)
	}
	return g
}

func serve(t *testing.T, srv *llmtest.Server) *llm.Provider {
	ts := httptest.NewServer(srv)
	t.Cleanup(llm.CloseIdleConnections) // after the server, as it does http.DefaultTransport's
	t.Cleanup(ts.Close)
	return &llm.Provider{BaseURL: ts.URL + "/v1", APIKey: srv.Key, Backoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond, Retries: 2}
}

type recorder struct {
	mu     sync.Mutex
	events []engine.Event
}

func (r *recorder) observe(ev engine.Event) {
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
}

func (r *recorder) nodeEnd(node string) engine.Event {
	for _, ev := range r.events {
		if ev.Type == engine.NodeEnd && ev.Node == node {
			return ev
		}
	}
	return engine.Event{}
}

func runFlow(t *testing.T, g *flow.Graph, st store.Store, observe engine.Observer) map[string]any {
	t.Helper()
	res, err := engine.New(st).Run(context.Background(), g, engine.Request{Thread: "t", Observe: observe})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return res.State
}

func TestStructuredReplyAndText(t *testing.T) {
	srv := llmtest.New(
		llmtest.Rule{Match: "Review this resume", Replies: []llmtest.Reply{{Content: `{"score": 8, "notes": "solid"}`}}},
		llmtest.Rule{Match: "Summarise", Replies: []llmtest.Reply{{Content: "good resume"}}},
	)
	g := setup(t, serve(t, srv))
	state := runFlow(t, g, memory.New(), nil)
	fb := state["feedback"].(map[string]any)
	if fb["notes"] != "solid" || state["summary"] != "GOOD RESUME" {
		t.Fatalf("state = %v", state)
	}
	calls := srv.Calls()
	if len(calls) != 2 || !calls[0].Structured || calls[1].Structured {
		t.Fatalf("calls = %+v", calls)
	}
	if !strings.Contains(calls[0].Messages[0].Content, "of 5 words") {
		t.Errorf("vars not rendered: %q", calls[0].Messages[0].Content)
	}
	if calls[1].Messages[0].Role != "system" || calls[1].Messages[1].Content != "Summarise: score 8.\n" {
		t.Errorf("summary messages = %+v", calls[1].Messages)
	}
	if calls[0].Model != llm.DefaultModel {
		t.Errorf("model = %q", calls[0].Model)
	}
}

func TestRepairTurn(t *testing.T) {
	srv := llmtest.New(
		llmtest.Rule{Match: "Review this resume", Replies: []llmtest.Reply{
			{Content: `{"score": 12, "notes": "too generous"}`},
			{Content: "```json\n{\"score\": 9, \"notes\": \"fixed\"}\n```"},
		}},
	)
	g := setup(t, serve(t, srv))
	state := runFlow(t, g, memory.New(), nil)
	if fb := state["feedback"].(map[string]any); fb["notes"] != "fixed" {
		t.Fatalf("feedback = %v", fb)
	}
	calls := srv.Calls()
	repair := calls[1].Messages
	if len(repair) != 3 || repair[1].Role != "assistant" || !strings.Contains(repair[2].Content, "does not match the required JSON schema") ||
		!strings.Contains(repair[2].Content, "score") {
		t.Fatalf("repair turn = %+v", repair)
	}
}

func TestRepairFailsThenFallback(t *testing.T) {
	srv := llmtest.New(
		llmtest.Rule{Match: "Review this resume", Replies: []llmtest.Reply{{Content: `{"score": "high"`}}},
	)
	g := setup(t, serve(t, srv))
	rec := &recorder{}
	state := runFlow(t, g, memory.New(), rec.observe)
	fb := state["feedback"].(map[string]any)
	if fb["score"] != 5 || !strings.Contains(fb["notes"].(string), "review failed: model reply does not match the output schema after a repair turn") {
		t.Fatalf("feedback = %v", fb)
	}
	if ev := rec.nodeEnd("review"); ev.Degraded == "" {
		t.Fatalf("review not marked degraded: %+v", ev)
	}
	if ev := rec.nodeEnd("summarise"); ev.Degraded != "" {
		t.Fatalf("summarise marked degraded: %+v", ev)
	}
}

func TestRetryHonoursRetryAfter(t *testing.T) {
	srv := llmtest.New(
		llmtest.Rule{Match: "Review this resume", Replies: []llmtest.Reply{
			{Status: 429, RetryAfter: "1"},
			{Content: `{"score": 7, "notes": "ok"}`},
		}},
	)
	g := setup(t, serve(t, srv)) // backoff 1ms: only Retry-After makes it wait
	start := time.Now()
	state := runFlow(t, g, memory.New(), nil)
	if waited := time.Since(start); waited < 900*time.Millisecond {
		t.Fatalf("retried after %v, before Retry-After's 1s", waited)
	}
	if fb := state["feedback"].(map[string]any); fb["notes"] != "ok" {
		t.Fatalf("feedback = %v", fb)
	}
	calls := srv.Calls()
	if len(calls) != 3 || calls[0].Status != 429 || calls[1].Status != 0 {
		t.Fatalf("calls = %+v", calls)
	}
}

func TestPersistentFailureFallsBack(t *testing.T) {
	srv := llmtest.New(llmtest.Rule{Replies: []llmtest.Reply{{Status: 500}}})
	g := setup(t, serve(t, srv))
	rec := &recorder{}
	state := runFlow(t, g, memory.New(), rec.observe)
	fb := state["feedback"].(map[string]any)
	if fb["score"] != 5 || !strings.Contains(fb["notes"].(string), "500") {
		t.Fatalf("feedback = %v", fb)
	}
	if !strings.HasPrefix(state["summary"].(string), "NO SUMMARY (MODEL:") {
		t.Fatalf("summary = %q", state["summary"])
	}
	if len(srv.Calls()) != 6 { // two nodes, three tries each
		t.Fatalf("calls = %d, want 6", len(srv.Calls()))
	}
	for _, node := range []string{"review", "summarise"} {
		if ev := rec.nodeEnd(node); !strings.Contains(ev.Degraded, "500") {
			t.Fatalf("%s end event = %+v", node, ev)
		}
	}
}

func TestNoModelUsesFallbacks(t *testing.T) {
	// retries cannot help without a model: none are made
	g := setupFlow(t, nil, strings.Replace(reviewFlow, "    prompt: review\n", "    prompt: review\n    retry: {attempts: 3, backoff: 1s}\n", 1))
	rec := &recorder{}
	state := runFlow(t, g, memory.New(), rec.observe)
	fb := state["feedback"].(map[string]any)
	if fb["score"] != 5 || fb["notes"] != "review failed: "+llm.ErrNoModel.Error() {
		t.Fatalf("feedback = %v", fb)
	}
	if ev := rec.nodeEnd("review"); ev.Degraded != llm.ErrNoModel.Error() || ev.Attempt > 1 {
		t.Fatalf("end event = %+v", ev)
	}
	for _, ev := range rec.events {
		if ev.Type == engine.NodeRetry {
			t.Fatalf("retried with no model: %+v", ev)
		}
	}
}

func TestStreamingReachesEvents(t *testing.T) {
	srv := llmtest.New(
		llmtest.Rule{Match: "Summarise", Replies: []llmtest.Reply{{Content: "a fine resume with clear impact"}}},
	)
	g := setup(t, serve(t, srv))
	rec := &recorder{}
	state := runFlow(t, g, memory.New(), rec.observe)
	var streamed strings.Builder
	pieces := 0
	for _, ev := range rec.events {
		if ev.Type == engine.NodeOutput && ev.Node == "summarise" {
			streamed.WriteString(ev.Text)
			pieces++
		}
	}
	if streamed.String() != "a fine resume with clear impact" || pieces < 6 {
		t.Fatalf("streamed %d pieces: %q", pieces, streamed.String())
	}
	if state["summary"] != "A FINE RESUME WITH CLEAR IMPACT" {
		t.Fatalf("summary = %q", state["summary"])
	}
	for _, c := range srv.Calls() {
		if !c.Stream {
			t.Fatalf("observed run did not stream: %+v", c)
		}
	}
}

// A reply whose stream ends before it says it is done (a connection
// closed mid-reply) is not taken for the whole reply: the call is tried
// again, and the node's update is the reply that came whole. The events
// void what the cut reply streamed (a node_retry), and the output of the
// attempt after it is the whole reply.
func TestACutReplyIsTriedAgain(t *testing.T) {
	const whole = "a fine resume with clear impact"
	srv := llmtest.New(
		llmtest.Rule{Match: "Summarise", Replies: []llmtest.Reply{{Content: whole, Cut: true}, {Content: whole}}},
	)
	g := setup(t, serve(t, srv))
	rec := &recorder{}
	state := runFlow(t, g, memory.New(), rec.observe)
	if state["summary"] != strings.ToUpper(whole) {
		t.Fatalf("summary = %q, want the whole reply", state["summary"])
	}
	summarise := 0
	for _, c := range srv.Calls() {
		if c.Rule == 0 {
			summarise++
		}
	}
	if ev := rec.nodeEnd("summarise"); summarise != 2 || ev.Usage["calls"] != 2 || ev.Attempt != 2 {
		t.Fatalf("%d calls to summarise, its end event %+v: want the cut reply's call tried again, as a second attempt", summarise, ev)
	}
	out := map[int]string{}
	var retries []engine.Event
	for _, ev := range rec.events {
		switch {
		case ev.Node != "summarise":
		case ev.Type == engine.NodeOutput:
			out[ev.Attempt] += ev.Text
		case ev.Type == engine.NodeRetry:
			retries = append(retries, ev)
		}
	}
	if len(retries) != 1 || retries[0].Attempt != 1 || !strings.Contains(retries[0].Error, "ended early") {
		t.Fatalf("retries %+v: want one, of the first attempt, for the cut reply", retries)
	}
	if len(out) != 2 || !strings.HasPrefix(whole, out[1]) || len(out[1]) >= len(whole) || out[2] != whole {
		t.Fatalf("output by attempt %v: want the cut part then the whole reply", out)
	}
}

func TestCredentialNeverLeaks(t *testing.T) {
	const key = "sk-test-0123456789-SECRET"
	srv := llmtest.New(
		llmtest.Rule{Match: "Review this resume", Replies: []llmtest.Reply{{Content: `{"score": 6, "notes": "fine"}`}}},
		llmtest.Rule{Match: "Summarise", Replies: []llmtest.Reply{{Status: 503}}},
	)
	srv.Key = key
	g := setup(t, serve(t, srv))
	rec := &recorder{}
	st := memory.New()
	state := runFlow(t, g, st, rec.observe)
	for _, c := range srv.Calls() {
		if !c.Authorized {
			t.Fatalf("request without the key: %+v", c)
		}
	}
	hist, err := st.History(context.Background(), "t", store.HistoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for what, v := range map[string]any{"events": rec.events, "state": state, "history": hist} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), key) || strings.Contains(string(b), "SECRET") {
			t.Fatalf("the API key appears in %s", what)
		}
	}
}

func TestSlowReplyTimesOutAndRetries(t *testing.T) {
	srv := llmtest.New(
		llmtest.Rule{Match: "Review this resume", Replies: []llmtest.Reply{
			{Delay: 2 * time.Second, Content: `{"score": 1, "notes": "too late"}`},
			{Content: `{"score": 6, "notes": "in time"}`},
		}},
	)
	p := serve(t, srv)
	p.Timeout = 200 * time.Millisecond
	g := setup(t, p)
	state := runFlow(t, g, memory.New(), nil)
	if fb := state["feedback"].(map[string]any); fb["notes"] != "in time" {
		t.Fatalf("feedback = %v", fb)
	}
	if n := len(srv.Calls()); n != 3 {
		t.Fatalf("calls = %d, want 3 (a timed-out review, its retry, the summary)", n)
	}
}

func TestMalformedReplyIsRepaired(t *testing.T) {
	srv := llmtest.New(
		llmtest.Rule{Match: "Review this resume", Replies: []llmtest.Reply{
			{Content: `{"score": 7, "notes": "cut off`},
			{Content: `{"score": 7, "notes": "whole"}`},
		}},
	)
	g := setup(t, serve(t, srv))
	state := runFlow(t, g, memory.New(), nil)
	if fb := state["feedback"].(map[string]any); fb["notes"] != "whole" {
		t.Fatalf("feedback = %v", fb)
	}
	if msg := srv.Calls()[1].Messages[2].Content; !strings.Contains(msg, "not valid JSON") {
		t.Fatalf("repair turn = %q", msg)
	}
}

func TestModelPrecedence(t *testing.T) {
	srv := llmtest.New()
	p := serve(t, srv)
	p.Model = "env-model"
	src := strings.Replace(reviewFlow, "nodes:\n", "model: flow-model\nnodes:\n", 1)
	src = strings.Replace(src, "    prompt: summary\n", "    prompt: summary\n    model: node-model\n", 1)
	g := setupFlow(t, p, src)
	runFlow(t, g, memory.New(), nil)
	calls := srv.Calls()
	if len(calls) != 2 || calls[0].Model != "flow-model" || calls[1].Model != "node-model" {
		t.Fatalf("models: %+v", calls)
	}
	g = setup(t, p)
	runFlow(t, g, memory.New(), nil)
	if calls := srv.Calls(); calls[2].Model != "env-model" {
		t.Fatalf("default model: %q", calls[2].Model)
	}
}

// A model chosen per run: the flow's model is a template over its run
// configuration, the node's over config and vars; one that renders
// nothing leaves the choice to the next (here the provider's default);
// the prompt's template sees .config too.
func TestModelFromTheRunConfiguration(t *testing.T) {
	srv := llmtest.New()
	p := serve(t, srv)
	p.Model = "env-model"
	src := strings.Replace(reviewFlow, "nodes:\n", `config:
  model: {type: string, enum: [small, large]}
  summariser: {type: string, default: ""}
model: "{{.config.model}}"
nodes:
`, 1)
	src = strings.Replace(src, "    prompt: summary\n", "    prompt: summary\n    model: \"{{.config.summariser}}\"\n", 1)
	g := setupFlow(t, p, src)
	run := func(cfg map[string]any) {
		t.Helper()
		if _, err := engine.New(memory.New()).Run(context.Background(), g, engine.Request{Thread: "t", Config: cfg}); err != nil {
			t.Fatal(err)
		}
	}
	run(map[string]any{"model": "large", "summariser": "tiny"})
	run(nil)
	calls := srv.Calls()
	var models []string
	for _, c := range calls {
		models = append(models, c.Model)
	}
	if !slices.Equal(models, []string{"large", "tiny", "env-model", "env-model"}) {
		t.Fatalf("models: %v", models)
	}
	bad := strings.Replace(src, `model: "{{.config.model}}"`, `model: "{{.config.modle}}"`, 1)
	dir := t.TempDir()
	_ = os.MkdirAll(filepath.Join(dir, "flows"), 0o755)
	_ = os.MkdirAll(filepath.Join(dir, "prompts"), 0o755)
	_ = os.WriteFile(filepath.Join(dir, "flows/review.yaml"), []byte(bad), 0o644)
	_ = os.WriteFile(filepath.Join(dir, "prompts/review.prompt"), []byte(reviewPrompt), 0o644)
	_ = os.WriteFile(filepath.Join(dir, "prompts/summary.prompt"), []byte(summaryPrompt), 0o644)
	_, dl := flow.Load(filepath.Join(dir, "flows/review.yaml"), all.WithProvider(func() *llm.Provider { return p }))
	if len(dl) != 1 || dl[0].Code != "P002" || !strings.Contains(dl[0].Summary, "modle") {
		t.Fatalf("a misspelt config in the flow's model: %v", dl)
	}
}

// A fallback tells standing in for a model that is not configured from
// standing in for one that failed: no_model (in a template, .no_model)
// holds only for the first, so a prompt may apply rules offline and
// report a failure as one.
func TestFallbackKnowsNoModelFromAFailure(t *testing.T) {
	write := func(dir, name, body string) {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	load := func(p *llm.Provider) *flow.Graph {
		dir := t.TempDir()
		write(dir, "flows/review.yaml", reviewFlow)
		write(dir, "prompts/review.prompt", strings.Replace(reviewPrompt,
			`fallback: {score: 5.0, notes: "review failed: {{.error}}"}`,
			`fallback: {score: 5.0, notes: "{{if .no_model}}rules: {{.vars.words}} words{{else}}review failed: {{.error}}{{end}}"}`, 1))
		write(dir, "prompts/summary.prompt", strings.Replace(summaryPrompt,
			`fallback_expr: "'no summary (' + error + ')'"`,
			`fallback_expr: "no_model ? 'offline summary' : 'no summary (' + error + ')'"`, 1))
		g, dl := flow.Load(filepath.Join(dir, "flows/review.yaml"), all.WithProvider(func() *llm.Provider { return p }))
		if dl.HasErrors() {
			t.Fatalf("load: %v", dl)
		}
		return g
	}
	state := runFlow(t, load(nil), memory.New(), nil)
	if fb := state["feedback"].(map[string]any); fb["notes"] != "rules: 5 words" || state["summary"] != "OFFLINE SUMMARY" {
		t.Fatalf("no model: feedback %v, summary %q", fb, state["summary"])
	}
	srv := llmtest.New(llmtest.Rule{Replies: []llmtest.Reply{{Status: 500}}})
	state = runFlow(t, load(serve(t, srv)), memory.New(), nil)
	if fb := state["feedback"].(map[string]any); !strings.HasPrefix(fb["notes"].(string), "review failed: ") ||
		!strings.HasPrefix(state["summary"].(string), "NO SUMMARY (") {
		t.Fatalf("a failing model: feedback %v, summary %q", fb, state["summary"])
	}
}
