package server

import (
	"strconv"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/nodes/llm/llmtest"
	"github.com/trellisflow/trellis/runtime/api"
)

// A finished run carries its flow's output, on wait and when read again;
// a paused run has none until the run that finishes it.
func TestRunOutputThroughTheAPI(t *testing.T) {
	feedback := func(agent string, score int, strength string) llmtest.Rule {
		return llmtest.Rule{Match: "Set agent_name to \"" + agent + "\"", Replies: []llmtest.Reply{{Content: `{"agent_name": "` + agent +
			`", "score": ` + strconv.Itoa(score) + `, "strengths": ["` + strength + `"], "issues": [], "suggestions": ["Name the vector store"]}`}}}
	}
	h := newHarness(t, "sqlite", []llmtest.Rule{
		feedback("recruiter", 8, "Strong retrieval work"),
		feedback("technical_writer", 8, "Precise bullets"),
		feedback("copywriter", 9, "A summary with a result"),
	})
	if _, err := h.acme.CreateThread(ctx, api.CreateThread{ID: "cv", Flow: "resume_review", Values: values(t, flowsDir+"/examples/resume.yaml")}); err != nil {
		t.Fatal(err)
	}
	r, err := h.acme.RunWait(ctx, "cv", api.StartRun{})
	if err != nil || r.Status != api.RunSucceeded {
		t.Fatalf("review %+v %v", r, err)
	}
	for _, want := range []string{"Resume review: Grace Lin for LLM Engineer\nOverall 7.7/10: meets the 7.5 threshold after 1 of at most 3 rounds",
		// the recruiter's reply judged no fit: the rules' fit holds the mean
		"Fit for the role: 5.7/10 (mid-level; keywords: 6 found, 4 missing); the overall score is held to 7.7",
		"  recruiter         8    fit for the role", "    + Strong retrieval work\n    → Name the vector store"} {
		if !strings.Contains(r.Output, want) {
			t.Fatalf("the output lacks %q:\n%s", want, r.Output)
		}
	}
	again, err := h.acme.Run(ctx, "cv", r.ID)
	if err != nil || again.Output != r.Output {
		t.Fatalf("the run read again: %v\n%s", err, again.Output)
	}

	if _, err := h.acme.CreateThread(ctx, api.CreateThread{ID: "cand", Flow: "approval"}); err != nil {
		t.Fatal(err)
	}
	paused, err := h.acme.RunWait(ctx, "cand", api.StartRun{Input: map[string]any{"candidate": "Ada", "score": 82}})
	if err != nil || paused.Status != api.RunSucceeded || paused.Output != "" {
		t.Fatalf("a paused run: %+v %v", paused, err)
	}
	done, err := h.acme.RunWait(ctx, "cand", api.StartRun{Resume: true, Answers: map[string]any{"recruiter": map[string]any{"approve": true}}})
	if err != nil || done.Output != "Ada (82, advance): invited\nDear Ada, we would like to invite you to the next round.\n" {
		t.Fatalf("the finished run: %q %v", done.Output, err)
	}
	if p, err := h.acme.Run(ctx, "cand", paused.ID); err != nil || p.Output != "" {
		t.Fatalf("the paused run read again: %q %v", p.Output, err)
	}
}
