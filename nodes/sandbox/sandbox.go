// Package sandbox is the sandbox node kind: it runs submitted code, with
// its tests, in isolation, and writes what it found to state.
//
//	run_code:
//	  kind: sandbox
//	  language: python                 # or javascript, or sandbox/NAME.yaml
//	  code: state.current_code
//	  tests: state.sandbox.exercise.tests   # [{call: "add(1, 2)", expected: 3}, {stdin: "x", stdout: "x"}]
//	  limits: {wall_time: 10s, memory_mb: 256}
//	  writes:
//	    code_submissions: "[output]"
//
// The output (result.schema.json) holds the exit status, stdout and
// stderr (cut at the output limit, and marked so), wall and CPU time,
// peak memory, the limit that stopped the code if one did, each test's
// outcome with its expected and actual value, and static metrics from the
// language's own parser (functions, cyclomatic complexity, nesting,
// syntax errors with their line).
//
// A backend runs the code: a container per execution on a Docker engine,
// or bubblewrap namespaces on this machine (see Backend, FromEnv).
// Executions across every run of a process share a bounded pool. With no
// backend, or when it fails, the node writes a result with executed
// false, status not_run and the reason, and is marked degraded: the flow
// says the code was not run rather than pretending it was.
//
// The verdict is decided here, outside the sandbox (see Execute): each
// test runs in a process of its own that receives only its own input,
// the code prints raw output only, and the expected values never enter
// the sandbox. README.md beside this file is the threat model.
//
// A language is data: a file naming the file to write, and the command
// that starts the language's runner, a program in the language that runs
// the code in its own process and prints raw output (see Language).
// Python and JavaScript ship built in; a flow adds one as
// sandbox/NAME.yaml beside it (or above it), with its runner there too.
package sandbox

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/expression"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/schema"
	"github.com/trellisflow/trellis/runtime/value"
)

//go:embed result.schema.json
var resultSchema []byte

// result is the compiled result schema, made when a flow first uses the
// kind (not at start-up: most commands never need it).
var result = sync.OnceValue(func() struct {
	shape     *schema.Shape
	validator *schema.Validator
} {
	var raw any
	if err := json.Unmarshal(resultSchema, &raw); err != nil {
		panic(err)
	}
	shape := schema.ShapeOf(raw, nil)
	compiled, err := schema.NewCompiler(nil).Compile("trellis:sandbox-result.schema.json", raw)
	if err != nil {
		panic(err)
	}
	return struct {
		shape     *schema.Shape
		validator *schema.Validator
	}{shape, schema.NewValidator(compiled, shape)}
})

// ResultSchema is the JSON Schema of a sandbox node's output.
func ResultSchema() []byte { return resultSchema }

// NewSpec returns the kind running code on the pool pool returns, called
// when a flow is loaded (nil: no sandbox; every node writes a not_run
// result, marked degraded).
func NewSpec(pool func() *Pool) kind.Spec {
	return kind.Spec{
		Name:    "sandbox",
		Summary: "Run submitted code and its tests in an isolated sandbox (no network, bounded time, memory, processes and output) and write the result, with static metrics, to state.",
		Fields: []config.Field{
			config.String("language", "The language: python, javascript, or NAME for a language file sandbox/NAME.yaml beside the flow or above it.").Require(),
			config.Expression("code", "The code to run: an expression over state and input giving a string.").Require(),
			config.Expression("tests", "Test cases: an expression giving a list of {name, call, expected} (call a function, compare its JSON result) or {name, stdin, stdout} (run the program on an input, compare its output)."),
			config.Expression("stdin", "Run the program once on this input (an expression giving a string); with no tests it runs once on empty input."),
			config.Object("limits", "Limits of one execution.",
				config.Duration("wall_time", "Wall time of the whole execution (default 10s)."),
				config.Duration("cpu_time", "CPU time of each process (default 5s)."),
				config.Duration("test_time", "Wall time of each test (default 5s)."),
				config.Integer("memory_mb", "Memory of the whole execution, without swap (default 256).").Min(16).Max(65536),
				config.Integer("processes", "Processes and threads at once (default 64).").Min(4).Max(4096),
				config.Integer("output_kb", "Output kept of each of stdout and stderr, per run and test (default 64).").Min(1).Max(65536),
				config.Integer("file_size_kb", "Size of each file the code writes (default 1024).").Min(1).Max(1<<20),
				config.Integer("workspace_mb", "Size of the whole workspace (default 16).").Min(1).Max(4096),
			),
			config.Map("writes", "Field to expression over output (the result), state and input.",
				config.Elem(config.Expression("", ""))).NonEmpty(1).Require(),
		},
		New: func(b kind.Builder) kind.Node { return build(b, pool) },
	}
}

type node struct {
	lang               *Language
	code, tests, stdin *expression.Program
	limits             Limits
	testTime           time.Duration
	writes             kind.Writes
	pool               *Pool // nil: no sandbox
}

var stringShape = &schema.Shape{Types: []string{"string"}}

func build(b kind.Builder, pool func() *Pool) kind.Node {
	s := b.Settings()
	n := &node{}
	n.lang = language(b, s.Value("language"))
	n.code = b.Expr(s.Value("code"), nil)
	if n.code != nil {
		checkShape(b, s.Value("code"), n.code, "string")
	}
	if s.Has("tests") {
		if n.tests = b.Expr(s.Value("tests"), nil); n.tests != nil {
			checkShape(b, s.Value("tests"), n.tests, "array")
		}
	}
	if s.Has("stdin") {
		if n.stdin = b.Expr(s.Value("stdin"), nil); n.stdin != nil {
			checkShape(b, s.Value("stdin"), n.stdin, "string")
		}
	}
	l := s.Object("limits")
	n.limits.Wall, _ = l.Duration("wall_time")
	n.limits.CPU, _ = l.Duration("cpu_time")
	n.testTime, _ = l.Duration("test_time")
	if v, ok := l.Int("memory_mb"); ok {
		n.limits.Memory = int64(v) << 20
	}
	n.limits.Processes, _ = l.Int("processes")
	if v, ok := l.Int("output_kb"); ok {
		n.limits.Output = int64(v) << 10
	}
	if v, ok := l.Int("file_size_kb"); ok {
		n.limits.FileSize = int64(v) << 10
	}
	if v, ok := l.Int("workspace_mb"); ok {
		n.limits.Workspace = int64(v) << 20
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"wall_time", n.limits.Wall}, {"cpu_time", n.limits.CPU}, {"test_time", n.testTime}} {
		if f.d < 0 || f.d > 0 && f.d < 10*time.Millisecond || f.d > time.Hour {
			b.Errorf(l.Block().Get(f.name), "limits.%s: %v is out of range (10ms to 1h)", f.name, f.d)
		}
	}
	writes, writesOK := kind.CompileWrites(b, "writes", kind.Vars{"output": result().shape})
	n.writes = writes
	if n.lang == nil || n.code == nil || s.Has("tests") && n.tests == nil || s.Has("stdin") && n.stdin == nil || !writesOK {
		return nil
	}
	n.pool = pool()
	return n
}

// checkShape reports an expression whose type is known and is not want
// (string or array).
func checkShape(b kind.Builder, at config.Value, p *expression.Program, want string) {
	t := p.ResultType()
	if t == nil {
		return
	}
	got := ""
	switch t.Kind() {
	case reflect.String:
		got = "string"
	case reflect.Slice, reflect.Array:
		got = "array"
	case reflect.Map, reflect.Struct:
		got = "object"
	case reflect.Bool:
		got = "boolean"
	case reflect.Int, reflect.Int64, reflect.Float64, reflect.Uint, reflect.Int32, reflect.Float32:
		got = "number"
	default:
		return
	}
	if got != want {
		b.Errorf(at, "this expression gives a %s, not a %s", got, want)
	}
}

// language resolves a language name: a file of the flow's, or a built-in.
func language(b kind.Builder, v config.Value) *Language {
	name := v.Text()
	if !v.IsString() || name == "" {
		return nil
	}
	if res, ok := b.Find("sandbox", name+".yaml"); ok {
		got := b.Shared("sandbox-language:"+res.Path, func() any {
			l, err := ParseLanguage(res.Data, func(driver string) ([]byte, error) {
				d, ok := b.Find("sandbox", driver)
				if !ok {
					return nil, fmt.Errorf("no file sandbox/%s beside the language file", driver)
				}
				return d.Data, nil
			})
			if err != nil {
				b.Errorf(v, "language %s (%s): %v", name, res.Path, err)
				return (*Language)(nil)
			}
			return l
		})
		return got.(*Language)
	}
	if l, ok := builtins()[name]; ok {
		return l
	}
	known := BuiltinNames()
	for _, n := range b.Names("sandbox", ".yaml") {
		if !strings.Contains(n, "/") && !slices.Contains(known, n) {
			known = append(known, n)
		}
	}
	msg := fmt.Sprintf("unknown language %q (known: %s)", name, strings.Join(known, ", "))
	if s := diag.Suggest(name, known); s != "" {
		msg += fmt.Sprintf("; did you mean %q?", s)
	}
	b.Errorf(v, "%s", msg)
	return nil
}

var builtins = sync.OnceValue(Builtin)

// Run implements kind.Node.
func (n *node) Run(ctx context.Context, s kind.State) (kind.Update, error) {
	sub, err := n.submission(s)
	if err != nil {
		return nil, err
	}
	if n.pool == nil {
		return nil, kind.Permanent(ErrUnavailable) // the engine calls Fallback
	}
	if sub.Code == "" {
		return n.write(s, NotRun(n.lang.Name, "no code was submitted"))
	}
	s.Measure("executions", 1)
	r, err := Execute(ctx, n.pool, n.lang, sub)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("sandbox (%s): %w", n.pool.Backend().Name(), err)
	}
	s.Measure("cpu_ms", r.CPUMS)
	return n.write(s, r)
}

// Fallback implements kind.Fallback: a result that says the code was not
// run, and why.
func (n *node) Fallback(_ context.Context, s kind.State, cause error) (kind.Update, error) {
	why := cause.Error()
	if errors.Is(cause, ErrUnavailable) {
		why = "the code was not run: no sandbox is configured (TRELLIS_SANDBOX)"
	} else {
		why = "the code was not run: " + why
	}
	return n.write(s, NotRun(n.lang.Name, why))
}

// WithOutput implements kind.Outputter: out stands for the result.
func (n *node) WithOutput(s kind.State, out any) (kind.Update, error) {
	if err := result().validator.Validate(out); err != nil {
		return nil, fmt.Errorf("output is not a sandbox result: %w", err)
	}
	return n.writeValue(s, out)
}

func (n *node) submission(s kind.State) (Submission, error) {
	sub := Submission{Limits: n.limits, TestTime: n.testTime}
	code, err := s.Eval(n.code)
	if err != nil {
		return sub, fmt.Errorf("code: %w", err)
	}
	switch c := code.(type) {
	case string:
		sub.Code = c
	case nil:
	default:
		return sub, kind.Permanent(fmt.Errorf("code: a %s, not a string", value.TypeOf(code)))
	}
	if n.stdin != nil {
		in, err := s.Eval(n.stdin)
		if err != nil {
			return sub, fmt.Errorf("stdin: %w", err)
		}
		if in != nil {
			str, ok := in.(string)
			if !ok {
				return sub, kind.Permanent(fmt.Errorf("stdin: a %s, not a string", value.TypeOf(in)))
			}
			sub.Stdin = &str
		}
	}
	if n.tests != nil {
		t, err := s.Eval(n.tests)
		if err != nil {
			return sub, fmt.Errorf("tests: %w", err)
		}
		if sub.Tests, err = Tests(t); err != nil {
			return sub, kind.Permanent(err)
		}
	}
	return sub, nil
}

// Tests checks test cases (a list of objects, as state holds them) and
// names the unnamed ones.
func Tests(v any) ([]map[string]any, error) {
	if v == nil {
		return nil, nil
	}
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("tests: a %s, not a list", value.TypeOf(v))
	}
	out := make([]map[string]any, 0, len(list))
	for i, x := range list {
		m, ok := x.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("tests[%d]: a %s, not an object", i, value.TypeOf(x))
		}
		t := map[string]any{}
		for k, v := range m {
			switch k {
			case "name", "call", "stdin", "stdout":
				if _, ok := v.(string); !ok {
					return nil, fmt.Errorf("tests[%d].%s: a %s, not a string", i, k, value.TypeOf(v))
				}
			case "expected":
			default:
				continue // other keys (a description, points) are the flow's
			}
			t[k] = v
		}
		_, call := t["call"]
		_, stdin := t["stdin"]
		_, stdout := t["stdout"]
		switch {
		case call && (stdin || stdout):
			return nil, fmt.Errorf("tests[%d]: a test calls a function (call, expected) or runs the program (stdin, stdout), not both", i)
		case !call && !stdin && !stdout:
			return nil, fmt.Errorf("tests[%d]: has neither call nor stdin/stdout", i)
		}
		if _, ok := t["name"]; !ok {
			t["name"] = fmt.Sprintf("test %d", i+1)
		}
		out = append(out, t)
	}
	return out, nil
}

func (n *node) write(s kind.State, r *Result) (kind.Update, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	out, err := value.Decode(b)
	if err != nil {
		return nil, err
	}
	return n.writeValue(s, out)
}

func (n *node) writeValue(s kind.State, out any) (kind.Update, error) {
	base := s.Vars()
	vars := make(map[string]any, len(base)+1)
	maps.Copy(vars, base)
	vars["output"] = out
	return n.writes.Eval(vars)
}

var (
	_ kind.Fallback  = (*node)(nil)
	_ kind.Outputter = (*node)(nil)
)
