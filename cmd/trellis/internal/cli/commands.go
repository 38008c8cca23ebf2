package cli

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/schema"
	"github.com/trellisflow/trellis/runtime/value"
)

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
	fs.Var(&answers, "answer", "with --resume, answer a paused run's question: ID=value, by the question's id or path (an interrupt node by its name; inside a subflow or a map's item, such as review/approve or items[2]/approve; repeatable; value parsed as YAML); unanswered questions are asked on standard input")
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
			fmt.Fprintf(env.Stderr, "%s\n%s> ", question(a), a.Path)
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

// hintedAnswers is how many questions the command that goes on from a
// pause spells out; the others are counted.
const hintedAnswers = 4

// paused tells that a run paused at a node's interrupt_before or
// interrupt_after, and how to go on.
func paused(env *Env, res *trellis.Result, at where) {
	if res.Interrupt == nil {
		return
	}
	if len(res.Interrupt.Asks) > 0 {
		var ids []string
		for _, a := range res.Interrupt.Asks {
			fmt.Fprintln(env.Stderr, question(a))
			if len(ids) < hintedAnswers {
				ids = append(ids, "--answer "+shellWord(a.Path+"=VALUE"))
			}
		}
		more := ""
		if n := len(res.Interrupt.Asks) - len(ids); n > 0 {
			// many questions (a long map's items): the command shows how,
			// and says that some answers at a time will do
			more = fmt.Sprintf("; any of the %d other questions is answered the same way (those not answered keep waiting)", n)
		}
		fmt.Fprintf(env.Stderr, "paused for answers; `trellis run %s --resume %s` goes on%s\n", at.run(), strings.Join(ids, " "), more)
		return
	}
	where := "after " + strings.Join(res.Interrupt.After, ", ")
	if len(res.Interrupt.Before) > 0 {
		where = "before " + strings.Join(res.Interrupt.Before, ", ")
	}
	fmt.Fprintf(env.Stderr, "paused %s; the thread's run is unfinished: `trellis run %s --resume` goes on, `trellis update` changes the state first\n", where, at.run())
}

// idNote shows a question's id where it differs from its path (a
// question asked inside a node): either answers it.
func idNote(a trellis.Ask) string {
	if a.ID == a.Path || a.ID == "" {
		return ""
	}
	return " (id " + a.ID + ")"
}

// parseAnswers reads --answer ID=value pairs (a question's id or path),
// values as YAML.
func parseAnswers(pairs []string) (map[string]any, error) {
	out := map[string]any{}
	for _, p := range pairs {
		k, raw, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--answer %q: want ID=value (a question's id or path)", p)
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
		fmt.Fprintf(&b, "%s would call:%s", a.Path, idNote(a))
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
	return fmt.Sprintf("%s asks: %s%s", a.Path, q, idNote(a))
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
		if len(ev.Appended) > 0 {
			a, _ := json.Marshal(ev.Appended)
			fmt.Fprintf(&b, " +%s", a)
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
