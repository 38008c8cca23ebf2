// Package sandboxtool is the sandbox tool kind: the model runs code in the
// code sandbox the sandbox node kind runs on (its backend, its pool, its
// isolation and limits), through that package's public API. The call's
// arguments are the code and, optionally, what it reads on stdin; the
// result is the sandbox's result (status, exit, stdout, stderr, limits
// met, metrics), which the model reads.
//
//	tools:
//	  run_python:
//	    kind: sandbox
//	    language: python
//	    description: Run a Python program and see what it prints.
//	    limits: {wall_time: 5s, memory_mb: 128}
//
// With no sandbox configured a call's result says the code was not run
// (status not_run), as a sandbox node's does.
package sandboxtool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/trellisflow/trellis/nodes/sandbox"
	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/schema"
	"github.com/trellisflow/trellis/runtime/value"
)

// NewSpec returns the tool kind running code on the pool pool returns,
// called when a flow is loaded (nil: no sandbox).
func NewSpec(pool func() *sandbox.Pool) kind.ToolSpec {
	return kind.ToolSpec{
		Name:    "sandbox",
		Summary: "Run code the model writes in the code sandbox (no network, bounded time, memory, processes and output): the arguments are code and an optional stdin, the result the sandbox's (status, exit, stdout, stderr, metrics).",
		Fields: []config.Field{
			config.String("language", "The language: python, javascript, or NAME for a language file sandbox/NAME.yaml beside the flow or above it.").Require(),
			config.Object("limits", "Limits of one execution.",
				config.Duration("wall_time", "Wall time of the whole execution (default 10s)."),
				config.Duration("cpu_time", "CPU time of each process (default 5s)."),
				config.Integer("memory_mb", "Memory of the whole execution, without swap (default 256).").Min(16).Max(65536),
				config.Integer("processes", "Processes and threads at once (default 64).").Min(4).Max(4096),
				config.Integer("output_kb", "Output kept of each of stdout and stderr (default 64).").Min(1).Max(65536),
			),
		},
		New: func(b kind.Builder) []*kind.Tool { return build(b, pool) },
	}
}

type tool struct {
	lang   *sandbox.Language
	limits sandbox.Limits
	pool   *sandbox.Pool
}

var params = sync.OnceValues(func() (map[string]any, *schema.Validator) {
	raw := map[string]any{
		"type": "object",
		"properties": map[string]any{
			"code":  map[string]any{"type": "string", "description": "The whole program."},
			"stdin": map[string]any{"type": "string", "description": "What the program reads on its standard input."},
		},
		"required":             []any{"code"},
		"additionalProperties": false,
	}
	c, err := schema.NewCompiler(nil).Compile("trellis:sandbox-tool.parameters.json", raw)
	if err != nil {
		panic(err)
	}
	return raw, schema.NewValidator(c, schema.ShapeOf(raw, nil))
})

var result = sync.OnceValue(func() *schema.Shape {
	var raw any
	if err := json.Unmarshal(sandbox.ResultSchema(), &raw); err != nil {
		panic(err)
	}
	return schema.ShapeOf(raw, nil)
})

func build(b kind.Builder, pool func() *sandbox.Pool) []*kind.Tool {
	s := b.Settings()
	t := &tool{lang: language(b, s.Value("language"))}
	l := s.Object("limits")
	t.limits.Wall, _ = l.Duration("wall_time")
	t.limits.CPU, _ = l.Duration("cpu_time")
	if v, ok := l.Int("memory_mb"); ok {
		t.limits.Memory = int64(v) << 20
	}
	t.limits.Processes, _ = l.Int("processes")
	if v, ok := l.Int("output_kb"); ok {
		t.limits.Output = int64(v) << 10
	}
	ok := t.lang != nil
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"wall_time", t.limits.Wall}, {"cpu_time", t.limits.CPU}} {
		if f.d < 0 || f.d > 0 && f.d < 10*time.Millisecond || f.d > time.Hour {
			b.Report(diag.CodeToolSetting, l.Block().Get(f.name).Pos(), l.Block().Get(f.name).Path(), "limits.%s: %v is out of range (10ms to 1h)", f.name, f.d)
			ok = false
		}
	}
	if !ok {
		return nil
	}
	t.pool = pool()
	raw, v := params()
	desc := fmt.Sprintf("Run a %s program in an isolated sandbox (no network) and see what it prints.", t.lang.Name)
	return []*kind.Tool{{Name: b.Node(), Description: desc, Parameters: raw, Params: v, Result: result(), Impl: t}}
}

// language resolves a language name: a file of the flow's
// (sandbox/NAME.yaml), or a built-in.
func language(b kind.Builder, v config.Value) *sandbox.Language {
	name := v.Text()
	if !v.IsString() || name == "" {
		return nil
	}
	if res, ok := b.Find("sandbox", name+".yaml"); ok {
		got := b.Shared("sandbox-language:"+res.Path, func() any {
			l, err := sandbox.ParseLanguage(res.Data, func(driver string) ([]byte, error) {
				d, ok := b.Find("sandbox", driver)
				if !ok {
					return nil, fmt.Errorf("no file sandbox/%s beside the language file", driver)
				}
				return d.Data, nil
			})
			if err != nil {
				b.Report(diag.CodeToolSetting, v.Pos(), v.Path(), "language %s (%s): %v", name, res.Path, err)
				return (*sandbox.Language)(nil)
			}
			return l
		})
		return got.(*sandbox.Language)
	}
	if l, ok := builtins()[name]; ok {
		return l
	}
	known := sandbox.BuiltinNames()
	for _, n := range b.Names("sandbox", ".yaml") {
		if !strings.Contains(n, "/") && !slices.Contains(known, n) {
			known = append(known, n)
		}
	}
	b.Report(diag.CodeToolSetting, v.Pos(), v.Path(), "unknown language %q (known: %s)", name, strings.Join(known, ", ")).
		Suggestion = diag.Suggest(name, known)
	return nil
}

var builtins = sync.OnceValue(sandbox.Builtin)

// Call implements kind.Caller.
func (t *tool) Call(ctx context.Context, s kind.State, c *kind.Call) (any, error) {
	code, _ := c.Args["code"].(string)
	sub := sandbox.Submission{Code: code, Limits: t.limits}
	if in, ok := c.Args["stdin"].(string); ok {
		sub.Stdin = &in
	}
	var r *sandbox.Result
	if t.pool == nil {
		r = sandbox.NotRun(t.lang.Name, "the code was not run: no sandbox is configured (TRELLIS_SANDBOX)")
	} else {
		s.Measure("executions", 1)
		var err error
		if r, err = sandbox.Execute(ctx, t.pool, t.lang, sub); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if errors.Is(err, context.DeadlineExceeded) {
				return nil, err
			}
			r = sandbox.NotRun(t.lang.Name, "the code was not run: "+err.Error())
		}
	}
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	return value.Decode(b)
}

var _ kind.Caller = (*tool)(nil)
