package server

import (
	"errors"
	"testing"

	"github.com/trellisflow/trellis/runtime/api"
)

// A flow that pauses for a recruiter's approval, through the API: the
// thread's state lists the question, a run with resume and answers
// answers it, and the flow goes on; answers without resume, or to a node
// that does not ask, are refused. On SQLite and PostgreSQL.
func TestInterruptsThroughTheAPI(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			h := newHarness(t, b.addr, nil)
			if _, err := h.acme.CreateThread(ctx, api.CreateThread{ID: "cand-1", Flow: "approval"}); err != nil {
				t.Fatal(err)
			}
			run, err := h.acme.RunWait(ctx, "cand-1", api.StartRun{Input: map[string]any{"candidate": "Ada", "score": 82}})
			if err != nil || run.Status != api.RunSucceeded {
				t.Fatalf("first run: %+v %v", run, err)
			}
			st, err := h.acme.State(ctx, "cand-1", 0)
			if err != nil || len(st.Interrupts) != 1 || st.Interrupts[0].ID != "recruiter" {
				t.Fatalf("state of the paused thread: %+v %v", st, err)
			}
			q, _ := st.Interrupts[0].Payload.(map[string]any)
			if q["question"] != "Advance Ada?" || q["recommendation"] != "advance" {
				t.Fatalf("the question: %v", st.Interrupts[0].Payload)
			}
			if _, err := h.acme.RunWait(ctx, "cand-1", api.StartRun{Input: map[string]any{"score": 1}}); apiCode(err) != api.CodeUnfinished {
				t.Fatalf("new input on a paused thread: %v", err)
			}
			if _, err := h.acme.StartRun(ctx, "cand-1", api.StartRun{Answers: map[string]any{"recruiter": true}}); apiCode(err) != api.CodeInvalidInput {
				t.Fatalf("answers without resume: %v", err)
			}
			if _, err = h.acme.RunWait(ctx, "cand-1", api.StartRun{Resume: true, Answers: map[string]any{"invite": true}}); apiCode(err) != api.CodeInvalidInput {
				t.Fatalf("an answer to a node that does not ask: %v", err)
			}
			run, err = h.acme.RunWait(ctx, "cand-1", api.StartRun{Resume: true, Answers: map[string]any{"recruiter": map[string]any{"approve": true, "note": "strong"}}})
			if err != nil || run.Status != api.RunSucceeded || run.Answers["recruiter"] == nil {
				t.Fatalf("the answer: %+v %v", run, err)
			}
			st, err = h.acme.State(ctx, "cand-1", 0)
			if err != nil || len(st.Interrupts) != 0 || st.Values["approved"] != true || st.Values["note"] != "strong" ||
				st.Values["letter"] != "Dear Ada, we would like to invite you to the next round." {
				t.Fatalf("state after the answer: %+v %v", st, err)
			}
			// a stricter bar for one run, through its configuration
			if _, err := h.acme.RunWait(ctx, "cand-1", api.StartRun{Input: map[string]any{"score": 82}, Config: map[string]any{"bra": 90}}); apiCode(err) != api.CodeInvalidInput {
				t.Fatalf("a misspelt configuration: %v", err)
			}
			run, err = h.acme.RunWait(ctx, "cand-1", api.StartRun{Input: map[string]any{"score": 82}, Config: map[string]any{"bar": 90}})
			if err != nil || run.Config["bar"] != 90 {
				t.Fatalf("configured run: %+v %v", run, err)
			}
			if st, _ = h.acme.State(ctx, "cand-1", 0); st.Values["recommendation"] != "hold" || len(st.Interrupts) != 1 {
				t.Fatalf("the stricter bar: %+v", st)
			}
		})
	}
}

func apiCode(err error) api.Code {
	var ae *api.Error
	if errors.As(err, &ae) {
		return ae.Code
	}
	return ""
}
