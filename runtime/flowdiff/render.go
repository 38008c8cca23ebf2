package flowdiff

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Details says what changed inside a change: for structured values, each
// setting added, removed or changed (by dotted path); for text (a
// prompt), the lines removed and added.
func (c Change) Details() []string {
	var a, b any
	if json.Unmarshal([]byte(c.Old), &a) == nil && json.Unmarshal([]byte(c.New), &b) == nil {
		fa, fb := map[string]string{}, map[string]string{}
		flatten("", a, fa)
		flatten("", b, fb)
		var keys []string
		for k := range fa {
			keys = append(keys, k)
		}
		for k := range fb {
			if _, ok := fa[k]; !ok {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		var out []string
		for _, k := range keys {
			x, inA := fa[k]
			y, inB := fb[k]
			name := k
			if name == "" {
				name = "value"
			}
			switch {
			case !inA:
				out = append(out, fmt.Sprintf("%s: added %s", name, short(y)))
			case !inB:
				out = append(out, fmt.Sprintf("%s: removed (was %s)", name, short(x)))
			case x != y:
				if more, less, ok := listChange(x, y); ok {
					for _, l := range less {
						out = append(out, fmt.Sprintf("%s: removed %s", name, short(l)))
					}
					for _, m := range more {
						out = append(out, fmt.Sprintf("%s: added %s", name, short(m)))
					}
					if len(more)+len(less) > 0 {
						continue
					}
				}
				out = append(out, fmt.Sprintf("%s: %s → %s", name, short(x), short(y)))
			}
		}
		return out
	}
	return lineDiff(c.Old, c.New)
}

// listChange compares two JSON lists by their items: those only in the
// new one and those only in the old one (ok false when either is not a
// list).
func listChange(x, y string) (more, less []string, ok bool) {
	var a, b []any
	if json.Unmarshal([]byte(x), &a) != nil || json.Unmarshal([]byte(y), &b) != nil {
		return nil, nil, false
	}
	count := map[string]int{}
	for _, v := range a {
		count[canonical(v)]++
	}
	for _, v := range b {
		c := canonical(v)
		if count[c] > 0 {
			count[c]--
		} else {
			more = append(more, c)
		}
	}
	for _, v := range a {
		if c := canonical(v); count[c] > 0 {
			count[c]--
			less = append(less, c)
		}
	}
	return more, less, true
}

// flatten maps nested objects to dotted paths; lists and scalars are
// leaves.
func flatten(prefix string, v any, out map[string]string) {
	if m, ok := v.(map[string]any); ok && len(m) > 0 {
		for k, x := range m {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			flatten(p, x, out)
		}
		return
	}
	out[prefix] = canonical(v)
}

func short(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if r := []rune(s); len(r) > 100 {
		return string(r[:100]) + "…"
	}
	return s
}

// lineDiff lists the lines removed (-) and added (+) between two texts,
// by their longest common subsequence (at most 40 lines).
func lineDiff(a, b string) []string {
	x, y := strings.Split(a, "\n"), strings.Split(b, "\n")
	if len(x)*len(y) > 4_000_000 {
		return []string{fmt.Sprintf("- (%d lines)", len(x)), fmt.Sprintf("+ (%d lines)", len(y))}
	}
	lcs := make([][]int, len(x)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(y)+1)
	}
	for i := len(x) - 1; i >= 0; i-- {
		for j := len(y) - 1; j >= 0; j-- {
			if x[i] == y[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out []string
	i, j := 0, 0
	for (i < len(x) || j < len(y)) && len(out) < 40 {
		switch {
		case i < len(x) && j < len(y) && x[i] == y[j]:
			i, j = i+1, j+1
		case i < len(x) && (j == len(y) || lcs[i+1][j] >= lcs[i][j+1]):
			out = append(out, "- "+x[i])
			i++
		default:
			out = append(out, "+ "+y[j])
			j++
		}
	}
	return out
}

var mark = map[string]string{Added: "+", Removed: "-", Changed: "~"}

// Text writes the changes for a terminal.
func Text(w io.Writer, old, new string, changes []Change) {
	if len(changes) == 0 {
		fmt.Fprintf(w, "%s and %s mean the same flow\n", old, new)
		return
	}
	fmt.Fprintf(w, "%s → %s: %d change(s)\n", old, new, len(changes))
	for _, c := range changes {
		fmt.Fprintf(w, "%s %s %s", mark[c.Kind], c.Area, c.Name)
		switch c.Kind {
		case Added:
			if c.Area != "prompt" {
				fmt.Fprintf(w, ": %s", short(c.New))
			}
			fmt.Fprintln(w)
		case Removed:
			fmt.Fprintln(w)
		default:
			fmt.Fprintln(w)
			for _, d := range c.Details() {
				fmt.Fprintf(w, "    %s\n", d)
			}
		}
	}
}

// GitHub writes the changes as Markdown for a pull-request comment: a
// list by area with the details folded, and the graph with the changed
// nodes highlighted (mermaid, from Mermaid).
func GitHub(w io.Writer, old, new string, changes []Change, mermaid string) {
	fmt.Fprintf(w, "### Flow changes: `%s` → `%s`\n\n", old, new)
	if len(changes) == 0 {
		fmt.Fprintln(w, "No change in meaning.")
		return
	}
	counts := map[string]int{}
	for _, c := range changes {
		counts[c.Kind]++
	}
	fmt.Fprintf(w, "%d added, %d removed, %d changed.\n\n", counts[Added], counts[Removed], counts[Changed])
	fmt.Fprintln(w, "| | area | name |\n| --- | --- | --- |")
	for _, c := range changes {
		fmt.Fprintf(w, "| %s | %s | `%s` |\n", c.Kind, c.Area, strings.ReplaceAll(c.Name, "|", "\\|"))
	}
	for _, c := range changes {
		if c.Kind != Changed {
			continue
		}
		fmt.Fprintf(w, "\n<details><summary>%s <code>%s</code></summary>\n\n```diff\n", c.Area, c.Name)
		for _, d := range c.Details() {
			if !strings.HasPrefix(d, "+ ") && !strings.HasPrefix(d, "- ") {
				d = "! " + d
			}
			fmt.Fprintln(w, d)
		}
		fmt.Fprint(w, "```\n</details>\n")
	}
	if mermaid != "" {
		fmt.Fprintf(w, "\n```mermaid\n%s```\n", mermaid)
	}
}

// Highlight adds to a Mermaid flowchart of the new flow (flow.Graph's
// Mermaid, whose node ids id gives) the nodes the changes touch: added
// ones green, changed ones amber, removed ones (drawn apart) red.
func Highlight(chart string, changes []Change, id func(node string) string) string {
	var b strings.Builder
	b.WriteString(chart)
	b.WriteString("  classDef added fill:#d3f9d8,stroke:#2b8a3e\n  classDef changed fill:#fff3bf,stroke:#e67700\n  classDef removed fill:#ffe3e3,stroke:#c92a2a,stroke-dasharray:4\n")
	state := map[string]string{}
	for _, c := range changes {
		if c.Node == "" || c.Node == "END" {
			continue
		}
		k := Changed
		if c.Area == "node" {
			k = c.Kind
		}
		if state[c.Node] == "" || c.Area == "node" {
			state[c.Node] = k
		}
	}
	var nodes []string
	for n := range state {
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	for _, n := range nodes {
		if state[n] == Removed {
			fmt.Fprintf(&b, "  %s[\"%s<br/><small>removed</small>\"]\n", id(n), n)
		}
		fmt.Fprintf(&b, "  class %s %s\n", id(n), state[n])
	}
	return b.String()
}
