package server

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
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

// Questions asked inside a map's items (their subflow asks), through the
// API: the thread's state lists each with its id and path; answers by
// path or id resume only their items, some at a time; an answer naming
// no question is refused at once (422, naming it); a paused child's
// thread is read, and updated, under its namespace, and the resumed run
// goes on from the edit. On SQLite and PostgreSQL.
func TestNestedInterruptsThroughTheAPI(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			h := newHarness(t, b.addr, nil)
			if _, err := h.acme.CreateThread(ctx, api.CreateThread{ID: "q1", Flow: "expenses"}); err != nil {
				t.Fatal(err)
			}
			claims := []any{map[string]any{"who": "Ada", "amount": 250}, map[string]any{"who": "Bo", "amount": 40}, map[string]any{"who": "Cy", "amount": 900}}
			run, err := h.acme.RunWait(ctx, "q1", api.StartRun{Input: map[string]any{"claims": claims}})
			if err != nil || run.Status != api.RunSucceeded {
				t.Fatalf("first run: %+v %v", run, err)
			}
			st, err := h.acme.State(ctx, "q1", 0)
			if err != nil || len(st.Interrupts) != 2 {
				t.Fatalf("state of the paused thread: %+v %v", st, err)
			}
			ada, cy := st.Interrupts[0], st.Interrupts[1]
			if ada.Path != "claims[0]/manager" || cy.Path != "claims[2]/manager" || !strings.HasPrefix(ada.ID, "claims[0]:") || !strings.HasSuffix(ada.ID, "|manager") || ada.ID == cy.ID {
				t.Fatalf("the questions: %+v", st.Interrupts)
			}
			if q, _ := cy.Payload.(map[string]any); q["who"] != "Cy" {
				t.Fatalf("Cy's question: %v", cy.Payload)
			}
			_, err = h.acme.RunWait(ctx, "q1", api.StartRun{Resume: true, Answers: map[string]any{"claims[1]/manager": true}})
			var ae *api.Error
			if !errors.As(err, &ae) || ae.Code != api.CodeInvalidInput || fmt.Sprint(ae.Details) != fmt.Sprint(map[string]any{"field": "answers.claims[1]/manager", "reason": ae.Details.(map[string]any)["reason"], "suggestion": ""}) || !strings.Contains(ae.Message, "claims[0]/manager, claims[2]/manager") {
				t.Fatalf("an answer to no question: %v", err)
			}
			// Cy's child, paused: read and corrected under its namespace
			ns, _, _ := strings.Cut(cy.ID, "|")
			child, err := h.acme.ChildState(ctx, "q1", ns)
			if err != nil || child.Values["amount"] != 900 || len(child.Next) != 1 || child.Next[0] != "manager" {
				t.Fatalf("Cy's child: %+v %v", child, err)
			}
			if _, err := h.acme.ChildUpdate(ctx, "q1", ns, api.Update{As: "manager", Values: map[string]any{"note": "checked receipts"}}); err != nil {
				t.Fatalf("update of the paused child: %v", err)
			}
			run, err = h.acme.RunWait(ctx, "q1", api.StartRun{Resume: true, Answers: map[string]any{cy.Path: map[string]any{"approve": true}}})
			if err != nil || run.Status != api.RunSucceeded {
				t.Fatalf("Cy's answer: %+v %v", run, err)
			}
			st, err = h.acme.State(ctx, "q1", 0)
			if err != nil || len(st.Interrupts) != 1 || !reflect.DeepEqual(st.Interrupts[0], ada) || len(st.Values["decisions"].([]any)) != 0 {
				t.Fatalf("after Cy's answer: %+v %v", st, err)
			}
			run, err = h.acme.RunWait(ctx, "q1", api.StartRun{Resume: true, Answers: map[string]any{ada.ID: false}})
			if err != nil || run.Status != api.RunSucceeded {
				t.Fatalf("Ada's answer: %+v %v", run, err)
			}
			st, err = h.acme.State(ctx, "q1", 0)
			if err != nil || len(st.Interrupts) != 0 || st.Values["approved_total"] != 940 {
				t.Fatalf("the end: %+v %v", st, err)
			}
			decisions := st.Values["decisions"].([]any)
			if len(decisions) != 3 || decisions[2].(map[string]any)["note"] != "checked receipts" || decisions[0].(map[string]any)["approved"] != false {
				t.Fatalf("decisions %v", decisions)
			}
		})
	}
}
