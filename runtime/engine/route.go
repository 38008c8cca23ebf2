package engine

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/trellisflow/trellis/runtime/flow"
)

// route fires the edges of the nodes that ran (or START's edges when outs
// is nil) and returns the next triggered set in declaration order. A node
// whose on_error routed elsewhere triggers that node instead of its edges.
// Conditions and routes are evaluated over the post-barrier state.
func (r *run) route(outs []outcome) ([]*flow.Node, error) {
	r.marked = r.marked[:0]
	if outs == nil {
		for _, e := range r.g.Entry {
			if err := r.fire(e, nil); err != nil {
				return nil, err
			}
		}
	}
	for i := range outs {
		n := outs[i].node
		if outs[i].route != nil {
			r.trigger(outs[i].route)
			continue
		}
		for _, e := range n.Out {
			if err := r.fire(e, n); err != nil {
				return nil, err
			}
		}
	}
	if len(r.marked) == 0 {
		return nil, nil
	}
	if len(r.marked) > 1 {
		slices.Sort(r.marked)
	}
	r.flip ^= 1
	next := r.next[r.flip][:0]
	for _, i := range r.marked {
		next = appendNode(next, r.g.Nodes[i])
		r.mark[i] = false
	}
	if cap(next) == cap(r.next[r.flip]) {
		// the same buffer: only its length changes
		r.next[r.flip] = r.next[r.flip][:len(next)]
	} else {
		r.next[r.flip] = next
	}
	return next, nil
}

// appendNode appends n to next. A loop triggers the same nodes step after
// step: when next's buffer holds n there already, no pointer is written
// (see begin).
func appendNode(next []*flow.Node, n *flow.Node) []*flow.Node {
	if len(next) < cap(next) && next[:len(next)+1][len(next)] == n {
		return next[:len(next)+1]
	}
	return append(next, n)
}

// trigger marks n for the next step.
func (r *run) trigger(n *flow.Node) {
	if !r.mark[n.Index] {
		r.mark[n.Index] = true
		r.marked = append(r.marked, n.Index)
	}
}

// fire takes one edge out of from: a join records from's arrival and fires
// once every source has arrived; a branch takes its first case that holds;
// a route takes the choice its expression names (or its default). A
// bounded edge taken more often than its bound stops the run.
func (r *run) fire(e *flow.Edge, from *flow.Node) error {
	var targets []*flow.Node
	switch {
	case e.Join >= 0:
		for i, s := range e.From {
			if s == from {
				r.joins[e.Join] |= 1 << i
			}
		}
		if r.joins[e.Join] != 1<<len(e.From)-1 {
			return nil
		}
		r.joins[e.Join] = 0
		targets = e.To
	case e.Cases != nil:
		matched := false
		for _, c := range e.Cases {
			ok := c.When == nil
			if !ok {
				var err error
				ok, err = r.machine.EvalBoolFrame(c.When, r.frame, r)
				if err != nil {
					return fmt.Errorf("branch at %s: %q: %w", e.Pos, c.When.Source(), err)
				}
			}
			if ok {
				targets, matched = c.To, true
				break
			}
		}
		if !matched {
			return fmt.Errorf("branch at %s: no case matched and there is no else", e.Pos)
		}
	case e.Route != nil:
		v, err := r.machine.EvalFrame(e.Route, r.frame, r)
		if err != nil {
			return fmt.Errorf("route at %s: %q: %w", e.Pos, e.Route.Source(), err)
		}
		name, _ := v.(string)
		n, ok := e.Choices[name]
		switch {
		case ok:
			if n != nil {
				targets = []*flow.Node{n}
			}
		case e.HasDefault:
			if e.Default != nil {
				targets = []*flow.Node{e.Default}
			}
		default:
			return fmt.Errorf("route at %s yielded %v, which is not one of its choices (%s)", e.Pos, v, strings.Join(slices.Sorted(maps.Keys(e.Choices)), ", "))
		}
	default:
		targets = e.To
	}
	if len(targets) == 0 {
		return nil
	}
	if e.Bound > 0 && e.Reenters(targets) {
		// a bound counts the traversals that re-enter the loop, not the
		// one that leaves it
		r.bounds[e.Index]++
		if r.bounds[e.Index] > e.Bound {
			pos := e.Pos
			return &LimitError{Limit: e.Bound, Loop: edgeLoopNames(r.g, e, targets), Edge: &pos}
		}
	}
	for _, n := range targets {
		r.trigger(n)
	}
	return nil
}

func (r *run) limitError(triggered []*flow.Node) error {
	for _, n := range triggered {
		if loop := loopNames(r.g, n); loop != nil {
			return &LimitError{Limit: r.limit, Loop: loop}
		}
	}
	return &LimitError{Limit: r.limit}
}

// edgeLoopNames names the loop a bounded edge re-entered.
func edgeLoopNames(g *flow.Graph, e *flow.Edge, targets []*flow.Node) []string {
	for _, t := range targets {
		if loop := g.EdgeLoop(e, t); loop != nil {
			names := make([]string, len(loop))
			for i, m := range loop {
				names[i] = m.Name
			}
			return names
		}
	}
	return nil
}

func loopNames(g *flow.Graph, n *flow.Node) []string {
	loop := g.Loop(n)
	if loop == nil {
		return nil
	}
	names := make([]string, len(loop))
	for i, m := range loop {
		names[i] = m.Name
	}
	return names
}
