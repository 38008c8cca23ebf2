package flow

import (
	"slices"
	"strings"

	"github.com/trellisflow/trellis/runtime/expression"
)

// A read through a value that may be null is safe where every way to
// it passes a branch case whose condition found the value not null
// (when: "state.note != nil", or the else of a case that tested it
// null), with no node writing the field after that test.

// guardedBy reports whether every way into node n (ran: n's outgoing
// edges, read once n ran) passes such a test of path (state.x or a
// member of it).
func (c *compiler) guardedBy(path string, n *Node, ran bool) bool {
	field, ok := strings.CutPrefix(path, "state.")
	if !ok || n == nil {
		return false
	}
	field, _, _ = strings.Cut(field, ".")
	if c.guards == nil {
		c.guards = map[string]map[*Node]bool{}
	}
	g, done := c.guards[path]
	if !done {
		g = c.solveGuards(path, field)
		c.guards[path] = g
	}
	if ran && n.Writes[field] {
		return false
	}
	return g[n]
}

// incoming is one way into a node: from a node (nil: START) along an
// edge, through a case of it (-1: none).
type incoming struct {
	from *Node
	edge *Edge
	kase int
}

// solveGuards is guardedBy for every node: the largest set of nodes
// each of whose ways in either tests path not null or comes from a node
// of the set that does not write field.
func (c *compiler) solveGuards(path, field string) map[*Node]bool {
	ins := map[*Node][]incoming{}
	add := func(e *Edge) {
		from := []*Node{nil}
		if len(e.From) > 0 {
			from = e.From
		}
		for _, f := range from {
			for _, t := range e.To {
				ins[t] = append(ins[t], incoming{f, e, -1})
			}
			for i, cs := range e.Cases {
				for _, t := range cs.To {
					ins[t] = append(ins[t], incoming{f, e, i})
				}
			}
			for _, t := range e.Choices {
				if t != nil {
					ins[t] = append(ins[t], incoming{f, e, -1})
				}
			}
			if e.Default != nil {
				ins[e.Default] = append(ins[e.Default], incoming{f, e, -1})
			}
		}
	}
	for _, e := range c.g.Entry {
		add(e)
	}
	for _, n := range c.g.Nodes {
		for _, e := range n.Out {
			add(e)
		}
		if n.OnError.Route != nil {
			ins[n.OnError.Route] = append(ins[n.OnError.Route], incoming{n, nil, -1})
		}
	}
	tested := func(in incoming) bool {
		if in.edge == nil || in.kase < 0 {
			return false
		}
		conds := make([]*expression.Program, len(in.edge.Cases))
		for i, cs := range in.edge.Cases {
			conds[i] = cs.When
		}
		for _, p := range expression.NotNullAfter(conds, in.kase) {
			if p == path {
				return true
			}
		}
		return false
	}
	g := map[*Node]bool{}
	for _, n := range c.g.Nodes {
		g[n] = len(ins[n]) > 0
	}
	for changed := true; changed; {
		changed = false
		for _, n := range c.g.Nodes {
			if !g[n] {
				continue
			}
			ok := !slices.ContainsFunc(ins[n], func(in incoming) bool {
				return !tested(in) && (in.from == nil || in.from.Writes[field] || !g[in.from])
			})
			if !ok {
				g[n] = false
				changed = true
			}
		}
	}
	return g
}
