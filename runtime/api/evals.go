package api

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/trellisflow/trellis/runtime/eval"
)

// StartEval asks a server to evaluate a flow it serves on a dataset of
// its flows directory (Dataset, relative to it: interview.eval.yaml):
// Cases names the cases to run (none: every one), Repeat how many times
// each (default 1).
type StartEval struct {
	Dataset string   `json:"dataset"`
	Cases   []string `json:"cases,omitempty"`
	Repeat  int      `json:"repeat,omitempty"`
}

// The statuses of an eval: it waits for a place among the server's
// evals, runs, then passed or failed as its report says (eval.Report.OK),
// or ended in error (Error says why: the server stopped).
const (
	EvalQueued  = "queued"
	EvalRunning = "running"
	EvalPassed  = "passed"
	EvalFailed  = "failed"
	EvalError   = "error"
)

// Eval is an eval a server ran, or runs, on the version of the flow it
// served then, kept in its store with its report: every case's results,
// scores and failures, and the transcript of each of its runs.
type Eval struct {
	ID          string     `json:"id"`
	Dataset     string     `json:"dataset"`
	Flow        string     `json:"flow"`
	FlowVersion string     `json:"flow_version"`
	Status      string     `json:"status"`
	Error       string     `json:"error,omitempty"`
	Repeat      int        `json:"repeat"`
	Cases       []string   `json:"cases,omitempty"`
	Created     time.Time  `json:"created"`
	Updated     time.Time  `json:"updated"`
	Finished    *time.Time `json:"finished,omitempty"`
	// Summary counts the cases by status once it has ended.
	Summary *eval.Summary `json:"summary,omitempty"`
	// Report is the whole report (GET /v1/evals/{eval} only).
	Report *eval.Report `json:"report,omitempty"`
}

// EvalList lists evals, the newest first.
type EvalList struct {
	Evals []Eval `json:"evals"`
}

// EvalDataset is a dataset of a server's flows directory: the flow it
// evaluates (a served flow's name; empty when it names none the server
// serves, and Error says why it cannot run) and its cases.
type EvalDataset struct {
	Path        string   `json:"path"`
	Flow        string   `json:"flow,omitempty"`
	Description string   `json:"description,omitempty"`
	Cases       []string `json:"cases"`
	Error       string   `json:"error,omitempty"`
}

// EvalDatasets lists the datasets of a server's flows directory.
type EvalDatasets struct {
	Datasets []EvalDataset `json:"datasets"`
}

// EvalDatasets lists the datasets the server can evaluate its flows on.
func (c *Client) EvalDatasets(ctx context.Context) (*EvalDatasets, error) {
	var out EvalDatasets
	return &out, c.do(ctx, http.MethodGet, "/v1/evals/datasets", nil, &out)
}

// StartEval starts an eval; it runs in the background (GetEval reads how
// it stands, WaitEval waits for its end).
func (c *Client) StartEval(ctx context.Context, in StartEval) (*Eval, error) {
	var out Eval
	return &out, c.do(ctx, http.MethodPost, "/v1/evals", in, &out)
}

// GetEval reads an eval with its report.
func (c *Client) GetEval(ctx context.Context, id string) (*Eval, error) {
	var out Eval
	return &out, c.do(ctx, http.MethodGet, "/v1/evals/"+url.PathEscape(id), nil, &out)
}

// ListEvals lists the tenant's evals, the newest first, at most limit (0:
// the server's default).
func (c *Client) ListEvals(ctx context.Context, limit int) (*EvalList, error) {
	path := "/v1/evals"
	if limit > 0 {
		path += "?limit=" + strconv.Itoa(limit)
	}
	var out EvalList
	return &out, c.do(ctx, http.MethodGet, path, nil, &out)
}

// DeleteEval deletes an eval that has ended, with its report.
func (c *Client) DeleteEval(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1/evals/"+url.PathEscape(id), nil, nil)
}

// WaitEval polls an eval every interval until it has ended, or ctx does.
func (c *Client) WaitEval(ctx context.Context, id string, interval time.Duration) (*Eval, error) {
	for {
		e, err := c.GetEval(ctx, id)
		if err != nil || (e.Status != EvalQueued && e.Status != EvalRunning) {
			return e, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(interval):
		}
	}
}
