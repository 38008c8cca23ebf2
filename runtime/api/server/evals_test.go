package server

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/eval"
	"github.com/trellisflow/trellis/runtime/store"
)

// The API evaluates a served flow on a dataset of its flows directory:
// the eval runs in the background on the version served, is kept in the
// store with its report (each case's scores, failures and transcripts),
// is read back by another server sharing the store, belongs to its
// tenant, and a request that cannot run is refused saying why.
func TestEvalsThroughTheAPI(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			addr := storeAddr(t, b.addr)
			offline := func(c *Config) { c.Kinds = all.Offline() }
			h := newHarness(t, addr, nil, offline)
			ds, err := h.acme.EvalDatasets(ctx)
			if err != nil {
				t.Fatal(err)
			}
			flows := map[string]api.EvalDataset{}
			for _, d := range ds.Datasets {
				flows[d.Path] = d
			}
			if d := flows["resume_review.eval.yaml"]; d.Flow != "resume_review" || len(d.Cases) != 5 || d.Error != "" {
				t.Fatalf("datasets %+v", ds.Datasets)
			}
			if d := flows["examples/greet.eval.yaml"]; d.Flow != "greet" || d.Error != "" {
				t.Fatalf("datasets %+v", ds.Datasets)
			}
			started, err := h.acme.StartEval(ctx, api.StartEval{Dataset: "resume_review.eval.yaml", Repeat: 2})
			if err != nil {
				t.Fatal(err)
			}
			if started.Status != api.EvalQueued || started.Flow != "resume_review" || started.Repeat != 2 {
				t.Fatalf("started %+v", started)
			}
			served, err := h.srv.flows.get("resume_review")
			if err != nil {
				t.Fatal(err)
			}
			done, err := h.acme.WaitEval(ctx, started.ID, 20*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			if done.Status != api.EvalPassed || done.FlowVersion != served.version || done.Summary == nil || done.Summary.Cases != 5 || done.Summary.XFail != 0 || done.Summary.Failed != 0 {
				t.Fatalf("done %+v %+v", done, done.Summary)
			}
			rep := done.Report
			if rep == nil || len(rep.Cases) != 5 || len(rep.Rankings) != 2 || rep.Versions[0].FlowVersion != served.version {
				t.Fatalf("report %+v", rep)
			}
			chef := rep.Cases[2]
			if chef.Name != "a resume for another profession" || chef.Status != eval.Passed || len(chef.Results[0].Repeats) != 2 {
				t.Fatalf("case %+v", chef)
			}
			if out := chef.Results[0].Repeats[0].Output; !strings.Contains(out, "Resume review: Marie Dubois for LLM Engineer") {
				t.Fatalf("transcript: %q", out)
			}
			// the report names the dataset as the request did, never
			// where the server's flows directory is
			if c := chef.Results[0].Repeats[0].Checks; rep.Dataset != "resume_review.eval.yaml" || !strings.HasPrefix(chef.Pos, "resume_review.eval.yaml:") ||
				len(c) == 0 || !strings.HasPrefix(c[0].Pos, "resume_review.eval.yaml:") || len(chef.Results[0].Failures) != 0 ||
				!strings.HasPrefix(rep.Rankings[0].Pos, "resume_review.eval.yaml:") {
				t.Fatalf("positions: %s, %s, %+v, %s", rep.Dataset, chef.Pos, c, rep.Rankings[0].Pos)
			}
			// the same start sent again with its idempotency key starts
			// nothing more: it is answered as the first was
			keyed := func() []byte {
				req, _ := http.NewRequestWithContext(ctx, "POST", h.base+"/v1/evals", strings.NewReader(`{"dataset": "examples/greet.eval.yaml"}`))
				req.Header.Set("Authorization", "Bearer "+h.acme.Key)
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set(api.IdempotencyKeyHeader, "eval-key")
				resp, err := h.http.Do(req)
				if err != nil || resp.StatusCode != http.StatusAccepted {
					t.Fatalf("keyed start: %v %v", resp, err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return b
			}
			if first, second := keyed(), keyed(); !bytes.Equal(first, second) {
				t.Fatalf("the keyed start sent again: %s / %s", first, second)
			}
			if l, err := h.acme.ListEvals(ctx, 0); err != nil || len(l.Evals) != 2 {
				t.Fatalf("evals after a keyed start sent twice: %+v %v", l, err)
			} else if _, err := h.acme.WaitEval(ctx, l.Evals[0].ID, 10*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			// kept: another server on the same store reads it; another
			// tenant does not find it
			h.stop()
			h2 := newHarness(t, addr, nil, offline)
			list, err := h2.acme.ListEvals(ctx, 0)
			if err != nil || len(list.Evals) != 2 || list.Evals[1].ID != started.ID || list.Evals[1].Report != nil || list.Evals[1].Status != api.EvalPassed {
				t.Fatalf("list %+v %v", list, err)
			}
			again, err := h2.acme.GetEval(ctx, started.ID)
			if err != nil || len(again.Report.Cases) != 5 || again.Report.Cases[2].Results[0].Repeats[1].Output != chef.Results[0].Repeats[1].Output {
				t.Fatalf("read again: %v", err)
			}
			var ae *api.Error
			if _, err := h2.globex.GetEval(ctx, started.ID); !errors.As(err, &ae) || ae.Code != api.CodeNotFound {
				t.Fatalf("another tenant: %v", err)
			}
			if l, err := h2.globex.ListEvals(ctx, 0); err != nil || len(l.Evals) != 0 {
				t.Fatalf("another tenant's list: %+v %v", l, err)
			}
			// requests that cannot run
			for _, tc := range []struct {
				in    api.StartEval
				code  api.Code
				field string
				want  string
			}{
				{api.StartEval{Dataset: "nothing.eval.yaml"}, api.CodeNotFound, "", `no dataset "nothing.eval.yaml"`},
				{api.StartEval{Dataset: "../flows/interview.eval.yaml"}, api.CodeInvalidInput, "dataset", "inside it"},
				{api.StartEval{Dataset: "/etc/passwd"}, api.CodeInvalidInput, "dataset", "inside it"},
				{api.StartEval{Dataset: "interview.yaml"}, api.CodeInvalidInput, "dataset", "ends in .eval.yaml"},
				{api.StartEval{Dataset: "interview.eval.yaml", Cases: []string{"a week candidate"}}, api.CodeInvalidInput, "cases", `did you mean "a weak candidate"?`},
				{api.StartEval{Dataset: "interview.eval.yaml", Repeat: 21}, api.CodeInvalidInput, "repeat", "repeat: from 1 to 20"},
			} {
				_, err := h2.acme.StartEval(ctx, tc.in)
				if !errors.As(err, &ae) || ae.Code != tc.code || !strings.Contains(ae.Message, tc.want) {
					t.Errorf("%+v: %v", tc.in, err)
					continue
				}
				if d, _ := ae.Details.(map[string]any); tc.field != "" && (d == nil || d["field"] != tc.field) {
					t.Errorf("%+v: details %v", tc.in, ae.Details)
				}
			}
			// deleted with its report
			if err := h2.acme.DeleteEval(ctx, started.ID); err != nil {
				t.Fatal(err)
			}
			if _, err := h2.acme.GetEval(ctx, started.ID); !errors.As(err, &ae) || ae.Code != api.CodeNotFound {
				t.Fatalf("deleted: %v", err)
			}
			mem, _ := store.MemoryOf(h2.srv.eng().Store)
			if left, err := mem.SearchMemory(ctx, evalTenant("acme"), store.MemoryQuery{Prefix: evalCases(started.ID), Now: time.Now()}); err != nil || len(left) != 0 {
				t.Fatalf("cases left after delete: %d %v", len(left), err)
			}
			if l, err := h2.acme.ListEvals(ctx, 0); err != nil || len(l.Evals) != 1 || l.Evals[0].ID == started.ID {
				t.Fatalf("evals after delete: %+v %v", l, err)
			}
			// the tenant's own memory holds nothing of it
			if items, err := h2.acme.SearchMemory(ctx, api.SearchMemory{NamespacePrefix: []string{"evals"}}); err != nil || len(items) != 0 {
				t.Fatalf("tenant memory: %+v %v", items, err)
			}
		})
	}
}

// An eval whose server stopped beating is reported as ended in error, and
// one that has not ended cannot be deleted.
func TestEvalLapsesWithItsServer(t *testing.T) {
	h := newHarness(t, "memory", nil)
	mem, _ := store.MemoryOf(h.srv.eng().Store)
	old := time.Now().UTC().Add(-time.Hour)
	for _, rec := range []api.Eval{
		{ID: "eval_lapsed", Dataset: "x.eval.yaml", Flow: "greet", FlowVersion: "v", Status: api.EvalRunning, Repeat: 1, Created: old, Updated: old},
		{ID: "eval_live", Dataset: "x.eval.yaml", Flow: "greet", FlowVersion: "v", Status: api.EvalRunning, Repeat: 1, Created: old, Updated: time.Now().UTC()},
	} {
		if err := putEval(ctx, mem, "acme", &rec); err != nil {
			t.Fatal(err)
		}
	}
	got, err := h.acme.GetEval(ctx, "eval_lapsed")
	if err != nil || got.Status != api.EvalError || got.Error != "the server running it stopped before it ended" {
		t.Fatalf("%+v %v", got, err)
	}
	var ae *api.Error
	if err := h.acme.DeleteEval(ctx, "eval_live"); !errors.As(err, &ae) || ae.Code != api.CodeEvalRunning || ae.Status != http.StatusConflict {
		t.Fatalf("delete a running eval: %v", err)
	}
	if err := h.acme.DeleteEval(ctx, "eval_lapsed"); err != nil {
		t.Fatalf("delete a lapsed eval: %v", err)
	}
}

// A case whose transcripts do not fit a document keeps those of its first
// failing and first passing runs, its replies cut, and still fits.
func TestEvalCaseFitsADocument(t *testing.T) {
	h := newHarness(t, "sqlite", nil)
	long := strings.Repeat("word ", 60_000)
	var runs []*eval.RunResult
	for i := range 30 {
		runs = append(runs, &eval.RunResult{Passed: i%3 != 0, Turns: []eval.TurnRecord{{Turn: 0, Reply: long, Path: [][]string{{"a"}}}}})
	}
	c := &eval.CaseReport{Name: "big", Results: []*eval.CaseResult{{Runs: 30, Repeats: runs}}}
	fit := fitCase(c)
	if n := len(fit.Results[0].Repeats); n != 2 || fit.Results[0].Repeats[0].Passed || !fit.Results[0].Repeats[1].Passed {
		t.Fatalf("kept %d runs", n)
	}
	if c.Results[0].Repeats[0].Turns[0].Reply != long {
		t.Fatal("the report itself was cut")
	}
	mem, _ := store.MemoryOf(h.srv.eng().Store)
	if err := putEvalCase(ctx, mem, "acme", "eval_big", 0, c); err != nil {
		t.Fatal(err)
	}
}
