package sandbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/trellisflow/trellis/runtime/value"
)

// MaxSource is the size of the largest source the sandbox runs, in
// bytes; a larger one, or one holding a NUL byte, is not run and its
// result says why.
const MaxSource = 1 << 20

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
	StatusError       = "error"        // the program failed (no tests), or the source could not be run
	StatusSyntaxError = "syntax_error" // the code does not parse; nothing ran
	StatusLimit       = "limit"        // a limit stopped the whole execution
	StatusNotRun      = "not_run"      // no sandbox ran it (Error says why)
)

// NotRun is the result for code that no sandbox ran.
func NotRun(lang string, why string) *Result {
	return &Result{Status: StatusNotRun, Language: lang, Error: why, Tests: []map[string]any{}, Metrics: nil}
}

// The lines a runner writes on stdout around the program's own output
// (see Language).
const (
	metricsFrame = "\x1etrellis metrics "
	valueFrame   = "\n\x1etrellis value "
	// metricsRoom bounds the metrics line
	metricsRoom = 256 << 10
)

// Execute runs a submission of language l on the pool's backend. The
// code runs in the sandbox and produces raw results only: each test runs
// in a process of its own that receives its own input and nothing else
// (the expected values never enter the sandbox), and the verdict is
// decided here, by comparing what each process printed with what its
// test expects, after checking that what was read answers the test that
// was sent.
func Execute(ctx context.Context, p *Pool, l *Language, sub Submission) (*Result, error) {
	r := &Result{Language: l.Name, Backend: p.b.Name(), Tests: []map[string]any{}}
	if why := sourceProblem(sub.Code); why != "" {
		r.Status, r.Error = StatusError, why
		return r, nil
	}
	lim := sub.Limits.withDefaults()
	tt := sub.TestTime
	if tt <= 0 {
		tt = 5 * time.Second
	}
	tt = min(tt, lim.Wall)
	img := p.images.image()
	if l.Image != "" {
		img = l.Image
	}
	s, err := p.Start(ctx, Spec{Image: img, Root: p.images.Root, Limits: lim})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	r.Executed = true

	first := true
	// the wall time is the time the processes run: not the wait for a
	// place, nor what the backend takes to make the sandbox or ready it
	// for each process, which a loaded machine stretches
	var cpu, used time.Duration
	var outOfTime bool
	// run runs one process of the execution: the program (call "") or a
	// call, with its input
	run := func(call *string, input string, limit time.Duration) (*Outcome, *answer, error) {
		left := lim.Wall - used
		if left <= 0 {
			outOfTime = true
			return nil, nil, nil
		}
		req := request{File: l.File, Source: sub.Code, Metrics: first, Mode: "run", Nonce: nonce(),
			Limits: map[string]int64{"output": lim.Output, "file_size": lim.FileSize, "cpu": lim.cpuSeconds()}}
		if call != nil {
			req.Mode, req.Call = "call", *call
		}
		head, err := json.Marshal(req)
		if err != nil {
			return nil, nil, err
		}
		in := make([]byte, 0, len(head)+len(input)+16)
		in = append(strconv.AppendInt(in, int64(len(head)), 10), '\n')
		in = append(append(in, head...), input...)
		room := 2*lim.Output + 4<<10
		if first {
			room += metricsRoom
		}
		o, err := s.Run(ctx, &Proc{Command: l.command(), Stdin: in, Time: min(limit, left), Stdout: room})
		if err != nil {
			return nil, nil, err
		}
		cpu += o.CPU
		used += o.Wall
		r.MemoryBytes = max(r.MemoryBytes, o.Memory)
		a := read(o, req, lim)
		if first {
			first = false
			r.Metrics = a.metrics
		}
		if o.Limit == LimitWall && lim.Wall-used <= 10*time.Millisecond {
			outOfTime = true
		}
		return o, a, nil
	}
	finish := func() (*Result, error) {
		r.WallMS, r.CPUMS = used.Milliseconds(), cpu.Milliseconds()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return r, nil
	}

	tests := sub.Tests
	if sub.Stdin != nil || len(tests) == 0 {
		o, a, err := run(nil, deref(sub.Stdin), lim.Wall)
		if err != nil {
			return nil, err
		}
		if o == nil {
			r.Status, r.Limit, r.Error = StatusLimit, LimitWall, "stopped at the wall time limit"
			return finish()
		}
		if a.syntax() {
			r.Status = StatusSyntaxError
			return finish()
		}
		r.Stdout, r.StdoutCut = a.stdout, a.stdoutCut
		r.Stderr, r.StderrCut = a.stderr, a.stderrCut
		r.Signal, r.Limit = o.Signal, a.limit
		if o.Signal == "" && o.Exit >= 0 {
			code := o.Exit
			r.Exit = &code
		}
		if r.Exit == nil || *r.Exit != 0 || r.Limit != "" {
			r.Error = a.failure(o)
		}
	}
	for _, t := range tests {
		res := map[string]any{"name": t["name"]}
		var o *Outcome
		var a *answer
		var err error
		if call, ok := t["call"].(string); ok {
			res["call"], res["expected"] = call, t["expected"]
			if !outOfTime {
				o, a, err = run(&call, "", tt)
			}
		} else {
			in, _ := t["stdin"].(string)
			want, _ := t["stdout"].(string)
			res["stdin"], res["expected"] = in, want
			if !outOfTime {
				o, a, err = run(nil, in, tt)
			}
		}
		if err != nil {
			return nil, err
		}
		if a != nil && a.syntax() {
			r.Status, r.Tests = StatusSyntaxError, []map[string]any{}
			return finish()
		}
		if o == nil {
			res["passed"], res["limit"] = false, LimitWall
			res["error"] = "not run: the execution's wall time ran out"
		} else {
			judge(res, t, o, a)
		}
		r.Tests = append(r.Tests, res)
		if res["passed"] == true {
			r.Passed++
		} else {
			r.Failed++
		}
	}
	r.Total = len(r.Tests)
	if outOfTime && r.Limit == "" {
		r.Limit = LimitWall
	}
	switch {
	case r.Total > 0 && outOfTime:
		r.Status = StatusLimit
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
	if r.Status == StatusLimit && r.Error == "" {
		r.Error = "stopped at the " + limitName(r.Limit) + " limit"
	}
	return finish()
}

// request is what a runner reads first on stdin (see Language).
type request struct {
	File    string           `json:"file"`
	Source  string           `json:"source"`
	Metrics bool             `json:"metrics,omitempty"`
	Mode    string           `json:"mode"`
	Call    string           `json:"call,omitempty"`
	Nonce   string           `json:"nonce"`
	Limits  map[string]int64 `json:"limits"`
}

// answer is what a process's raw output says, read outside the sandbox.
type answer struct {
	metrics map[string]any // nil: none
	// stdout and stderr are the program's own output, as text cut to the
	// output limit once escaped as JSON
	stdout, stderr       string
	stdoutCut, stderrCut bool
	// value is the call's value (or its text when it has no JSON form);
	// hasValue says whether one came, answering the request
	value    any
	text     bool
	hasValue bool
	limit    string
}

func (a *answer) syntax() bool {
	_, bad := a.metrics["syntax_error"]
	return bad
}

// read parses a process's output: the metrics line first (when asked
// for), the program's output, and the value line last (in mode call),
// which counts only when it carries the request's nonce.
func read(o *Outcome, req request, lim Limits) *answer {
	a := &answer{limit: o.Limit}
	out := o.Stdout
	if req.Metrics && bytes.HasPrefix(out, []byte(metricsFrame)) {
		line := out[len(metricsFrame):]
		if i := bytes.IndexByte(line, '\n'); i >= 0 {
			a.metrics = cleanMetrics(line[:i])
			out = line[i+1:]
		}
	}
	if req.Mode == "call" {
		if i := bytes.LastIndex(out, []byte(valueFrame)); i >= 0 {
			line := out[i+len(valueFrame):]
			out = out[:i]
			if j := bytes.IndexByte(line, '\n'); j >= 0 {
				line = line[:j]
			}
			if rest, ok := bytes.CutPrefix(line, []byte(req.Nonce+" ")); ok {
				a.value, a.text, a.hasValue = decodeValue(rest)
			}
		}
	}
	raw := int64(len(out))
	a.stdout, a.stdoutCut = cutText(out, lim.Output)
	a.stderr, a.stderrCut = cutText(o.Stderr, lim.Output)
	a.stdoutCut = a.stdoutCut || o.StdoutCut
	a.stderrCut = a.stderrCut || o.StderrCut
	if a.limit == "" && (raw > lim.Output || o.StdoutCut || o.StderrCut) {
		a.limit = LimitOutput // it printed more than it may
	}
	return a
}

// decodeValue reads a value line: {"value": V} or {"text": "..."}.
func decodeValue(line []byte) (v any, text, ok bool) {
	var f struct {
		Value json.RawMessage `json:"value"`
		Text  *string         `json:"text"`
	}
	if json.Unmarshal(line, &f) != nil {
		return nil, false, false
	}
	if f.Text != nil {
		return *f.Text, true, true
	}
	if f.Value == nil {
		return nil, false, false
	}
	v, err := value.Decode(f.Value)
	if err != nil {
		// a number past what state holds: its text
		return string(f.Value), true, true
	}
	return v, false, true
}

// judge decides a test from its process's outcome.
func judge(res, t map[string]any, o *Outcome, a *answer) {
	res["seconds"] = math.Round(o.Wall.Seconds()*1e4) / 1e4
	if o.Signal != "" || o.Exit < 0 {
		res["exit"] = nil
		if o.Signal != "" {
			res["signal"] = o.Signal
		}
	} else {
		res["exit"] = o.Exit
	}
	if a.limit != "" {
		res["limit"] = a.limit
	}
	res["stdout"], res["stdout_cut"] = a.stdout, a.stdoutCut
	res["stderr"], res["stderr_cut"] = a.stderr, a.stderrCut
	ok := o.Exit == 0 && o.Signal == "" && a.limit == ""
	if _, call := t["call"]; call {
		if ok && a.hasValue {
			res["actual"] = a.value
			res["passed"] = equal(a.value, a.text, t["expected"])
			return
		}
		res["passed"] = false
		res["error"] = a.failure(o)
		return
	}
	want, _ := t["stdout"].(string)
	res["actual"] = a.stdout
	res["passed"] = ok && !a.stdoutCut && strings.TrimRightFunc(a.stdout, unicode.IsSpace) == strings.TrimRightFunc(want, unicode.IsSpace)
	if !ok {
		res["error"] = a.failure(o)
	}
}

// failure says why a process gave no answer.
func (a *answer) failure(o *Outcome) string {
	if a.limit != "" {
		return "stopped at the " + limitName(a.limit) + " limit"
	}
	if line := errorLine(a.stderr); line != "" {
		return line
	}
	switch {
	case o.Signal != "":
		return "killed by " + o.Signal
	case o.Exit != 0:
		return "exit status " + strconv.Itoa(o.Exit)
	}
	return "no result"
}

var thrown = regexp.MustCompile(`^[A-Za-z_.]*(Error|Exception)\b`)

// errorLine is the line of a program's stderr that names its error: the
// last that reads like one (Python's last, Node's first below the code),
// else the last line.
func errorLine(text string) string {
	lines := strings.Split(strings.TrimSpace(text), "\n")
	last := ""
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l == "" {
			continue
		}
		if last == "" {
			last = l
		}
		if thrown.MatchString(l) {
			return short(l)
		}
	}
	return short(last)
}

// equal compares a call's value with what its test expects: numbers by
// value (2 and 2.0 are equal), lists item by item, objects key by key; a
// value with no JSON form, by its text: equal to the same text, or to the
// number it spells exactly.
func equal(got any, text bool, want any) bool {
	if text {
		s := got.(string)
		switch w := want.(type) {
		case string:
			return s == w
		case int, float64:
			x, ok := new(big.Float).SetPrec(4096).SetString(s)
			if !ok {
				return false
			}
			y := new(big.Float).SetPrec(4096)
			if i, isInt := w.(int); isInt {
				y.SetInt64(int64(i))
			} else {
				y.SetFloat64(w.(float64))
			}
			return x.Cmp(y) == 0
		}
		return false
	}
	return same(got, want)
}

func same(a, b any) bool {
	switch x := a.(type) {
	case int:
		switch y := b.(type) {
		case int:
			return x == y
		case float64:
			return float64(x) == y && int(y) == x
		}
		return false
	case float64:
		switch y := b.(type) {
		case int:
			return x == float64(y) && int(x) == y
		case float64:
			return x == y
		}
		return false
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !same(x[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !same(v, w) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a, b)
}

// cutText is output as text (invalid UTF-8 as U+FFFD), cut where its JSON
// form would pass n bytes.
func cutText(b []byte, n int64) (string, bool) {
	var s strings.Builder
	size := int64(0)
	for len(b) > 0 {
		r, w := utf8.DecodeRune(b)
		cost := int64(utf8.RuneLen(r))
		switch {
		case r == '"' || r == '\\' || r == '\n' || r == '\r' || r == '\t' || r == '\b' || r == '\f':
			cost = 2
		case r < 0x20 || r == 0x2028 || r == 0x2029 || r == utf8.RuneError && w == 1:
			cost = 6
		}
		if size+cost > n {
			return s.String(), true
		}
		size += cost
		s.WriteRune(r)
		b = b[w:]
	}
	return s.String(), false
}

// sourceProblem says why a source is not run, or "".
func sourceProblem(src string) string {
	if len(src) > MaxSource {
		return fmt.Sprintf("the code was not run: the source is %d bytes, over the sandbox's limit of %d bytes (1 MiB)", len(src), MaxSource)
	}
	if i := strings.IndexByte(src, 0); i >= 0 {
		line := strings.Count(src[:i], "\n") + 1
		col := i - strings.LastIndexByte(src[:i], '\n')
		return fmt.Sprintf("the code was not run: the source holds a NUL byte at line %d, column %d; a source is text", line, col)
	}
	return ""
}

// cleanMetrics keeps the metrics a runner reported that have the shape
// result.schema.json gives them: they are data from inside the sandbox.
func cleanMetrics(line []byte) map[string]any {
	if len(line) > metricsRoom {
		return nil
	}
	v, err := value.Decode(line)
	m, ok := v.(map[string]any)
	if err != nil || !ok {
		return nil
	}
	num := func(x any) (int, bool) {
		switch n := x.(type) {
		case int:
			return n, true
		case float64:
			if n == math.Trunc(n) && math.Abs(n) < 1<<53 {
				return int(n), true
			}
		}
		return 0, false
	}
	text := func(x any) (string, bool) {
		s, ok := x.(string)
		if len(s) > 500 {
			s = s[:500]
			for !utf8.ValidString(s) {
				s = s[:len(s)-1]
			}
		}
		return s, ok
	}
	out := map[string]any{}
	for _, k := range []string{"lines", "comments", "classes", "complexity", "max_nesting"} {
		if n, ok := num(m[k]); ok {
			out[k] = n
		}
	}
	if fs, ok := m["functions"].([]any); ok {
		list := []any{}
		for _, f := range fs[:min(len(fs), 10000)] {
			fm, ok := f.(map[string]any)
			if !ok {
				continue
			}
			g := map[string]any{}
			if s, ok := text(fm["name"]); ok {
				g["name"] = s
			}
			for _, k := range []string{"line", "complexity", "nesting"} {
				if n, ok := num(fm[k]); ok {
					g[k] = n
				}
			}
			list = append(list, g)
		}
		out["functions"] = list
	}
	if se, ok := m["syntax_error"].(map[string]any); ok {
		g := map[string]any{}
		for _, k := range []string{"line", "column"} {
			n, _ := num(se[k])
			g[k] = n
		}
		g["message"], _ = text(se["message"])
		out["syntax_error"] = g
	}
	return out
}

func nonce() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
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
