package flow

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/trellisflow/trellis/runtime/kind"
)

// Arc is one drawn connection of a graph: every edge becomes one arc per
// target, labelled with the condition that selects it.
type Arc struct {
	From  string `json:"from"`
	To    string `json:"to"`
	Label string `json:"label,omitempty"`
	// Kind is static, join, branch, else, route, default or on_error.
	Kind  string `json:"kind"`
	Bound int    `json:"bound,omitempty"`
}

// Arcs lists the graph's connections in declaration order.
func (g *Graph) Arcs() []Arc {
	var arcs []Arc
	names := func(ns []*Node, end bool) []string {
		var s []string
		for _, n := range ns {
			s = append(s, n.Name)
		}
		if end {
			s = append(s, endName)
		}
		return s
	}
	for _, e := range g.Edges {
		sources := []string{startName}
		if len(e.From) > 0 {
			sources = names(e.From, false)
		}
		add := func(to []string, kind, label string) {
			for _, s := range sources {
				for _, t := range to {
					arcs = append(arcs, Arc{From: s, To: t, Label: label, Kind: kind, Bound: e.Bound})
				}
			}
		}
		switch {
		case e.Join >= 0:
			add(names(e.To, e.ToEnd), "join", "")
		case e.Cases != nil:
			for _, c := range e.Cases {
				if c.When == nil {
					add(names(c.To, c.ToEnd), "else", "else")
				} else {
					add(names(c.To, c.ToEnd), "branch", c.When.Source())
				}
			}
		case e.Route != nil:
			route := strings.TrimSpace(e.Route.Source())
			if !e.Route.Atomic() && !bracketed(route) {
				route = "(" + route + ")" // keep its meaning beside ==
			}
			for _, name := range sortedKeys(e.Choices) {
				add([]string{name}, "route", fmt.Sprintf("%s == %q", route, name))
			}
			if e.HasDefault {
				d := endName
				if e.Default != nil {
					d = e.Default.Name
				}
				add([]string{d}, "default", "default")
			}
		default:
			add(names(e.To, e.ToEnd), "static", "")
		}
	}
	for _, n := range g.Nodes {
		if n.OnError.Route != nil {
			arcs = append(arcs, Arc{From: n.Name, To: n.OnError.Route.Name, Label: "on error", Kind: "on_error"})
		}
	}
	return arcs
}

// bracketed reports whether s is one bracketed expression, (...).
func bracketed(s string) bool {
	if !strings.HasPrefix(s, "(") || !strings.HasSuffix(s, ")") {
		return false
	}
	depth := 0
	var quote rune
	for i, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"' || r == '`':
			quote = r
		case r == '(':
			depth++
		case r == ')':
			depth--
			if depth == 0 && i < len(s)-1 {
				return false
			}
		}
	}
	return true
}

// DrawOptions say how a drawing shows composite nodes: collapsed (a
// subflow as one node, a map as one node naming its items) or expanded
// (a subflow as a box holding the child flow's graph, a map as a box
// holding the node it runs per item).
type DrawOptions struct {
	Expand bool
}

// Mermaid renders the graph as a Mermaid flowchart, composite nodes
// collapsed.
func (g *Graph) Mermaid() string { return g.MermaidWith(DrawOptions{}) }

// MermaidWith renders the graph as a Mermaid flowchart.
func (g *Graph) MermaidWith(o DrawOptions) string {
	var b strings.Builder
	b.WriteString("flowchart TD\n")
	g.mermaid(&b, "", "  ", o)
	return b.String()
}

// mermaid writes the graph's nodes and arcs, their ids prefixed (the
// graph of a subflow drawn inside its node).
func (g *Graph) mermaid(b *strings.Builder, prefix, indent string, o DrawOptions) {
	id := func(name string) string { return mermaidIDIn(prefix, name) }
	fmt.Fprintf(b, "%s%s([START])\n", indent, id(startName))
	for _, n := range g.Nodes {
		parts, composite := partsOf(n)
		if composite && o.Expand {
			mermaidComposite(b, n, parts, prefix, indent, o)
			continue
		}
		open, end := "[", "]"
		switch {
		case composite && parts.Flow != nil:
			open, end = "[[", "]]" // a subroutine: another flow
		case composite && parts.Nested != nil:
			open, end = "[/", "\\]" // many runs of one node
		default:
			if _, asks := n.Impl.(kind.Asker); asks {
				open, end = "{{", "}}" // a node that waits for a person's answer
			}
		}
		fmt.Fprintf(b, "%s%s%s\"%s<br/><small>%s%s</small>\"%s\n", indent, id(n.Name), open, n.Name, mermaidEscape(kindLabel(n, parts, composite)), marks(n), end)
	}
	if g.Output != nil {
		fmt.Fprintf(b, "%s%s([\"END<br/><small>%s</small>\"])\n", indent, id(endName), mermaidEscape(g.Output.label()))
	} else {
		fmt.Fprintf(b, "%s%s([END])\n", indent, id(endName))
	}
	for _, a := range g.Arcs() {
		label := a.Label
		if a.Bound > 0 {
			label = strings.TrimSpace(label + fmt.Sprintf(" (≤%d)", a.Bound))
		}
		arrow := "-->"
		switch a.Kind {
		case "join":
			arrow = "==>"
		case "on_error":
			arrow = "-.->"
		}
		if label != "" {
			fmt.Fprintf(b, "%s%s %s|\"%s\"| %s\n", indent, id(a.From), arrow, mermaidEscape(label), id(a.To))
		} else {
			fmt.Fprintf(b, "%s%s %s %s\n", indent, id(a.From), arrow, id(a.To))
		}
	}
}

// mermaidComposite draws a composite node expanded: a subgraph of the
// node's id, so the arcs that reach the node reach the box, holding the
// child flow's graph or the node run per item.
func mermaidComposite(b *strings.Builder, n *Node, parts kind.Parts, prefix, indent string, o DrawOptions) {
	inner := prefix + n.Name + "__"
	fmt.Fprintf(b, "%ssubgraph %s [\"%s: %s%s\"]\n", indent, mermaidIDIn(prefix, n.Name), n.Name, mermaidEscape(kindLabel(n, parts, true)), marks(n))
	switch {
	case parts.Flow != nil:
		if child, ok := parts.Flow.Graph.(*Graph); ok {
			child.mermaid(b, inner, indent+"  ", o)
		}
	case parts.Nested != nil:
		nn, _ := parts.Nested.Impl.(*Node)
		if nn == nil {
			break
		}
		nparts, ncomp := partsOf(nn)
		if ncomp {
			nested := *nn
			nested.Name = "each"
			mermaidComposite(b, &nested, nparts, inner, indent+"  ", o)
		} else {
			fmt.Fprintf(b, "%s  %s[\"each item<br/><small>%s%s</small>\"]\n", indent, mermaidIDIn(inner, "each"), nn.Kind, marks(nn))
		}
	}
	fmt.Fprintf(b, "%send\n", indent)
}

// partsOf returns what a composite node is made of.
func partsOf(n *Node) (kind.Parts, bool) {
	c, ok := n.Impl.(kind.Composite)
	if !ok {
		return kind.Parts{}, false
	}
	return c.Parts(), true
}

// kindLabel names a node's kind in a drawing, with what a composite
// node runs.
func kindLabel(n *Node, parts kind.Parts, composite bool) string {
	switch {
	case composite && parts.Flow != nil:
		return n.Kind + " " + parts.Flow.Name
	case composite && parts.Nested != nil:
		return fmt.Sprintf("%s over %s, %d at once: %s", n.Kind, parts.Each, parts.MaxConcurrency, parts.Nested.Kind)
	}
	return n.Kind
}

// marks lists what a drawing says of a node besides its kind: a pause
// before or after it, a cache.
func marks(n *Node) string {
	var m []string
	if n.InterruptBefore {
		m = append(m, "pause before")
	}
	if n.InterruptAfter {
		m = append(m, "pause after")
	}
	if n.Cache != nil {
		m = append(m, "cached")
	}
	if _, asks := n.Impl.(kind.Asker); asks {
		m = append(m, "asks and waits")
	}
	if len(m) == 0 {
		return ""
	}
	return ", " + strings.Join(m, ", ")
}

// MermaidID is the id Mermaid gives a node of the graph, for drawings
// that add to it.
func MermaidID(name string) string { return mermaidID(name) }

func mermaidID(name string) string { return mermaidIDIn("", name) }

// mermaidIDIn is the id of a node of a graph drawn with prefix (inside a
// composite node).
func mermaidIDIn(prefix, name string) string {
	switch name {
	case startName, endName:
		if prefix == "" {
			return name
		}
		return "n_" + prefix + name
	}
	return "n_" + prefix + name
}

func mermaidEscape(s string) string {
	return strings.NewReplacer(`"`, "#quot;", "<", "#lt;", ">", "#gt;", "|", "#124;", "\n", " ").Replace(s)
}

// DOT renders the graph in Graphviz's DOT language, composite nodes
// collapsed.
func (g *Graph) DOT() string { return g.DOTWith(DrawOptions{}) }

// DOTWith renders the graph in Graphviz's DOT language. An expanded
// composite node is a cluster: arcs into it reach the child flow's START
// (or the node run per item), arcs out of it leave its END.
func (g *Graph) DOTWith(o DrawOptions) string {
	var b strings.Builder
	fmt.Fprintf(&b, "digraph %q {\n  rankdir=TB;\n  node [shape=box, style=rounded];\n", g.Name)
	g.dot(&b, "", "  ", o)
	b.WriteString("}\n")
	return b.String()
}

// dot writes the graph's nodes and arcs with ids prefixed, and returns
// the ids arcs use to enter and leave it.
func (g *Graph) dot(b *strings.Builder, prefix, indent string, o DrawOptions) (entry, exit string) {
	in, out := map[string]string{}, map[string]string{}
	fmt.Fprintf(b, "%s%q [label=%q, shape=circle];\n", indent, prefix+startName, startName)
	for _, n := range g.Nodes {
		parts, composite := partsOf(n)
		id := prefix + n.Name
		if composite && o.Expand {
			in[n.Name], out[n.Name] = dotComposite(b, n, parts, prefix, indent, o)
			continue
		}
		shape := ""
		switch {
		case composite && parts.Flow != nil:
			shape = ", shape=component"
		case composite && parts.Nested != nil:
			shape = ", shape=box3d"
		default:
			if _, asks := n.Impl.(kind.Asker); asks {
				shape = ", shape=hexagon"
			}
		}
		fmt.Fprintf(b, "%s%q [label=%q%s];\n", indent, id, n.Name+"\n("+kindLabel(n, parts, composite)+marks(n)+")", shape)
	}
	endLabel := endName
	if g.Output != nil {
		endLabel += "\n(" + g.Output.label() + ")"
	}
	fmt.Fprintf(b, "%s%q [label=%q, shape=doublecircle];\n", indent, prefix+endName, endLabel)
	ref := func(m map[string]string, name string) string {
		if id, ok := m[name]; ok {
			return id
		}
		return prefix + name
	}
	for _, a := range g.Arcs() {
		var attrs []string
		label := a.Label
		if a.Bound > 0 {
			label = strings.TrimSpace(label + fmt.Sprintf(" (≤%d)", a.Bound))
		}
		if label != "" {
			attrs = append(attrs, fmt.Sprintf("label=%q", label))
		}
		switch a.Kind {
		case "join":
			attrs = append(attrs, "style=bold")
		case "on_error":
			attrs = append(attrs, "style=dashed")
		}
		fmt.Fprintf(b, "%s%q -> %q", indent, ref(out, a.From), ref(in, a.To))
		if len(attrs) > 0 {
			fmt.Fprintf(b, " [%s]", strings.Join(attrs, ", "))
		}
		b.WriteString(";\n")
	}
	return prefix + startName, prefix + endName
}

// dotComposite draws a composite node as a cluster and returns where arcs
// enter and leave it.
func dotComposite(b *strings.Builder, n *Node, parts kind.Parts, prefix, indent string, o DrawOptions) (entry, exit string) {
	inner := prefix + n.Name + "/"
	fmt.Fprintf(b, "%ssubgraph %q {\n%s  label=%q;\n%s  style=dashed;\n", indent, "cluster_"+prefix+n.Name, indent, n.Name+": "+kindLabel(n, parts, true)+marks(n), indent)
	entry, exit = inner+"each", inner+"each"
	switch {
	case parts.Flow != nil:
		if child, ok := parts.Flow.Graph.(*Graph); ok {
			entry, exit = child.dot(b, inner, indent+"  ", o)
		}
	case parts.Nested != nil:
		nn, _ := parts.Nested.Impl.(*Node)
		if nn == nil {
			break
		}
		if nparts, ncomp := partsOf(nn); ncomp {
			nested := *nn
			nested.Name = "each"
			entry, exit = dotComposite(b, &nested, nparts, inner, indent+"  ", o)
		} else {
			fmt.Fprintf(b, "%s  %q [label=%q];\n", indent, inner+"each", "each item\n("+nn.Kind+marks(nn)+")")
		}
	}
	fmt.Fprintf(b, "%s}\n", indent)
	return entry, exit
}

// JSON renders nodes and arcs as a JSON document; a subflow node holds
// the child flow's document, a map node what it runs per item.
func (g *Graph) JSON() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	err := enc.Encode(g.document())
	return bytes.TrimRight(buf.Bytes(), "\n"), err
}

// graphDoc is the JSON document of a graph.
type graphDoc struct {
	Name  string    `json:"name"`
	Path  string    `json:"path,omitempty"`
	Nodes []nodeDoc `json:"nodes"`
	Arcs  []Arc     `json:"arcs"`
	// Output is the flow's declared result, when it has one.
	Output *outputDoc `json:"output,omitempty"`
}

type nodeDoc struct {
	Name        string   `json:"name"`
	Kind        string   `json:"kind"`
	Description string   `json:"description,omitempty"`
	Writes      []string `json:"writes,omitempty"`
	Line        int      `json:"line"`
	// Asks: the node pauses the run for an answer (kind.Asker)
	Asks            bool `json:"asks,omitempty"`
	InterruptBefore bool `json:"interrupt_before,omitempty"`
	InterruptAfter  bool `json:"interrupt_after,omitempty"`
	Cached          bool `json:"cached,omitempty"`
	// Subflow is the child flow a subflow node runs; Map what a map node
	// runs per item.
	Subflow *graphDoc `json:"subflow,omitempty"`
	Map     *mapDoc   `json:"map,omitempty"`
}

type mapDoc struct {
	Items          string   `json:"items"`
	MaxConcurrency int      `json:"max_concurrency"`
	Node           *nodeDoc `json:"node"`
}

func (g *Graph) document() *graphDoc {
	doc := &graphDoc{Name: g.Name, Arcs: g.Arcs()}
	if g.Output != nil {
		doc.Output = &outputDoc{Reads: g.Output.Reads, Line: g.Output.Pos.Line}
	}
	for _, n := range g.Nodes {
		doc.Nodes = append(doc.Nodes, nodeDocOf(n))
	}
	return doc
}

func nodeDocOf(n *Node) nodeDoc {
	_, asks := n.Impl.(kind.Asker)
	d := nodeDoc{Name: n.Name, Kind: n.Kind, Description: n.Description, Writes: sortedKeys(n.Writes), Line: n.Pos.Line,
		Asks: asks, InterruptBefore: n.InterruptBefore, InterruptAfter: n.InterruptAfter, Cached: n.Cache != nil}
	parts, composite := partsOf(n)
	switch {
	case composite && parts.Flow != nil:
		if child, ok := parts.Flow.Graph.(*Graph); ok {
			d.Subflow = child.document()
			d.Subflow.Path = parts.Flow.Path
		}
	case composite && parts.Nested != nil:
		d.Map = &mapDoc{Items: parts.Each, MaxConcurrency: parts.MaxConcurrency}
		if nn, ok := parts.Nested.Impl.(*Node); ok {
			nd := nodeDocOf(nn)
			nd.Name, nd.Line = "each", nn.Pos.Line
			d.Map.Node = &nd
		}
	}
	return d
}
