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
			for _, name := range sortedKeys(e.Choices) {
				add([]string{name}, "route", fmt.Sprintf("%s == %q", e.Route.Source(), name))
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

// Mermaid renders the graph as a Mermaid flowchart.
func (g *Graph) Mermaid() string {
	var b strings.Builder
	b.WriteString("flowchart TD\n")
	fmt.Fprintf(&b, "  %s([START])\n", startName)
	for _, n := range g.Nodes {
		open, end := "[", "]"
		if _, asks := n.Impl.(kind.Asker); asks {
			open, end = "{{", "}}" // a node that waits for a person's answer
		}
		fmt.Fprintf(&b, "  %s%s\"%s<br/><small>%s%s</small>\"%s\n", mermaidID(n.Name), open, n.Name, n.Kind, marks(n), end)
	}
	fmt.Fprintf(&b, "  %s([END])\n", endName)
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
			fmt.Fprintf(&b, "  %s %s|\"%s\"| %s\n", mermaidID(a.From), arrow, mermaidEscape(label), mermaidID(a.To))
		} else {
			fmt.Fprintf(&b, "  %s %s %s\n", mermaidID(a.From), arrow, mermaidID(a.To))
		}
	}
	return b.String()
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

func mermaidID(name string) string {
	switch name {
	case startName, endName:
		return name
	}
	return "n_" + name
}

func mermaidEscape(s string) string {
	return strings.NewReplacer(`"`, "#quot;", "<", "#lt;", ">", "#gt;", "|", "#124;", "\n", " ").Replace(s)
}

// DOT renders the graph in Graphviz's DOT language.
func (g *Graph) DOT() string {
	var b strings.Builder
	fmt.Fprintf(&b, "digraph %q {\n  rankdir=TB;\n  node [shape=box, style=rounded];\n", g.Name)
	fmt.Fprintf(&b, "  %q [shape=circle];\n", startName)
	for _, n := range g.Nodes {
		shape := ""
		if _, asks := n.Impl.(kind.Asker); asks {
			shape = ", shape=hexagon"
		}
		fmt.Fprintf(&b, "  %q [label=%q%s];\n", n.Name, n.Name+"\n("+n.Kind+marks(n)+")", shape)
	}
	fmt.Fprintf(&b, "  %q [shape=doublecircle];\n", endName)
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
		fmt.Fprintf(&b, "  %q -> %q", a.From, a.To)
		if len(attrs) > 0 {
			fmt.Fprintf(&b, " [%s]", strings.Join(attrs, ", "))
		}
		b.WriteString(";\n")
	}
	b.WriteString("}\n")
	return b.String()
}

// JSON renders nodes and arcs as a JSON document.
func (g *Graph) JSON() ([]byte, error) {
	type node struct {
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
	}
	doc := struct {
		Name  string `json:"name"`
		Nodes []node `json:"nodes"`
		Arcs  []Arc  `json:"arcs"`
	}{Name: g.Name, Arcs: g.Arcs()}
	for _, n := range g.Nodes {
		_, asks := n.Impl.(kind.Asker)
		doc.Nodes = append(doc.Nodes, node{Name: n.Name, Kind: n.Kind, Description: n.Description, Writes: sortedKeys(n.Writes), Line: n.Pos.Line,
			Asks: asks, InterruptBefore: n.InterruptBefore, InterruptAfter: n.InterruptAfter, Cached: n.Cache != nil})
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	err := enc.Encode(doc)
	return bytes.TrimRight(buf.Bytes(), "\n"), err
}
