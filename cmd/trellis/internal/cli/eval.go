package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/trellisflow/trellis/nodes/llm"
	"github.com/trellisflow/trellis/runtime/api/server"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/eval"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/flowdiff"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/versions"
)

// evalFormats are the report formats.
var evalFormats = map[string]func(io.Writer, []*eval.Report) error{
	"text": eval.WriteText, "json": eval.WriteJSON, "junit": eval.WriteJUnit, "github": eval.WriteGitHub, "markdown": eval.WriteMarkdown,
}

func cmdEval(ctx context.Context, env *Env, args []string) int {
	if len(args) > 0 && args[0] == "add" {
		return cmdEvalAdd(ctx, env, args[1:])
	}
	fs := flags(env, "eval")
	repeat := fs.Int("repeat", 1, "run each case N times and report its pass rate")
	against := fs.String("against", "", "also run the cases on the flow at this git revision (HEAD~1, main) or, with --store, this flow version, and report both side by side with the changes")
	model := fs.String("model", "", "the model every node of the flow asks instead of its own (needs a model endpoint: OPENAI_BASE_URL or OPENAI_API_KEY)")
	judgeModel := fs.String("judge-model", "", "the model the rubric judges ask unless a dataset names one (default: TRELLIS_MODEL)")
	concurrency := fs.Int("concurrency", 4, "at most this many runs of cases at once")
	match := fs.String("run", "", "run only the cases whose name contains this text")
	format := fs.String("format", "text", "what to print: text, json, junit, github (Actions annotations) or markdown (a pull request's summary)")
	var reports multi
	fs.Var(&reports, "report", "also write a report to a file: FORMAT=FILE, e.g. junit=eval.xml (repeatable)")
	record := fs.Bool("record", false, "ask the configured model and keep every reply (the flow's and the judges') in each dataset's cassette, which later runs replay offline")
	verbose := fs.Bool("v", false, "print each run of a case as it ends")
	storeAddr := storeFlag(fs)
	paths, code, ok := parse(fs, args)
	if !ok {
		return code
	}
	write, ok := evalFormats[*format]
	if !ok {
		return fail(env, "eval", usagef("--format %q: want text, json, junit, github or markdown", *format))
	}
	type out struct {
		path  string
		write func(io.Writer, []*eval.Report) error
	}
	var outs []out
	for _, r := range reports {
		name, file, found := strings.Cut(r, "=")
		w, known := evalFormats[name]
		if !found || !known || file == "" {
			return fail(env, "eval", usagef("--report %q: want FORMAT=FILE, FORMAT one of text, json, junit, github, markdown", r))
		}
		outs = append(outs, out{file, w})
	}
	if *repeat < 1 || *repeat > 1000 {
		return fail(env, "eval", usagef("--repeat %d: want 1 to 1000", *repeat))
	}
	if *concurrency < 1 || *concurrency > 256 {
		return fail(env, "eval", usagef("--concurrency %d: want 1 to 256", *concurrency))
	}
	files, err := eval.Find(paths...)
	if err != nil {
		return fail(env, "eval", usagef("%v", err))
	}
	if len(files) == 0 {
		return fail(env, "eval", usagef("nothing to evaluate: no %s files in %s", eval.Suffix, strings.Join(orDot(paths), ", ")))
	}
	provider := llm.FromEnv()
	if (*model != "" || *record) && (provider == nil || env.WithModel == nil) {
		return fail(env, "eval", usagef("--model and --record ask a model, and none is configured (set OPENAI_BASE_URL or OPENAI_API_KEY)"))
	}
	opts := eval.Options{Repeat: *repeat, Concurrency: *concurrency, Match: *match, Record: *record, JudgeModel: *judgeModel}
	kinds := env.Offline
	if kinds == nil {
		kinds = env.Registry
	}
	if provider != nil && env.WithModel != nil {
		p := *provider
		p.Override = *model
		kinds = env.WithModel(&p)
		opts.Live = true
		opts.Judge = judge{provider}
	}
	defer flow.Prepare(kinds)() // for every dataset's flows
	if *verbose {
		opts.Progress = func(v int, c *eval.Case, rep int, r *eval.RunResult) {
			how := "passed"
			if !r.Passed {
				how = "failed"
			}
			fmt.Fprintf(env.Stderr, "  %s (version %d, run %d): %s in %dms\n", c.Name, v+1, rep+1, how, r.TookMS)
		}
	}
	var done []*eval.Report
	failed := false
	for _, path := range files {
		ds, err := eval.Load(path)
		if err != nil {
			failed = true
			printLoadError(env, path, "the dataset is not valid", err)
			continue
		}
		targets, code := evalTargets(ctx, env, ds, kinds, *against, *storeAddr)
		if targets == nil {
			return code
		}
		cas, err := eval.OpenCassette(eval.CassettePath(path))
		if err != nil {
			failed = true
			fmt.Fprintf(env.Stdout, "FAIL %s: %v\n", path, err)
			continue
		}
		opts.Cassette = cas
		res, err := eval.Run(ctx, ds, targets, opts)
		if err != nil {
			failed = true
			printLoadError(env, path, "the dataset does not fit its flow", err)
			continue
		}
		if len(res.Warnings) > 0 {
			_ = diag.WriteText(env.Stderr, res.Warnings, diag.Sources{ds.Path: ds.Source})
		}
		if *record {
			cas.Replace(res.Cases, res.Recorded)
			if err := cas.Save(); err != nil {
				failed = true
				fmt.Fprintf(env.Stdout, "FAIL %s: %v\n", path, err)
			} else {
				fmt.Fprintf(env.Stderr, "recorded %s\n", cas.Path)
			}
		}
		if !res.Report.OK() {
			failed = true
		}
		done = append(done, res.Report)
	}
	if err := write(env.Stdout, done); err != nil {
		return fail(env, "eval", err)
	}
	for _, o := range outs {
		f, err := os.Create(o.path)
		if err == nil {
			err = o.write(f, done)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			return fail(env, "eval", fmt.Errorf("--report %s: %w", o.path, err))
		}
	}
	if ctx.Err() != nil {
		return exitRuntime
	}
	if failed {
		return exitFailed
	}
	return exitOK
}

// evalTargets compiles the dataset's flow (and the version it is
// compared against): a flow that does not load is reported with every
// problem, and a revision that cannot be read is a usage error.
func evalTargets(ctx context.Context, env *Env, ds *eval.Dataset, kinds kind.Registry, against, storeAddr string) ([]eval.Target, int) {
	now, dl := versions.Compile(nil, ds.FlowPath(), nil, kinds)
	if now == nil {
		fmt.Fprintf(env.Stdout, "FAIL %s: the flow %s does not load\n", ds.Path, ds.FlowPath())
		_ = diag.WriteText(env.Stdout, dl, nil)
		return []eval.Target{{Label: ds.FlowPath(), Err: errors.New("the flow does not load")}}, exitFailed
	}
	targets := []eval.Target{{Label: ds.FlowPath(), Graph: now.Graph(), FlowVersion: now.Version().Version}}
	if against == "" {
		return targets, exitOK
	}
	t, err := againstTarget(ctx, ds, kinds, against, storeAddr, now.Name())
	if err != nil {
		return nil, fail(env, "eval", err)
	}
	return append(targets, t), exitOK
}

// againstTarget is the flow as it was at a git revision, or a version of
// it a store keeps.
func againstTarget(ctx context.Context, ds *eval.Dataset, kinds kind.Registry, against, storeAddr, name string) (eval.Target, error) {
	src, gitErr := flowdiff.Git(against, ds.FlowPath())
	if gitErr == nil {
		g, dl, sources := src.Compile(kinds)
		t := eval.Target{Label: src.Name}
		if g == nil {
			t.Err = fmt.Errorf("the flow does not load at %s: %s", against, firstError(dl))
			return t, nil
		}
		t.Graph, t.FlowVersion = g, versions.NewFlow(g, dl, sources, true).Version().Version
		return t, nil
	}
	rt, err := openRuntime(ctx, storeAddr)
	if err != nil {
		return eval.Target{}, usagef("--against %s: %v; and the store to find it as a flow version in: %v", against, gitErr, err)
	}
	defer rt.Close()
	vs, err := versions.New(rt.Store(), kinds)
	if err != nil {
		return eval.Target{}, err
	}
	f, err := vs.Flow(ctx, name, against)
	if err != nil {
		return eval.Target{}, usagef("--against %s: %v; nor is it a version of flow %s in %s (GET /v1/flows/%s/versions lists them)", against, gitErr, name, shownStore(storeAddr), name)
	}
	return eval.Target{Label: name + "@" + against, Graph: f.Graph(), FlowVersion: against}, nil
}

func firstError(dl diag.List) string {
	for _, d := range dl {
		if d.Severity == diag.Error {
			return d.String()
		}
	}
	return "it has errors"
}

// printLoadError prints a dataset that does not load, or does not fit
// its flow, with every problem.
func printLoadError(env *Env, path, what string, err error) {
	var le *diag.ListError
	if errors.As(err, &le) {
		fmt.Fprintf(env.Stdout, "FAIL %s: %s\n", path, what)
		_ = diag.WriteText(env.Stdout, le.List, le.Sources)
		return
	}
	fmt.Fprintf(env.Stdout, "FAIL %s: %v\n", path, err)
}

func orDot(paths []string) []string {
	if len(paths) == 0 {
		return []string{"."}
	}
	return paths
}

// serverEvals is how a server's evals run: on the model the environment
// configures (the flows' nodes and the rubric judges ask it), or offline.
func serverEvals() *server.EvalConfig {
	p := llm.FromEnv()
	if p == nil {
		return &server.EvalConfig{}
	}
	return &server.EvalConfig{Live: true, Judge: judge{p}}
}

// judge asks the configured model for the rubric judges.
type judge struct{ p *llm.Provider }

func (j judge) Complete(ctx context.Context, req eval.ModelRequest) (string, error) {
	return j.p.Complete(ctx, req.Model, req.System, req.User, req.SchemaName, req.Schema)
}

var _ eval.Model = judge{}
