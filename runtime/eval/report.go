// The outcome of an eval: each case's results on each version, its
// scores, checks and transcripts, rankings, and what fails the eval.

package eval

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Status is where a case (or a ranking) stands on a version.
type Status string

// The statuses. A case passes when its pass rate reaches its own; one
// marked xfail that fails is xfail (a known failure), and one that
// passes is xpass, which fails the eval until the mark is removed. A
// case on a version that does not load is error.
const (
	Passed  Status = "passed"
	Failed  Status = "failed"
	XFail   Status = "xfail"
	XPass   Status = "xpass"
	Errored Status = "error"
)

// fails reports whether a status fails the eval.
func (s Status) fails() bool { return s == Failed || s == XPass || s == Errored }

// Report is an eval's outcome.
type Report struct {
	Dataset     string `json:"dataset"`
	Flow        string `json:"flow"`
	Description string `json:"description,omitempty"`
	// Versions are the versions of the flow evaluated: the first is the
	// one judged, a second the one it is compared against.
	Versions []Version `json:"versions"`
	// Repeat is how many times each case ran on each version.
	Repeat   int              `json:"repeat"`
	Cases    []*CaseReport    `json:"cases"`
	Rankings []*RankingReport `json:"rankings,omitempty"`
	Summary  Summary          `json:"summary"`
	Started  time.Time        `json:"started"`
	TookMS   int64            `json:"took_ms"`
}

// Version is one version of the flow an eval ran.
type Version struct {
	// Label names it in reports: the flow file, or REV:FILE.
	Label string `json:"label"`
	// FlowVersion is the hash of the files it was compiled from, when
	// known (a served flow's version).
	FlowVersion string `json:"flow_version,omitempty"`
	// Error says why it could not be evaluated (it does not load).
	Error string `json:"error,omitempty"`
}

// CaseReport is one case's results, one per version.
type CaseReport struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Pos is where the case is written (file:line:col); Line its line.
	Pos   string `json:"pos"`
	Line  int    `json:"line"`
	XFail string `json:"xfail,omitempty"`
	// Status is the first version's.
	Status  Status        `json:"status"`
	Results []*CaseResult `json:"results"`
	// Regressed: its pass rate is lower than on the version compared
	// against.
	Regressed bool `json:"regressed,omitempty"`
}

// CaseResult is a case's outcome on one version.
type CaseResult struct {
	Status Status `json:"status"`
	// Runs counts its runs (the repeats), Passed those that passed;
	// PassRate is their share and MinPassRate the share it needs.
	Runs        int     `json:"runs"`
	Passed      int     `json:"passed"`
	PassRate    float64 `json:"pass_rate"`
	MinPassRate float64 `json:"min_pass_rate"`
	// Scores are the scores' and judges' values, averaged over the runs.
	Scores []ScoreResult `json:"scores,omitempty"`
	// Reason is the first failure of the first failing run.
	Reason string `json:"reason,omitempty"`
	// Failures lists each failing check once, with the runs it failed.
	Failures []Failure    `json:"failures,omitempty"`
	Repeats  []*RunResult `json:"repeats"`
	// Usage sums what the flow's models were asked over the runs
	// (calls, input_tokens, output_tokens).
	Usage map[string]int64 `json:"usage,omitempty"`
}

// Failure is a check that failed in some runs of a case.
type Failure struct {
	Check  string `json:"check"`
	Pos    string `json:"pos"`
	Line   int    `json:"line"`
	Runs   int    `json:"runs"`
	Reason string `json:"reason"`
	// XFail: a known failure, and why.
	XFail string `json:"xfail,omitempty"`
}

// ScoreResult is a score's mean over a case's runs.
type ScoreResult struct {
	Name string `json:"name"`
	// Kind is score or judge.
	Kind   string    `json:"kind"`
	Value  float64   `json:"value"`
	Values []float64 `json:"values"`
	// Want says what passes (<= 4, >= 3 of 1-5).
	Want string `json:"want"`
}

// RunResult is one run of a case: its checks and transcript.
type RunResult struct {
	Passed bool `json:"passed"`
	// Error says why the case's runs could not go on (a run failed, the
	// conversation ended early).
	Error  string        `json:"error,omitempty"`
	Checks []CheckResult `json:"checks"`
	Turns  []TurnRecord  `json:"turns"`
	// Output is the flow's output after the last turn, when it declares
	// one.
	Output string `json:"output,omitempty"`
	// Usage sums what the flow's nodes asked their models.
	Usage  map[string]int64 `json:"usage,omitempty"`
	TookMS int64            `json:"took_ms"`
}

// CheckResult is one check of a run.
type CheckResult struct {
	// Name says what was checked; Kind is state, output, reply, replies,
	// path, score or judge; Turn the turn it is about (0: the case as a
	// whole; the opening run of a conversational flow is its turn 0 too).
	Name   string   `json:"name"`
	Kind   string   `json:"kind"`
	Turn   int      `json:"turn,omitempty"`
	Passed bool     `json:"passed"`
	Score  *float64 `json:"score,omitempty"`
	// Want says what a score must be to pass.
	Want   string `json:"want,omitempty"`
	Reason string `json:"reason,omitempty"`
	// XFail says why the check is known to fail: its failure does not
	// fail the run.
	XFail string `json:"xfail,omitempty"`
	Pos   string `json:"pos"`
	Line  int    `json:"line"`
}

// TurnRecord is one run of a case, as its transcript shows it.
type TurnRecord struct {
	// Turn numbers it: 0 is the opening run of a conversational flow.
	Turn int `json:"turn"`
	// Message is what the person said (a conversational flow's input);
	// Input the run's other input; Answers a resume's answers.
	Message string         `json:"message,omitempty"`
	Input   map[string]any `json:"input,omitempty"`
	Answers map[string]any `json:"answers,omitempty"`
	// Reply is the flow's reply (its conversation's output field).
	Reply string `json:"reply,omitempty"`
	// Path lists each step's nodes.
	Path [][]string `json:"path"`
	// Degraded names the nodes that used a fallback, with why.
	Degraded map[string]string `json:"degraded,omitempty"`
	// Tools are the tool calls the run made, in the order they ended (a
	// call a person rejected with its approval, though not made).
	Tools []ToolRecord `json:"tools,omitempty"`
	// Paused names the nodes the run paused at.
	Paused []string `json:"paused,omitempty"`
	Error  string   `json:"error,omitempty"`
}

// RankingReport is a ranking's outcome on each version.
type RankingReport struct {
	By      string           `json:"by"`
	Order   []string         `json:"order"`
	XFail   string           `json:"xfail,omitempty"`
	Pos     string           `json:"pos"`
	Line    int              `json:"line"`
	Status  Status           `json:"status"`
	Results []*RankingResult `json:"results"`
}

// RankingResult is a ranking on one version: each case's score, in the
// ranking's order, and why it does not hold.
type RankingResult struct {
	Status Status     `json:"status"`
	Values []*float64 `json:"values"`
	Reason string     `json:"reason,omitempty"`
}

// Summary counts the cases by status on the first version.
type Summary struct {
	Cases      int `json:"cases"`
	Passed     int `json:"passed"`
	Failed     int `json:"failed"`
	XFail      int `json:"xfail"`
	XPass      int `json:"xpass"`
	Errors     int `json:"errors"`
	Regressed  int `json:"regressed"`
	Rankings   int `json:"rankings"`
	RankFailed int `json:"rankings_failed"`
	// OK: nothing fails the eval.
	OK bool `json:"ok"`
}

// OK reports whether the eval passes: no case fails, passes where it is
// marked xfail or errs, no ranking fails, and no case's pass rate drops
// against the version compared.
func (r *Report) OK() bool { return r.Summary.OK }

// summarize fills the report's statuses and summary.
func (r *Report) summarize() {
	s := Summary{Cases: len(r.Cases), Rankings: len(r.Rankings)}
	for _, c := range r.Cases {
		c.Status = c.Results[0].Status
		if len(c.Results) > 1 && c.Results[1].Status != Errored && c.Results[0].PassRate < c.Results[1].PassRate {
			c.Regressed = true
			s.Regressed++
		}
		switch c.Status {
		case Passed:
			s.Passed++
		case Failed:
			s.Failed++
		case XFail:
			s.XFail++
		case XPass:
			s.XPass++
		case Errored:
			s.Errors++
		}
	}
	for _, rk := range r.Rankings {
		rk.Status = rk.Results[0].Status
		if rk.Status.fails() {
			s.RankFailed++
		}
	}
	s.OK = s.Failed == 0 && s.XPass == 0 && s.Errors == 0 && s.Regressed == 0 && s.RankFailed == 0
	r.Summary = s
}

// caseResult folds a case's runs into its result on a version.
func caseResult(c *Case, runs []*RunResult) *CaseResult {
	res := &CaseResult{Runs: len(runs), MinPassRate: c.PassRate, Repeats: runs}
	type agg struct {
		name, kind, want string
		values           []float64
	}
	var scores []*agg
	failures := map[string]*Failure{}
	var order []string
	for _, run := range runs {
		for k, n := range run.Usage {
			if res.Usage == nil {
				res.Usage = map[string]int64{}
			}
			res.Usage[k] += n
		}
		if run.Passed {
			res.Passed++
		} else if res.Reason == "" {
			res.Reason = firstReason(run)
		}
		if run.Error != "" {
			key := "run"
			if f := failures[key]; f != nil {
				f.Runs++
			} else {
				failures[key] = &Failure{Check: "the case's runs", Pos: posText(c.Pos), Line: c.Pos.Line, Runs: 1, Reason: run.Error}
				order = append(order, key)
			}
		}
		for _, ch := range run.Checks {
			if ch.Score != nil {
				i := slices.IndexFunc(scores, func(a *agg) bool { return a.name == ch.Name && a.kind == ch.Kind })
				if i < 0 {
					scores = append(scores, &agg{name: ch.Name, kind: ch.Kind, want: wantOf(ch)})
					i = len(scores) - 1
				}
				scores[i].values = append(scores[i].values, *ch.Score)
			}
			if ch.Passed {
				continue
			}
			key := fmt.Sprintf("%s\x00%d\x00%s", ch.Pos, ch.Turn, ch.Name)
			if f := failures[key]; f != nil {
				f.Runs++
				continue
			}
			failures[key] = &Failure{Check: checkLabel(ch), Pos: ch.Pos, Line: ch.Line, Runs: 1, Reason: ch.Reason, XFail: ch.XFail}
			order = append(order, key)
		}
	}
	for _, k := range order {
		res.Failures = append(res.Failures, *failures[k])
	}
	for _, a := range scores {
		res.Scores = append(res.Scores, ScoreResult{Name: a.name, Kind: a.kind, Value: mean(a.values), Values: a.values, Want: a.want})
	}
	if c.XFail != "" {
		// a case known to fail as a whole: a run passes when every
		// check does, those marked xfail too
		res.Passed = 0
		for _, run := range runs {
			if run.Passed && !slices.ContainsFunc(run.Checks, func(ch CheckResult) bool { return !ch.Passed }) {
				res.Passed++
			}
		}
	}
	if res.Runs > 0 {
		res.PassRate = float64(res.Passed) / float64(res.Runs)
	}
	pass := res.Runs > 0 && res.PassRate >= c.PassRate-1e-9
	known, xpassed := knownFailures(runs)
	switch {
	case c.XFail != "" && pass:
		res.Status = XPass
		res.Reason = "it passes, but is marked xfail (" + c.XFail + "): remove the mark"
	case c.XFail != "":
		res.Status = XFail
	case !pass:
		res.Status = Failed
	case known != "":
		res.Status, res.Reason = XFail, known
	case xpassed != "":
		res.Status, res.Reason = XPass, xpassed
	default:
		res.Status = Passed
	}
	if pass && res.PassRate < 1 && res.Reason != "" && res.Status == Passed {
		res.Reason = fmt.Sprintf("passes at %s (needs %s); a failing run: %s", percent(res.PassRate), percent(c.PassRate), res.Reason)
	}
	return res
}

// knownFailures reads the checks marked xfail of a case's runs: the
// first known failure, or, when every one of them passed in every run,
// the first of them (it should lose its mark).
func knownFailures(runs []*RunResult) (known, xpassed string) {
	marked := false
	for _, run := range runs {
		for _, ch := range run.Checks {
			if ch.XFail == "" {
				continue
			}
			marked = true
			if !ch.Passed {
				return fmt.Sprintf("known failure (%s): %s: %s", ch.XFail, checkLabel(ch), ch.Reason), ""
			}
			if xpassed == "" {
				xpassed = fmt.Sprintf("%s passes, but is marked xfail (%s): remove the mark", checkLabel(ch), ch.XFail)
			}
		}
	}
	if !marked {
		return "", ""
	}
	return "", xpassed
}

// wantOf is what a scored check needs.
func wantOf(ch CheckResult) string { return ch.Want }

func firstReason(run *RunResult) string {
	if run.Error != "" {
		return run.Error
	}
	for _, ch := range run.Checks {
		if !ch.Passed {
			return checkLabel(ch) + ": " + ch.Reason
		}
	}
	return ""
}

// checkLabel names a check with its turn.
func checkLabel(ch CheckResult) string {
	if ch.Turn > 0 {
		return fmt.Sprintf("turn %d: %s", ch.Turn, ch.Name)
	}
	return ch.Name
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return math.Round(s/float64(len(xs))*1000) / 1000
}

func percent(f float64) string { return fmt.Sprintf("%.0f%%", f*100) }

// rankingReport judges a ranking on each version from the cases' mean
// scores.
func rankingReport(rk *Ranking, rep *Report) *RankingReport {
	out := &RankingReport{By: rk.By, Order: rk.Order, XFail: rk.XFail, Pos: posText(rk.Pos), Line: rk.Pos.Line}
	for v := range rep.Versions {
		res := &RankingResult{}
		var missing []string
		for _, name := range rk.Order {
			var val *float64
			for _, c := range rep.Cases {
				if c.Name != name || v >= len(c.Results) {
					continue
				}
				for _, s := range c.Results[v].Scores {
					if s.Name == rk.By && !math.IsNaN(s.Value) {
						x := s.Value
						val = &x
					}
				}
			}
			if val == nil {
				missing = append(missing, name)
			}
			res.Values = append(res.Values, val)
		}
		switch {
		case rep.Versions[v].Error != "":
			res.Status, res.Reason = Errored, rep.Versions[v].Error
			out.Results = append(out.Results, res)
			continue
		case len(missing) > 0:
			res.Reason = fmt.Sprintf("no %s for %s (its runs did not get that far)", rk.By, quoteAll(missing))
		default:
			for i := 0; i+1 < len(rk.Order); i++ {
				if *res.Values[i] <= *res.Values[i+1] {
					res.Reason = fmt.Sprintf("%q (%s %s) does not outscore %q (%s)", rk.Order[i], rk.By, fmtNum(*res.Values[i]), rk.Order[i+1], fmtNum(*res.Values[i+1]))
					break
				}
			}
		}
		pass := res.Reason == ""
		switch {
		case rk.XFail != "" && pass:
			res.Status, res.Reason = XPass, "it holds, but is marked xfail ("+rk.XFail+"): remove the mark"
		case rk.XFail != "":
			res.Status = XFail
		case pass:
			res.Status = Passed
		default:
			res.Status = Failed
		}
		out.Results = append(out.Results, res)
	}
	return out
}

// Rename names the dataset's file name instead of path in the report (its
// dataset and every position in it): a server reports a dataset by its
// name in the flows directory, not by where that directory is.
func (r *Report) Rename(path, name string) {
	re := func(pos string) string {
		if rest, ok := strings.CutPrefix(pos, path+":"); ok {
			return name + ":" + rest
		}
		return pos
	}
	if r.Dataset == path {
		r.Dataset = name
	}
	for _, c := range r.Cases {
		c.Pos = re(c.Pos)
		for _, res := range c.Results {
			for i := range res.Failures {
				res.Failures[i].Pos = re(res.Failures[i].Pos)
			}
			for _, run := range res.Repeats {
				for i := range run.Checks {
					run.Checks[i].Pos = re(run.Checks[i].Pos)
				}
			}
		}
	}
	for _, rk := range r.Rankings {
		rk.Pos = re(rk.Pos)
	}
}
