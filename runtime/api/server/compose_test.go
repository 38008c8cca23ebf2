package server

import (
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/runtime/api"
)

// The interview that reviews the resume as a subflow, through the API:
// the child flow's thread is read with ?ns= on the parent's history and
// state (the namespace its events carry), only by the parent's tenant; a
// malformed or unknown namespace is an error with its code; the graph
// draws the subflow expanded on request.
func TestSubflowThroughTheAPI(t *testing.T) {
	h := newHarness(t, "sqlite", nil)
	v := values(t, flowsDir+"/examples/candidate_reviewed.yaml")
	if _, err := h.acme.CreateThread(ctx, api.CreateThread{ID: "rev-1", Flow: "interview", Values: v}); err != nil {
		t.Fatal(err)
	}
	var ns string
	for ev, err := range h.acme.StreamRun(ctx, "rev-1", api.StartRun{}) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Event.NS != "" {
			ns, _, _ = strings.Cut(ev.Event.NS, "|")
		}
	}
	steps, err := h.acme.History(ctx, "rev-1", url.Values{"node": {"screen_resume"}})
	if err != nil || len(steps) != 1 || ns != "screen_resume:"+strconv.FormatUint(steps[0].Parent, 10) {
		t.Fatalf("the parent's subflow step %+v %v, events' namespace %q", steps, err, ns)
	}
	child, err := h.acme.History(ctx, "rev-1", url.Values{"ns": {ns}, "limit": {"1000"}})
	if err != nil || len(child) < 5 || child[len(child)-1].Source != "create" {
		t.Fatalf("the child's history: %d checkpoints, %v", len(child), err)
	}
	st, err := h.acme.State(ctx, "rev-1", 0)
	if err != nil || st.Values["resume_review"] == nil {
		t.Fatalf("parent state %v %v", st, err)
	}
	cs, err := h.acme.ChildState(ctx, "rev-1", ns)
	if err != nil || cs.Values["section_feedback"] == nil || len(cs.Next) != 0 {
		t.Fatalf("the child's state: %+v %v", cs, err)
	}
	for _, tc := range []struct {
		c    *api.Client
		ns   string
		code api.Code
	}{
		{h.acme, "screen_resume:999", api.CodeNotFound},
		{h.acme, "../other", api.CodeBadRequest},
		{h.globex, ns, api.CodeNotFound},
	} {
		if _, err := tc.c.ChildState(ctx, "rev-1", tc.ns); apiCode(err) != tc.code {
			t.Errorf("state ns %q: %v, want %s", tc.ns, err, tc.code)
		}
		if _, err := tc.c.History(ctx, "rev-1", url.Values{"ns": {tc.ns}}); apiCode(err) != tc.code {
			t.Errorf("history ns %q: %v, want %s", tc.ns, err, tc.code)
		}
	}
	req, _ := http.NewRequest("GET", h.base+"/v1/flows/interview/graph?format=mermaid&expand=true", nil)
	req.Header.Set("Authorization", "Bearer "+h.acme.Key)
	resp, err := h.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `subgraph n_screen_resume ["screen_resume: subflow resume_review"]`) ||
		!strings.Contains(string(body), "n_screen_resume__sections__each") {
		t.Fatalf("expanded graph:\n%s", body)
	}
}
