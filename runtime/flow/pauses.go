package flow

import (
	"fmt"

	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/kind"
)

// PausePoint is a place where a run of a flow may pause to wait for a
// person, in the flow itself or anywhere below it: in the node a map runs
// per item, in a subflow at any depth.
type PausePoint struct {
	// Path names it: the names of the nodes from the flow down, joined by
	// /, a map's items as NODE[*] (review/approve, claims[*]/approve).
	Path string
	// Why says how it pauses: "asks" (the node asks a question),
	// "approval" (a tool call it makes may wait for a person's approval),
	// "interrupt_before" or "interrupt_after".
	Why string
	// Node is the flow's own node it is under (or at).
	Node *Node
}

type pausePointsKey struct{}

// PausePoints lists where a run of g may pause, in node order: what a
// caller that cannot wait for a person (a schedule, a flow marked
// interactive: false that runs g) is told of.
func (g *Graph) PausePoints() []PausePoint {
	return g.Memo(pausePointsKey{}, func(g *Graph) any {
		var out []PausePoint
		for _, n := range g.Nodes {
			for _, p := range nodePausePoints(n, n.Name, 0) {
				p.Node = n
				out = append(out, p)
			}
		}
		return out
	}).([]PausePoint)
}

// nodePausePoints lists where node n, at path, may pause a run.
func nodePausePoints(n *Node, path string, depth int) []PausePoint {
	var out []PausePoint
	if n.InterruptBefore {
		out = append(out, PausePoint{Path: path, Why: "interrupt_before"})
	}
	if _, asks := n.Impl.(kind.Asker); asks {
		out = append(out, PausePoint{Path: path, Why: "asks"})
	}
	if _, approves := n.Impl.(kind.Interrupter); approves {
		out = append(out, PausePoint{Path: path, Why: "approval"})
	}
	if n.InterruptAfter {
		out = append(out, PausePoint{Path: path, Why: "interrupt_after"})
	}
	c, ok := n.Impl.(kind.Composite)
	if !ok || depth > 64 {
		return out
	}
	parts := c.Parts()
	if parts.Flow != nil {
		if g, ok := parts.Flow.Graph.(*Graph); ok {
			for _, p := range g.PausePoints() {
				out = append(out, PausePoint{Path: path + "/" + p.Path, Why: p.Why})
			}
		}
	}
	if parts.Nested != nil {
		if nn, ok := parts.Nested.Impl.(*Node); ok {
			out = append(out, nodePausePoints(nn, path+"[*]", depth+1)...)
		}
	}
	return out
}

// interactive reads the flow's interactive key: false declares that no
// person answers its runs, so each place a run may pause is a warning
// (C006) at the node it is under.
func (c *compiler) interactive(top config.Settings) {
	c.g.Interactive = true
	if b, ok := top.Bool("interactive"); ok && !b {
		c.g.Interactive = false
	}
	if c.g.Interactive {
		return
	}
	for _, p := range c.g.PausePoints() {
		how := map[string]string{"asks": "a node that asks a question", "approval": "a tool call that waits for approval", "interrupt_before": "interrupt_before", "interrupt_after": "interrupt_after"}[p.Why]
		d := c.dl.Errorf(diag.CodeNotInteractive, p.Node.Pos, "nodes."+p.Node.Name,
			"flow %s is marked interactive: false, but its runs may pause at %s (%s), where nobody would answer", c.g.Name, p.Path, how)
		d.Severity = diag.Warning
		d.Detail = fmt.Sprintf("interactive: false at line %d", top.Value("interactive").Pos().Line)
	}
}
