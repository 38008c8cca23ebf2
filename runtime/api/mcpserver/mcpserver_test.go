package mcpserver_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/api/mcpserver"
	"github.com/trellisflow/trellis/runtime/api/server"
	"github.com/trellisflow/trellis/runtime/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const greet = `version: 1
name: greet
description: Greet someone by name, counting the greetings of the thread.
state:
  schema:
    type: object
    properties:
      name: {type: string, default: ""}
      greeting: {type: string, default: ""}
      greetings: {type: integer, default: 0}
input: [name]
nodes:
  hello:
    kind: assign
    set:
      greeting: "'Hello, ' + input.name + '!'"
      greetings: "state.greetings + 1"
  count: {kind: noop}
edges:
  - {from: START, to: hello}
  - {from: hello, to: count}
  - {from: count, to: END}
output: "{{.state.greeting}} ({{.state.greetings}})"
`

const approve = `version: 1
name: approve
description: Ask a person to approve an amount.
state:
  schema:
    type: object
    properties:
      amount: {type: integer, default: 0}
      approved: {type: boolean, default: false}
input: [amount]
nodes:
  ask: {kind: interrupt, ask: "'Approve ' + string(state.amount) + '?'", writes: {approved: "answer == true"}}
edges:
  - {from: START, to: ask}
  - {from: ask, to: END}
output: "{{if .state.approved}}approved{{else}}refused{{end}} {{.state.amount}}"
`

// rig is a served API with /mcp, and keys of two tenants.
type rig struct {
	url        string
	acme, beta string
	api        *api.Client
}

func newRig(t *testing.T) *rig {
	t.Helper()
	ctx := context.Background()
	flows := t.TempDir()
	os.WriteFile(filepath.Join(flows, "greet.yaml"), []byte(greet), 0o644)
	os.WriteFile(filepath.Join(flows, "approve.yaml"), []byte(approve), 0o644)
	rt, err := trellis.Open(ctx, "memory")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{Runtime: rt, FlowsDir: flows, Kinds: all.Offline(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), MCP: mcpserver.New})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		hs.Close()
		srv.Shutdown(context.Background())
		rt.Close()
	})
	cat, _ := store.CatalogOf(rt.Store())
	_, acme, _ := server.CreateKey(ctx, cat, "acme", "a", false)
	_, beta, _ := server.CreateKey(ctx, cat, "beta", "b", false)
	return &rig{url: hs.URL, acme: acme, beta: beta, api: api.NewClient(hs.URL, acme)}
}

type bearer struct {
	key  string
	next http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.key != "" {
		r.Header.Set("Authorization", "Bearer "+b.key)
	}
	return b.next.RoundTrip(r)
}

// connect opens an MCP session with a key (none: "").
func (rg *rig) connect(t *testing.T, key string, progress func(*mcp.ProgressNotificationParams)) (*mcp.ClientSession, error) {
	t.Helper()
	opts := &mcp.ClientOptions{}
	if progress != nil {
		opts.ProgressNotificationHandler = func(_ context.Context, r *mcp.ProgressNotificationClientRequest) { progress(r.Params) }
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, opts)
	tr := &mcp.StreamableClientTransport{Endpoint: rg.url + "/mcp", HTTPClient: &http.Client{Transport: bearer{key, http.DefaultTransport}},
		DisableStandaloneSSE: true, MaxRetries: -1}
	cs, err := c.Connect(context.Background(), tr, nil)
	if err == nil {
		t.Cleanup(func() { cs.Close() })
	}
	return cs, err
}

// An MCP client lists the served flows as tools, and a call runs one on
// a new thread, reporting progress, and returns its output; _thread goes
// on with the same thread.
func TestFlowsAsTools(t *testing.T) {
	rg := newRig(t)
	var mu sync.Mutex
	var progress []string
	counted := make(chan struct{})
	cs, err := rg.connect(t, rg.acme, func(p *mcp.ProgressNotificationParams) {
		mu.Lock()
		progress = append(progress, p.Message)
		if p.Message == "node count done" {
			close(counted)
		}
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil || len(tools.Tools) != 2 {
		t.Fatalf("tools %+v %v", tools, err)
	}
	tool := tools.Tools[slices.IndexFunc(tools.Tools, func(t *mcp.Tool) bool { return t.Name == "greet" })]
	b, _ := json.Marshal(tool.InputSchema)
	if tool.Name != "greet" || !strings.Contains(tool.Description, "Greet someone") || !strings.Contains(string(b), `"name":{"default":"","type":"string"}`) ||
		!strings.Contains(string(b), `"_thread"`) {
		t.Fatalf("tool %+v: %s", tool, b)
	}
	params := &mcp.CallToolParams{Name: "greet", Arguments: map[string]any{"name": "Ada"}}
	params.SetProgressToken("p1")
	res, err := cs.CallTool(ctx, params)
	if err != nil || res.IsError {
		t.Fatalf("call: %+v %v", res, err)
	}
	if text := res.Content[0].(*mcp.TextContent).Text; text != "Hello, Ada! (1)" {
		t.Fatalf("output %q", text)
	}
	out := res.StructuredContent.(map[string]any)
	thread := out["thread"].(string)
	if out["status"] != "succeeded" || thread == "" {
		t.Fatalf("structured %v", out)
	}
	// notifications are handled apart from the call's result: wait for
	// the last (a generous deadline, against a hang only)
	select {
	case <-counted:
	case <-time.After(time.Minute):
	}
	mu.Lock()
	got := strings.Join(progress, "; ")
	mu.Unlock()
	if got != "node hello done; node count done" {
		t.Errorf("progress %q", got)
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "greet", Arguments: map[string]any{"name": "Bo", mcpserver.ThreadArg: thread}})
	if err != nil || res.IsError || res.Content[0].(*mcp.TextContent).Text != "Hello, Bo! (2)" {
		t.Fatalf("the thread goes on: %+v %v", res, err)
	}
	// the run is the API's: the tenant reads it there
	runs, err := rg.api.Runs(ctx, thread)
	if err != nil || len(runs) != 2 {
		t.Fatalf("runs %v %v", runs, err)
	}
	// input the flow does not take is refused, as the API refuses it
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "greet", Arguments: map[string]any{"nmae": "x"}})
	if err != nil || !res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "invalid_input") {
		t.Fatalf("bad input: %+v %v", res, err)
	}
}

// A request without a key, or with a wrong one, is refused with the
// API's error; another tenant's thread is not found.
func TestKeysAndTenants(t *testing.T) {
	rg := newRig(t)
	for _, key := range []string{"", "trk_nope"} {
		req, _ := http.NewRequest("POST", rg.url+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body api.ErrorBody
		json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || body.Error == nil || body.Error.Code != api.CodeUnauthorized {
			t.Errorf("key %q: %d %+v", key, resp.StatusCode, body.Error)
		}
	}
	if _, err := rg.connect(t, "", nil); err == nil {
		t.Error("a session opened without a key")
	}
	ctx := context.Background()
	acme, err := rg.connect(t, rg.acme, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := acme.CallTool(ctx, &mcp.CallToolParams{Name: "greet", Arguments: map[string]any{"name": "Ada"}})
	if err != nil || res.IsError {
		t.Fatal(res, err)
	}
	thread := res.StructuredContent.(map[string]any)["thread"].(string)
	beta, err := rg.connect(t, rg.beta, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err = beta.CallTool(ctx, &mcp.CallToolParams{Name: "greet", Arguments: map[string]any{"name": "Eve", mcpserver.ThreadArg: thread}})
	if err != nil || !res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "not_found") {
		t.Fatalf("another tenant's thread: %+v %v", res, err)
	}
	if st, err := rg.api.State(ctx, thread, 0); err != nil || st.Values["name"] != "Ada" {
		t.Fatalf("the thread changed: %+v %v", st, err)
	}
	if list, err := api.NewClient(rg.url, rg.beta).Threads(ctx, api.ThreadQuery{}); err != nil || len(list.Threads) != 0 {
		t.Fatalf("tenant beta sees threads: %+v %v", list, err)
	}
}

// A run that pauses returns its question; a call with _thread and
// _answers answers it and resumes the run, and _answers that cannot be
// taken are refused, with the run left waiting.
func TestAnswersResumeAPausedRun(t *testing.T) {
	rg := newRig(t)
	ctx := context.Background()
	cs, err := rg.connect(t, rg.acme, nil)
	if err != nil {
		t.Fatal(err)
	}
	text := func(r *mcp.CallToolResult) string { return r.Content[0].(*mcp.TextContent).Text }
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "approve", Arguments: map[string]any{"amount": 5}})
	if err != nil || res.IsError {
		t.Fatalf("call: %+v %v", res, err)
	}
	out := res.StructuredContent.(map[string]any)
	thread := out["thread"].(string)
	if out["status"] != "paused" || !strings.Contains(text(res), `"Approve 5?"`) || !strings.Contains(text(res), mcpserver.AnswersArg) {
		t.Fatalf("the paused run: %q %v", text(res), out)
	}
	for _, bad := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{mcpserver.AnswersArg: map[string]any{"ask": true}}, "give _thread"},
		{map[string]any{mcpserver.ThreadArg: thread, mcpserver.AnswersArg: true}, "not a boolean"},
		{map[string]any{mcpserver.ThreadArg: thread, mcpserver.AnswersArg: map[string]any{"ask": true}, "amount": 6}, "leave out amount"},
		{map[string]any{mcpserver.ThreadArg: thread, mcpserver.AnswersArg: map[string]any{"nobody": true}}, "invalid_input"},
		{map[string]any{mcpserver.ThreadArg: thread, "amount": 6}, "unfinished"},
	} {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "approve", Arguments: bad.args})
		if err != nil || !res.IsError || !strings.Contains(text(res), bad.want) {
			t.Errorf("%v: %+v %v, want an error saying %q", bad.args, res, err, bad.want)
		}
	}
	if st, err := rg.api.State(ctx, thread, 0); err != nil || len(st.Interrupts) != 1 {
		t.Fatalf("the run no longer waits: %+v %v", st, err)
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "approve", Arguments: map[string]any{mcpserver.ThreadArg: thread, mcpserver.AnswersArg: map[string]any{"ask": true}}})
	if err != nil || res.IsError || text(res) != "approved 5" || res.StructuredContent.(map[string]any)["status"] != "succeeded" {
		t.Fatalf("answered: %+v %v", res, err)
	}
	if runs, err := rg.api.Runs(ctx, thread); err != nil || len(runs) != 2 || runs[0].Answers["ask"] != true && runs[1].Answers["ask"] != true {
		t.Fatalf("the runs %+v %v", runs, err)
	}
}
