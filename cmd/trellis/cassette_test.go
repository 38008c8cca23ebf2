package main

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/nodes/llm/llmtest"
)

const cassetteFlow = `version: 1
name: ask
input: [question]
state:
  schema:
    type: object
    properties:
      question: {type: string, default: ""}
      answer: {type: string, default: ""}
      mood: {type: string, default: ""}
nodes:
  answer:
    kind: llm
    prompt: answer.prompt
    writes: {answer: output}
  mood:
    kind: llm
    prompt: mood.prompt
    writes: {mood: output.mood}
edges:
  - {from: START, to: answer}
  - {from: answer, to: mood}
  - {from: mood, to: END}
`

const cassetteTests = `flow: ask.yaml
tests:
  - name: the model answers
    runs:
      - input: {question: "What is a superstep?"}
        expect:
          state:
            - "state.answer == 'One round of nodes that run together.'"
            - "state.mood == 'curious'"
`

// Flow tests recorded once against a model over HTTP replay offline, and
// a prompt edit is reported as drift of the node that sends it.
func TestCassetteRecordAndReplay(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("ask.yaml", cassetteFlow)
	write("ask.test.yaml", cassetteTests)
	write("answer.prompt", "---\nfallback_expr: \"'no model'\"\n---\nAnswer briefly: {{.state.question}}\n")
	write("mood.prompt", "---\noutput:\n  name: mood\n  schema: {type: object, required: [mood], properties: {mood: {type: string}}}\nfallback_expr: \"{mood: 'unknown'}\"\n---\nWhat is the mood of: {{.state.question}}\n")
	model := llmtest.New(
		llmtest.Rule{Match: "Answer briefly", Replies: []llmtest.Reply{{Content: "One round of nodes that run together."}}},
		llmtest.Rule{Match: "What is the mood", Replies: []llmtest.Reply{{Content: `{"mood": "curious"}`}}})
	srv := httptest.NewServer(model)
	t.Setenv("OPENAI_BASE_URL", srv.URL+"/v1")
	t.Setenv("OPENAI_API_KEY", "")
	tests := filepath.Join(dir, "ask.test.yaml")

	// offline, the fallbacks do not pass the test
	t.Setenv("OPENAI_BASE_URL", "")
	if out, _, code := trellis(t, "test", tests); code == 0 {
		t.Fatalf("passed on fallbacks:\n%s", out)
	}
	// record against the model
	t.Setenv("OPENAI_BASE_URL", srv.URL+"/v1")
	if out, errs, code := trellis(t, "test", "--record", tests); code != 0 {
		t.Fatalf("record: %d\n%s%s", code, out, errs)
	}
	calls := len(model.Calls())
	if calls != 2 {
		t.Fatalf("%d model calls while recording, want 2", calls)
	}
	cas, err := os.ReadFile(filepath.Join(dir, "ask.cassette.yaml"))
	if err != nil || !strings.Contains(string(cas), "node: answer") || !strings.Contains(string(cas), "node: mood") {
		t.Fatalf("cassette %s %v", cas, err)
	}
	// replay: no model configured, and the server gone
	srv.Close()
	t.Setenv("OPENAI_BASE_URL", "")
	if out, errs, code := trellis(t, "test", "-v", tests); code != 0 {
		t.Fatalf("replay: %d\n%s%s", code, out, errs)
	}
	if len(model.Calls()) != calls {
		t.Fatal("the replay called the model")
	}
	// a prompt edit: the test says which node drifted instead of passing
	write("mood.prompt", "---\noutput:\n  name: mood\n  schema: {type: object, required: [mood], properties: {mood: {type: string}}}\nfallback_expr: \"{mood: 'curious'}\"\n---\nIn one word, the mood of: {{.state.question}}\n")
	out, _, code := trellis(t, "test", tests)
	if code == 0 || !strings.Contains(out, "node mood drifted") || strings.Contains(out, "node answer") {
		t.Fatalf("after a prompt edit: %d\n%s", code, out)
	}
}

const toolCassetteFlow = `version: 1
name: shouter
input: [text]
state:
  schema:
    type: object
    properties:
      text: {type: string, default: ""}
      answer: {type: string, default: ""}
      calls: {type: array, default: []}
tools:
  shout:
    kind: flow
    flow: shout.yaml
nodes:
  ask:
    kind: llm
    prompt: ask.prompt
    tools: [shout]
    writes: {answer: output, calls: tool_calls}
edges:
  - {from: START, to: ask}
  - {from: ask, to: END}
`

const shoutChild = `version: 1
name: shout
description: Shout a text.
input: [text]
state:
  schema:
    type: object
    properties:
      text: {type: string, default: ""}
      loud: {type: string, default: ""}
nodes:
  up: {kind: assign, set: {loud: "upper(state.text)"}}
edges:
  - {from: START, to: up}
  - {from: up, to: END}
output: "{{.state.loud}}!"
`

// A model's tool calls are recorded in the cassette with its replies, and
// replayed offline: the tools run, the model is not asked.
func TestCassetteRecordsToolCalls(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{
		"shouter.yaml": toolCassetteFlow, "shout.yaml": shoutChild,
		"ask.prompt": "---\nfallback_expr: \"'no model'\"\n---\nShout this: {{.state.text}}\n",
		"shouter.test.yaml": `flow: shouter.yaml
tests:
  - name: the model shouts through the tool
    runs:
      - input: {text: hello}
        expect:
          tools: [shout]
          state: ["state.answer == 'I shouted HELLO!'", "state.calls[0].result == 'HELLO!'"]
`} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	model := llmtest.New(llmtest.Rule{Match: "Shout this", Replies: []llmtest.Reply{
		{ToolCalls: []llmtest.ToolCall{{ID: "s1", Name: "shout", Arguments: map[string]any{"text": "hello"}}}},
		{Content: "I shouted HELLO!"},
	}})
	srv := httptest.NewServer(model)
	tests := filepath.Join(dir, "shouter.test.yaml")
	t.Setenv("OPENAI_API_KEY", "")
	t.Setenv("OPENAI_BASE_URL", srv.URL+"/v1")
	if out, errs, code := trellis(t, "test", "--record", tests); code != 0 {
		t.Fatalf("record: %d\n%s%s", code, out, errs)
	}
	if n := len(model.Calls()); n != 2 {
		t.Fatalf("%d model calls while recording, want 2", n)
	}
	cas, err := os.ReadFile(filepath.Join(dir, "shouter.cassette.yaml"))
	if err != nil || !strings.Contains(string(cas), "tool_calls:") || !strings.Contains(string(cas), "name: shout") {
		t.Fatalf("cassette %s %v", cas, err)
	}
	srv.Close()
	t.Setenv("OPENAI_BASE_URL", "")
	if out, errs, code := trellis(t, "test", "-v", tests); code != 0 {
		t.Fatalf("replay: %d\n%s%s", code, out, errs)
	}
	if n := len(model.Calls()); n != 2 {
		t.Fatal("the replay called the model")
	}
}
