package sandbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"
)

// Submission is code to run, with its tests.
type Submission struct {
	Code string
	// Stdin, when not nil, runs the program once on it; with no tests the
	// program runs once on empty input.
	Stdin *string
	// Tests each call a function (Call, Expected: a JSON value) or run
	// the program on an input (Stdin, Stdout).
	Tests []map[string]any
	// Limits bound the whole execution; TestTime each test (default:
	// 5 s, never more than the wall time).
	Limits   Limits
	TestTime time.Duration
}

// Result is what an execution found; it is written to state as JSON
// (see result.schema.json).
type Result struct {
	// Executed says whether the code ran in a sandbox; when not, Error
	// says why.
	Executed bool   `json:"executed"`
	Status   string `json:"status"`
	Language string `json:"language"`
	Backend  string `json:"backend"`
	Error    string `json:"error,omitempty"`

	Exit      *int   `json:"exit"`
	Signal    string `json:"signal,omitempty"`
	Limit     string `json:"limit,omitempty"`
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	StdoutCut bool   `json:"stdout_cut"`
	StderrCut bool   `json:"stderr_cut"`

	WallMS      int64 `json:"wall_ms"`
	CPUMS       int64 `json:"cpu_ms"`
	MemoryBytes int64 `json:"memory_bytes"`

	Tests  []map[string]any `json:"tests"`
	Passed int              `json:"passed"`
	Failed int              `json:"failed"`
	Total  int              `json:"total"`

	Metrics map[string]any `json:"metrics"`
}

// The statuses of a Result.
const (
	StatusOK          = "ok"           // ran with no tests, exit 0
	StatusPassed      = "passed"       // every test passed
	StatusFailed      = "failed"       // a test failed
	StatusError       = "error"        // the program failed (no tests), or the run did not finish its report
	StatusSyntaxError = "syntax_error" // the code does not parse; nothing ran
	StatusLimit       = "limit"        // a limit stopped the whole execution
	StatusNotRun      = "not_run"      // no sandbox ran it (Error says why)
)

// NotRun is the result for code that no sandbox ran.
func NotRun(lang string, why string) *Result {
	return &Result{Status: StatusNotRun, Language: lang, Error: why, Tests: []map[string]any{}, Metrics: nil}
}

// report is what a driver prints.
type report struct {
	Metrics map[string]any   `json:"metrics"`
	Run     map[string]any   `json:"run"`
	Tests   []map[string]any `json:"tests"`
}

// Execute runs a submission of language l on the pool's backend.
func Execute(ctx context.Context, p *Pool, l *Language, sub Submission) (*Result, error) {
	lim := sub.Limits.withDefaults()
	tt := sub.TestTime
	if tt <= 0 {
		tt = 5 * time.Second
	}
	tt = min(tt, lim.Wall)
	var nonce [12]byte
	_, _ = rand.Read(nonce[:])
	tag := "trellis-report-" + hex.EncodeToString(nonce[:]) + ":"
	tests := sub.Tests
	if tests == nil {
		tests = []map[string]any{}
	}
	job := map[string]any{
		"nonce": tag, "file": l.File, "source": sub.Code, "tests": tests,
		"run": sub.Stdin != nil || len(tests) == 0,
		"limits": map[string]any{
			"output": lim.Output, "file_size": lim.FileSize, "cpu": max(int64(lim.CPU/time.Second), 1),
			// the driver keeps a little of the wall time to report in
			"wall": max((lim.Wall - lim.Wall/10).Seconds(), 0.1), "test": tt.Seconds(),
		},
	}
	if sub.Stdin != nil {
		job["stdin"] = *sub.Stdin
	}
	in, err := json.Marshal(job)
	if err != nil {
		return nil, err
	}
	img := p.images.image()
	if l.Image != "" {
		img = l.Image
	}
	// the report holds every test's output: room for all of it
	jl := lim
	jl.Output = lim.Output*int64(2*len(tests)+4) + 1<<20
	o, err := p.Exec(ctx, &Job{Image: img, Root: p.images.Root, Command: l.command(), Stdin: in, Limits: jl})
	if err != nil {
		return nil, err
	}
	r := &Result{Executed: true, Language: l.Name, Backend: p.b.Name(), Tests: []map[string]any{},
		WallMS: o.Wall.Milliseconds(), CPUMS: o.CPU.Milliseconds(), MemoryBytes: o.Memory, Limit: o.Limit}
	rep, ok := findReport(o.Stdout, tag)
	if !ok {
		// the driver did not get to its report: a limit stopped the whole
		// execution, or the code killed it
		r.Status, r.Signal = StatusError, o.Signal
		if o.Limit != "" {
			r.Status = StatusLimit
			r.Error = "stopped at the " + limitName(o.Limit) + " limit"
		} else {
			r.Error = fmt.Sprintf("the execution ended without a report (exit %d %s): %s", o.Exit, o.Signal, short(string(o.Stderr)))
		}
		return r, nil
	}
	r.Metrics = rep.Metrics
	if _, bad := rep.Metrics["syntax_error"]; bad {
		r.Status = StatusSyntaxError
		return r, nil
	}
	if run := rep.Run; run != nil {
		r.Stdout, _ = run["stdout"].(string)
		r.Stderr, _ = run["stderr"].(string)
		r.StdoutCut, _ = run["stdout_cut"].(bool)
		r.StderrCut, _ = run["stderr_cut"].(bool)
		if n, ok := run["exit"].(float64); ok {
			code := int(n)
			r.Exit = &code
		}
		r.Signal, _ = run["signal"].(string)
		if lm, _ := run["limit"].(string); lm != "" && r.Limit == "" {
			r.Limit = lm
		}
		if o.Limit == LimitMemory && r.Signal == "SIGKILL" {
			r.Limit = LimitMemory
		}
		if e, _ := run["error"].(string); e != "" {
			r.Error = e
		}
	}
	for _, t := range rep.Tests {
		if t == nil {
			continue
		}
		if o.Limit == LimitMemory && t["signal"] == "SIGKILL" && t["limit"] == nil {
			t["limit"] = LimitMemory // the kernel killed it at the job's memory limit
		}
		r.Tests = append(r.Tests, t)
		if pass, _ := t["passed"].(bool); pass {
			r.Passed++
		} else {
			r.Failed++
		}
	}
	r.Total = len(r.Tests)
	switch {
	case r.Total > 0 && r.Failed == 0:
		r.Status = StatusPassed
	case r.Total > 0:
		r.Status = StatusFailed
	case r.Exit != nil && *r.Exit == 0 && r.Limit == "":
		r.Status = StatusOK
	case r.Limit != "":
		r.Status = StatusLimit
	default:
		r.Status = StatusError
	}
	return r, nil
}

// findReport finds the driver's report: the last line that starts with
// the job's tag, which the code it ran cannot know.
func findReport(out []byte, tag string) (*report, bool) {
	i := bytes.LastIndex(out, []byte("\n"+tag))
	if i < 0 {
		return nil, false
	}
	line := out[i+1+len(tag):]
	if j := bytes.IndexByte(line, '\n'); j >= 0 {
		line = line[:j]
	}
	var rep report
	if json.Unmarshal(line, &rep) != nil || rep.Metrics == nil {
		return nil, false
	}
	return &rep, true
}

func limitName(l string) string {
	switch l {
	case LimitWall:
		return "wall time"
	case LimitCPU:
		return "CPU time"
	case LimitFileSize:
		return "file size"
	}
	return l
}
