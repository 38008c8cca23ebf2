package flow

import (
	"fmt"

	"gopkg.in/yaml.v3"

	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/kind"
)

func (c *compiler) edges() {
	for _, pr := range c.pendingRoutes {
		target, ok := c.g.nodes[pr.at.Value]
		if !ok {
			c.dl.Errorf(CodeUnknownTarget, c.pos(pr.at), "nodes."+pr.n.Name+".on_error.route", "on_error routes to %q, which is not a node", pr.at.Value).
				Suggestion = diag.Suggest(pr.at.Value, c.nodeNames())
			continue
		}
		pr.n.OnError.Route = target
	}
	en := c.get("edges")
	if en == nil || en.Kind != yaml.SequenceNode {
		return
	}
	for i, e := range en.Content {
		if e.Kind != yaml.MappingNode {
			continue
		}
		c.edge(i, e)
	}
}

func (c *compiler) edge(i int, e *yaml.Node) {
	path := fmt.Sprintf("edges[%d]", i)
	edge := &Edge{Index: i, Pos: c.pos(e), Join: -1}
	fromN, toN, branchN, routeN := mapGet(e, "from"), mapGet(e, "to"), mapGet(e, "branch"), mapGet(e, "route")
	kinds := 0
	for _, n := range []*yaml.Node{toN, branchN, routeN} {
		if n != nil {
			kinds++
		}
	}
	if kinds != 1 {
		msg := "edge has none of to, branch or route"
		if kinds > 1 {
			msg = "edge mixes to, branch and route; use exactly one"
		}
		c.dl.Errorf(CodeEdgeShape, c.pos(e), path, "%s", msg)
		c.assumeBest(e)
		return
	}
	if b := mapGet(e, "bound"); b != nil {
		_ = b.Decode(&edge.Bound)
	}
	if choices := mapGet(e, "choices"); choices != nil && routeN == nil {
		c.dl.Errorf(CodeEdgeShape, c.pos(mapKey(e, "choices")), path, "choices belong to a route edge")
	}
	// sources
	entry := false
	ok := true
	switch {
	case fromN == nil:
		return // the format check reported it
	case fromN.Kind == yaml.ScalarNode:
		switch fromN.Value {
		case startName:
			entry = true
		case endName:
			c.dl.Errorf(CodeReserved, c.pos(fromN), path+".from", "END cannot be the source of an edge")
			ok = false
		default:
			n, found := c.g.nodes[fromN.Value]
			if !found {
				c.unknownNode(fromN, path+".from", true)
				ok = false
				break
			}
			edge.From = []*Node{n}
		}
	case fromN.Kind == yaml.SequenceNode:
		for _, s := range fromN.Content {
			switch s.Value {
			case startName, endName:
				c.dl.Errorf(CodeReserved, c.pos(s), path+".from", "%s cannot be part of a join", s.Value)
				ok = false
				continue
			}
			n, found := c.g.nodes[s.Value]
			if !found {
				c.unknownNode(s, path+".from", false)
				ok = false
				continue
			}
			edge.From = append(edge.From, n)
		}
		if toN == nil {
			c.dl.Errorf(CodeEdgeShape, c.pos(fromN), path, "a join (from: a list) must use to")
			ok = false
		}
	}
	// targets; conditions read the state after the source node ran
	c.edgeReader(edge)
	defer func() { c.reader = nil }()
	switch {
	case toN != nil:
		var tok bool
		edge.To, edge.ToEnd, tok = c.targets(toN, path+".to")
		ok = ok && tok
	case branchN != nil:
		ok = c.branch(edge, branchN, path+".branch") && ok
	case routeN != nil:
		ok = c.route(edge, e, routeN, path) && ok
	}
	if !ok {
		c.assumeBest(e)
		return
	}
	if len(edge.From) > 1 {
		edge.Join = c.g.Joins
		c.g.Joins++
	}
	c.g.Edges = append(c.g.Edges, edge)
	c.edgeOf[edge] = e
	if entry {
		c.g.Entry = append(c.g.Entry, edge)
		return
	}
	for _, n := range edge.From {
		n.Out = append(n.Out, edge)
	}
}

func (c *compiler) unknownNode(n *yaml.Node, path string, allowStart bool) {
	cands := c.nodeNames()
	if allowStart {
		cands = append(cands, startName)
	}
	c.dl.Errorf(CodeUnknownTarget, c.pos(n), path, "edge source %q is not a node", n.Value).
		Suggestion = diag.Suggest(n.Value, cands)
}

// targets resolves a target or a list of targets.
func (c *compiler) targets(n *yaml.Node, path string) (nodes []*Node, toEnd, ok bool) {
	ok = true
	var items []*yaml.Node
	switch n.Kind {
	case yaml.ScalarNode:
		items = []*yaml.Node{n}
	case yaml.SequenceNode:
		items = n.Content
	}
	for _, t := range items {
		switch t.Value {
		case endName:
			toEnd = true
			continue
		case startName:
			c.dl.Errorf(CodeReserved, c.pos(t), path, "START cannot be the target of an edge")
			ok = false
			continue
		}
		node, found := c.g.nodes[t.Value]
		if !found {
			c.dl.Errorf(CodeUnknownTarget, c.pos(t), path, "edge target %q is not a node", t.Value).
				Suggestion = diag.Suggest(t.Value, append(c.nodeNames(), endName))
			ok = false
			continue
		}
		nodes = append(nodes, node)
	}
	return nodes, toEnd, ok
}

func (c *compiler) branch(edge *Edge, bn *yaml.Node, path string) bool {
	ok := true
	for j, cn := range bn.Content {
		cpath := fmt.Sprintf("%s[%d]", path, j)
		when, to, els := mapGet(cn, "when"), mapGet(cn, "to"), mapGet(cn, "else")
		cs := &Case{}
		switch {
		case els != nil && (when != nil || to != nil):
			c.dl.Errorf(CodeEdgeShape, c.pos(cn), cpath, "a branch case has either when and to, or else alone")
			ok = false
			continue
		case els != nil:
			if j != len(bn.Content)-1 {
				c.dl.Errorf(CodeEdgeShape, c.pos(mapKey(cn, "else")), cpath, "else must be the last case of a branch")
				ok = false
			}
			var tok bool
			cs.To, cs.ToEnd, tok = c.targets(els, cpath+".else")
			ok = ok && tok
		case when == nil || to == nil:
			missing := "when"
			if when != nil {
				missing = "to"
			}
			c.dl.Errorf(CodeEdgeShape, c.pos(cn), cpath, "branch case is missing %s", missing)
			ok = false
			continue
		default:
			cs.When = c.compileExpr(when, c.env, true, cpath+".when")
			ok = ok && cs.When != nil
			var tok bool
			cs.To, cs.ToEnd, tok = c.targets(to, cpath+".to")
			ok = ok && tok
		}
		edge.Cases = append(edge.Cases, cs)
	}
	return ok
}

func (c *compiler) route(edge *Edge, e, rn *yaml.Node, path string) bool {
	ok := true
	edge.Route = c.compileExpr(rn, c.env, false, path+".route")
	ok = edge.Route != nil
	choices := mapGet(e, "choices")
	if choices == nil {
		c.dl.Errorf(CodeEdgeShape, c.pos(mapKey(e, "route")), path, "a route edge needs choices: the nodes its expression may yield")
		return false
	}
	edge.Choices = map[string]*Node{}
	cands := append(c.nodeNames(), endName)
	for _, ch := range choices.Content {
		if ch.Value == endName {
			edge.Choices[endName] = nil
			continue
		}
		n, found := c.g.nodes[ch.Value]
		if !found {
			c.dl.Errorf(CodeRouteChoice, c.pos(ch), path+".choices", "route choice %q is not a node", ch.Value).
				Suggestion = diag.Suggest(ch.Value, cands)
			ok = false
			continue
		}
		edge.Choices[ch.Value] = n
	}
	if d := mapGet(e, "default"); d != nil {
		edge.HasDefault = true
		if d.Value != endName {
			n, found := c.g.nodes[d.Value]
			if !found {
				c.dl.Errorf(CodeRouteChoice, c.pos(d), path+".default", "route default %q is not a node", d.Value).
					Suggestion = diag.Suggest(d.Value, cands)
				return false
			}
			edge.Default = n
		}
	}
	return ok
}

// assumeBest records the nodes a broken edge names, so that the graph
// checks do not report what is only a consequence of the broken edge.
func (c *compiler) assumeBest(e *yaml.Node) {
	if c.assumeReached == nil {
		c.assumeReached, c.assumeEnds = map[*Node]bool{}, map[*Node]bool{}
	}
	var walk func(n *yaml.Node, into map[*Node]bool)
	walk = func(n *yaml.Node, into map[*Node]bool) {
		if n == nil {
			return
		}
		if n.Kind == yaml.ScalarNode {
			name := n.Value
			if _, ok := c.g.nodes[name]; !ok {
				// a misspelt name most likely meant its suggestion
				name = diag.Suggest(name, c.nodeNames())
			}
			if node, ok := c.g.nodes[name]; ok {
				into[node] = true
			}
		}
		for _, ch := range n.Content {
			walk(ch, into)
		}
	}
	for _, kv := range kind.Pairs(e) {
		switch kv[0].Value {
		case "from":
			walk(kv[1], c.assumeEnds)
		case "to", "branch", "choices", "default":
			walk(kv[1], c.assumeReached)
		}
	}
}

// edgeReader makes an edge's single source the reader of its conditions,
// which are evaluated once that node ran.
func (c *compiler) edgeReader(edge *Edge) {
	c.reader, c.readerRan = nil, true
	if len(edge.From) == 1 {
		c.reader = edge.From[0]
	}
}
