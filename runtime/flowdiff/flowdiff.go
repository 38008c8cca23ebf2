// Package flowdiff compares two versions of a flow by meaning: its nodes,
// edges, conditions, state fields and reducers, prompts, inputs and
// limits, each added, removed or changed, rather than by lines of YAML.
// A version is read from disk or from a git revision, with the prompt
// and schema files it refers to as they were in that version.
package flowdiff

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/trellisflow/trellis/runtime/schema"
)

// Source reads one version of a flow and the files beside it.
type Source struct {
	// Name is how the version is shown (a path, or REV:path).
	Name string
	// Path is the flow file, slash-separated (relative to Root for git).
	Path string
	read func(p string) ([]byte, error)
	// git: Path is relative to a git work tree's top, read at a revision
	git bool
}

// Disk is the flow file at path on disk.
func Disk(p string) Source {
	return Source{Name: p, Path: filepath.ToSlash(p), read: func(p string) ([]byte, error) { return os.ReadFile(filepath.FromSlash(p)) }}
}

// Git is the flow file at path (on disk, inside a git work tree) as it
// was at revision rev.
func Git(rev, p string) (Source, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return Source{}, err
	}
	dir := filepath.Dir(abs)
	top, err := exec.Command("git", "-C", dir, "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return Source{}, fmt.Errorf("%s is not in a git work tree", p)
	}
	root := strings.TrimSpace(string(top))
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real
	}
	if real, err := filepath.EvalSymlinks(root); err == nil {
		root = real
	}
	rel, err := filepath.Rel(root, abs)
	if err != nil {
		return Source{}, err
	}
	if out, err := exec.Command("git", "-C", root, "rev-parse", "--verify", "--quiet", rev+"^{commit}").Output(); err != nil || len(out) == 0 {
		return Source{}, fmt.Errorf("%q is not a revision of %s", rev, root)
	}
	return Source{Name: rev + ":" + filepath.ToSlash(rel), Path: filepath.ToSlash(rel), git: true, read: func(p string) ([]byte, error) {
		out, err := exec.Command("git", "-C", root, "show", rev+":"+p).Output()
		if err != nil {
			return nil, fmt.Errorf("%s:%s: %w", rev, p, os.ErrNotExist)
		}
		return out, nil
	}}, nil
}

// Change is one difference.
type Change struct {
	// Kind is added, removed or changed.
	Kind string `json:"kind"`
	// Area is what changed: flow, input, conversation, limits, node,
	// prompt, edge, field, reducer, definition, setting; a part of a
	// subflow's file has its area, and is named under the node that runs
	// it ("review › node recruiter"); a subflow file that cannot be read
	// is a change of area subflow.
	Area string `json:"area"`
	// Name names it within its area (a node, a field, the edges leaving
	// a node).
	Name string `json:"name"`
	// Node is the node the change belongs to, when there is one (for
	// drawing).
	Node string `json:"node,omitempty"`
	// Old and New are the before and after, as canonical text.
	Old string `json:"old,omitempty"`
	New string `json:"new,omitempty"`
}

// The kinds of Change.
const (
	Added   = "added"
	Removed = "removed"
	Changed = "changed"
)

// facet is one comparable part of a flow.
type facet struct {
	area, name, node, text string
}

// Diff compares two versions of a flow.
func Diff(old, new Source) ([]Change, error) {
	a, err := facets(old)
	if err != nil {
		return nil, err
	}
	b, err := facets(new)
	if err != nil {
		return nil, err
	}
	key := func(f facet) string { return f.area + "\x00" + f.name }
	am, bm := map[string]facet{}, map[string]facet{}
	var order []string
	for _, f := range a {
		am[key(f)] = f
		order = append(order, key(f))
	}
	for _, f := range b {
		bm[key(f)] = f
		if _, ok := am[key(f)]; !ok {
			order = append(order, key(f))
		}
	}
	var out []Change
	for _, k := range order {
		x, inOld := am[k]
		y, inNew := bm[k]
		switch {
		case inOld && !inNew:
			out = append(out, Change{Kind: Removed, Area: x.area, Name: x.name, Node: x.node, Old: x.text})
		case !inOld && inNew:
			out = append(out, Change{Kind: Added, Area: y.area, Name: y.name, Node: y.node, New: y.text})
		case x.text != y.text:
			out = append(out, Change{Kind: Changed, Area: y.area, Name: y.name, Node: y.node, Old: x.text, New: y.text})
		}
	}
	rank := map[string]int{"flow": 0, "input": 1, "conversation": 2, "limits": 3, "setting": 4, "field": 5, "reducer": 6, "definition": 7, "tool": 8, "node": 8, "prompt": 9, "subflow": 10, "edge": 11}
	slices.SortStableFunc(out, func(x, y Change) int { return rank[x.Area] - rank[y.Area] })
	return out, nil
}

// facets splits a version of a flow into its comparable parts.
func facets(s Source) ([]facet, error) {
	return facetsIn(s, map[string]bool{s.Path: true})
}

// facetsIn is facets, with the flow files being read (a subflow that
// includes one of them again is not followed).
func facetsIn(s Source, within map[string]bool) ([]facet, error) {
	src, err := s.read(s.Path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.Name, err)
	}
	raw, err := schema.Parse(s.Name, src)
	if err != nil {
		return nil, err
	}
	doc, ok := raw.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: not a flow (a mapping at the top)", s.Name)
	}
	var out []facet
	add := func(area, name, node string, v any) {
		out = append(out, facet{area: area, name: name, node: node, text: canonical(v)})
	}
	for _, k := range sortedKeys(doc) {
		v := doc[k]
		switch k {
		case "version", "name", "description":
			add("flow", k, "", v)
		case "input", "conversation", "lint":
			add(k, k, "", v)
		case "limits":
			if m, ok := v.(map[string]any); ok {
				for _, l := range sortedKeys(m) {
					add("limits", l, "", m[l])
				}
			} else {
				add("limits", "limits", "", v)
			}
		case "state":
			out = append(out, stateFacets(s, v)...)
		case "nodes":
			nodes, _ := v.(map[string]any)
			for _, name := range sortedKeys(nodes) {
				add("node", name, name, nodes[name])
				block, _ := nodes[name].(map[string]any)
				out = append(out, s.parts(name, name, block, within)...)
				// a map's node per item
				if nested, ok := block["node"].(map[string]any); ok {
					out = append(out, s.parts(name+"[each]", name, nested, within)...)
				}
			}
		case "tools":
			// each tool on its own: a change names the tool
			tools, _ := v.(map[string]any)
			for _, name := range sortedKeys(tools) {
				add("tool", name, "", tools[name])
			}
		case "edges":
			list, _ := v.([]any)
			by := map[string][]string{}
			var froms []string
			for _, e := range list {
				from := "?"
				if m, ok := e.(map[string]any); ok {
					if f, ok := m["from"].(string); ok {
						from = f
					} else if fs, ok := m["from"].([]any); ok {
						from = canonical(fs)
					}
				}
				if _, seen := by[from]; !seen {
					froms = append(froms, from)
				}
				by[from] = append(by[from], canonical(e))
			}
			for _, from := range froms {
				edges := by[from]
				slices.Sort(edges)
				node := from
				if node == "START" {
					node = ""
				}
				out = append(out, facet{area: "edge", name: "from " + from, node: node, text: strings.Join(edges, "\n")})
			}
		default:
			add("setting", k, "", v)
		}
	}
	return out, nil
}

// parts are the files a node block reads, compared with the flow: an
// llm node's prompt, and a subflow's flow file, followed (its own parts
// named under the node, label: "review › node recruiter").
func (s Source) parts(label, node string, block map[string]any, within map[string]bool) []facet {
	var out []facet
	if p, ok := block["prompt"].(string); ok {
		text, _ := prompt(s, p)
		out = append(out, facet{area: "prompt", name: label + " (" + p + ")", node: node, text: text})
	}
	f, ok := block["flow"].(string)
	if !ok || block["kind"] != "subflow" {
		return out
	}
	child := Source{Name: s.Name, Path: path.Join(path.Dir(s.Path), f), read: s.read}
	if within[child.Path] {
		return out // flows that include each other: the validator says so
	}
	within[child.Path] = true
	defer delete(within, child.Path)
	cf, err := facetsIn(child, within)
	if err != nil {
		return append(out, facet{area: "subflow", name: label + " (" + f + ")", node: node, text: "(missing)"})
	}
	for _, c := range cf {
		out = append(out, facet{area: c.area, name: label + " › " + c.area + " " + c.name, node: node, text: c.text})
	}
	return out
}

// stateFacets splits the state: each field's schema, each reducer, the
// schema's definitions, the other settings.
func stateFacets(s Source, v any) []facet {
	st, ok := v.(map[string]any)
	if !ok {
		return []facet{{area: "field", name: "(state)", text: canonical(v)}}
	}
	var out []facet
	sch := st["schema"]
	if p, ok := sch.(string); ok {
		file := path.Join(path.Dir(s.Path), p)
		if b, err := s.read(file); err == nil {
			if parsed, err := schema.Parse(file, b); err == nil {
				sch = parsed
			}
		}
	}
	if m, ok := sch.(map[string]any); ok {
		props, _ := m["properties"].(map[string]any)
		for _, f := range sortedKeys(props) {
			out = append(out, facet{area: "field", name: f, text: canonical(props[f])})
		}
		for _, defs := range []string{"$defs", "definitions"} {
			d, _ := m[defs].(map[string]any)
			for _, name := range sortedKeys(d) {
				out = append(out, facet{area: "definition", name: name, text: canonical(d[name])})
			}
		}
		for _, k := range sortedKeys(m) {
			if k != "properties" && k != "$defs" && k != "definitions" {
				out = append(out, facet{area: "field", name: "(schema " + k + ")", text: canonical(m[k])})
			}
		}
	}
	if r, ok := st["reducers"].(map[string]any); ok {
		for _, f := range sortedKeys(r) {
			out = append(out, facet{area: "reducer", name: f, text: canonical(r[f])})
		}
	}
	for _, k := range sortedKeys(st) {
		if k != "schema" && k != "reducers" {
			out = append(out, facet{area: "setting", name: "state." + k, text: canonical(st[k])})
		}
	}
	return out
}

// prompt reads an llm node's prompt file the way the loader finds it: a
// path ending in .prompt relative to the flow, else prompts/NAME.prompt
// beside the flow or in a directory above it.
func prompt(s Source, name string) (text, where string) {
	dir := path.Dir(s.Path)
	if strings.HasSuffix(name, ".prompt") {
		p := path.Join(dir, name)
		if b, err := s.read(p); err == nil {
			return string(b), p
		}
		return "(missing)", p
	}
	for d := dir; ; d = path.Dir(d) {
		p := path.Join(d, "prompts", name+".prompt")
		if b, err := s.read(p); err == nil {
			return string(b), p
		}
		if d == "." || d == "/" || d == "" || path.Base(d) == ".." {
			return "(missing)", "prompts/" + name + ".prompt"
		}
	}
}

func canonical(v any) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Sprint(v)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func sortedKeys(m map[string]any) []string { return slices.Sorted(maps.Keys(m)) }
