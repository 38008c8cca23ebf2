package cli

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"text/template"
)

// scaffolds are the flows init writes: each folder a flow (flow.yaml),
// its tests (flow.test.yaml) and the prompts it names (*.prompt). The
// name is written <<.Name>>.
//
//go:embed scaffold
var scaffolds embed.FS

// scaffoldNames lists the templates, simplest first.
var scaffoldNames = []string{"linear", "router", "fanout", "loop", "chat"}

var scaffoldSummary = map[string]string{
	"linear": "steps in a row",
	"router": "a route to one of several nodes, over an enum",
	"fanout": "parallel nodes merged through a reducer, then a join",
	"loop":   "a node repeated until a condition, with a bound",
	"chat":   "a conversation with a model, one run per message (fallback offline)",
}

var flowName = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// cmdInit scaffolds a flow from a template, with a passing test.
func cmdInit(_ context.Context, env *Env, args []string) int {
	fs := flags(env, "init")
	tmpl := fs.String("template", "linear", "the kind of flow: linear, router, fanout, loop or chat")
	pos, code, ok := parse(fs, args)
	if !ok {
		return code
	}
	if len(pos) == 0 || len(pos) > 2 {
		fmt.Fprintln(env.Stderr, "usage: trellis init [--template NAME] FLOW [DIR]\n\ntemplates:")
		for _, n := range scaffoldNames {
			fmt.Fprintf(env.Stderr, "  %-8s %s\n", n, scaffoldSummary[n])
		}
		return 2
	}
	name, dir := pos[0], "."
	if len(pos) == 2 {
		dir = pos[1]
	}
	if !slices.Contains(scaffoldNames, *tmpl) {
		fmt.Fprintf(env.Stderr, "trellis init: no template %q (linear, router, fanout, loop, chat)\n", *tmpl)
		return 2
	}
	if !flowName.MatchString(name) {
		fmt.Fprintf(env.Stderr, "trellis init: a flow's name is snake_case (a-z, 0-9, _), not %q\n", name)
		return 2
	}
	files, err := scaffold(*tmpl, name)
	if err != nil {
		return fail(env, "init", err)
	}
	for p := range files {
		if _, err := os.Stat(filepath.Join(dir, p)); err == nil {
			fmt.Fprintf(env.Stderr, "trellis init: %s exists; nothing was written\n", filepath.Join(dir, p))
			return 1
		}
	}
	for _, p := range slices.Sorted(mapsKeys(files)) {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return fail(env, "init", err)
		}
		if err := os.WriteFile(full, files[p], 0o644); err != nil {
			return fail(env, "init", err)
		}
		fmt.Fprintln(env.Stdout, full)
	}
	fmt.Fprintf(env.Stdout, "\ntrellis validate %s\ntrellis test %s\n", filepath.Join(dir, name+".yaml"), filepath.Join(dir, name+".test.yaml"))
	return 0
}

// scaffold renders a template's files for a flow called name, by the
// paths they take beside each other.
func scaffold(tmpl, name string) (map[string][]byte, error) {
	root := "scaffold/" + tmpl
	entries, err := fs.ReadDir(scaffolds, root)
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for _, e := range entries {
		src, err := fs.ReadFile(scaffolds, root+"/"+e.Name())
		if err != nil {
			return nil, err
		}
		t, err := template.New(e.Name()).Delims("<<", ">>").Parse(string(src))
		if err != nil {
			return nil, err
		}
		var b bytes.Buffer
		if err := t.Execute(&b, map[string]string{"Name": name}); err != nil {
			return nil, err
		}
		var p string
		switch ext := filepath.Ext(e.Name()); {
		case e.Name() == "flow.yaml":
			p = name + ".yaml"
		case e.Name() == "flow.test.yaml":
			p = name + ".test.yaml"
		case ext == ".prompt":
			p = filepath.Join("prompts", name, e.Name())
		default:
			return nil, errors.New("scaffold: unexpected file " + e.Name())
		}
		out[p] = b.Bytes()
	}
	return out, nil
}

func mapsKeys(m map[string][]byte) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
