package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/flowdiff"
)

// cmdDiff compares two versions of a flow by meaning. A version is a
// file, or REV:FILE for the file as it was at a git revision.
func cmdDiff(ctx context.Context, env *Env, args []string) int {
	fs := flags(env, "diff")
	format := fs.String("format", "text", "output format: text, github (Markdown with a highlighted graph), mermaid or json")
	pos, code, ok := parse(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 2 {
		fmt.Fprintln(env.Stderr, "trellis diff: want OLD NEW (a flow file, or REV:FILE for a git revision)")
		return 2
	}
	old, err := source(pos[0])
	if err != nil {
		fmt.Fprintf(env.Stderr, "trellis diff: %v\n", err)
		return 2
	}
	new, err := source(pos[1])
	if err != nil {
		fmt.Fprintf(env.Stderr, "trellis diff: %v\n", err)
		return 2
	}
	changes, err := flowdiff.Diff(old, new)
	if err != nil {
		fmt.Fprintf(env.Stderr, "trellis diff: %v\n", err)
		return 2
	}
	// the drawing is of the new version, when it loads; when it cannot
	// be drawn, each format says why
	var why string
	var whyDiags diag.List
	var whySources diag.Sources
	chart := func() string {
		if strings.Contains(pos[1], ":") && !fileExists(pos[1]) {
			why = fmt.Sprintf("%s is a git revision: only a flow file on disk is drawn", pos[1])
			return ""
		}
		g, dl, sources := flow.Compile(nil, pos[1], nil, env.Registry)
		if g == nil {
			n := 0
			for _, d := range dl {
				if d.Severity == diag.Error {
					n++
				}
			}
			why = fmt.Sprintf("%s has %s, so its graph cannot be drawn (trellis validate %s lists them)", pos[1], plural(n, "error"), pos[1])
			whyDiags, whySources = dl, sources
			return ""
		}
		return flowdiff.Highlight(g.Mermaid(), changes, flow.MermaidID)
	}
	// what the change means for the threads of the old version is said
	// only when both load: when one does not, each format says which
	loadNote := unloaded(env, pos, old, new)
	switch *format {
	case "text":
		flowdiff.Text(env.Stdout, old.Name, new.Name, changes)
		threadEffects(env, old, new)
		if chart(); whyDiags.HasErrors() {
			fmt.Fprintf(env.Stderr, "note: %s\n", why)
		}
		if loadNote != "" {
			fmt.Fprintf(env.Stderr, "note: %s\n", loadNote)
		}
	case "github":
		c := chart()
		flowdiff.GitHub(env.Stdout, old.Name, new.Name, changes, c)
		if loadNote != "" {
			fmt.Fprintf(env.Stdout, "\n> %s.\n", loadNote)
		}
		if c == "" {
			fmt.Fprintf(env.Stdout, "\n> The graph is not drawn: %s.\n", why)
			shown := 0
			for _, d := range whyDiags {
				if d.Severity != diag.Error {
					continue
				}
				if shown++; shown > 10 {
					fmt.Fprintln(env.Stdout, "> - …")
					break
				}
				fmt.Fprintf(env.Stdout, "> - `%s`\n", strings.ReplaceAll(d.String(), "`", "'"))
			}
		}
	case "mermaid":
		c := chart()
		if c == "" {
			fmt.Fprintf(env.Stderr, "trellis diff: no drawing: %s\n", why)
			if whyDiags.HasErrors() {
				_ = diag.WriteText(env.Stderr, whyDiags, whySources)
			}
			return exitUsage
		}
		fmt.Fprint(env.Stdout, c)
	case "json":
		b, _ := json.MarshalIndent(changes, "", "  ")
		fmt.Fprintln(env.Stdout, string(b))
		if chart(); whyDiags.HasErrors() {
			fmt.Fprintf(env.Stderr, "note: %s\n", why)
		}
		if loadNote != "" {
			fmt.Fprintf(env.Stderr, "note: %s\n", loadNote)
		}
	default:
		fmt.Fprintf(env.Stderr, "trellis diff: unknown format %q (text, github, mermaid, json)\n", *format)
		return 2
	}
	if len(changes) > 0 {
		return 1
	}
	return 0
}

// unloaded says which of the two versions (its argument in args) does
// not load, with its count of errors, so that what the change means for
// the threads of the old version cannot be said ("" when both load).
func unloaded(env *Env, args []string, old, new flowdiff.Source) string {
	var notes []string
	for i, s := range []flowdiff.Source{old, new} {
		g, dl, _ := s.Compile(env.Registry)
		if g != nil {
			continue
		}
		n := 0
		for _, d := range dl {
			if d.Severity == diag.Error {
				n++
			}
		}
		which := "the old version"
		if i == 1 {
			which = "the new version"
		}
		notes = append(notes, fmt.Sprintf("%s %s does not load (%s; trellis validate %s lists them)", which, args[i], plural(n, "error"), args[i]))
	}
	if len(notes) == 0 {
		return ""
	}
	return strings.Join(notes, ", and ") + ", so what the change means for the threads of the old version is not said"
}

// threadEffects prints what the change means for the threads of the old
// version moving to the new one, when both compile: each change
// compatible or breaking, with the reason.
func threadEffects(env *Env, old, new flowdiff.Source) {
	a, _, _ := old.Compile(env.Registry)
	b, _, _ := new.Compile(env.Registry)
	if a == nil || b == nil {
		return
	}
	effects := flowdiff.Compat(a, b)
	if len(effects) == 0 {
		return
	}
	breaking := len(flowdiff.Breaking(effects))
	fmt.Fprintf(env.Stdout, "\nFor the threads of %s moving to %s (%s):\n", old.Name, new.Name, plural(breaking, "breaking change"))
	for _, e := range effects {
		verdict := "compatible"
		if e.Breaking {
			verdict = "breaking"
		}
		fmt.Fprintf(env.Stdout, "  %-10s  %s\n", verdict, e.Reason)
	}
	if breaking > 0 {
		fmt.Fprintln(env.Stdout, "A thread moves across a breaking change only with a migration (trellis threads migrate --set FIELD=EXPR).")
	}
}

// source reads FILE from disk, or REV:FILE from git.
func source(arg string) (flowdiff.Source, error) {
	if rev, file, ok := strings.Cut(arg, ":"); ok && rev != "" && !fileExists(arg) && filepath.VolumeName(arg) == "" {
		return flowdiff.Git(rev, file)
	}
	if !fileExists(arg) {
		return flowdiff.Source{}, fmt.Errorf("%s: no such file", arg)
	}
	return flowdiff.Disk(arg), nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
