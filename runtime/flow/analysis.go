package flow

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/trellisflow/trellis/runtime/diag"
)

// analyse runs the graph-wide passes: entry, reachability, paths to END,
// unbounded cycles, and an abstract execution that finds the nodes able to
// run in one superstep (for write conflicts) and joins that can starve.
func (c *compiler) analyse() {
	g := c.g
	if len(g.Entry) == 0 && c.root.Get("edges").Exists() && !c.brokenEntry {
		c.dl.Errorf(diag.CodeEntry, c.root.KeyOf("edges").Pos(), "edges", "no edge leaves START: the flow has no entry").
			Detail = "add an edge such as {from: START, to: " + firstName(g) + "}"
	}
	// reachability from START
	reached := map[*Node]bool{}
	start := slices.Collect(maps.Keys(c.assumeReached))
	walkFrom(append(start, entryTargets(g)...), func(n *Node) bool {
		reached[n] = true
		return true
	})
	if len(g.Entry) > 0 {
		for _, n := range g.Nodes {
			if !reached[n] {
				c.dl.Errorf(diag.CodeUnreachable, n.Pos, "nodes."+n.Name, "node %q is unreachable: no edge path from START leads to it", n.Name)
			}
		}
	}
	// paths to END
	ends := map[*Node]bool{}
	for n := range c.assumeEnds {
		ends[n] = true
	}
	for changed := true; changed; {
		changed = false
		for _, n := range g.Nodes {
			if ends[n] {
				continue
			}
			if reachesEnd(n, ends) {
				ends[n] = true
				changed = true
			}
		}
	}
	for _, n := range g.Nodes {
		if ends[n] || !reached[n] {
			continue
		}
		if len(n.Out) == 0 && n.OnError.Route == nil {
			c.dl.Errorf(diag.CodeNoPathToEnd, n.Pos, "nodes."+n.Name, "node %q has no outgoing edge, so runs through it never reach END", n.Name)
		} else {
			c.dl.Errorf(diag.CodeNoPathToEnd, n.Pos, "nodes."+n.Name, "node %q has no path to END", n.Name)
		}
	}
	c.cycles()
	c.explore()
}

// entryTargets lists the nodes START's edges can trigger.
func entryTargets(g *Graph) []*Node {
	var out []*Node
	for _, e := range g.Entry {
		out = append(out, e.Targets()...)
	}
	return out
}

// walkFrom visits every node reachable from start once, breadth first;
// visit says whether to go on to a node's successors.
func walkFrom(start []*Node, visit func(*Node) bool) {
	seen := map[*Node]bool{}
	queue := start
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		if seen[n] {
			continue
		}
		seen[n] = true
		if visit(n) {
			queue = append(queue, successors(n)...)
		}
	}
}

func firstName(g *Graph) string {
	if len(g.Nodes) > 0 {
		return g.Nodes[0].Name
	}
	return "a_node"
}

func reachesEnd(n *Node, ends map[*Node]bool) bool {
	for _, e := range n.Out {
		if e.ToEnd {
			return true
		}
		for _, cs := range e.Cases {
			if cs.ToEnd {
				return true
			}
		}
		if _, ok := e.Choices[endName]; ok {
			return true
		}
		if e.HasDefault && e.Default == nil {
			return true
		}
		for _, t := range e.Targets() {
			if ends[t] {
				return true
			}
		}
	}
	return n.OnError.Route != nil && ends[n.OnError.Route]
}

// cycles finds the strongly connected components of the node graph. Every
// one that still has a cycle once bounded edges are removed is reported.
func (c *compiler) cycles() {
	g := c.g
	all := tarjan(g.Nodes, func(n *Node) []*Node { return successors(n) })
	loopOf := map[*Node]int{}
	for _, scc := range all {
		if hasCycle(scc, successors) {
			for _, n := range scc {
				loopOf[n] = len(g.loops) + 1
			}
			g.loops = append(g.loops, scc)
		}
	}
	// a bounded edge counts the traversals that re-enter a loop through
	// its source
	for _, e := range g.Edges {
		if e.Bound == 0 {
			continue
		}
		for _, t := range e.Targets() {
			for _, src := range e.From {
				if l := loopOf[src]; l > 0 && loopOf[t] == l {
					if e.loopTargets == nil {
						e.loopTargets = map[*Node]bool{}
					}
					e.loopTargets[t] = true
				}
			}
		}
	}
	unbounded := func(n *Node) []*Node {
		var out []*Node
		for _, e := range n.Out {
			if e.Bound == 0 {
				out = append(out, e.Targets()...)
			}
		}
		if n.OnError.Route != nil {
			out = append(out, n.OnError.Route)
		}
		return out
	}
	for _, scc := range tarjan(g.Nodes, unbounded) {
		if !hasCycle(scc, unbounded) {
			continue
		}
		first := scc[0]
		for _, n := range scc {
			if n.Index < first.Index {
				first = n
			}
		}
		loop := cycleThroughFn(first, scc, unbounded)
		// report at the edge that closes the loop back to its first node
		pos := first.Pos
		last := loop[len(loop)-2]
		for _, e := range last.Out {
			if e.Bound == 0 && slices.Contains(e.Targets(), first) {
				pos = e.Pos
				break
			}
		}
		c.dl.Errorf(diag.CodeUnboundedCycle, pos, "edges", "cycle %s has no bounded edge", loopString(loop)).
			Detail = "add bound: N to one of its edges to cap how often a run may go round"
	}
}

func loopString(loop []*Node) string {
	names := make([]string, len(loop))
	for i, n := range loop {
		names[i] = n.Name
	}
	return strings.Join(names, " → ")
}

func hasCycle(scc []*Node, next func(*Node) []*Node) bool {
	if len(scc) > 1 {
		return true
	}
	return slices.Contains(next(scc[0]), scc[0])
}

func cycleThroughFn(n *Node, scc []*Node, next func(*Node) []*Node) []*Node {
	in := map[*Node]bool{}
	for _, m := range scc {
		in[m] = true
	}
	prev := map[*Node]*Node{}
	queue := []*Node{n}
	seen := map[*Node]bool{n: true}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		for _, nx := range next(cur) {
			if !in[nx] {
				continue
			}
			if nx == n {
				var rev []*Node
				for x := cur; x != n; x = prev[x] {
					rev = append(rev, x)
				}
				path := []*Node{n}
				for i := len(rev) - 1; i >= 0; i-- {
					path = append(path, rev[i])
				}
				return append(path, n)
			}
			if !seen[nx] {
				seen[nx] = true
				prev[nx] = cur
				queue = append(queue, nx)
			}
		}
	}
	return []*Node{n, n}
}

// tarjan returns the strongly connected components in a deterministic order.
func tarjan(nodes []*Node, next func(*Node) []*Node) [][]*Node {
	index := map[*Node]int{}
	low := map[*Node]int{}
	on := map[*Node]bool{}
	var stack []*Node
	var out [][]*Node
	i := 0
	var visit func(n *Node)
	visit = func(n *Node) {
		index[n], low[n] = i, i
		i++
		stack = append(stack, n)
		on[n] = true
		for _, m := range next(n) {
			if _, seen := index[m]; !seen {
				visit(m)
				low[n] = min(low[n], low[m])
			} else if on[m] {
				low[n] = min(low[n], index[m])
			}
		}
		if low[n] == index[n] {
			var scc []*Node
			for {
				m := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				on[m] = false
				scc = append(scc, m)
				if m == n {
					break
				}
			}
			slices.SortFunc(scc, func(a, b *Node) int { return a.Index - b.Index })
			out = append(out, scc)
		}
	}
	for _, n := range nodes {
		if _, seen := index[n]; !seen {
			visit(n)
		}
	}
	return out
}

func names(ns []*Node, end bool) string {
	var s []string
	for _, n := range ns {
		s = append(s, n.Name)
	}
	if end {
		s = append(s, endName)
	}
	return strings.Join(s, ", ")
}

func mapsKeys(m map[int]uint64) func(func(int) bool) {
	return func(yield func(int) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// nodeOutcomes combines the options of every edge leaving n.
func nodeOutcomes(edges []*Edge, n *Node) []emission {
	var perEdge [][]emission
	for _, e := range edges {
		perEdge = append(perEdge, edgeOptions(e, n))
	}
	var out []emission
	for _, combo := range product(perEdge) {
		var em emission
		for _, x := range combo {
			em.targets = append(em.targets, x.targets...)
			em.arrivals = append(em.arrivals, x.arrivals...)
		}
		out = append(out, em)
	}
	return out
}

// edgeOptions lists the alternative emissions of one edge taken from n.
func edgeOptions(e *Edge, n *Node) []emission {
	idx := func(ns []*Node) []int {
		out := make([]int, len(ns))
		for i, x := range ns {
			out[i] = x.Index
		}
		return out
	}
	switch {
	case e.Join >= 0:
		return []emission{{arrivals: [][2]int{{e.Join, n.Index}}}}
	case e.Cases != nil:
		var opts []emission
		hasElse := false
		for _, cs := range e.Cases {
			opts = append(opts, emission{targets: idx(cs.To)})
			hasElse = hasElse || cs.When == nil
		}
		if !hasElse {
			opts = append(opts, emission{})
		}
		return opts
	case e.Route != nil:
		var opts []emission
		for _, name := range sortedKeys(e.Choices) {
			if t := e.Choices[name]; t != nil {
				opts = append(opts, emission{targets: []int{t.Index}})
			} else {
				opts = append(opts, emission{})
			}
		}
		if e.Default != nil {
			opts = append(opts, emission{targets: []int{e.Default.Index}})
		}
		return opts
	}
	return []emission{{targets: idx(e.To)}}
}

// product is the cartesian product of option lists.
func product(lists [][]emission) [][]emission {
	out := [][]emission{{}}
	for _, l := range lists {
		if len(l) == 0 {
			continue
		}
		var next [][]emission
		for _, prefix := range out {
			for _, x := range l {
				next = append(next, append(slices.Clone(prefix), x))
			}
		}
		out = next
		if len(out) > maxAbstractStates {
			return out[:maxAbstractStates]
		}
	}
	return out
}

// conflicts reports replace fields written by two nodes that can share a
// superstep.
func (c *compiler) conflicts(coRun map[[2]int]bool) {
	g := c.g
	pairs := slices.SortedFunc(mapKeys2(coRun), func(a, b [2]int) int {
		if a[0] != b[0] {
			return a[0] - b[0]
		}
		return a[1] - b[1]
	})
	for _, p := range pairs {
		a, b := g.Nodes[min(p[0], p[1])], g.Nodes[max(p[0], p[1])]
		for _, f := range g.Fields {
			if f.Reducer.Concurrent || !a.Writes[f.Name] || !b.Writes[f.Name] {
				continue
			}
			pos := c.writes[b.Name][f.Name]
			c.dl.Errorf(diag.CodeWriteConflict, pos, "nodes."+b.Name, "nodes %q and %q can run in the same superstep and both write %q, whose reducer is replace", a.Name, b.Name, f.Name).
				Detail = fmt.Sprintf("declare a reducer for %q under state.reducers, or write it from one node only (%s writes it at %s)", f.Name, a.Name, c.writes[a.Name][f.Name])
		}
	}
}

func mapKeys2(m map[[2]int]bool) func(func([2]int) bool) {
	return func(yield func([2]int) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
