package flows_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
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
)

// reviewed is a resume and the feedback each reviewer's model gives it
// when it does what its prompt asks: the recruiter judges fit for the
// role (a well-written resume for another profession is a poor fit), the
// writers judge the writing.
type reviewed struct {
	name           string
	resume         map[string]any
	recruiter      float64
	fit            map[string]any
	writer, copier float64
}

func resumes(t *testing.T) []reviewed {
	strong, err := schema.ReadFile("examples/resume_strong.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return []reviewed{
		{name: "senior LLM engineer", resume: strong.(map[string]any)["resume"].(map[string]any), recruiter: 9,
			fit:    map[string]any{"score": 9, "keywords_found": []string{"LLM", "RAG", "evaluation", "fine-tuning", "embeddings", "vector search", "PyTorch", "Python", "prompt engineering"}, "keywords_missing": []string{"retrieval"}, "seniority": "senior"},
			writer: 8.5, copier: 8},
		{name: "junior", resume: map[string]any{"name": "Sam Patel", "title": "Junior Software Engineer",
			"summary": "Recent graduate who built a chatbot over course notes as a final-year project.",
			"experience": []any{map[string]any{"company": "Acme", "role": "Software Engineering Intern", "bullets": []any{
				"Built a Python script that tagged 3,000 support tickets with an LLM, saving the team 5 hours a week.", "Wrote unit tests for the ticket API."}}},
			"skills":   []any{"Python", "SQL", "Git", "LLM"},
			"projects": []any{map[string]any{"name": "notes-bot", "description": "A retrieval chatbot over course notes with embeddings, built for a university project."}}},
			recruiter: 5, fit: map[string]any{"score": 4.5, "keywords_found": []string{"LLM", "retrieval", "embeddings", "Python"}, "keywords_missing": []string{"RAG", "evaluation"}, "seniority": "junior"},
			writer: 6.5, copier: 6.5},
		{name: "pastry chef", resume: map[string]any{"name": "Marie Dubois", "title": "Pastry Chef",
			"summary": "Pastry chef with ten years in fine-dining kitchens, leading a brigade of six.",
			"experience": []any{map[string]any{"company": "Le Petit Four", "role": "Head Pastry Chef", "bullets": []any{
				"Designed a seasonal dessert menu that raised dessert sales by 30%.", "Trained 6 commis chefs in lamination and sugar work."}}},
			"skills": []any{"lamination", "chocolate tempering", "menu design", "food cost control"}, "projects": []any{}},
			recruiter: 2, fit: map[string]any{"score": 0.5, "keywords_found": []string{}, "keywords_missing": []string{"LLM", "RAG"}, "seniority": "mid"},
			// the writers like a well-written resume, whatever the role
			writer: 8.5, copier: 9},
	}
}

// reviewScript answers as the reviewers' models would for one resume.
func reviewScript(r reviewed) []llmtest.Rule {
	feedback := func(agent string, score float64, fit map[string]any) []llmtest.Reply {
		fb := map[string]any{"agent_name": agent, "score": score, "strengths": []string{}, "issues": []any{}, "suggestions": []string{"Quantify one more outcome."}}
		if fit != nil {
			fb["role_fit"] = fit
		}
		b, _ := json.Marshal(fb)
		return []llmtest.Reply{{Content: string(b)}}
	}
	return []llmtest.Rule{
		{Match: "You are a technical recruiter", Replies: feedback("recruiter", r.recruiter, r.fit)},
		{Match: "You are a technical writer", Replies: feedback("technical_writer", r.writer, nil)},
		{Match: "You are a copywriter", Replies: feedback("copywriter", r.copier, nil)},
	}
}

func review(t *testing.T, reg kind.Registry, thread string, r reviewed) map[string]any {
	t.Helper()
	g, dl := flow.Load("resume_review.yaml", reg)
	if g == nil {
		t.Fatal(dl)
	}
	eng := engine.New(memory.New())
	ctx := context.Background()
	// one round, the reviewers only: what is compared is their judgement
	values := map[string]any{"target_role": "LLM Engineer", "resume": r.resume, "max_iterations": 1, "review_sections": false}
	if _, err := eng.Create(ctx, g, thread, values); err != nil {
		t.Fatal(err)
	}
	res, err := eng.Run(ctx, g, engine.Request{Thread: thread, Input: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	return res.State
}

// TestResumeJudgementAgreesWithAndWithoutAModel: the offline rules and
// reviewers' models that do what their prompts ask rank the senior LLM
// engineer above the junior above the pastry chef; in both the senior
// passes the threshold and the pastry chef, whose writing the writers
// like, does not.
func TestResumeJudgementAgreesWithAndWithoutAModel(t *testing.T) {
	for _, mode := range []string{"offline", "model"} {
		var scores []float64
		for _, r := range resumes(t) {
			reg := all.Offline()
			if mode == "model" {
				srv := llmtest.New(reviewScript(r)...)
				ts := httptest.NewServer(srv)
				defer ts.Close()
				reg = all.WithProvider(func() *llm.Provider {
					return &llm.Provider{BaseURL: ts.URL + "/v1", Backoff: time.Millisecond}
				})
			}
			st := review(t, reg, mode+"-"+strings.ReplaceAll(r.name, " ", "-"), r)
			scores = append(scores, number(st["final_score"]))
			wantMet := r.name == "senior LLM engineer"
			if st["threshold_met"] != wantMet {
				t.Errorf("%s, %s: final %v, threshold met %v", mode, r.name, st["final_score"], st["threshold_met"])
			}
		}
		t.Logf("%s: final scores %v", mode, scores)
		if !(scores[0] > scores[1] && scores[1] > scores[2]) {
			t.Errorf("%s: senior %v, junior %v, pastry chef %v are not in that order", mode, scores[0], scores[1], scores[2])
		}
	}
}
