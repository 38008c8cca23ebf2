package flows_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/nodes/llm"
	"github.com/trellisflow/trellis/nodes/llm/llmtest"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/schema"
	"github.com/trellisflow/trellis/runtime/store/memory"
	"gopkg.in/yaml.v3"
)

// twelveTurns is one interview: what the candidate says, and the action
// the turn reaches with the model of examples/interview.model.yaml (which
// classifies and decides each turn in this order).
var twelveTurns = []struct {
	say, code string
	want      string // the action the turn reaches with the model
}{
	{say: "", want: "greeting"},
	{say: "I build data pipelines in Go and PostgreSQL at Northwind.", want: "question"},
	{say: "Backpressure was the hard part; we added bounded queues.", want: "question"},
	{say: "Sorry, what do you mean?", want: "followup"},
	{say: "I meant the indexer's write path: batching and retries.", want: "question"},
	{say: "Could we do a coding exercise?", want: "sandbox_guidance"},
	{say: "Here it is.", code: "def top_k(words, k):\n    # count, then sort\n    return sorted(words)[:k]\n", want: "code_review"},
	{say: "It is O(n log n); I would test ties first.", want: "question"},
	{say: "We cut search latency tenfold.", want: "followup"},
	{say: "I wrote the cache invalidation myself.", want: "question"},
	{say: "The flag service served forty teams.", want: "question"},
	{say: "Let us wrap up here, please.", want: "closing"},
}

// modelScript answers every interview prompt, matched by a phrase of its
// body (examples/interview.model.yaml, which `trellis dev model-server
// --script` serves too). The second question repeats the first: the flow
// must block it.
func modelScript(t *testing.T) []llmtest.Rule {
	b, err := os.ReadFile("examples/interview.model.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rules []llmtest.Rule
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatal(err)
	}
	return rules
}

func runTwelve(t *testing.T, reg kind.Registry, observe engine.Observer, checkTurns bool) map[string]any {
	t.Helper()
	g, dl := flow.Load("interview.yaml", reg)
	if g == nil {
		t.Fatal(dl)
	}
	values, err := schema.ReadFile("examples/candidate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	eng := engine.New(memory.New())
	ctx := context.Background()
	if _, err := eng.Create(ctx, g, "i12", values.(map[string]any)); err != nil {
		t.Fatal(err)
	}
	var state map[string]any
	for i, tr := range twelveTurns {
		in := map[string]any{}
		if i > 0 {
			in["last_response"] = tr.say
		}
		if tr.code != "" {
			in["current_code"] = tr.code
		}
		res, err := eng.Run(ctx, g, engine.Request{Thread: "i12", Input: in, Observe: observe, RecordPath: true})
		if err != nil {
			t.Fatalf("turn %d: %v", i+1, err)
		}
		if got := res.State["last_node"]; checkTurns && got != tr.want {
			t.Fatalf("turn %d (%q): reached %v, want %s; path %v", i+1, tr.say, got, tr.want, res.Path)
		}
		state = res.State
	}
	if state["phase"] != "done" || state["evaluation"] == nil {
		t.Fatalf("the interview did not reach closing with an evaluation: phase %v, last node %v", state["phase"], state["last_node"])
	}
	return state
}

// TestInterviewWithModel runs twelve turns against the test model server
// over HTTP, streaming, and checks the model's words and decisions reach
// the state, a repeated question is blocked, and nothing degrades.
func TestInterviewWithModel(t *testing.T) {
	srv := llmtest.New(modelScript(t)...)
	srv.Key = "sk-interview-test-key"
	ts := httptest.NewServer(srv)
	defer ts.Close()
	reg := all.WithProvider(func() *llm.Provider {
		return &llm.Provider{BaseURL: ts.URL + "/v1", APIKey: srv.Key, Backoff: time.Millisecond}
	})
	var mu sync.Mutex
	var streamed strings.Builder
	degraded := map[string]string{}
	var events []engine.Event
	state := runTwelve(t, reg, func(ev engine.Event) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, ev)
		switch {
		case ev.Type == engine.NodeOutput:
			streamed.WriteString(ev.Text)
		case ev.Type == engine.NodeEnd && ev.Degraded != "":
			degraded[ev.Node] = ev.Degraded
		}
	}, true)
	// no sandbox here: the code is not run, and says so
	if why := degraded["run_code"]; !strings.Contains(why, "no sandbox") {
		t.Fatalf("run_code with no sandbox: %q", why)
	}
	delete(degraded, "run_code")
	if len(degraded) > 0 {
		t.Fatalf("degraded nodes with a model: %v", degraded)
	}
	calls := srv.Calls()
	for _, c := range calls {
		if !c.Stream || !c.Authorized || c.Rule < 0 {
			t.Fatalf("call not streamed, unauthorised or unscripted: %+v", c)
		}
	}
	if !strings.Contains(streamed.String(), "Welcome Ada!") || !strings.Contains(streamed.String(), "Overall you scored 4.5") {
		t.Fatalf("the replies were not streamed into the events")
	}
	// the scores are the flow's, from the model's assessments of each
	// answer; the code never ran, so it has no quality
	if ev := state["evaluation"].(map[string]any); ev["overall"] != 4.5 || ev["technical"] != 5.4 || ev["code_quality"] != nil ||
		ev["answers"] != 7 || ev["strengths"].([]any)[0] != "Named the write path: batching and retries" {
		t.Fatalf("evaluation = %v", ev)
	}
	if state["next_message"] != "Thank you Ada! Overall you scored 4.5 out of 10. Good luck!" {
		t.Fatalf("closing message = %v", state["next_message"])
	}
	asked := map[string]bool{}
	for _, q := range state["questions_asked"].([]any) {
		text := q.(map[string]any)["text"].(string)
		if asked[strings.ToLower(strings.Trim(text, "?"))] {
			t.Fatalf("question asked twice: %q", text)
		}
		asked[strings.ToLower(strings.Trim(text, "?"))] = true
	}
	if !asked["what made the streaming log indexer hard to build"] || len(asked) < 6 {
		t.Fatalf("questions = %v", asked)
	}
	subs := state["code_submissions"].([]any)
	if sub := subs[0].(map[string]any); len(subs) != 1 || sub["quality"] != nil || number(sub["style"]) != 6 || sub["executed"] != false {
		t.Fatalf("code review = %v", subs)
	}
	b, _ := json.Marshal([]any{events, state})
	if strings.Contains(string(b), srv.Key) {
		t.Fatal("the API key reached the events or the state")
	}
}

// TestInterviewTwelveTurnsOffline: the same conversation with no model
// reaches closing on the prompts' fallbacks, every llm node degraded.
func TestInterviewTwelveTurnsOffline(t *testing.T) {
	degraded := map[string]bool{}
	state := runTwelve(t, all.Offline(), func(ev engine.Event) {
		if ev.Type == engine.NodeEnd && ev.Degraded != "" {
			degraded[ev.Node] = true
		}
	}, false)
	if !strings.HasPrefix(state["next_message"].(string), "Thank you, that is all from me.") {
		t.Fatalf("closing = %v", state["next_message"])
	}
	for _, n := range []string{"greeting", "detect_intent", "decide_next_action", "question", "evaluation", "closing"} {
		if !degraded[n] {
			t.Errorf("%s did not run degraded", n)
		}
	}
}
