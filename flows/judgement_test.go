package flows_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/store/memory"
)

// randomWordsResume is a resume of about 700 KB: 729 entries whose
// bullets are random words drawn from the very words the offline rules
// reward (the role's keywords, outcome phrases, numbers, seniority).
func randomWordsResume() map[string]any {
	vocab := strings.Fields(`the of and to in a is that for it as was with be by on we their can has been more when
		LLM RAG retrieval evaluation prompt engineering fine-tuning embeddings vector search PyTorch Python led mentored owned
		senior cut reduced improved increased 35% 40 2M faster adopted banana river quantum lattice purple window hammer orbit`)
	rnd := rand.New(rand.NewPCG(7, 47))
	words := func(n int) string {
		w := make([]string, n)
		for i := range w {
			w[i] = vocab[rnd.IntN(len(vocab))]
		}
		return strings.Join(w, " ")
	}
	var experience []any
	for i := range 729 {
		bullets := make([]any, 4)
		for b := range bullets {
			bullets[b] = words(20+rnd.IntN(40)) + "."
		}
		experience = append(experience, map[string]any{"company": fmt.Sprintf("Company %d", i), "role": "LLM Engineer", "bullets": bullets})
	}
	return map[string]any{"name": "Random Words", "title": "Senior LLM Engineer", "summary": words(40),
		"experience": experience, "skills": []any{"Python", "PyTorch", "LLM", "RAG"}, "projects": []any{}}
}

// TestResumeReviewOfRandomWords: a resume of random words, every rule's
// favourite words among them, is not read for fit (too long to read), so
// it fails the bar offline; its entries are reviewed only up to
// max_sections, and the report stays short.
func TestResumeReviewOfRandomWords(t *testing.T) {
	g, dl := flow.Load("resume_review.yaml", all.Offline())
	if g == nil {
		t.Fatal(dl)
	}
	resume := randomWordsResume()
	if b, _ := json.Marshal(resume); len(b) < 500_000 {
		t.Fatalf("the resume is %d bytes, want a long one", len(b))
	}
	eng := engine.New(memory.New())
	ctx := context.Background()
	if _, err := eng.Create(ctx, g, "long", map[string]any{"target_role": "LLM Engineer", "resume": resume}); err != nil {
		t.Fatal(err)
	}
	res, err := eng.Run(ctx, g, engine.Request{Thread: "long", Input: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	st := res.State
	rec := st["recruiter_feedback"].(map[string]any)
	fit := rec["role_fit"].(map[string]any)
	if st["threshold_met"] != false || number(st["final_score"]) > 5 || number(fit["score"]) > 3 || len(fit["keywords_found"].([]any)) != 10 {
		t.Fatalf("a resume of random words: final %v, met %v, fit %v", st["final_score"], st["threshold_met"], fit)
	}
	top := st["top_issues"].([]any)[0].(map[string]any)
	if !strings.HasPrefix(top["description"].(string), "The resume is ") || top["severity"] != "high" {
		t.Fatalf("the first issue is %v", top)
	}
	if n := len(st["section_feedback"].([]any)); n != 12 {
		t.Fatalf("%d entries reviewed on their own, want max_sections (12)", n)
	}
	for _, fb := range st["current_feedback"].([]any) {
		if n := len(fb.(map[string]any)["issues"].([]any)); n > 12 {
			t.Fatalf("%s lists %d issues", fb.(map[string]any)["agent_name"], n)
		}
	}
	text, err := g.Output.Render(st)
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(text, "\n"); lines > 120 || len(text) > 20_000 || !strings.Contains(text, "below the 7.5 threshold") {
		t.Fatalf("the report is %d lines, %d bytes:\n%.2000s", lines, len(text), text)
	}
}
