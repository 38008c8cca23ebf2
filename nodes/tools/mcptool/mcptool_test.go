package mcptool_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/nodes/llm"
	"github.com/trellisflow/trellis/nodes/llm/llmtest"
	"github.com/trellisflow/trellis/nodes/tools/mcptool"
	"github.com/trellisflow/trellis/nodes/tools/mcptool/mcptest"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/store/memory"
)

// This test binary is also the stdio MCP server its flows start.
func TestMain(m *testing.M) {
	if os.Getenv("MCPTOOL_SERVE") == "1" {
		_ = mcptest.New(mcptest.Config{}).Run(context.Background(), &mcp.StdioTransport{})
		os.Exit(0)
	}
	code := m.Run()
	mcptool.CloseSessions()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString(err.Error())
			code = 1
		}
	}
	os.Exit(code)
}

// samples serves the sample tools over streamable HTTP, recording calls.
type samples struct {
	mu    sync.Mutex
	calls []string
	url   string
}

func serveSamples(t *testing.T, drift bool) *samples {
	s := &samples{}
	srv := mcptest.New(mcptest.Config{Drift: drift, OnCall: func(tool string, _ map[string]any) {
		s.mu.Lock()
		s.calls = append(s.calls, tool)
		s.mu.Unlock()
	}})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{Stateless: true})
	ts := httptest.NewServer(h)
	t.Cleanup(func() {
		mcptool.CloseSessions()
		ts.Close()
	})
	s.url = ts.URL
	return s
}

const flowSrc = `version: 1
name: mcpflow
state:
  schema:
    type: object
    properties:
      answer: {type: string, default: ""}
      calls: {type: array, default: []}
config:
  url: {type: string, default: "URL"}
tools:
  samples:
    kind: mcp
    SERVER
    tools: [add, echo, fail, sleep, word_count]
    timeout: TIMEOUT
nodes:
  agent:
    kind: llm
    prompt: agent
    tools: [samples]
    on_error: fail
    writes: {answer: output, calls: tool_calls}
edges:
  - {from: START, to: agent}
  - {from: agent, to: END}
`

const promptSrc = `---
fallback_calls:
  - tool: add
    arguments: {a: 2, b: 40}
fallback_expr: "string(tool_calls[0].result)"
---
Go
`

// write writes the flow in a directory of its own, with server as how
// it reaches its server.
func write(t *testing.T, server, url string) string { return writeTimeout(t, server, url, "60s") }

// writeTimeout is write with the calls' timeout.
func writeTimeout(t *testing.T, server, url, timeout string) string {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "prompts"), 0o755)
	src := strings.NewReplacer("SERVER", server, "URL", url, "TIMEOUT", timeout).Replace(flowSrc)
	os.WriteFile(filepath.Join(dir, "mcpflow.yaml"), []byte(src), 0o644)
	os.WriteFile(filepath.Join(dir, "prompts", "agent.prompt"), []byte(promptSrc), 0o644)
	return filepath.Join(dir, "mcpflow.yaml")
}

func load(t *testing.T, path string, p *llm.Provider) *flow.Graph {
	t.Helper()
	g, dl := flow.Load(path, all.WithProvider(func() *llm.Provider { return p }))
	if dl.HasErrors() {
		t.Fatalf("load: %v", dl)
	}
	return g
}

func model(t *testing.T, replies ...llmtest.Reply) (*llmtest.Server, *llm.Provider) {
	srv := llmtest.New(llmtest.Rule{Replies: replies})
	ts := httptest.NewServer(srv)
	t.Cleanup(llm.CloseIdleConnections)
	t.Cleanup(ts.Close)
	return srv, &llm.Provider{BaseURL: ts.URL + "/v1", Backoff: time.Millisecond, MaxBackoff: time.Millisecond, Retries: 1}
}

// A model calls an MCP server's tools, over streamable HTTP and over
// stdio: each call reaches the server, and the results go back to it.
func TestModelCallsServerTools(t *testing.T) {
	s := serveSamples(t, false)
	exe, _ := os.Executable()
	for name, server := range map[string]string{
		"http":  `url: "{{.config.url}}"`,
		"stdio": `command: [env, MCPTOOL_SERVE=1, ` + exe + `]`,
	} {
		t.Run(name, func(t *testing.T) {
			srv, p := model(t,
				llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "a", Name: "add", Arguments: map[string]any{"a": 2, "b": 3}},
					{ID: "w", Name: "word_count", Arguments: map[string]any{"text": "one two"}}}},
				llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "f", Name: "fail", Arguments: map[string]any{"message": "no luck"}}}},
				llmtest.Reply{Content: "five"})
			g := load(t, write(t, server, s.url), p)
			res, err := engine.New(memory.New()).Run(context.Background(), g, engine.Request{Thread: "t"})
			if err != nil {
				t.Fatal(err)
			}
			calls := res.State["calls"].([]any)
			if res.State["answer"] != "five" || len(calls) != 3 {
				t.Fatalf("state %v", res.State)
			}
			add, wc, f := calls[0].(map[string]any), calls[1].(map[string]any), calls[2].(map[string]any)
			if add["result"] != "5" || wc["result"].(map[string]any)["words"] != 2 || f["error"] != "no luck" {
				t.Fatalf("calls %v", calls)
			}
			if got := srv.Calls()[1].Messages; len(got) != 4 || got[2].Content != "5" || got[3].Content != `{"words":2}` {
				t.Fatalf("the results did not reach the model: %+v", got)
			}
		})
	}
	if len(s.calls) != 3 {
		t.Errorf("the HTTP server saw %v", s.calls)
	}
}

// A server that does not answer within the entry's timeout fails the
// node, naming the tool, and the step is not committed.
func TestHangingServerFailsTheNode(t *testing.T) {
	s := serveSamples(t, false)
	_, p := model(t, llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "s", Name: "sleep", Arguments: map[string]any{"seconds": 2}}}},
		llmtest.Reply{Content: "late"})
	g := load(t, writeTimeout(t, `url: "{{.config.url}}"`, s.url, "300ms"), p)
	st := memory.New()
	_, err := engine.New(st).Run(context.Background(), g, engine.Request{Thread: "t"})
	if err == nil || !strings.Contains(err.Error(), `tool "sleep" (mcp)`) || !strings.Contains(err.Error(), "did not answer within 300ms") {
		t.Fatalf("error %v", err)
	}
	head, _ := st.Head(context.Background(), "t")
	if head.Step != 0 {
		t.Errorf("a step committed: %+v", head)
	}
}

// At load a server that answers is listed, and its tools must agree with
// the pinned copy; one that does not answer is read from the pinned copy;
// with neither the load fails. Offline, only the pin is read.
func TestPinnedTools(t *testing.T) {
	s := serveSamples(t, false)
	path := write(t, `url: "{{.config.url}}"`, s.url)
	if written, err := mcptool.Pin(context.Background(), path); err != nil || len(written) != 1 ||
		filepath.Base(written[0]) != "mcpflow.samples.mcp.json" {
		t.Fatalf("pin: %v %v", written, err)
	}
	load(t, path, nil)
	// offline: the pinned copy alone
	if _, dl := flow.Load(path, all.Offline()); dl.HasErrors() {
		t.Fatalf("offline: %v", dl)
	}
	// a server gone: the pinned copy
	gone := write(t, `url: "{{.config.url}}"`, "http://127.0.0.1:1/mcp")
	pin, _ := os.ReadFile(filepath.Join(filepath.Dir(path), "mcpflow.samples.mcp.json"))
	os.WriteFile(filepath.Join(filepath.Dir(gone), "mcpflow.samples.mcp.json"), pin, 0o644)
	load(t, gone, nil)
	// a server that changed since it was pinned
	drifted := serveSamples(t, true)
	changed := write(t, `url: "{{.config.url}}"`, drifted.url)
	os.WriteFile(filepath.Join(filepath.Dir(changed), "mcpflow.samples.mcp.json"), pin, 0o644)
	_, dl := flow.Load(changed, all.WithProvider(func() *llm.Provider { return nil }))
	if !has(dl, diag.CodeToolServer, "tool add: its input schema changed") {
		t.Errorf("drift: %v", dl)
	}
	// neither a server nor a pin
	none := write(t, `url: "{{.config.url}}"`, "http://127.0.0.1:1/mcp")
	_, dl = flow.Load(none, all.WithProvider(func() *llm.Provider { return nil }))
	if !has(dl, diag.CodeToolServer, "there is no pinned copy") {
		t.Errorf("no pin: %v", dl)
	}
	// a tool the server does not have
	misnamed := write(t, `url: "{{.config.url}}"`, s.url)
	src, _ := os.ReadFile(misnamed)
	os.WriteFile(misnamed, []byte(strings.Replace(string(src), "[add, echo,", "[ad, echo,", 1)), 0o644)
	_, dl = flow.Load(misnamed, all.WithProvider(func() *llm.Provider { return nil }))
	if !has(dl, diag.CodeToolName, `did you mean "add"`) {
		t.Errorf("a misspelt tool: %v", dl)
	}
}

func has(dl diag.List, code diag.Code, text string) bool {
	for _, d := range dl {
		if d.Code == code && strings.Contains(d.String(), text) {
			return true
		}
	}
	return false
}

// A result larger than the entry's cap fails the node, naming the tool.
func TestResultOverItsCap(t *testing.T) {
	s := serveSamples(t, false)
	_, p := model(t, llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "e", Name: "echo", Arguments: map[string]any{"text": strings.Repeat("word ", 100)}}}},
		llmtest.Reply{Content: "done"})
	path := write(t, `url: "{{.config.url}}"`, s.url)
	src, _ := os.ReadFile(path)
	os.WriteFile(path, []byte(strings.Replace(string(src), "    timeout:", "    max_bytes: 64\n    timeout:", 1)), 0o644)
	g := load(t, path, p)
	_, err := engine.New(memory.New()).Run(context.Background(), g, engine.Request{Thread: "t"})
	if err == nil || !strings.Contains(err.Error(), `tool "echo" (mcp): the result is larger than the tool's cap of 64 bytes`) {
		t.Fatalf("error %v", err)
	}
}

// A pinned (or listed) schema that refers to a file of this machine is
// refused: a server's schemas stand alone.
func TestServerSchemaReadsNoFile(t *testing.T) {
	path := write(t, `url: "{{.config.url}}"`, "http://127.0.0.1:1/mcp")
	secret := filepath.Join(t.TempDir(), "secret.json")
	os.WriteFile(secret, []byte(`{"type": "string"}`), 0o600)
	pin := `{"tools": [{"name": "add", "inputSchema": {"type": "object", "properties": {"a": {"$ref": "file://` + secret + `"}}}},
	  {"name": "echo", "inputSchema": {"type": "object"}}, {"name": "fail", "inputSchema": {"type": "object"}},
	  {"name": "sleep", "inputSchema": {"type": "object"}}, {"name": "word_count", "inputSchema": {"type": "object"}}]}`
	os.WriteFile(filepath.Join(filepath.Dir(path), "mcpflow.samples.mcp.json"), []byte(pin), 0o644)
	_, dl := flow.Load(path, all.Offline())
	if !has(dl, diag.CodeToolSetting, "a server's schema refers to no file") {
		t.Fatalf("%v", dl)
	}
}
