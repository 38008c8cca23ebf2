package cli

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/schema"
	"github.com/trellisflow/trellis/runtime/value"
)

func cmdValidate(_ context.Context, env *Env, args []string) int {
	fs := flags(env, "validate")
	format := fs.String("format", "text", "output format: text, json, github (Actions annotations) or sarif (code scanning)")
	strict := fs.Bool("strict", false, "report every warning as an error (exit 1 on any)")
	maxWarnings := fs.Int("max-warnings", -1, "exit 1 when there are more warnings than this (-1: any number)")
	paths, code, ok := parse(fs, args)
	if !ok {
		return code
	}
	if *maxWarnings < -1 {
		fmt.Fprintf(env.Stderr, "trellis validate: --max-warnings %d: give a count, or -1 for no limit\n", *maxWarnings)
		return exitUsage
	}
	if len(paths) == 0 {
		paths = []string{"."}
	}
	go flow.Prepare(env.Registry) // while the files are found and read
	files, skipped, err := trellis.ScanFlows(paths...)
	if err != nil {
		fmt.Fprintf(env.Stderr, "trellis validate: %v\n", err)
		return exitUsage
	}
	files, skipped, datasets := splitDatasets(files, skipped)
	if len(files) == 0 && len(datasets) == 0 {
		fmt.Fprintf(env.Stderr, "trellis validate: nothing to check: no flow in %s (a flow is a .yaml or .yml file with a top-level version, nodes or edges)\n", strings.Join(paths, ", "))
		if len(skipped) > 0 {
			fmt.Fprintf(env.Stderr, "  not flows: %s\n", strings.Join(skipped, ", "))
		}
		return exitUsage
	}
	all, sources, graphs := validateFiles(files, env)
	if len(datasets) > 0 {
		dl, dsrc := CheckDatasets(datasets, env.Registry)
		all = append(all, dl...)
		if sources == nil {
			sources = diag.Sources{}
		}
		maps.Copy(sources, dsrc)
	}
	promoted := 0
	if *strict {
		for i := range all {
			if all[i].Severity == diag.Warning {
				all[i].Severity = diag.Error
				promoted++
			}
		}
	}
	switch *format {
	case "json":
		err = writeValidation(env.Stdout, files, all, graphs)
	case "github":
		err = diag.WriteGitHub(env.Stdout, all)
	case "sarif":
		err = diag.WriteSARIF(env.Stdout, all, Version())
	case "text":
		err = diag.WriteText(env.Stdout, all, sources)
	default:
		fmt.Fprintf(env.Stderr, "trellis validate: unknown format %q (text, json, github, sarif)\n", *format)
		return 2
	}
	if err != nil {
		fmt.Fprintf(env.Stderr, "trellis validate: %v\n", err)
		return 2
	}
	errs, warns := 0, 0
	for _, d := range all {
		if d.Severity == diag.Error {
			errs++
		} else {
			warns++
		}
	}
	tooMany := *maxWarnings >= 0 && warns > *maxWarnings
	if *format == "text" {
		for i, g := range graphs {
			for _, n := range neededInputs(g) {
				fmt.Fprintf(env.Stderr, "%s: %s\n", files[i], n)
			}
		}
		checked := plural(len(files), "flow")
		if len(datasets) > 0 {
			checked += " and " + plural(len(datasets), "eval dataset")
		}
		summary := fmt.Sprintf("%s checked: %s", checked, plural(errs, "error"))
		if promoted > 0 {
			summary += fmt.Sprintf(" (%s made errors by --strict)", plural(promoted, "warning"))
		}
		if warns > 0 {
			summary += ", " + plural(warns, "warning")
		}
		if tooMany {
			summary += fmt.Sprintf(", more than the %d --max-warnings allows", *maxWarnings)
		}
		if len(skipped) > 0 {
			summary += fmt.Sprintf("; skipped %s with no version, nodes or edges: %s", plural(len(skipped), "YAML file"), strings.Join(skipped, ", "))
		}
		fmt.Fprintln(env.Stderr, summary)
	} else if tooMany {
		fmt.Fprintf(env.Stderr, "trellis validate: %s, more than the %d --max-warnings allows\n", plural(warns, "warning"), *maxWarnings)
	}
	if all.HasErrors() || tooMany {
		return exitFailed
	}
	return exitOK
}

// version is set at link time (make build passes git describe's):
// -ldflags "-X github.com/trellisflow/trellis/cmd/trellis/internal/cli.version=V".
var version string

// Version names this build of trellis: the version given at link time,
// else the module's version when it was installed as one, else the
// commit it was built from (marked dirty when the tree had changes),
// else "devel".
func Version() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "devel"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return "devel-" + rev
}

// plural says "1 flow", "2 flows".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// ValidateFiles loads every flow and returns all diagnostics of all files,
// and the sources they point into.
func ValidateFiles(files []string, env *Env) (diag.List, diag.Sources) {
	dl, sources, _ := validateFiles(files, env)
	return dl, sources
}

// validateFiles is ValidateFiles, with the graph each file compiled to
// (nil for one that did not).
func validateFiles(files []string, env *Env) (diag.List, diag.Sources, []*flow.Graph) {
	// the files load at once, one per core; the garbage they leave is
	// little and short-lived, so the collector waits until the heap nears
	// a bound (a few flows never reach it)
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(256 << 20))
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	type loaded struct {
		g       *flow.Graph
		dl      diag.List
		sources diag.Sources
	}
	results := make([]loaded, len(files))
	next := make(chan int)
	var wg sync.WaitGroup
	// a flow one file runs as a subflow and another is is compiled once
	batch := flow.NewBatch()
	for range min(len(files), runtime.GOMAXPROCS(0)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				g, dl, sources := batch.Compile(nil, files[i], env.Registry)
				results[i] = loaded{g, dl, sources}
			}
		}()
	}
	for i := range files {
		next <- i
	}
	close(next)
	wg.Wait()
	var all diag.List
	sources := diag.Sources{}
	graphs := make([]*flow.Graph, len(results))
	for i, r := range results {
		all = append(all, r.dl...)
		maps.Copy(sources, r.sources)
		if !r.dl.HasErrors() {
			graphs[i] = r.g
		}
	}
	return all.Sort(), sources, graphs
}

// validation is what `trellis validate --format json` prints: whether the
// flows are valid, every diagnostic, and each flow that compiled with the
// inputs a run of it must give (the rules the runtime refuses runs by).
type validation struct {
	Valid       bool            `json:"valid"`
	Diagnostics diag.List       `json:"diagnostics"`
	Flows       []validatedFlow `json:"flows"`
}

type validatedFlow struct {
	File string `json:"file"`
	Name string `json:"name"`
	// Inputs are the inputs a run must give (none: an empty list).
	Inputs []flow.NeededInput `json:"inputs"`
}

func writeValidation(w io.Writer, files []string, all diag.List, graphs []*flow.Graph) error {
	out := validation{Valid: !all.HasErrors(), Diagnostics: all, Flows: []validatedFlow{}}
	if out.Diagnostics == nil {
		out.Diagnostics = diag.List{}
	}
	for i, g := range graphs {
		if g == nil {
			continue
		}
		vf := validatedFlow{File: files[i], Name: g.Name, Inputs: g.NeededInputs()}
		if vf.Inputs == nil {
			vf.Inputs = []flow.NeededInput{}
		}
		out.Flows = append(out.Flows, vf)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// neededInputs says in words what each input a run of g must give is
// needed for (none for a flow that did not compile).
func neededInputs(g *flow.Graph) []string {
	if g == nil {
		return nil
	}
	var out []string
	for _, n := range g.NeededInputs() {
		var why []string
		if n.EveryRun {
			why = append(why, fmt.Sprintf("every run gives it: the flow reads input.%s at %s with nothing to fall back on", n.Name, n.ReadAt))
		}
		if n.FirstRun {
			why = append(why, "a new thread's first run gives it, unless the thread is created with a value for it: the state schema requires it and has no default")
		}
		out = append(out, fmt.Sprintf("flow %s needs input %s: %s", g.Name, n.Name, strings.Join(why, "; ")))
	}
	return out
}

// FlowFiles expands directories into the flow files they hold.
func FlowFiles(paths []string) ([]string, error) { return trellis.FindFlows(paths...) }

// load compiles one flow, printing its diagnostics (warnings too); with
// no flow it returns the exit code: a path that names no file is a wrong
// command line, as it is to validate, and a flow that does not load is
// invalid.
func load(env *Env, path string) (*trellis.Flow, int) { return loadWith(env, path, env.Registry) }

// loadWith is load with the given node kinds.
func loadWith(env *Env, path string, kinds kind.Registry) (*trellis.Flow, int) {
	if _, err := os.Stat(path); err != nil {
		fmt.Fprintf(env.Stderr, "trellis: flow %s: %v\n", path, errors.Unwrap(err))
		return nil, exitUsage
	}
	f, err := trellis.Load(path, trellis.WithKinds(kinds))
	var le *trellis.LoadError
	switch {
	case errors.As(err, &le):
		_ = le.Print(env.Stderr)
		return nil, exitFailed
	case err != nil:
		fmt.Fprintf(env.Stderr, "trellis: %v\n", err)
		return nil, exitFailed
	}
	if len(f.Warnings()) > 0 {
		_ = diag.WriteText(env.Stderr, f.Warnings(), f.Sources())
	}
	return f, exitOK
}

func cmdGraph(_ context.Context, env *Env, args []string) int {
	fs := flags(env, "graph")
	format := fs.String("format", "mermaid", "output format: mermaid, dot or json")
	expand := fs.Bool("expand", false, "draw each subflow with its child flow's graph inside it, and each map with the node it runs per item (json always holds them)")
	paths, code, ok := parse(fs, args)
	if !ok {
		return code
	}
	if len(paths) != 1 {
		fs.Usage()
		return 2
	}
	f, code := load(env, paths[0])
	if f == nil {
		return code
	}
	g := f.Graph()
	o := flow.DrawOptions{Expand: *expand}
	switch *format {
	case "mermaid":
		fmt.Fprint(env.Stdout, g.MermaidWith(o))
	case "dot":
		fmt.Fprint(env.Stdout, g.DOTWith(o))
	case "json":
		b, err := g.JSON()
		if err != nil {
			fmt.Fprintf(env.Stderr, "trellis graph: %v\n", err)
			return 1
		}
		fmt.Fprintf(env.Stdout, "%s\n", b)
	default:
		fmt.Fprintf(env.Stderr, "trellis graph: unknown format %q (mermaid, dot, json)\n", *format)
		return 2
	}
	return 0
}

func cmdSchema(_ context.Context, env *Env, args []string) int {
	fs := flags(env, "schema")
	if _, code, ok := parse(fs, args); !ok {
		return code
	}
	b, err := flow.FormatSchema(env.Registry)
	if err != nil {
		fmt.Fprintf(env.Stderr, "trellis schema: %v\n", err)
		return 1
	}
	_, _ = env.Stdout.Write(b)
	return 0
}

func cmdRun(ctx context.Context, env *Env, args []string) int {
	fs := flags(env, "run")
	var inputs multi
	fs.Var(&inputs, "input", "set an input field: name=value (repeatable; value parsed as YAML)")
	inputFile := fs.String("input-file", "", "read input fields from a YAML or JSON file")
	with := fs.String("with", "", "create the thread with these initial values (YAML or JSON file)")
	thread := fs.String("thread", "", "thread id: continue this thread, or create it (default: a new thread)")
	storeAddr := storeFlag(fs)
	trace := fs.Bool("trace", false, "print the run's events to stderr")
	resume := fs.Bool("resume", false, "continue the thread's unfinished run (after a crash) instead of starting one")
	durability := fs.String("durability", "sync", "when steps are committed: sync, async or exit")
	jsonOut := fs.Bool("json", false, "print the final state as JSON, not the flow's output")
	var answers multi
	fs.Var(&answers, "answer", "with --resume, answer a paused run's question: NODE=value (repeatable; value parsed as YAML); unanswered questions are asked on standard input")
	var configs multi
	fs.Var(&configs, "config", "set a run configuration value of the flow's config block: name=value (repeatable; value parsed as YAML); secret values are never checkpointed, so give them again with --resume")
	paths, code, ok := parse(fs, args)
	if !ok {
		return code
	}
	if len(paths) != 1 {
		fs.Usage()
		return 2
	}
	switch trellis.Durability(*durability) {
	case trellis.Sync, trellis.Async, trellis.Exit:
	default:
		return fail(env, "run", usagef("unknown --durability %q (sync, async, exit)", *durability))
	}
	f, code := load(env, paths[0])
	if f == nil {
		return code
	}
	in, err := ParseInputs(f, "--input", inputs, *inputFile)
	if err != nil {
		return fail(env, "run", err)
	}
	var initial map[string]any
	if *with != "" {
		if initial, err = readValues(*with); err != nil {
			return fail(env, "run", err)
		}
	}
	tracer, flush, code := traced(ctx, env, "run")
	if code != 0 {
		return code
	}
	defer flush()
	rt, err := openRuntime(ctx, *storeAddr, tracer)
	if err != nil {
		return fail(env, "run", err)
	}
	defer rt.Close()
	if *thread == "" {
		*thread = f.Name() + "-" + time.Now().UTC().Format("20060102-150405.000")
	}
	at := where{flow: paths[0], id: *thread, store: *storeAddr}
	_, err = rt.State(ctx, *thread)
	exists := err == nil
	if exists && *with != "" {
		fmt.Fprintf(env.Stderr, "thread %s exists; continuing it (--with applies to new threads)\n", *thread)
	}
	var opts []trellis.RunOption
	switch {
	case exists || *with == "":
	case !*resume:
		// created by the (first) run: the values are checked with the
		// input, and a refused input leaves no thread
		opts = append(opts, trellis.WithValues(initial))
	default:
		if _, err := rt.Create(ctx, f, *thread, initial); err != nil {
			return fail(env, "run", err)
		}
	}
	var traceTo func(trellis.Event)
	if *trace {
		traceTo = TraceTo(env.Stderr)
	}
	if len(configs) > 0 {
		cfg := map[string]any{}
		for _, p := range configs {
			k, raw, ok := strings.Cut(p, "=")
			if !ok || k == "" {
				fmt.Fprintf(env.Stderr, "trellis run: --config %q: want name=value\n", p)
				return exitUsage
			}
			cfg[k] = yamlValue(raw)
		}
		opts = append(opts, trellis.WithConfig(cfg))
	}
	if f.Conversation() != nil && len(in) == 0 {
		if traceTo != nil {
			opts = append(opts, trellis.WithObserver(traceTo))
		}
		fmt.Fprintf(env.Stderr, "thread %s in %s\n", *thread, shownStore(*storeAddr))
		return converse(ctx, env, rt, f, at, opts, exists)
	}
	// the nodes that answered with their fallbacks are named once the
	// run ends, so that a result reached without a model says so
	fb := &fallbacks{}
	opts = append(opts, trellis.WithObserver(func(ev trellis.Event) {
		if traceTo != nil {
			traceTo(ev)
		}
		fb.observe(ev)
	}))
	defer fb.report(env.Stderr)
	opts = append(opts, trellis.WithDurability(trellis.Durability(*durability)))
	if len(answers) > 0 && !*resume {
		fmt.Fprintf(env.Stderr, "trellis run: --answer goes with --resume (a paused run's questions)\n")
		return exitUsage
	}
	var res *trellis.Result
	if *resume {
		if len(in) > 0 {
			fmt.Fprintf(env.Stderr, "trellis run: a resumed run takes no input\n")
			return exitUsage
		}
		given, perr := parseAnswers(answers)
		if perr != nil {
			fmt.Fprintf(env.Stderr, "trellis run: %v\n", perr)
			return exitUsage
		}
		// err is the run's, checked below
		res, err = rt.Resume(ctx, f, *thread, append(opts, trellis.WithAnswers(given))...)
	} else {
		res, err = rt.Run(ctx, f, *thread, in, opts...)
	}
	if err != nil {
		return failRun(env, "run", at, err)
	}
	// questions are asked on standard input, the run resumed with the
	// answers, until it ends or input does
	lines := bufio.NewScanner(env.Stdin)
	for res.Interrupt != nil && len(res.Interrupt.Asks) > 0 {
		given := map[string]any{}
		for _, a := range res.Interrupt.Asks {
			fmt.Fprintf(env.Stderr, "%s\n%s> ", question(a), a.ID)
			if !lines.Scan() {
				fmt.Fprintln(env.Stderr)
				break
			}
			given[a.ID] = yamlValue(lines.Text())
		}
		if len(given) < len(res.Interrupt.Asks) {
			break
		}
		if res, err = rt.Resume(ctx, f, *thread, append(opts, trellis.WithAnswers(given))...); err != nil {
			return failRun(env, "run", at, err)
		}
	}
	if res.Interrupt == nil && !*jsonOut {
		if text, ok, err := f.Output(res.State); ok {
			if err != nil {
				fmt.Fprintf(env.Stderr, "trellis run: %v; the final state follows\n", err)
				printState(env, res.State)
				return 1
			}
			fmt.Fprint(env.Stdout, strings.TrimRight(text, "\n")+"\n")
			return 0
		}
	}
	printState(env, res.State)
	paused(env, res, at)
	return 0
}

// fallbacks gathers the nodes of a run that answered with their
// fallbacks (their end events marked degraded), by the reason given.
type fallbacks struct {
	reasons []string
	nodes   map[string][]fellBack
}

// fellBack is a node that answered with its fallback at a step.
type fellBack struct {
	step int
	name string
}

func (f *fallbacks) observe(ev trellis.Event) {
	if ev.Type != trellis.NodeEnd || ev.Degraded == "" {
		return
	}
	name := ev.Node
	if ev.NS != "" {
		name = ev.NS + "/" + name
	}
	if f.nodes == nil {
		f.nodes = map[string][]fellBack{}
	}
	if _, seen := f.nodes[ev.Degraded]; !seen {
		f.reasons = append(f.reasons, ev.Degraded)
	}
	f.nodes[ev.Degraded] = append(f.nodes[ev.Degraded], fellBack{ev.Step, name})
}

// report names the nodes, once per reason, by step and name (the items of
// a map end in any order); a map's items are named once as a range when
// there are more than two, so a map over many items stays one short line.
func (f *fallbacks) report(w io.Writer) {
	for _, why := range f.reasons {
		nodes := f.nodes[why]
		slices.SortFunc(nodes, func(a, b fellBack) int {
			ab, ai := mapItem(a.name)
			bb, bi := mapItem(b.name)
			return cmp.Or(cmp.Compare(a.step, b.step), strings.Compare(ab, bb), cmp.Compare(ai, bi), strings.Compare(a.name, b.name))
		})
		var names []string
		items := map[string][]int{}
		for _, n := range nodes {
			if base, i := mapItem(n.name); i >= 0 {
				if _, seen := items[base]; !seen {
					names = append(names, base+"[]")
				}
				if !slices.Contains(items[base], i) {
					items[base] = append(items[base], i)
				}
				continue
			}
			if !slices.Contains(names, n.name) {
				names = append(names, n.name)
			}
		}
		for k, name := range names {
			base, ok := strings.CutSuffix(name, "[]")
			if !ok {
				continue
			}
			names[k] = itemRange(base, items[base])
		}
		fmt.Fprintf(w, "fallbacks answered for %s: %s\n", strings.Join(names, ", "), why)
	}
}

// mapItem splits a map item's name, NODE[INDEX], into the node and the
// index; any other name gives -1.
func mapItem(name string) (string, int) {
	base, rest, ok := strings.Cut(name, "[")
	if !ok || !strings.HasSuffix(rest, "]") {
		return name, -1
	}
	i, err := strconv.Atoi(strings.TrimSuffix(rest, "]"))
	if err != nil || i < 0 {
		return name, -1
	}
	return base, i
}

// itemRange names a map's items: each of one or two, a range of more
// (sections[0..728], 729 items), or their count when they have gaps.
func itemRange(base string, idx []int) string {
	slices.Sort(idx)
	if len(idx) <= 2 {
		parts := make([]string, len(idx))
		for k, i := range idx {
			parts[k] = fmt.Sprintf("%s[%d]", base, i)
		}
		return strings.Join(parts, ", ")
	}
	if idx[len(idx)-1]-idx[0] == len(idx)-1 {
		return fmt.Sprintf("%s[%d..%d] (%d items)", base, idx[0], idx[len(idx)-1], len(idx))
	}
	return fmt.Sprintf("%s (%d items)", base, len(idx))
}

// printState prints a run's final state as indented JSON.
func printState(env *Env, state map[string]any) {
	enc := json.NewEncoder(env.Stdout)
	enc.SetIndent("", "  ")
	_ = enc.Encode(state)
}

// paused tells that a run paused at a node's interrupt_before or
// interrupt_after, and how to go on.
func paused(env *Env, res *trellis.Result, at where) {
	if res.Interrupt == nil {
		return
	}
	if len(res.Interrupt.Asks) > 0 {
		var ids []string
		for _, a := range res.Interrupt.Asks {
			q, _ := json.Marshal(a.Payload)
			fmt.Fprintf(env.Stderr, "%s asks: %s\n", a.ID, q)
			ids = append(ids, "--answer "+a.ID+"=VALUE")
		}
		fmt.Fprintf(env.Stderr, "paused for answers; `trellis run %s --resume %s` goes on\n", at.run(), strings.Join(ids, " "))
		return
	}
	where := "after " + strings.Join(res.Interrupt.After, ", ")
	if len(res.Interrupt.Before) > 0 {
		where = "before " + strings.Join(res.Interrupt.Before, ", ")
	}
	fmt.Fprintf(env.Stderr, "paused %s; the thread's run is unfinished: `trellis run %s --resume` goes on, `trellis update` changes the state first\n", where, at.run())
}

// parseAnswers reads --answer NODE=value pairs, values as YAML.
func parseAnswers(pairs []string) (map[string]any, error) {
	out := map[string]any{}
	for _, p := range pairs {
		k, raw, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--answer %q: want NODE=value", p)
		}
		out[k] = yamlValue(raw)
	}
	return out, nil
}

// yamlValue reads a YAML scalar or flow collection (true, 3, [a, b],
// {k: v}); what does not parse is the text itself.
func yamlValue(raw string) any {
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(raw), &n); err != nil || len(n.Content) == 0 {
		return raw
	}
	v, err := value.FromYAML(&n)
	if err != nil {
		return raw
	}
	return v
}

// readValues reads a thread's initial values from a YAML or JSON file;
// a file that cannot be read or holds no mapping is a usageError.
func readValues(path string) (map[string]any, error) {
	raw, err := schema.ReadFile(path)
	if err != nil {
		return nil, &usageError{err}
	}
	m, ok := raw.(map[string]any)
	if !ok {
		return nil, usagef("%s: want a mapping of field to value", path)
	}
	return m, nil
}

// ParseInputs builds a run input from name=value pairs (given with the
// flag called flag) and an input file. Values are read as YAML scalars,
// except that a field whose schema says string keeps the text as written.
// Its errors are usageErrors.
func ParseInputs(f *trellis.Flow, flag string, pairs []string, file string) (map[string]any, error) {
	g := f.Graph()
	in := map[string]any{}
	if file != "" {
		m, err := readValues(file)
		if err != nil {
			return nil, err
		}
		for k, x := range m {
			in[k] = x
		}
	}
	for _, p := range pairs {
		k, raw, ok := strings.Cut(p, "=")
		if !ok {
			return nil, usagef("%s %q: want name=value", flag, p)
		}
		if f, ok := g.Field(k); ok && f.Shape.Is("string") {
			in[k] = raw
			continue
		}
		in[k] = yamlValue(raw)
	}
	return in, nil
}

// question is what a paused run asks, as a person reads it: a tool call
// waiting for approval says what it would do and how to answer.
func question(a trellis.Ask) string {
	if p, ok := a.Payload.(map[string]any); ok && p["type"] == "tool_approval" {
		var b strings.Builder
		fmt.Fprintf(&b, "%s would call:", a.ID)
		calls, _ := p["calls"].([]any)
		for _, c := range calls {
			cm, _ := c.(map[string]any)
			args, _ := json.Marshal(cm["arguments"])
			fmt.Fprintf(&b, "\n  %v %s (call %v)", cm["tool"], args, cm["id"])
		}
		if problem, _ := p["problem"].(string); problem != "" {
			fmt.Fprintf(&b, "\nthe last answer could not be taken: %s", problem)
		}
		b.WriteString("\nanswer approve, reject, {decision: reject, reason: TEXT}, {decision: edit, arguments: {...}} or {calls: {ID: DECISION}}")
		return b.String()
	}
	q, _ := json.Marshal(a.Payload)
	return fmt.Sprintf("%s asks: %s", a.ID, q)
}

// TraceTo prints events as one line each.
func TraceTo(w io.Writer) func(trellis.Event) {
	return func(ev trellis.Event) {
		var b strings.Builder
		if ev.NS != "" {
			fmt.Fprintf(&b, "[%s] ", ev.NS)
		}
		fmt.Fprintf(&b, "%-12s step %-3d", ev.Type, ev.Step)
		if ev.Node != "" {
			fmt.Fprintf(&b, " %s (%s)", ev.Node, ev.Kind)
		}
		if ev.Attempt > 1 {
			fmt.Fprintf(&b, " attempt %d", ev.Attempt)
		}
		if ev.Duration > 0 {
			fmt.Fprintf(&b, " %s", ev.Duration.Round(time.Microsecond))
		}
		if ev.Degraded != "" {
			fmt.Fprintf(&b, " DEGRADED (%s)", ev.Degraded)
		}
		if ev.Text != "" {
			fmt.Fprintf(&b, " %q", ev.Text)
		}
		if t := ev.Tool; t != nil {
			args, _ := json.Marshal(t.Arguments)
			fmt.Fprintf(&b, " → %s %s [%s]", t.Name, args, t.ID)
			if t.Approval != "" {
				fmt.Fprintf(&b, " %s", t.Approval)
			}
			switch {
			case t.Error != "":
				fmt.Fprintf(&b, " error: %s", t.Error)
			case ev.Type == trellis.ToolEnd:
				r, _ := json.Marshal(t.Result)
				fmt.Fprintf(&b, " = %s", r)
			}
		}
		if ev.Interrupt != nil && ev.Type == trellis.NodeEnd {
			b.WriteString(" PAUSED (asks)")
		}
		if len(ev.Update) > 0 {
			u, _ := json.Marshal(ev.Update)
			fmt.Fprintf(&b, " %s", u)
		}
		if len(ev.Next) > 0 {
			fmt.Fprintf(&b, " → %s", strings.Join(ev.Next, ", "))
		}
		if ev.Error != "" {
			fmt.Fprintf(&b, " error: %s", ev.Error)
		}
		fmt.Fprintln(w, b.String())
	}
}
