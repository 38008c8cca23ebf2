package llm_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/nodes/llm"
	"github.com/trellisflow/trellis/nodes/llm/llmtest"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/memory"
)

// weather is an HTTP API for tools: GET /weather?city=C answers JSON, and
// counts its calls; /big answers more than a small cap, /bad answers
// text where JSON is due, /wrong JSON its schema refuses.
type weather struct {
	calls atomic.Int64
	srv   *httptest.Server
}

func newWeather(t *testing.T) *weather {
	w := &weather{}
	w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w.calls.Add(1)
		rw.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/weather":
			city := r.URL.Query().Get("city")
			if city == "Atlantis" {
				rw.WriteHeader(http.StatusNotFound)
				fmt.Fprint(rw, `{"error": "no such city"}`)
				return
			}
			fmt.Fprintf(rw, `{"city": %q, "celsius": 21, "sky": "clear"}`, city)
		case "/big":
			fmt.Fprintf(rw, `{"pad": %q}`, strings.Repeat("x", 4096))
		case "/bad":
			fmt.Fprint(rw, `{"city": `)
		case "/wrong":
			fmt.Fprint(rw, `{"city": 7}`)
		}
	}))
	t.Cleanup(w.srv.Close)
	return w
}

const agentFlow = `version: 1
name: agent
state:
  schema:
    type: object
    properties:
      question: {type: string, default: ""}
      answer: {type: string, default: ""}
      calls: {type: array, default: []}
input: [question]
tools:
  get_weather:
    kind: http
    description: The weather in a city now.
    parameters:
      type: object
      properties: {city: {type: string}}
      required: [city]
    url: "BASE{{.config.path}}?city={{urlquery .args.city}}"
    response:
      schema:
        type: object
        required: [city]
        properties: {city: {type: string}, celsius: {type: integer}}
    max_bytes: 1024
    allow: [ALLOW]
    APPROVE
  shout:
    kind: flow
    flow: shout.yaml
config:
  path: {type: string, default: /weather}
nodes:
  agent:
    kind: llm
    prompt: agent
    tools: [get_weather, shout]
    ONERROR
    writes: {answer: output, calls: tool_calls}
edges:
  - {from: START, to: agent}
  - {from: agent, to: END}
`

const shoutFlow = `version: 1
name: shout
description: Shout a text.
state:
  schema:
    type: object
    properties:
      text: {type: string, default: ""}
      loud: {type: string, default: ""}
input: [text]
nodes:
  up: {kind: assign, set: {loud: "upper(input.text)"}}
edges:
  - {from: START, to: up}
  - {from: up, to: END}
output: "{{.state.loud}}!"
`

const agentPrompt = `---
fallback_calls:
  - tool: shout
    arguments: {text: "state.question"}
fallback_expr: "'offline: ' + string(tool_calls[0].result)"
---
Answer: {{.state.question}}
`

// agentGraph writes the agent flow (its http tool on w, allowed allow,
// approving as approve says, with onError on the node) and loads it with
// provider p.
func agentGraph(t *testing.T, p *llm.Provider, w *weather, allow, approve, onError string) *flow.Graph {
	t.Helper()
	dir := t.TempDir()
	src := strings.NewReplacer("BASE", w.srv.URL, "ALLOW", allow, "APPROVE", approve, "ONERROR", onError).Replace(agentFlow)
	for name, body := range map[string]string{"agent.yaml": src, "shout.yaml": shoutFlow, "prompts/agent.prompt": agentPrompt} {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	g, dl := flow.Load(filepath.Join(dir, "agent.yaml"), all.WithProvider(func() *llm.Provider { return p }))
	if dl.HasErrors() {
		t.Fatalf("load: %v", dl)
	}
	return g
}

func callTools(calls ...llmtest.ToolCall) llmtest.Reply { return llmtest.Reply{ToolCalls: calls} }

// The model's calls run (two at once), their results go back to it, and
// the node writes its answer and the calls; each call is a tool_start and
// a tool_end event.
func TestToolLoop(t *testing.T) {
	w := newWeather(t)
	srv := llmtest.New(llmtest.Rule{Match: "Answer:", Replies: []llmtest.Reply{
		callTools(llmtest.ToolCall{ID: "c1", Name: "get_weather", Arguments: map[string]any{"city": "Oslo"}},
			llmtest.ToolCall{ID: "c2", Name: "shout", Arguments: map[string]any{"text": "hi"}}),
		callTools(llmtest.ToolCall{ID: "c3", Name: "get_weather", Arguments: map[string]any{"city": "Atlantis"}}),
		{Content: "It is 21 degrees in Oslo."},
	}})
	g := agentGraph(t, serve(t, srv), w, "127.0.0.1/32", "", "")
	rec := &recorder{}
	res, err := engine.New(memory.New()).Run(context.Background(), g, engine.Request{Thread: "t", Input: map[string]any{"question": "weather?"}, Observe: rec.observe})
	if err != nil {
		t.Fatal(err)
	}
	if res.State["answer"] != "It is 21 degrees in Oslo." {
		t.Fatalf("answer %v", res.State["answer"])
	}
	calls := res.State["calls"].([]any)
	if len(calls) != 3 {
		t.Fatalf("calls %v", calls)
	}
	first := calls[0].(map[string]any)
	if r := first["result"].(map[string]any); r["celsius"] != 21 || first["tool"] != "get_weather" {
		t.Errorf("first call %v (the integer comes back an integer)", first)
	}
	if calls[1].(map[string]any)["result"] != "HI!" {
		t.Errorf("the flow tool's result is its output, its arguments the child's input: %v", calls[1])
	}
	// the child reads input.text with nothing to fall back on: the
	// model must give it
	if shout, _ := g.Tool("shout"); fmt.Sprint(shout.Parameters["required"]) != "[text]" {
		t.Errorf("the flow tool's parameters: %v", shout.Parameters)
	}
	if e, _ := calls[2].(map[string]any)["error"].(string); !strings.Contains(e, "answered 404") {
		t.Errorf("a 404 is told to the model as an error: %v", calls[2])
	}
	reqs := srv.Calls()
	if len(reqs) != 3 || len(reqs[0].Tools) != 2 {
		t.Fatalf("model requests %+v", reqs)
	}
	second := reqs[1].Messages
	if n := len(second); n != 4 || second[2].Role != "tool" || second[2].ToolCallID != "c1" || !strings.Contains(second[2].Content, `"celsius":21`) ||
		second[3].ToolCallID != "c2" || second[3].Content != "HI!" {
		t.Fatalf("the second request does not carry the results: %+v", second)
	}
	var starts, ends int
	for _, ev := range rec.events {
		switch ev.Type {
		case engine.ToolStart:
			starts++
		case engine.ToolEnd:
			ends++
			if ev.Tool == nil || ev.Tool.ID == "" || ev.Node != "agent" {
				t.Errorf("tool_end %+v", ev)
			}
		}
	}
	if starts != 3 || ends != 3 {
		t.Errorf("tool events: %d starts, %d ends", starts, ends)
	}
	if w.calls.Load() != 2 {
		t.Errorf("the API was called %d times", w.calls.Load())
	}
}

// A node makes at most max_tool_calls calls: a call beyond them is not
// run (the model is told why) and the model is then asked to answer with
// no tool; a model that goes on calling fails the node.
func TestMaxToolCalls(t *testing.T) {
	oslo := llmtest.ToolCall{Name: "get_weather", Arguments: map[string]any{"city": "Oslo"}}
	again := callTools(llmtest.ToolCall{ID: "s", Name: "shout", Arguments: map[string]any{"text": "more"}})
	t.Run("the model answers", func(t *testing.T) {
		w := newWeather(t)
		srv := llmtest.New(llmtest.Rule{Match: "Answer:", Replies: []llmtest.Reply{
			callTools(llmtest.ToolCall{ID: "a", Name: oslo.Name, Arguments: oslo.Arguments}, llmtest.ToolCall{ID: "b", Name: oslo.Name, Arguments: oslo.Arguments},
				llmtest.ToolCall{ID: "c", Name: "shout", Arguments: map[string]any{"text": "hi"}}),
			again,
			{Content: "done"},
		}})
		g := agentGraph(t, serve(t, srv), w, "127.0.0.1/32", "", "max_tool_calls: 2")
		res, err := engine.New(memory.New()).Run(context.Background(), g, engine.Request{Thread: "t", Input: map[string]any{"question": "q"}})
		if err != nil {
			t.Fatal(err)
		}
		calls := res.State["calls"].([]any)
		if res.State["answer"] != "done" || len(calls) != 4 || w.calls.Load() != 2 {
			t.Fatalf("answer %v, calls %v, API calls %d", res.State["answer"], calls, w.calls.Load())
		}
		for _, c := range calls[2:] {
			if e, _ := c.(map[string]any)["error"].(string); !strings.Contains(e, "limit of 2 tool calls (max_tool_calls)") {
				t.Errorf("a call beyond the limit: %v", c)
			}
		}
		reqs := srv.Calls()
		if len(reqs) != 3 || reqs[0].ToolChoice != "" || reqs[1].ToolChoice != "none" || reqs[2].ToolChoice != "none" {
			t.Fatalf("requests %+v", reqs)
		}
	})
	t.Run("the model goes on calling", func(t *testing.T) {
		w := newWeather(t)
		srv := llmtest.New(llmtest.Rule{Match: "Answer:", Replies: []llmtest.Reply{again}})
		// the prompt's fallback stands in for a model that does not answer;
		// its call of the flow tool runs a child of its own, not the one
		// the model's call of it ran
		g := agentGraph(t, serve(t, srv), w, "127.0.0.1/32", "", "max_tool_calls: 2")
		rec := &recorder{}
		res, err := engine.New(memory.New()).Run(context.Background(), g, engine.Request{Thread: "t", Input: map[string]any{"question": "q"}, Observe: rec.observe})
		if err != nil || res.State["answer"] != "offline: Q!" || !strings.Contains(rec.nodeEnd("agent").Degraded, "the model went on calling tools after 6 of them") {
			t.Fatalf("%v %v, the node's end %+v", res.State, err, rec.nodeEnd("agent"))
		}
		if n := len(srv.Calls()); n != 6 {
			t.Errorf("the model was asked %d times, want 6 (the limit and four turns more)", n)
		}
		// and with none, the node fails
		g = agentGraph(t, serve(t, srv), w, "127.0.0.1/32", "", "max_tool_calls: 2\n    on_error: fail")
		st := memory.New()
		if _, err = engine.New(st).Run(context.Background(), g, engine.Request{Thread: "t", Input: map[string]any{"question": "q"}}); err == nil ||
			!strings.Contains(err.Error(), "the model went on calling tools") {
			t.Fatalf("error %v", err)
		}
		if head, _ := st.Head(context.Background(), "t"); head.Step != 0 {
			t.Errorf("a step committed: %+v", head)
		}
	})
}

// A node that fails midway through its loop leaves the calls it finished
// kept: resuming its run does not make them again, nor ask the model the
// turns it answered.
func TestFinishedCallsAreNotRepeated(t *testing.T) {
	w := newWeather(t)
	srv := llmtest.New(llmtest.Rule{Match: "Answer:", Replies: []llmtest.Reply{
		callTools(llmtest.ToolCall{ID: "c1", Name: "get_weather", Arguments: map[string]any{"city": "Oslo"}}),
		{Status: 500}, {Status: 500}, {Status: 500},
		{Content: "done"},
	}})
	p := serve(t, srv)
	g := agentGraph(t, p, w, "127.0.0.1/32", "", "on_error: fail")
	st := memory.New()
	e := engine.New(st)
	_, err := e.Run(context.Background(), g, engine.Request{Thread: "t", Input: map[string]any{"question": "q"}})
	if err == nil || !strings.Contains(err.Error(), "500") {
		t.Fatalf("the run should fail on the model: %v", err)
	}
	if w.calls.Load() != 1 {
		t.Fatalf("calls before the failure: %d", w.calls.Load())
	}
	res, err := e.Run(context.Background(), g, engine.Request{Thread: "t", Resume: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.State["answer"] != "done" || w.calls.Load() != 1 {
		t.Fatalf("answer %v, API calls %d (want 1)", res.State["answer"], w.calls.Load())
	}
	reqs := srv.Calls()
	last := reqs[len(reqs)-1]
	if len(reqs) != 5 || len(last.Messages) != 3 || last.Messages[2].ToolCallID != "c1" {
		t.Fatalf("the resumed run asked %d times; its last request %+v", len(reqs), last.Messages)
	}
}

// A call whose tool says approve pauses the run with the call; the answer
// approves, edits or rejects it.
func TestApproval(t *testing.T) {
	cases := []struct {
		name   string
		answer any
		check  func(t *testing.T, call map[string]any, apiCalls int64)
	}{
		{"approve", "approve", func(t *testing.T, c map[string]any, n int64) {
			if c["approval"] != "approved" || c["result"].(map[string]any)["city"] != "Oslo" || n != 1 {
				t.Errorf("%v, %d", c, n)
			}
		}},
		{"edit", map[string]any{"decision": "edit", "arguments": map[string]any{"city": "Bergen"}}, func(t *testing.T, c map[string]any, n int64) {
			if c["approval"] != "edited" || c["result"].(map[string]any)["city"] != "Bergen" || n != 1 {
				t.Errorf("%v, %d", c, n)
			}
		}},
		{"reject", map[string]any{"decision": "reject", "reason": "not now"}, func(t *testing.T, c map[string]any, n int64) {
			if c["approval"] != "rejected" || !strings.Contains(c["error"].(string), "not now") || n != 0 {
				t.Errorf("%v, %d", c, n)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWeather(t)
			srv := llmtest.New(llmtest.Rule{Match: "Answer:", Replies: []llmtest.Reply{
				callTools(llmtest.ToolCall{ID: "c1", Name: "get_weather", Arguments: map[string]any{"city": "Oslo"}}),
				{Content: "ok"},
			}})
			g := agentGraph(t, serve(t, srv), w, "127.0.0.1/32", `approve: {when: "args.city != 'Paris'"}`, "")
			st := memory.New()
			e := engine.New(st)
			res, err := e.Run(context.Background(), g, engine.Request{Thread: "t", Input: map[string]any{"question": "q"}})
			if err != nil {
				t.Fatal(err)
			}
			if res.Interrupt == nil || len(res.Interrupt.Asks) != 1 || res.Interrupt.Asks[0].ID != "agent" {
				t.Fatalf("interrupt %+v", res.Interrupt)
			}
			p := res.Interrupt.Asks[0].Payload.(map[string]any)
			call := p["calls"].([]any)[0].(map[string]any)
			if p["type"] != "tool_approval" || call["id"] != "c1" || call["tool"] != "get_weather" || call["arguments"].(map[string]any)["city"] != "Oslo" {
				t.Fatalf("payload %v", p)
			}
			if w.calls.Load() != 0 {
				t.Fatal("the call ran before its approval")
			}
			asks, err := e.Asks(context.Background(), g, "t")
			if err != nil || len(asks) != 1 || asks[0].ID != "agent" {
				t.Fatalf("the thread's questions: %+v %v", asks, err)
			}
			if _, err := e.Run(context.Background(), g, engine.Request{Thread: "t", Resume: true, Answers: map[string]any{"agent": "maybe"}}); err == nil ||
				!strings.Contains(err.Error(), "answers.agent") {
				t.Fatalf("a malformed answer is refused before the run: %v", err)
			}
			res, err = e.Run(context.Background(), g, engine.Request{Thread: "t", Resume: true, Answers: map[string]any{"agent": tc.answer}})
			if err != nil {
				t.Fatal(err)
			}
			if res.Interrupt != nil {
				t.Fatalf("paused again: %+v", res.Interrupt)
			}
			if n := len(srv.Calls()); n != 2 {
				t.Errorf("the model was asked %d times (the paused turn is kept)", n)
			}
			tc.check(t, res.State["calls"].([]any)[0].(map[string]any), w.calls.Load())
		})
	}
}

// Two calls of one turn that wait are asked about together; an answer
// may decide them one by one ({calls: {ID: DECISION}}), the run pausing
// again for the calls it leaves undecided, and an edit meant for one call
// of several is asked again with the reason. No call runs before all are
// decided.
func TestApprovalPerCall(t *testing.T) {
	w := newWeather(t)
	srv := llmtest.New(llmtest.Rule{Match: "Answer:", Replies: []llmtest.Reply{
		callTools(llmtest.ToolCall{ID: "c1", Name: "get_weather", Arguments: map[string]any{"city": "Oslo"}},
			llmtest.ToolCall{ID: "c2", Name: "get_weather", Arguments: map[string]any{"city": "Bergen"}}),
		{Content: "ok"},
	}})
	g := agentGraph(t, serve(t, srv), w, "127.0.0.1/32", "approve: always", "")
	e := engine.New(memory.New())
	ctx := context.Background()
	asked := func(res *engine.Result) (ids []string, problem string) {
		t.Helper()
		if res.Interrupt == nil || len(res.Interrupt.Asks) != 1 {
			t.Fatalf("not paused: %+v", res.Interrupt)
		}
		p := res.Interrupt.Asks[0].Payload.(map[string]any)
		for _, c := range p["calls"].([]any) {
			ids = append(ids, c.(map[string]any)["id"].(string))
		}
		problem, _ = p["problem"].(string)
		return ids, problem
	}
	res, err := e.Run(ctx, g, engine.Request{Thread: "t", Input: map[string]any{"question": "q"}})
	if err != nil {
		t.Fatal(err)
	}
	if ids, _ := asked(res); fmt.Sprint(ids) != "[c1 c2]" {
		t.Fatalf("asked about %v", ids)
	}
	resume := func(answer any) *engine.Result {
		t.Helper()
		res, err := e.Run(ctx, g, engine.Request{Thread: "t", Resume: true, Answers: map[string]any{"agent": answer}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	res = resume(map[string]any{"decision": "edit", "arguments": map[string]any{"city": "Tromsø"}})
	if ids, problem := asked(res); fmt.Sprint(ids) != "[c1 c2]" || !strings.Contains(problem, "an edit gives the arguments of one call") {
		t.Fatalf("an edit for two calls: asked about %v, %q", ids, problem)
	}
	res = resume(map[string]any{"calls": map[string]any{"c1": "approve"}})
	if ids, _ := asked(res); fmt.Sprint(ids) != "[c2]" || w.calls.Load() != 0 {
		t.Fatalf("after c1's decision: asked about %v, %d calls made", ids, w.calls.Load())
	}
	res = resume(map[string]any{"calls": map[string]any{"c2": map[string]any{"decision": "reject", "reason": "not there"}}})
	if res.Interrupt != nil || res.State["answer"] != "ok" || w.calls.Load() != 1 {
		t.Fatalf("after c2's decision: %+v %v, %d calls made", res.Interrupt, res.State, w.calls.Load())
	}
	calls := res.State["calls"].([]any)
	c1, c2 := calls[0].(map[string]any), calls[1].(map[string]any)
	if c1["approval"] != "approved" || c1["result"].(map[string]any)["city"] != "Oslo" || c2["approval"] != "rejected" || !strings.Contains(c2["error"].(string), "not there") {
		t.Fatalf("calls %v", calls)
	}
	if n := len(srv.Calls()); n != 2 {
		t.Errorf("the model was asked %d times, want 2", n)
	}
}

// An http tool with idempotency_header sends each call's own key: the
// same on a retried attempt and when the step runs again after the node
// failed, another for another call.
func TestIdempotencyKey(t *testing.T) {
	var mu sync.Mutex
	var keys []string
	api := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		n := len(keys)
		mu.Unlock()
		rw.Header().Set("Content-Type", "application/json")
		switch n {
		case 1:
			rw.WriteHeader(http.StatusServiceUnavailable) // tried again
		case 2:
			fmt.Fprintf(rw, `{"pad": %q}`, strings.Repeat("x", 4096)) // over the cap: the node fails
		default:
			fmt.Fprintf(rw, `{"city": %q}`, r.URL.Query().Get("city"))
		}
	}))
	defer api.Close()
	srv := llmtest.New(llmtest.Rule{Match: "Answer:", Replies: []llmtest.Reply{
		callTools(llmtest.ToolCall{ID: "c1", Name: "get_weather", Arguments: map[string]any{"city": "Oslo"}}),
		callTools(llmtest.ToolCall{ID: "c2", Name: "get_weather", Arguments: map[string]any{"city": "Bergen"}}),
		{Content: "done"},
	}})
	g := agentGraph(t, serve(t, srv), &weather{srv: api}, "127.0.0.1/32", "idempotency_header: idempotency-key\n    retries: 1", "on_error: fail")
	e := engine.New(memory.New())
	ctx := context.Background()
	if _, err := e.Run(ctx, g, engine.Request{Thread: "t", Input: map[string]any{"question": "q"}}); err == nil || !strings.Contains(err.Error(), "cap") {
		t.Fatalf("the first run: %v", err)
	}
	res, err := e.Run(ctx, g, engine.Request{Thread: "t", Resume: true})
	if err != nil || res.State["answer"] != "done" {
		t.Fatalf("resumed: %v %v", res, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(keys) != 4 || keys[0] == "" || keys[1] != keys[0] || keys[2] != keys[0] || keys[3] == "" || keys[3] == keys[0] {
		t.Fatalf("the keys sent: %q", keys)
	}
}

// What a tool may not do fails the node, naming the tool, and commits
// nothing of the step.
func TestToolFailuresFailTheNode(t *testing.T) {
	cases := []struct{ name, path, allow, want string }{
		{"over its cap", "/big", "127.0.0.1/32", "larger than the tool's cap of 1024 bytes"},
		{"not JSON", "/bad", "127.0.0.1/32", "not valid JSON"},
		{"against its schema", "/wrong", "127.0.0.1/32", "does not match the tool's response schema"},
		{"outside the allow-list", "/weather", "10.0.0.0/8", "on the allow-list opens"},
	}
	for _, tc := range cases {
		// the prompt's fallback does not stand in for a tool that failed,
		// nor does a node fail otherwise with on_error: fail
		for _, onError := range []string{"", "on_error: fail"} {
			t.Run(tc.name+" "+onError, func(t *testing.T) {
				w := newWeather(t)
				srv := llmtest.New(llmtest.Rule{Match: "Answer:", Replies: []llmtest.Reply{
					callTools(llmtest.ToolCall{ID: "c1", Name: "get_weather", Arguments: map[string]any{"city": "Oslo"}}),
					{Content: "ok"},
				}})
				g := agentGraph(t, serve(t, srv), w, tc.allow, "", onError)
				st := memory.New()
				_, err := engine.New(st).Run(context.Background(), g, engine.Request{Thread: "t", Input: map[string]any{"question": "q"},
					Config: map[string]any{"path": tc.path}})
				if err == nil || !strings.Contains(err.Error(), `tool "get_weather" (http)`) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("error %v, want one naming the tool and %q", err, tc.want)
				}
				cps, _ := st.History(context.Background(), "t", store.HistoryOptions{Limit: 10})
				for _, cp := range cps {
					if cp.Source == store.SourceStep {
						t.Fatalf("the step committed: %+v", cp)
					}
				}
			})
		}
	}
}

// With no model the fallback makes the calls it names, approval included,
// and its reply reads their results.
func TestFallbackCallsTools(t *testing.T) {
	w := newWeather(t)
	g := agentGraph(t, nil, w, "127.0.0.1/32", "", "")
	rec := &recorder{}
	res, err := engine.New(memory.New()).Run(context.Background(), g, engine.Request{Thread: "t", Input: map[string]any{"question": "hey"}, Observe: rec.observe})
	if err != nil {
		t.Fatal(err)
	}
	if res.State["answer"] != "offline: HEY!" {
		t.Fatalf("state %v", res.State)
	}
	if ev := rec.nodeEnd("agent"); ev.Degraded == "" {
		t.Errorf("the fallback is marked degraded: %+v", ev)
	}
}

// A fallback's calls are checked at load as a node's writes are: a tool
// it may not call, an argument it does not take, one it leaves out, and
// a literal the parameter's enum refuses are each reported where they are.
func TestFallbackCallsAreChecked(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "prompts"), 0o755)
	os.WriteFile(filepath.Join(dir, "f.yaml"), []byte(`version: 1
name: f
state:
  schema:
    type: object
    properties:
      flag: {type: boolean, default: false}
      out: {type: string, default: ""}
tools:
  paint:
    kind: http
    description: Paint.
    parameters:
      type: object
      properties: {color: {type: string, enum: [red, green]}, coats: {type: integer, minimum: 1}}
      required: [color]
      additionalProperties: false
    url: https://paint.example.com/
    allow: [paint.example.com]
nodes:
  n:
    kind: llm
    prompt: p
    tools: [paint]
    writes: {out: output}
edges:
  - {from: START, to: n}
  - {from: n, to: END}
`), 0o644)
	os.WriteFile(filepath.Join(dir, "prompts", "p.prompt"), []byte(`---
fallback_calls:
  - tool: pant
    arguments: {color: "'red'"}
  - tool: paint
    arguments: {color: "state.flag ? 'red' : 'blue'", shade: "'dark'"}
  - tool: paint
    arguments: {coats: "0"}
fallback: done
---
Paint.
`), 0o644)
	_, dl := flow.Load(filepath.Join(dir, "f.yaml"), all.Offline())
	var got []string
	for _, d := range dl {
		got = append(got, fmt.Sprintf("%d:%d %s %s", d.Pos.Line, d.Pos.Col, d.Code, d.Summary))
	}
	text := strings.Join(got, "\n")
	for _, want := range []string{
		`3:11 T001 the fallback of prompt p calls "pant", which node "n" may not call`,
		`6:46 T002 argument "color" of tool paint is one of "red", "green", never "blue"`,
		`6:62 T002 tool paint takes no argument "shade"`,
		`7:11 T002 the fallback's call of paint leaves out its required argument "color"`,
		`8:24 W004 argument "coats" of tool paint is at least 1, but this expression is always 0`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("missing %q in:\n%s", want, text)
		}
	}
}

// A node that may pause for a tool call's approval cannot run where no
// one could answer it: per item of a map, or in a flow run as a tool.
func TestApprovalWhereNoOneAnswers(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "prompts"), 0o755)
	os.WriteFile(filepath.Join(dir, "prompts", "p.prompt"), []byte("---\nfallback: done\n---\nGo.\n"), 0o644)
	tools := `tools:
  paint:
    kind: http
    description: Paint.
    parameters: {type: object, properties: {color: {type: string}}}
    url: https://paint.example.com/
    allow: [paint.example.com]
    approve: always
`
	state := `state:
  schema:
    type: object
    properties:
      items: {type: array, default: [1, 2]}
      out: {type: array, default: []}
      text: {type: string, default: ""}
  reducers: {out: append}
input: [text]
`
	os.WriteFile(filepath.Join(dir, "mapped.yaml"), []byte("version: 1\nname: mapped\n"+state+tools+`nodes:
  each:
    kind: map
    items: state.items
    node: {kind: llm, prompt: p, tools: [paint], writes: {out: "[output]"}}
edges:
  - {from: START, to: each}
  - {from: each, to: END}
`), 0o644)
	os.WriteFile(filepath.Join(dir, "child.yaml"), []byte("version: 1\nname: child\n"+state+tools+`nodes:
  ask: {kind: llm, prompt: p, tools: [paint], writes: {out: "[output]"}}
edges:
  - {from: START, to: ask}
  - {from: ask, to: END}
`), 0o644)
	os.WriteFile(filepath.Join(dir, "parent.yaml"), []byte("version: 1\nname: parent\n"+state+`tools:
  child:
    kind: flow
    flow: child.yaml
nodes:
  ask: {kind: llm, prompt: p, tools: [child], writes: {out: "[output]"}}
edges:
  - {from: START, to: ask}
  - {from: ask, to: END}
`), 0o644)
	for file, want := range map[string]string{"mapped.yaml": "C004 this llm node may pause the run for a person's approval", "parent.yaml": "C001 subflow"} {
		_, dl := flow.Load(filepath.Join(dir, file), all.Offline())
		found := false
		for _, d := range dl {
			found = found || strings.Contains(string(d.Code)+" "+d.Summary, want)
		}
		if !found {
			t.Errorf("%s: want %q in %v", file, want, dl)
		}
	}
}

// A tool loop's model turns are recorded with the step's checkpoint, the
// turn kept across a pause for approval too, so that a replay of the
// thread with no model makes the same calls, to the same end.
func TestToolLoopReplays(t *testing.T) {
	ctx := context.Background()
	w := newWeather(t)
	srv := llmtest.New(llmtest.Rule{Match: "Answer:", Replies: []llmtest.Reply{
		callTools(llmtest.ToolCall{ID: "c1", Name: "get_weather", Arguments: map[string]any{"city": "Oslo"}}),
		{Content: "It is 21 degrees."},
	}})
	g := agentGraph(t, serve(t, srv), w, "127.0.0.1/32", "approve: always", "")
	st := memory.New()
	e := engine.New(st)
	if _, err := e.Run(ctx, g, engine.Request{Thread: "t", Input: map[string]any{"question": "q"}}); err != nil {
		t.Fatal(err)
	}
	res, err := e.Run(ctx, g, engine.Request{Thread: "t", Resume: true, Answers: map[string]any{"agent": "approve"}})
	if err != nil {
		t.Fatal(err)
	}
	hist, err := st.History(ctx, "t", store.HistoryOptions{Source: store.SourceStep})
	if err != nil {
		t.Fatal(err)
	}
	var replies []store.Reply
	for i := len(hist) - 1; i >= 0; i-- {
		replies = append(replies, hist[i].Replies...)
	}
	if len(replies) != 2 {
		t.Fatalf("recorded replies: %+v", replies)
	}
	offline := agentGraph(t, nil, w, "127.0.0.1/32", "approve: always", "")
	rs := engine.NewReplies(replies)
	e2 := engine.New(memory.New())
	if _, err := e2.Run(ctx, offline, engine.Request{Thread: "r", Input: map[string]any{"question": "q"}, Replies: rs}); err != nil {
		t.Fatal(err)
	}
	again, err := e2.Run(ctx, offline, engine.Request{Thread: "r", Resume: true, Answers: map[string]any{"agent": "approve"}, Replies: rs})
	if err != nil {
		t.Fatal(err)
	}
	if again.State["answer"] != res.State["answer"] || rs.Misses() != 0 || len(srv.Calls()) != 2 {
		t.Fatalf("replayed to %v (%d misses, %d model calls), the run ended with %v", again.State["answer"], rs.Misses(), len(srv.Calls()), res.State["answer"])
	}
	if w.calls.Load() != 2 {
		t.Errorf("the replay made the call again for real, as it should: %d calls", w.calls.Load())
	}
}
