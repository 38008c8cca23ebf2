package llm_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/nodes/llm"
	"github.com/trellisflow/trellis/nodes/llm/llmtest"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/store"
	_ "github.com/trellisflow/trellis/runtime/store/all"
)

const deskFlow = `version: 1
name: desk
state:
  schema:
    type: object
    properties:
      question: {type: string, default: ""}
      answer: {type: string, default: ""}
input: [question]
nodes:
  review:
    kind: subflow
    flow: agent.yaml
    input: {question: "state.question"}
    writes: {answer: "output.answer"}
edges:
  - {from: START, to: review}
  - {from: review, to: END}
`

// A tool call waiting for approval inside a subflow pauses the root run:
// its question has the path review/agent and an id under the child's
// namespace; an answer the node cannot take is refused by either, before
// the run; the approval resumes the child's node where it stopped: the
// model is not asked its first turn again, and the tool runs once. On a
// store opened anew between the runs.
func TestApprovalInsideASubflow(t *testing.T) {
	ctx := context.Background()
	w := newWeather(t)
	srv := llmtest.New(llmtest.Rule{Match: "Answer:", Replies: []llmtest.Reply{
		callTools(llmtest.ToolCall{ID: "c1", Name: "get_weather", Arguments: map[string]any{"city": "Oslo"}}),
		{Content: "It is 21 degrees."},
	}})
	p := serve(t, srv)
	dir := t.TempDir()
	src := strings.NewReplacer("BASE", w.srv.URL, "ALLOW", "127.0.0.1/32", "APPROVE", "approve: always", "ONERROR", "").Replace(agentFlow)
	for name, body := range map[string]string{"desk.yaml": deskFlow, "agent.yaml": src, "shout.yaml": shoutFlow, "prompts/agent.prompt": agentPrompt} {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	g, dl := flow.Load(filepath.Join(dir, "desk.yaml"), all.WithProvider(func() *llm.Provider { return p }))
	if dl.HasErrors() {
		t.Fatalf("load: %v", dl)
	}
	url := "sqlite:" + filepath.Join(dir, "s.db")
	open := func() store.Store {
		st, err := store.Open(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	res, err := engine.New(open()).Run(ctx, g, engine.Request{Thread: "t", Input: map[string]any{"question": "weather?"}})
	if err != nil || res.Interrupt == nil || len(res.Interrupt.Asks) != 1 {
		t.Fatalf("the first run: %+v %v", res, err)
	}
	ask := res.Interrupt.Asks[0]
	if ask.Path != "review/agent" || !strings.HasPrefix(ask.ID, "review:") || !strings.HasSuffix(ask.ID, "|agent") {
		t.Fatalf("the question: %+v", ask)
	}
	if q, _ := ask.Payload.(map[string]any); q["type"] != "tool_approval" {
		t.Fatalf("the question's payload: %v", ask.Payload)
	}
	if w.calls.Load() != 0 {
		t.Fatal("the call ran before its approval")
	}
	e := engine.New(open())
	asks, err := e.Asks(ctx, g, "t")
	if err != nil || len(asks) != 1 || asks[0].ID != ask.ID || asks[0].Path != ask.Path {
		t.Fatalf("the thread's questions: %+v %v", asks, err)
	}
	for _, key := range []string{ask.Path, ask.ID} {
		if _, err := e.Run(ctx, g, engine.Request{Thread: "t", Resume: true, Answers: map[string]any{key: "maybe"}}); err == nil || !strings.Contains(err.Error(), "answers."+key) {
			t.Fatalf("an answer the node cannot take, by %s: %v", key, err)
		}
	}
	res, err = engine.New(open()).Run(ctx, g, engine.Request{Thread: "t", Resume: true, Answers: map[string]any{ask.Path: "approve"}})
	if err != nil || res.Interrupt != nil {
		t.Fatalf("the approved run: %+v %v", res, err)
	}
	if res.State["answer"] != "It is 21 degrees." {
		t.Fatalf("state %v", res.State)
	}
	if n := len(srv.Calls()); n != 2 {
		t.Errorf("the model was asked %d times, want 2 (the paused turn is kept)", n)
	}
	if n := w.calls.Load(); n != 1 {
		t.Errorf("the tool ran %d times, want 1", n)
	}
}
