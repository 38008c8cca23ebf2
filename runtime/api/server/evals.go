package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/eval"
	"github.com/trellisflow/trellis/runtime/store"
)

// Evals: the server evaluates the flows it serves on the datasets of its
// flows directory (*.eval.yaml), in the background, each run of a case on
// a store of its own (an eval writes none of the tenant's threads or
// memory), and keeps each eval with its report in its store, where every
// server sharing it reads it. A tenant's evals are kept as documents of a
// memory partition no key reaches (the tenant's name and /evals: a
// tenant's name has no slash), one for the eval and one per case, which
// holds the case's transcripts.

// EvalConfig is how a server runs evals.
type EvalConfig struct {
	// Judge is the model the rubric judges ask (nil: replies recorded in
	// the dataset's cassette, else the judges' rules).
	Judge eval.Model
	// Live says the flows' nodes ask a model (the server's kinds have
	// one): the cassettes' replies are not told to them.
	Live bool
	// Concurrency bounds the runs of one eval's cases at once (default
	// 2); Running bounds the evals running at once on the server (default
	// 2): the others wait, queued.
	Concurrency, Running int
}

// maxEvalRepeat bounds a request's repeat.
const maxEvalRepeat = 20

// evals runs a server's evals.
type evals struct {
	cfg   EvalConfig
	slots chan struct{}
	ctx   context.Context
	stop  context.CancelFunc
	wg    sync.WaitGroup
}

// evalBeat is how often a running eval's record says it is alive; one
// not heard of for evalLapse was left by a server that stopped.
const (
	evalBeat  = 5 * time.Second
	evalLapse = 30 * time.Second
)

func (s *Server) startEvals() {
	cfg := EvalConfig{}
	if s.cfg.Evals != nil {
		cfg = *s.cfg.Evals
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 2
	}
	if cfg.Running <= 0 {
		cfg.Running = 2
	}
	ctx, stop := context.WithCancel(context.Background())
	s.evals = &evals{cfg: cfg, slots: make(chan struct{}, cfg.Running), ctx: ctx, stop: stop}
}

// stopEvals ends the evals under way, each recorded as ended in error,
// and waits for them (within ctx).
func (s *Server) stopEvals(ctx context.Context) {
	if s.evals == nil {
		return
	}
	s.evals.stop()
	done := make(chan struct{})
	go func() { s.evals.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

func (s *Server) evalRoutes() []route {
	return []route{
		{method: "GET", path: "/v1/evals/datasets", access: tenant, handle: s.evalDatasets},
		{method: "POST", path: "/v1/evals", access: tenant, idempotence: keyedAnswer, handle: s.startEval},
		{method: "GET", path: "/v1/evals", access: tenant, handle: s.listEvals},
		{method: "GET", path: "/v1/evals/{eval}", access: tenant, handle: s.getEval},
		{method: "DELETE", path: "/v1/evals/{eval}", access: tenant, handle: s.deleteEval},
	}
}

// evalTenant is the memory partition of a tenant's evals.
func evalTenant(tenant string) string { return tenant + "/evals" }

var (
	evalRecords = []string{"evals", "records"}
	evalCases   = func(id string) []string { return []string{"evals", "cases", id} }
)

func (s *Server) evalMemory() (store.Memory, error) {
	m, ok := store.MemoryOf(s.eng().Store)
	if !ok {
		return nil, &api.Error{Code: api.CodeUnavailable, Message: "this server's store keeps no evals"}
	}
	return m, nil
}

// evalDatasets lists the datasets of the flows directory.
func (s *Server) evalDatasets(w http.ResponseWriter, r *http.Request, c *caller) error {
	files, err := eval.Find(s.flows.dir)
	if err != nil {
		return err
	}
	out := api.EvalDatasets{Datasets: []api.EvalDataset{}}
	for _, f := range files {
		rel, err := filepath.Rel(s.flows.dir, f)
		if err != nil {
			continue
		}
		d := api.EvalDataset{Path: filepath.ToSlash(rel), Cases: []string{}}
		ds, err := eval.Load(f)
		if err != nil {
			d.Error = "the dataset is not valid: " + publicLoadError(err)
			out.Datasets = append(out.Datasets, d)
			continue
		}
		d.Description = ds.Description
		for _, cs := range ds.Cases {
			d.Cases = append(d.Cases, cs.Name)
		}
		if l, err := s.datasetFlow(ds); err != nil {
			d.Error = err.Error()
		} else {
			d.Flow = l.flow.Name()
		}
		out.Datasets = append(out.Datasets, d)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// publicLoadError is a dataset's problems as a tenant reads them: each at
// its line in the dataset, named relative to the flows directory.
func publicLoadError(err error) string {
	var le *diag.ListError
	if !errors.As(err, &le) {
		return "it cannot be read"
	}
	var parts []string
	for _, d := range le.List {
		if d.Severity == diag.Error {
			parts = append(parts, fmt.Sprintf("line %d: %s", d.Line, d.Message()))
		}
	}
	return strings.Join(parts, "; ")
}

// datasetFlow is the served flow a dataset evaluates.
func (s *Server) datasetFlow(ds *eval.Dataset) (*loaded, error) {
	want, err := filepath.Abs(ds.FlowPath())
	if err != nil {
		return nil, err
	}
	if real, err := filepath.EvalSymlinks(want); err == nil {
		want = real
	}
	for _, l := range s.flows.list() {
		have, err := filepath.Abs(l.flow.Path())
		if err != nil {
			continue
		}
		if real, err := filepath.EvalSymlinks(have); err == nil {
			have = real
		}
		if have == want {
			return l, nil
		}
	}
	return nil, fmt.Errorf("it evaluates %s, which is not a flow this server serves", ds.Flow)
}

// datasetFile is the file of a dataset named relative to the flows
// directory: a .eval.yaml file inside it, not through a link out of it.
func (s *Server) datasetFile(name string) (string, error) {
	bad := func(why string) error {
		return &api.Error{Code: api.CodeInvalidInput, Message: "dataset: " + why, Details: map[string]string{"field": "dataset"}}
	}
	clean := filepath.Clean(filepath.FromSlash(name))
	switch {
	case name == "":
		return "", bad("name a dataset of the flows directory (GET /v1/evals/datasets lists them)")
	case filepath.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, ".."+string(filepath.Separator)):
		return "", bad("a dataset is named relative to the flows directory, inside it")
	case !strings.HasSuffix(clean, eval.Suffix):
		return "", bad("a dataset's file ends in " + eval.Suffix)
	}
	dir, err := filepath.Abs(s.flows.dir)
	if err != nil {
		return "", err
	}
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	file := filepath.Join(dir, clean)
	real, err := filepath.EvalSymlinks(file)
	if err != nil {
		return "", &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("no dataset %q in the flows directory", filepath.ToSlash(clean))}
	}
	if !within(dir, real) {
		return "", bad("a dataset is named relative to the flows directory, inside it")
	}
	return real, nil
}

// startEval starts an eval in the background: 202 with its record.
func (s *Server) startEval(w http.ResponseWriter, r *http.Request, c *caller) error {
	// api.StartEval, with a repeat given as 0 told from none
	var body struct {
		Dataset string   `json:"dataset"`
		Cases   []string `json:"cases"`
		Repeat  *int     `json:"repeat"`
	}
	if err := readJSON(r, &body); err != nil {
		return err
	}
	in := api.StartEval{Dataset: body.Dataset, Cases: body.Cases, Repeat: 1}
	if body.Repeat != nil {
		in.Repeat = *body.Repeat
	}
	mem, err := s.evalMemory()
	if err != nil {
		return err
	}
	if in.Repeat < 1 || in.Repeat > maxEvalRepeat {
		return &api.Error{Code: api.CodeInvalidInput, Message: fmt.Sprintf("repeat: from 1 to %d", maxEvalRepeat), Details: map[string]string{"field": "repeat"}}
	}
	file, err := s.datasetFile(in.Dataset)
	if err != nil {
		return err
	}
	ds, err := eval.Load(file)
	if err != nil {
		return &api.Error{Code: api.CodeInvalidInput, Message: "the dataset is not valid: " + publicLoadError(err), Details: map[string]string{"field": "dataset"}}
	}
	var names []string
	for _, cs := range ds.Cases {
		names = append(names, cs.Name)
	}
	for _, name := range in.Cases {
		if !slices.Contains(names, name) {
			msg := fmt.Sprintf("cases: the dataset has no case %q", name)
			if sug := diag.Suggest(name, names); sug != "" {
				msg += fmt.Sprintf("; did you mean %q?", sug)
			}
			return &api.Error{Code: api.CodeInvalidInput, Message: msg, Details: map[string]string{"field": "cases"}}
		}
	}
	l, err := s.datasetFlow(ds)
	if err != nil {
		return &api.Error{Code: api.CodeInvalidInput, Message: "dataset: " + err.Error(), Details: map[string]string{"field": "dataset"}}
	}
	// the dataset is checked against the flow now, so that a request
	// that cannot run is refused rather than recorded failing
	if _, dl := eval.Bind(ds, l.flow.Graph()); dl.HasErrors() {
		return &api.Error{Code: api.CodeInvalidInput, Message: "the dataset does not fit flow " + l.flow.Name() + ": " + publicLoadError(&diag.ListError{List: dl}),
			Details: map[string]string{"field": "dataset"}}
	}
	now := time.Now().UTC()
	rec := api.Eval{ID: newID("eval"), Dataset: filepath.ToSlash(filepath.Clean(filepath.FromSlash(in.Dataset))), Flow: l.flow.Name(), FlowVersion: l.version,
		Status: api.EvalQueued, Repeat: in.Repeat, Cases: in.Cases, Created: now, Updated: now}
	if err := putEval(r.Context(), mem, c.tenant, &rec); err != nil {
		return err
	}
	made(r, "")
	opts := eval.Options{Repeat: in.Repeat, Concurrency: s.evals.cfg.Concurrency, Names: in.Cases, Live: s.evals.cfg.Live, Judge: s.evals.cfg.Judge}
	if !opts.Live {
		if cas, err := eval.OpenCassette(eval.CassettePath(file)); err == nil {
			opts.Cassette = cas
		}
	}
	target := eval.Target{Label: rec.Flow + "@" + shortVersion(l.version), FlowVersion: l.version, Graph: l.flow.Graph()}
	s.evals.wg.Add(1)
	go s.runEval(c.tenant, rec, ds, target, opts)
	writeJSON(w, http.StatusAccepted, rec)
	return nil
}

func shortVersion(v string) string {
	if len(v) > 12 {
		return v[:12]
	}
	return v
}

// runEval runs an eval and keeps its outcome: its record, beating while
// it waits and runs, then its report, a document per case.
func (s *Server) runEval(tenant string, rec api.Eval, ds *eval.Dataset, target eval.Target, opts eval.Options) {
	defer s.evals.wg.Done()
	mem, _ := s.evalMemory()
	ctx := s.evals.ctx
	var mu sync.Mutex
	save := func() {
		mu.Lock()
		defer mu.Unlock()
		rec.Updated = time.Now().UTC()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := putEval(sctx, mem, tenant, &rec); err != nil {
			s.log.Error("recording an eval", "eval", rec.ID, "error", err.Error())
		}
	}
	beat := time.NewTicker(evalBeat)
	defer beat.Stop()
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-done:
				return
			case <-beat.C:
				save()
			}
		}
	}()
	end := func(rep *eval.Report, why string) {
		mu.Lock()
		if why != "" {
			rec.Status, rec.Error = api.EvalError, why
		}
		mu.Unlock()
		s.finishEval(tenant, &mu, &rec, rep, save)
	}
	select {
	case s.evals.slots <- struct{}{}:
		defer func() { <-s.evals.slots }()
	case <-ctx.Done():
		end(nil, "the server stopped before the eval ran")
		return
	}
	mu.Lock()
	rec.Status = api.EvalRunning
	mu.Unlock()
	save()
	res, err := eval.Run(ctx, ds, []eval.Target{target}, opts)
	switch {
	case ctx.Err() != nil:
		end(nil, "the server stopped before the eval ended")
	case err != nil:
		end(nil, err.Error())
	default:
		res.Report.Rename(ds.Path, rec.Dataset)
		end(res.Report, "")
	}
}

// finishEval records an eval's end: its cases' documents first, then its
// record, so that a record that says it ended has its report.
func (s *Server) finishEval(tenant string, mu *sync.Mutex, rec *api.Eval, rep *eval.Report, save func()) {
	mem, _ := s.evalMemory()
	if rep != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for i, c := range rep.Cases {
			if err := putEvalCase(sctx, mem, tenant, rec.ID, i, c); err != nil {
				s.log.Error("recording an eval's case", "eval", rec.ID, "error", err.Error())
				mu.Lock()
				rec.Status, rec.Error = api.EvalError, "the report could not be kept"
				mu.Unlock()
				rep = nil
				break
			}
		}
	}
	mu.Lock()
	now := time.Now().UTC()
	rec.Finished = &now
	if rep != nil {
		sum := rep.Summary
		rec.Summary = &sum
		rec.Status = api.EvalFailed
		if rep.OK() {
			rec.Status = api.EvalPassed
		}
		head := *rep
		head.Cases = []*eval.CaseReport{}
		rec.Report = &head
	}
	mu.Unlock()
	save()
}

// putEval keeps an eval's record (with its report's head: versions,
// rankings, summary; the cases are documents of their own).
func putEval(ctx context.Context, mem store.Memory, tenant string, rec *api.Eval) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return mem.PutMemory(ctx, evalTenant(tenant), &store.MemoryItem{Namespace: evalRecords, Key: rec.ID, Value: b, Updated: rec.Updated})
}

// putEvalCase keeps a case's report, its transcripts cut to fit a
// document when they must be.
func putEvalCase(ctx context.Context, mem store.Memory, tenant, id string, i int, c *eval.CaseReport) error {
	b, err := json.Marshal(fitCase(c))
	if err != nil {
		return err
	}
	return mem.PutMemory(ctx, evalTenant(tenant), &store.MemoryItem{Namespace: evalCases(id), Key: fmt.Sprintf("%05d", i), Value: b, Updated: time.Now().UTC()})
}

// fitCase is a case's report small enough for a document: with many
// repeats, the transcripts of its first failing and first passing runs
// only, and then replies cut, as long as it is too large.
func fitCase(c *eval.CaseReport) *eval.CaseReport {
	size := func(v any) int {
		b, _ := json.Marshal(v)
		return len(b)
	}
	limit := store.MaxMemoryValue - 4<<10
	if size(c) <= limit {
		return c
	}
	out := *c
	out.Results = nil
	for _, r := range c.Results {
		rr := *r
		var keep []*eval.RunResult
		var passed, failed bool
		for _, run := range r.Repeats {
			if run.Passed && !passed || !run.Passed && !failed {
				keep = append(keep, run)
				passed, failed = passed || run.Passed, failed || !run.Passed
			}
		}
		rr.Repeats = keep
		out.Results = append(out.Results, &rr)
	}
	for cut := 4000; size(&out) > limit && cut >= 250; cut /= 2 {
		for _, r := range out.Results {
			for i, run := range r.Repeats {
				cp := *run
				cp.Turns = slices.Clone(run.Turns)
				for j := range cp.Turns {
					cp.Turns[j].Reply = cutText(cp.Turns[j].Reply, cut)
					cp.Turns[j].Message = cutText(cp.Turns[j].Message, cut)
				}
				cp.Output = cutText(cp.Output, cut)
				r.Repeats[i] = &cp
			}
		}
	}
	return &out
}

func cutText(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}

// lapsed marks an eval whose server stopped beating as ended in error.
func lapsed(rec *api.Eval, now time.Time) {
	if (rec.Status == api.EvalQueued || rec.Status == api.EvalRunning) && now.Sub(rec.Updated) > evalLapse {
		rec.Status, rec.Error = api.EvalError, "the server running it stopped before it ended"
	}
}

func (s *Server) readEval(ctx context.Context, tenant, id string) (*api.Eval, error) {
	mem, err := s.evalMemory()
	if err != nil {
		return nil, err
	}
	it, err := mem.GetMemory(ctx, evalTenant(tenant), evalRecords, id, time.Now())
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrMemoryKey) {
		return nil, &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("no eval %q", id)}
	}
	if err != nil {
		return nil, err
	}
	var rec api.Eval
	if err := json.Unmarshal(it.Value, &rec); err != nil {
		return nil, err
	}
	lapsed(&rec, time.Now())
	return &rec, nil
}

func (s *Server) getEval(w http.ResponseWriter, r *http.Request, c *caller) error {
	rec, err := s.readEval(r.Context(), c.tenant, r.PathValue("eval"))
	if err != nil {
		return err
	}
	if rec.Report != nil {
		mem, _ := s.evalMemory()
		items, err := mem.SearchMemory(r.Context(), evalTenant(c.tenant), store.MemoryQuery{Prefix: evalCases(rec.ID), Limit: store.MaxMemoryLimit, Now: time.Now()})
		if err != nil {
			return err
		}
		slices.SortFunc(items, func(a, b *store.MemoryItem) int { return strings.Compare(a.Key, b.Key) })
		rec.Report.Cases = []*eval.CaseReport{}
		for _, it := range items {
			var cr eval.CaseReport
			if err := json.Unmarshal(it.Value, &cr); err != nil {
				return err
			}
			rec.Report.Cases = append(rec.Report.Cases, &cr)
		}
	}
	writeJSON(w, http.StatusOK, rec)
	return nil
}

func (s *Server) listEvals(w http.ResponseWriter, r *http.Request, c *caller) error {
	limit := 50
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > store.MaxMemoryLimit {
			return badParam("limit", "is a whole number from 1 to %d", store.MaxMemoryLimit)
		}
		limit = n
	}
	mem, err := s.evalMemory()
	if err != nil {
		return err
	}
	items, err := mem.SearchMemory(r.Context(), evalTenant(c.tenant), store.MemoryQuery{Prefix: evalRecords, Limit: store.MaxMemoryLimit, Now: time.Now()})
	if err != nil {
		return err
	}
	out := api.EvalList{Evals: []api.Eval{}}
	now := time.Now()
	for _, it := range items {
		var rec api.Eval
		if err := json.Unmarshal(it.Value, &rec); err != nil {
			return err
		}
		lapsed(&rec, now)
		rec.Report = nil
		out.Evals = append(out.Evals, rec)
	}
	slices.SortStableFunc(out.Evals, func(a, b api.Eval) int { return b.Created.Compare(a.Created) })
	if len(out.Evals) > limit {
		out.Evals = out.Evals[:limit]
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) deleteEval(w http.ResponseWriter, r *http.Request, c *caller) error {
	rec, err := s.readEval(r.Context(), c.tenant, r.PathValue("eval"))
	if err != nil {
		return err
	}
	if rec.Status == api.EvalQueued || rec.Status == api.EvalRunning {
		return &api.Error{Code: api.CodeEvalRunning, Message: fmt.Sprintf("eval %s has not ended: delete it once it has", rec.ID)}
	}
	mem, _ := s.evalMemory()
	items, err := mem.SearchMemory(r.Context(), evalTenant(c.tenant), store.MemoryQuery{Prefix: evalCases(rec.ID), Limit: store.MaxMemoryLimit, Now: time.Now()})
	if err != nil {
		return err
	}
	for _, it := range items {
		if err := mem.DeleteMemory(r.Context(), evalTenant(c.tenant), it.Namespace, it.Key); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
	}
	if err := mem.DeleteMemory(r.Context(), evalTenant(c.tenant), evalRecords, rec.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
