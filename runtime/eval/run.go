// Running the cases: each run of a case on a store of its own, the turns
// one after the other, the checks after each turn and after the last,
// every case, version and repeat concurrently up to a bound.

package eval

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/memory"
	"github.com/trellisflow/trellis/runtime/testfile"
)

// Options say how an eval runs.
type Options struct {
	// Repeat runs each case this many times on each version (default 1).
	Repeat int
	// Concurrency bounds the runs of cases at once (default 4).
	Concurrency int
	// Match keeps only the cases whose name contains it, Names (when
	// set) those named.
	Match string
	Names []string
	// Live says the flow's nodes ask a model: the cassette's replies are
	// not told to them, and a node that uses its fallback is not a drift.
	Live bool
	// Judge asks the rubric judges' model (nil: the judges' replies come
	// from the cassette, else from their rules).
	Judge Model
	// JudgeModel is the model a judge asks when neither it nor the
	// dataset names one (empty: the Judge's default).
	JudgeModel string
	// Cassette holds recorded replies (nil: none).
	Cassette *Cassette
	// Record keeps the replies each case's first run on the first version
	// was told, for the cassette (Result.Recorded).
	Record bool
	// Progress, when set, hears each run of a case as it ends (from the
	// goroutine that ran it).
	Progress func(version int, c *Case, repeat int, r *RunResult)
}

// Target is a version of the flow to evaluate.
type Target struct {
	// Label names it in reports.
	Label string
	// FlowVersion is the hash of its files, when known.
	FlowVersion string
	// Graph is the compiled flow; nil with Err when it does not load.
	Graph *flow.Graph
	Err   error
}

// Result is an eval's report and what it recorded.
type Result struct {
	Report *Report
	// Recorded are the replies the cases were told (with Options.Record),
	// for the cases that ran.
	Recorded []CassetteEntry
	// Cases names the cases that ran.
	Cases []string
	// Warnings are what checking the dataset against the version judged
	// found that does not stop it running (a read of a field the state's
	// schema does not declare, where it leaves the object open).
	Warnings diag.List
}

// Run evaluates the dataset on targets, the first the version judged and
// any other one it is compared with. A dataset that does not fit the
// first target is an error listing every problem (*diag.ListError); one
// that does not fit another makes that version's results errors.
func Run(ctx context.Context, ds *Dataset, targets []Target, opts Options) (*Result, error) {
	if len(targets) == 0 {
		return nil, errors.New("eval: no version of the flow to evaluate")
	}
	if opts.Repeat < 1 {
		opts.Repeat = 1
	}
	if opts.Concurrency < 1 {
		opts.Concurrency = 4
	}
	start := time.Now()
	rep := &Report{Dataset: ds.Path, Flow: ds.Flow, Description: ds.Description, Repeat: opts.Repeat, Started: start.UTC()}
	var cases []*Case
	for _, c := range ds.Cases {
		if (opts.Match == "" || strings.Contains(c.Name, opts.Match)) && (opts.Names == nil || slices.Contains(opts.Names, c.Name)) {
			cases = append(cases, c)
		}
	}
	binds := make([]*bound, len(targets))
	var warnings diag.List
	for i, t := range targets {
		v := Version{Label: t.Label, FlowVersion: t.FlowVersion}
		switch {
		case t.Graph == nil:
			v.Error = "the flow does not load"
			if t.Err != nil {
				v.Error = t.Err.Error()
			}
			if i == 0 {
				return nil, fmt.Errorf("%s: %s", t.Label, v.Error)
			}
		default:
			b, dl := Bind(ds, t.Graph)
			if dl.HasErrors() {
				if i == 0 {
					return nil, &diag.ListError{List: dl, Sources: diag.Sources{ds.Path: ds.Source}}
				}
				v.Error = "the dataset does not fit this version: " + firstError(dl)
			} else {
				binds[i] = b
				if i == 0 {
					warnings = dl
				}
			}
		}
		rep.Versions = append(rep.Versions, v)
	}
	type job struct {
		v, c, r int
	}
	runs := make([][][]*RunResult, len(targets))
	for v := range targets {
		runs[v] = make([][]*RunResult, len(cases))
		for c := range cases {
			runs[v][c] = make([]*RunResult, opts.Repeat)
		}
	}
	recorded := make([][]CassetteEntry, len(cases))
	jobs := make(chan job)
	var wg sync.WaitGroup
	for range opts.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				c := cases[j.c]
				r, got := binds[j.v].runCase(ctx, c, opts, opts.Record && j.v == 0 && j.r == 0)
				runs[j.v][j.c][j.r] = r
				if got != nil {
					recorded[j.c] = got
				}
				if opts.Progress != nil {
					opts.Progress(j.v, c, j.r, r)
				}
			}
		}()
	}
	// the first repeat of every case first, so that a slow case's
	// repeats do not hold the others' first results back
	for r := range opts.Repeat {
		for c := range cases {
			for v := range targets {
				if binds[v] != nil {
					jobs <- job{v, c, r}
				}
			}
		}
	}
	close(jobs)
	wg.Wait()
	for ci, c := range cases {
		cr := &CaseReport{Name: c.Name, Description: c.Description, Pos: posText(c.Pos), Line: c.Pos.Line, XFail: c.XFail}
		for v := range targets {
			if binds[v] == nil {
				cr.Results = append(cr.Results, &CaseResult{Status: Errored, MinPassRate: c.PassRate, Reason: rep.Versions[v].Error})
				continue
			}
			cr.Results = append(cr.Results, caseResult(c, runs[v][ci]))
		}
		rep.Cases = append(rep.Cases, cr)
	}
	for _, rk := range ds.Rankings {
		if slices.ContainsFunc(rk.Order, func(name string) bool {
			return !slices.ContainsFunc(cases, func(c *Case) bool { return c.Name == name })
		}) {
			continue // a case it ranks did not run
		}
		rep.Rankings = append(rep.Rankings, rankingReport(rk, rep))
	}
	rep.summarize()
	rep.TookMS = time.Since(start).Milliseconds()
	res := &Result{Report: rep, Warnings: warnings}
	for i, c := range cases {
		res.Cases = append(res.Cases, c.Name)
		res.Recorded = append(res.Recorded, recorded[i]...)
	}
	return res, nil
}

// runCase runs a case once: its opening run, then its turns, checking
// each turn and then the case. With record, it returns the replies the
// runs were told, as cassette entries.
func (b *bound) runCase(ctx context.Context, c *Case, opts Options, record bool) (*RunResult, []CassetteEntry) {
	start := time.Now()
	rr := &RunResult{Turns: []TurnRecord{}, Checks: []CheckResult{}}
	defer func() { rr.TookMS = time.Since(start).Milliseconds() }()
	g := b.g
	st := memory.New()
	defer st.Close()
	eng := engine.New(st)
	const thread = "eval"
	values, err := b.ds.initial(c)
	if err == nil {
		_, err = eng.Create(ctx, g, thread, values)
	}
	if err != nil {
		rr.Error = "the case's thread cannot be created: " + err.Error()
		return rr, nil
	}
	if len(c.Tools) > 0 {
		ctx = kind.WithToolMock(ctx, testfile.ToolMock(c.Tools))
	}
	var replies *engine.Replies
	if !opts.Live {
		if rs := opts.Cassette.replies(c.Name); len(rs) > 0 {
			replies = engine.NewReplies(rs)
		}
	}
	type turn struct {
		t *Turn
		n int
	}
	var turns []turn
	if g.Conversation != nil || len(c.Turns) == 0 {
		turns = append(turns, turn{nil, 0})
	}
	for i, t := range c.Turns {
		turns = append(turns, turn{t, i + 1})
	}
	o := &outcome{transcript: []any{}, replies: []any{}}
	var last *engine.Result
	drifted := map[string]bool{}
	for ti, tn := range turns {
		if tn.n > 0 && g.Conversation != nil && o.state != nil {
			if done, _ := g.Finished(o.state); done {
				rr.Error = fmt.Sprintf("the conversation ended before turn %d, so %s not taken", tn.n, plural(len(turns)-ti, "turn was", "turns were"))
				break
			}
		}
		rec := TurnRecord{Turn: tn.n, Path: [][]string{}}
		req := engine.Request{Thread: thread, RecordPath: true, Replies: replies, Config: b.ds.configOf(c)}
		in := map[string]any{}
		if t := tn.t; t != nil {
			maps.Copy(in, t.Input)
			rec.Input = t.Input
			if t.HasMessage {
				in[g.Conversation.Input] = t.Message
				rec.Message = t.Message
				o.say("user", tn.n, t.Message)
			}
			if t.Answers != nil {
				req.Resume, req.Answers, in = true, t.Answers, nil
				rec.Answers = t.Answers
			}
		}
		if last != nil && last.Interrupt != nil && (tn.t == nil || tn.t.Answers == nil) {
			rr.Error = fmt.Sprintf("turn %d: the run before paused at %s; answer it with answers: {NODE: VALUE}", tn.n, strings.Join(pausedAt(last.Interrupt), ", "))
			break
		}
		req.Input = in
		var mu sync.Mutex
		req.Observe = func(ev engine.Event) {
			if ev.Type == engine.ToolEnd {
				mu.Lock()
				toolRecorder(ev, &rec.Tools)
				mu.Unlock()
				return
			}
			if ev.Type != engine.NodeEnd && ev.Type != engine.NodeFailed {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for k, n := range ev.Usage {
				if rr.Usage == nil {
					rr.Usage = map[string]int64{}
				}
				rr.Usage[k] += n
			}
			if ev.Type != engine.NodeEnd || ev.Degraded == "" {
				return
			}
			if rec.Degraded == nil {
				rec.Degraded = map[string]string{}
			}
			rec.Degraded[ev.Node] = ev.Degraded
		}
		res, err := eng.Run(ctx, g, req)
		if err != nil {
			rec.Error = err.Error()
			rr.Turns = append(rr.Turns, rec)
			rr.Error = fmt.Sprintf("turn %d failed: %v", tn.n, err)
			break
		}
		last = res
		rec.Path = res.Path
		if rec.Path == nil {
			rec.Path = [][]string{}
		}
		rec.Paused = pausedAt(res.Interrupt)
		o.state = res.State
		o.path = append(o.path, res.Path...)
		sortCalls(rec.Tools)
		o.tools = append(o.tools, rec.Tools...)
		if g.Conversation != nil {
			if s, ok := res.State[g.Conversation.Output].(string); ok {
				rec.Reply = s
			}
			o.reply = rec.Reply
			o.replies = append(o.replies, rec.Reply)
			o.replyTurns = append(o.replyTurns, tn.n)
			o.say("flow", tn.n, rec.Reply)
		}
		rr.Turns = append(rr.Turns, rec)
		if !opts.Live {
			for _, node := range slices.Sorted(maps.Keys(rec.Degraded)) {
				if !drifted[node] && opts.Cassette.recorded(c.Name, node) {
					drifted[node] = true
					rr.Checks = append(rr.Checks, CheckResult{Name: "recorded replies of " + node, Kind: "cassette", Turn: tn.n, Pos: posText(c.Pos), Line: c.Pos.Line,
						Reason: fmt.Sprintf("node %s asked what the cassette holds no reply for (its prompt, or the state it renders, changed since the case was recorded), so it used its fallback: record the case again with trellis eval --record", node)})
				}
			}
		}
		if tn.t != nil && tn.t.Expect != nil {
			rr.Checks = append(rr.Checks, b.checkExpect(tn.t.Expect, o, res.Path, rec.Tools, res.Interrupt, tn.n)...)
		}
	}
	if rr.Error == "" && o.state != nil {
		if c.Expect != nil {
			rr.Checks = append(rr.Checks, b.checkExpect(c.Expect, o, o.path, o.tools, last.Interrupt, 0)...)
		}
		vars := b.vars(o, last.Interrupt)
		for _, s := range c.Scores {
			rr.Checks = append(rr.Checks, b.checkScore(s, vars))
		}
		for _, j := range c.Judges {
			ch, entry := b.judge(ctx, c, j, o, vars, opts)
			rr.Checks = append(rr.Checks, ch)
			if entry != nil && record {
				o.judged = append(o.judged, *entry)
			}
		}
		if b.g.Output != nil && last.Interrupt == nil {
			rr.Output, _ = b.g.Output.Render(o.state)
		}
	}
	rr.Passed = rr.Error == "" && !slices.ContainsFunc(rr.Checks, func(ch CheckResult) bool { return !ch.Passed && ch.XFail == "" })
	if !record {
		return rr, nil
	}
	entries, err := told(ctx, st, c.Name)
	if err != nil {
		rr.Error, rr.Passed = "reading the replies to record: "+err.Error(), false
	}
	return rr, append(entries, o.judged...)
}

// outcome is what a case's runs produced so far.
type outcome struct {
	state      map[string]any
	path       [][]string
	tools      []ToolRecord
	reply      string
	replies    []any
	replyTurns []int
	transcript []any
	judged     []CassetteEntry
}

func (o *outcome) say(role string, turn int, text string) {
	o.transcript = append(o.transcript, map[string]any{"turn": turn, "role": role, "text": text})
}

// told reads the model replies a case's runs were told from its store:
// every thread's (the case's and its child flows'), oldest first.
func told(ctx context.Context, st store.Store, caseName string) ([]CassetteEntry, error) {
	threads, err := st.Threads(ctx, store.ThreadOptions{})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(threads, func(a, b store.ThreadInfo) int { return strings.Compare(a.ID, b.ID) })
	var out []CassetteEntry
	for _, t := range threads {
		cps, err := st.History(ctx, t.ID, store.HistoryOptions{})
		if err != nil {
			return nil, err
		}
		for i := len(cps) - 1; i >= 0; i-- {
			for _, r := range cps[i].Replies {
				out = append(out, CassetteEntry{Case: caseName, Node: r.Node, Hash: r.Key, Reply: r.Text})
			}
		}
	}
	return out, nil
}

// pausedAt lists the nodes a run paused at, sorted (nil when it did not).
func pausedAt(in *engine.Interrupt) []string {
	if in == nil {
		return nil
	}
	set := map[string]bool{}
	for _, n := range append(slices.Clone(in.Before), in.After...) {
		set[n] = true
	}
	for _, a := range in.Asks {
		set[a.ID] = true
	}
	return slices.Sorted(maps.Keys(set))
}

func posText(p diag.Pos) string { return p.String() }

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// firstError is the first error of a list.
func firstError(dl diag.List) string {
	for _, d := range dl {
		if d.Severity == diag.Error {
			return d.String()
		}
	}
	return "it has errors"
}
