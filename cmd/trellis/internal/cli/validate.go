package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"

	"github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/flow"
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
	held := make(chan func(), 1)
	go func() { held <- flow.Prepare(env.Registry) }() // while the files are found and read
	defer func() { (<-held)() }()
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
