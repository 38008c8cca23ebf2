package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	facade "github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/cmd/trellis/internal/cli"
	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/nodes/llm/llmtest"
	"github.com/trellisflow/trellis/nodes/tools/mcptool/mcptest"
	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/api/server"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/store"
)

// samplesServer serves the sample tools and weather API (as `trellis dev
// mcp-server --addr` does), counting the calls each tool received.
type samplesServer struct {
	url   string
	mu    sync.Mutex
	calls map[string]int
}

func startSamples(t *testing.T) *samplesServer {
	s := &samplesServer{calls: map[string]int{}}
	ts := httptest.NewServer(mcptest.Handler(mcptest.Config{OnCall: func(tool string, _ map[string]any) {
		s.mu.Lock()
		s.calls[tool]++
		s.mu.Unlock()
	}}))
	t.Cleanup(ts.Close)
	s.url = ts.URL
	return s
}

func (s *samplesServer) count(tool string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[tool]
}

// agentServe serves flows/examples (the agent example) over a SQLite store
// with a model; it returns a client of a tenant's.
func agentServe(t *testing.T, model string, extra ...string) (c *api.Client, db string, start func() (*exec.Cmd, *syncBuffer)) {
	t.Helper()
	ctx := context.Background()
	db = "sqlite:" + filepath.Join(t.TempDir(), "t.db")
	rt, err := facade.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	cat, _ := store.CatalogOf(rt.Store())
	_, key, err := server.CreateKey(ctx, cat, "acme", "", false)
	rt.Close()
	if err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	c = api.NewClient("http://"+addr, key)
	start = func() (*exec.Cmd, *syncBuffer) {
		args := append([]string{"serve", "--flows", "../../flows/examples", "--store", db, "--addr", addr}, extra...)
		cmd, stderr := trellisProcess(t, []string{"OPENAI_BASE_URL=" + model + "/v1", "OPENAI_API_KEY=k"}, args...)
		waitReady(t, c)
		return cmd, stderr
	}
	return c, db, start
}

// The agent example served: the test model calls its tools (the http, the
// flow and the mcp one, two of them at once), the deletion waits for a
// person, the resumed run takes the answer, and the stream shows each
// call's tool_start and tool_end; no model turn and no call is made twice.
func TestAgentThroughTheAPI(t *testing.T) {
	ctx := context.Background()
	samples := startSamples(t)
	model := llmtest.New(llmtest.Rule{Match: "Delete my note", Replies: []llmtest.Reply{
		{ToolCalls: []llmtest.ToolCall{{ID: "w", Name: "get_weather", Arguments: map[string]any{"city": "Oslo"}}}},
		{ToolCalls: []llmtest.ToolCall{{ID: "n", Name: "trip_note", Arguments: map[string]any{"city": "Oslo", "celsius": 12}},
			{ID: "d", Name: "delete_note", Arguments: map[string]any{"title": "old plans"}}}},
		{Content: "Oslo is 12 degrees and rainy: pack a light jacket. Your note is gone."},
	}})
	ms := httptest.NewServer(model)
	defer ms.Close()
	c, _, start := agentServe(t, ms.URL)
	start()
	if _, err := c.CreateThread(ctx, api.CreateThread{ID: "trip", Flow: "agent"}); err != nil {
		t.Fatal(err)
	}
	cfg := map[string]any{"samples_url": samples.url}
	var first []engine.Event
	for ev, err := range c.StreamRun(ctx, "trip", api.StartRun{Config: cfg,
		Input: map[string]any{"question": "What should I pack?", "city": "Oslo", "note": "old plans"}}) {
		if err != nil {
			t.Fatal(err)
		}
		first = append(first, ev.Event)
	}
	end := first[len(first)-1]
	if end.Type != engine.RunEnd || end.Interrupt == nil || len(end.Interrupt.Asks) != 1 {
		t.Fatalf("the first run should pause for the deletion: %+v", end)
	}
	calls := end.Interrupt.Asks[0].Payload.(map[string]any)["calls"].([]any)
	if len(calls) != 1 || calls[0].(map[string]any)["tool"] != "delete_note" {
		t.Fatalf("the question: %+v", end.Interrupt.Asks[0].Payload)
	}
	if got := toolEvents(first); !slices.Equal(got, []string{"tool_start get_weather", "tool_end get_weather"}) {
		t.Fatalf("the first run's tool events: %v", got)
	}
	if samples.count("weather") != 1 || samples.count("delete_note") != 0 {
		t.Fatalf("calls before the answer: %v", samples.calls)
	}
	st, err := c.State(ctx, "trip", 0)
	if err != nil || len(st.Interrupts) != 1 || st.Interrupts[0].ID != "assistant" {
		t.Fatalf("the thread's questions: %+v %v", st, err)
	}

	// an answer the node cannot take is refused before any run starts
	if _, err := c.StartRun(ctx, "trip", api.StartRun{Resume: true, Answers: map[string]any{"assistant": "maybe later"}}); !api.IsCode(err, api.CodeInvalidInput) ||
		!strings.Contains(err.Error(), "not a decision") {
		t.Fatalf("a malformed answer: %v", err)
	}
	var second []engine.Event
	for ev, err := range c.StreamRun(ctx, "trip", api.StartRun{Resume: true, Answers: map[string]any{"assistant": "approve"}}) {
		if err != nil {
			t.Fatal(err)
		}
		second = append(second, ev.Event)
	}
	end = second[len(second)-1]
	if end.Type != engine.RunEnd || end.Interrupt != nil || !strings.Contains(end.State["answer"].(string), "light jacket") {
		t.Fatalf("the resumed run: %+v", end)
	}
	got := toolEvents(second)
	slices.Sort(got)
	if !slices.Equal(got, []string{"tool_end delete_note", "tool_end trip_note", "tool_start delete_note", "tool_start trip_note"}) {
		t.Fatalf("the resumed run's tool events: %v", got)
	}
	for _, ev := range second {
		if ev.Type == engine.ToolEnd && ev.Tool.Name == "delete_note" && (ev.Tool.Approval != "approved" || ev.Tool.Result != `deleted the note "old plans"`) {
			t.Errorf("delete_note's end: %+v", ev.Tool)
		}
		if ev.Type == engine.ToolEnd && ev.Tool.Name == "trip_note" && ev.Tool.Result != "For Oslo at 12 degrees, pack a light jacket." {
			t.Errorf("trip_note's end: %+v", ev.Tool)
		}
	}
	if n := len(model.Calls()); n != 3 {
		t.Errorf("the model was asked %d times, want 3 (the turn before the pause is kept)", n)
	}
	if samples.count("weather") != 1 || samples.count("delete_note") != 1 {
		t.Errorf("calls: %v", samples.calls)
	}
	if calls := end.State["calls"].([]any); len(calls) != 3 {
		t.Errorf("the state's calls: %v", calls)
	}
}

// toolEvents names a run's tool events, type and tool.
func toolEvents(evs []engine.Event) []string {
	var out []string
	for _, ev := range evs {
		if (ev.Type == engine.ToolStart || ev.Type == engine.ToolEnd) && ev.NS == "" {
			out = append(out, string(ev.Type)+" "+ev.Tool.Name)
		}
	}
	return out
}

// A server SIGKILLed while its run waits on the model's third turn, after
// two turns of tool calls: the server that takes the run over asks the
// model that turn again, and makes none of the finished calls again.
func TestAgentCrashMidLoop(t *testing.T) {
	ctx := context.Background()
	samples := startSamples(t)
	model := llmtest.New(llmtest.Rule{Match: "What should I pack", Replies: []llmtest.Reply{
		{ToolCalls: []llmtest.ToolCall{{ID: "w", Name: "get_weather", Arguments: map[string]any{"city": "Lisbon"}}}},
		{ToolCalls: []llmtest.ToolCall{{ID: "n", Name: "trip_note", Arguments: map[string]any{"city": "Lisbon", "celsius": 24}},
			{ID: "c", Name: "word_count", Arguments: map[string]any{"text": "What should I pack"}}}},
		{Content: "never heard", Delay: 10 * time.Minute},
		{Content: "Lisbon is 24 degrees: pack sunglasses."},
	}})
	ms := httptest.NewServer(model)
	defer ms.Close()
	c, _, start := agentServe(t, ms.URL, "--dead-after", "2s", "--lease-ttl", "2s")
	first, _ := start()
	if _, err := c.CreateThread(ctx, api.CreateThread{ID: "trip", Flow: "agent"}); err != nil {
		t.Fatal(err)
	}
	run, err := c.StartRun(ctx, "trip", api.StartRun{Config: map[string]any{"samples_url": samples.url},
		Input: map[string]any{"question": "What should I pack?", "city": "Lisbon"}})
	if err != nil {
		t.Fatal(err)
	}
	// the third turn's request is in flight: both turns of calls are done
	deadline := time.Now().Add(2 * time.Minute)
	for len(model.Calls()) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("the model heard %d requests", len(model.Calls()))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	start()
	done, err := c.Join(ctx, "trip", run.ID)
	for err != nil && api.IsCode(err, api.CodeRunRequeued) {
		done, err = c.Join(ctx, "trip", run.ID)
	}
	if err != nil || done.Status != api.RunSucceeded || !strings.Contains(done.State["answer"].(string), "sunglasses") {
		t.Fatalf("the run after the crash: %+v %v", done, err)
	}
	reqs := model.Calls()
	if len(reqs) != 4 {
		t.Fatalf("the model heard %d requests, want 4 (only the turn in flight again)", len(reqs))
	}
	if last := reqs[3].Messages; len(last) != 7 || last[3].ToolCallID != "w" || last[6].ToolCallID != "c" {
		t.Fatalf("the turn asked again does not carry the kept results: %+v", last)
	}
	if samples.count("weather") != 1 || samples.count("word_count") != 1 {
		t.Fatalf("finished calls were made again: %v", samples.calls)
	}
	if calls := done.State["calls"].([]any); len(calls) != 3 {
		t.Fatalf("the state's calls: %v", calls)
	}
}

// `trellis dev mcp-server` serves its sample tools over stdio (a flow's
// command starts it) and over streamable HTTP; `trellis mcp pin` writes a
// flow's servers' tools beside it, which validate reads once the server
// is gone.
func TestDevMCPServerAndPin(t *testing.T) {
	dir := t.TempDir()
	addr := freeAddr(t)
	server, stderr := trellisProcess(t, nil, "dev", "mcp-server", "--addr", addr)
	defer server.Process.Kill()
	flowSrc := `version: 1
name: sums
state:
  schema:
    type: object
    properties:
      sum: {type: string, default: ""}
tools:
  samples:
    kind: mcp
    SERVER
    tools: [add]
    list_timeout: 2m
nodes:
  add:
    kind: llm
    prompt: add.prompt
    tools: [samples]
    writes: {sum: output}
edges:
  - {from: START, to: add}
  - {from: add, to: END}
`
	os.WriteFile(filepath.Join(dir, "add.prompt"), []byte("---\nfallback_calls: [{tool: add, arguments: {a: 40, b: 2}}]\nfallback_expr: \"string(tool_calls[0].result)\"\n---\nAdd.\n"), 0o644)
	stdio := filepath.Join(dir, "stdio.yaml")
	os.WriteFile(stdio, []byte(strings.Replace(flowSrc, "SERVER", "command: [env, TRELLIS_AS_MAIN=1, "+os.Args[0]+", dev, mcp-server]", 1)), 0o644)
	if out, errs, code := trellis(t, "run", stdio, "--store", "memory"); code != 0 || !strings.Contains(out, `"sum": "42"`) {
		t.Fatalf("over stdio: %d\n%s%s", code, out, errs)
	}
	web := filepath.Join(dir, "web.yaml")
	os.WriteFile(web, []byte(strings.Replace(flowSrc, "SERVER", "url: http://"+addr+"/mcp", 1)), 0o644)
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(stderr.String(), "/mcp") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if out, errs, code := trellis(t, "mcp", "pin", web); code != 0 || !strings.Contains(out, "web.samples.mcp.json") {
		t.Fatalf("pin: %d\n%s%s", code, out, errs)
	}
	if out, errs, code := trellis(t, "run", web, "--store", "memory"); code != 0 || !strings.Contains(out, `"sum": "42"`) {
		t.Fatalf("over HTTP: %d\n%s%s", code, out, errs)
	}
	server.Process.Kill()
	server.Wait()
	// (in processes of their own: this one keeps what it listed a while)
	validate := func() (int, string) {
		cmd, errs := trellisProcess(t, nil, "validate", web)
		err := cmd.Wait()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), errs.String()
		}
		return 0, errs.String()
	}
	if code, errs := validate(); code != 0 {
		t.Fatalf("with the server gone, the pinned copy: %d %s", code, errs)
	}
	os.Remove(filepath.Join(dir, "web.samples.mcp.json"))
	if code, errs := validate(); code != 1 || !strings.Contains(errs, "1 error") {
		t.Fatalf("with neither: %d %s", code, errs)
	}
}

// A flow a caller posts to be validated does not have the server reach
// an MCP server: no command is started, no address dialled (its tools
// come from a pinned copy, and without one it is an error saying so).
func TestPostedFlowReachesNoServer(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	flows := filepath.Join(dir, "flows")
	os.MkdirAll(filepath.Join(flows, "prompts"), 0o755)
	os.WriteFile(filepath.Join(flows, "prompts", "p.prompt"), []byte("---\nfallback: done\n---\nGo.\n"), 0o644)
	marker := filepath.Join(dir, "started")
	rt, err := facade.Open(ctx, "memory")
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	srv, err := server.New(server.Config{Runtime: rt, FlowsDir: flows, Kinds: all.Registry(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer func() { hs.Close(); srv.Shutdown(ctx) }()
	cat, _ := store.CatalogOf(rt.Store())
	_, key, _ := server.CreateKey(ctx, cat, "acme", "", false)
	posted := `version: 1
name: posted
state:
  schema:
    type: object
    properties:
      out: {type: string, default: ""}
tools:
  evil:
    kind: mcp
    command: [sh, -c, "touch ` + marker + `"]
nodes:
  n: {kind: llm, prompt: p, tools: [evil], writes: {out: output}}
edges:
  - {from: START, to: n}
  - {from: n, to: END}
`
	_, err = api.NewClient(hs.URL, key).Validate(ctx, "posted.yaml", []byte(posted))
	if !api.IsCode(err, api.CodeInvalidFlow) || !strings.Contains(err.Error(), "it was not asked") {
		t.Fatalf("validate: %v", err)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatalf("the posted flow's command ran: %v", err)
	}
}

// trellis run shows a tool call waiting for approval and takes the answer
// on standard input; --resume --answer takes an edit of its arguments or
// a rejection with a reason, and refuses an answer that is neither.
func TestRunAnswersToolApproval(t *testing.T) {
	samples := startSamples(t)
	db := "sqlite:" + filepath.Join(t.TempDir(), "a.db")
	run := func(stdin string, args ...string) (string, string, int) {
		var out, errs bytes.Buffer
		code := cli.Main(args, &cli.Env{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errs, Registry: all.Offline()})
		return out.String(), errs.String(), code
	}
	on := func(thread string, more ...string) []string {
		return append([]string{"run", "../../flows/examples/agent.yaml", "--store", db, "--thread", thread,
			"--config", "samples_url=" + samples.url}, more...)
	}
	input := []string{"--input", "question=What should I pack?", "--input", "city=Oslo", "--input", "note=old plans"}

	out, errs, code := run("approve\n", on("a", input...)...)
	if code != 0 || !strings.Contains(errs, "assistant would call:\n  delete_note {\"title\":\"old plans\"} (call ") ||
		!strings.Contains(out, `delete_note: "deleted the note \"old plans\""`) || samples.count("delete_note") != 1 {
		t.Fatalf("approved on standard input: %d\n%s%s", code, out, errs)
	}

	if out, errs, code = run("", on("b", input...)...); code != 0 || samples.count("delete_note") != 1 || !strings.Contains(errs, "--resume --answer assistant=VALUE") {
		t.Fatalf("no one to answer: %d\n%s%s", code, out, errs)
	}
	if out, errs, code = run("", on("b", "--resume", "--answer", "assistant=maybe")...); code != 2 || !strings.Contains(errs, "answers.assistant") ||
		samples.count("delete_note") != 1 {
		t.Fatalf("an answer that is no decision: %d\n%s%s", code, out, errs)
	}
	out, errs, code = run("", on("b", "--resume", "--answer", "assistant={decision: edit, arguments: {title: older plans}}")...)
	if code != 0 || !strings.Contains(out, `delete_note: "deleted the note \"older plans\""`) || samples.count("delete_note") != 2 {
		t.Fatalf("edited: %d\n%s%s", code, out, errs)
	}

	run("", on("c", input...)...)
	out, errs, code = run("", on("c", "--resume", "--answer", "assistant={decision: reject, reason: I still need it}")...)
	if code != 0 || !strings.Contains(out, "delete_note failed (the call was rejected by a person: I still need it)") || samples.count("delete_note") != 2 {
		t.Fatalf("rejected: %d\n%s%s", code, out, errs)
	}
}
