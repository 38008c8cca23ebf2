package flow

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/expression"
	"github.com/trellisflow/trellis/runtime/schema"
)

// edges compiles the edges, after the nodes (and their error routes).
func (c *compiler) edges(en config.Value) {
	for _, pr := range c.pendingRoutes {
		target, ok := c.g.nodes[pr.at.Text()]
		if !ok {
			c.dl.Errorf(diag.CodeUnknownTarget, pr.at.Pos(), "nodes."+pr.n.Name+".on_error.route", "on_error routes to %q, which is not a node", pr.at.Text()).
				Suggestion = diag.Suggest(pr.at.Text(), c.nodeNames())
			continue
		}
		pr.n.OnError.Route = target
	}
	for i, e := range en.Items() {
		if !e.IsMapping() {
			continue
		}
		c.edge(i, config.NewSettings(e, definitions["edge"].Fields))
	}
}

func (c *compiler) edge(i int, s config.Settings) {
	e := s.Block()
	path := fmt.Sprintf("edges[%d]", i)
	edge := &Edge{Index: i, Pos: e.Pos(), Join: -1}
	fromN, toN, branchN, routeN := s.Value("from"), s.Value("to"), s.Value("branch"), s.Value("route")
	kinds := 0
	for _, n := range []config.Value{toN, branchN, routeN} {
		if n.Exists() {
			kinds++
		}
	}
	if kinds != 1 {
		msg := "edge has none of to, branch or route"
		if kinds > 1 {
			msg = "edge mixes to, branch and route; use exactly one"
		}
		c.dl.Errorf(diag.CodeEdgeShape, e.Pos(), path, "%s", msg)
		c.assumeBest(e)
		return
	}
	edge.Bound, _ = s.Int("bound")
	if s.Has("choices") && !routeN.Exists() {
		c.dl.Errorf(diag.CodeEdgeShape, s.Key("choices").Pos(), path, "choices belong to a route edge")
	}
	// sources
	entry := false
	ok := true
	switch {
	case !fromN.Exists():
		return // the format check reported it
	case fromN.IsScalar():
		switch fromN.Text() {
		case startName:
			entry = true
		case endName:
			c.dl.Errorf(diag.CodeReserved, fromN.Pos(), path+".from", "END cannot be the source of an edge")
			ok = false
		default:
			n, found := c.g.nodes[fromN.Text()]
			if !found {
				c.unknownNode(fromN, path+".from", true)
				ok = false
				break
			}
			edge.From = []*Node{n}
		}
	case fromN.IsSequence():
		for _, s := range fromN.Items() {
			switch s.Text() {
			case startName, endName:
				c.dl.Errorf(diag.CodeReserved, s.Pos(), path+".from", "%s cannot be part of a join", s.Text())
				ok = false
				continue
			}
			n, found := c.g.nodes[s.Text()]
			if !found {
				c.unknownNode(s, path+".from", false)
				ok = false
				continue
			}
			edge.From = append(edge.From, n)
		}
		if !toN.Exists() {
			c.dl.Errorf(diag.CodeEdgeShape, fromN.Pos(), path, "a join (from: a list) must use to")
			ok = false
		}
	}
	// targets; conditions read the state after the source node ran
	c.edgeReader(edge)
	defer func() { c.reader = nil }()
	switch {
	case toN.Exists():
		var tok bool
		edge.To, edge.ToEnd, tok = c.targets(toN, path+".to")
		ok = ok && tok
	case branchN.Exists():
		ok = c.branch(edge, branchN, s.Key("branch").Pos(), path+".branch") && ok
	case routeN.Exists():
		ok = c.route(edge, s, routeN, path) && ok
	}
	if !ok {
		c.assumeBest(e)
		// an entry that did not compile is still an entry: no G005 too
		c.brokenEntry = c.brokenEntry || entry
		return
	}
	if len(edge.From) > 1 {
		edge.Join = c.g.Joins
		c.g.Joins++
	}
	c.g.Edges = append(c.g.Edges, edge)
	if entry {
		c.g.Entry = append(c.g.Entry, edge)
		return
	}
	for _, n := range edge.From {
		n.Out = append(n.Out, edge)
	}
}

func (c *compiler) unknownNode(n config.Value, path string, allowStart bool) {
	cands := c.nodeNames()
	if allowStart {
		cands = append(cands, startName)
	}
	c.dl.Errorf(diag.CodeUnknownTarget, n.Pos(), path, "edge source %q is not a node", n.Text()).
		Suggestion = diag.Suggest(n.Text(), cands)
}

// targets resolves a target or a list of targets.
func (c *compiler) targets(n config.Value, path string) (nodes []*Node, toEnd, ok bool) {
	ok = true
	items := n.Items()
	if n.IsScalar() {
		items = []config.Value{n}
	}
	for _, t := range items {
		switch t.Text() {
		case endName:
			toEnd = true
			continue
		case startName:
			c.dl.Errorf(diag.CodeReserved, t.Pos(), path, "START cannot be the target of an edge")
			ok = false
			continue
		}
		node, found := c.g.nodes[t.Text()]
		if !found {
			c.dl.Errorf(diag.CodeUnknownTarget, t.Pos(), path, "edge target %q is not a node", t.Text()).
				Suggestion = diag.Suggest(t.Text(), append(c.nodeNames(), endName))
			ok = false
			continue
		}
		nodes = append(nodes, node)
	}
	return nodes, toEnd, ok
}

func (c *compiler) branch(edge *Edge, bn config.Value, at diag.Pos, path string) bool {
	ok := true
	cases := bn.Items()
	for j, cn := range cases {
		cpath := fmt.Sprintf("%s[%d]", path, j)
		when, to, els := cn.Get("when"), cn.Get("to"), cn.Get("else")
		cs := &Case{}
		if b, err := cn.Get("bound").JSON(); err == nil && edge.Bound == 0 {
			// a bound misplaced on a case (reported by the format check)
			// stands for the edge's, so the cycle is not reported too
			if n, ok := b.(int); ok && n > 0 {
				edge.Bound = n
			}
		}
		switch {
		case els.Exists() && (when.Exists() || to.Exists()):
			c.dl.Errorf(diag.CodeEdgeShape, cn.Pos(), cpath, "a branch case has either when and to, or else alone")
			ok = false
			continue
		case els.Exists():
			if j != len(cases)-1 {
				c.dl.Errorf(diag.CodeEdgeShape, cn.KeyOf("else").Pos(), cpath, "else must be the last case of a branch")
				ok = false
			}
			var tok bool
			cs.To, cs.ToEnd, tok = c.targets(els, cpath+".else")
			ok = ok && tok
		case !when.Exists() || !to.Exists():
			missing := "when"
			if when.Exists() {
				missing = "to"
			}
			c.dl.Errorf(diag.CodeEdgeShape, cn.Pos(), cpath, "branch case is missing %s", missing)
			ok = false
			continue
		default:
			cs.When = c.compileExpr(when, c.env, true)
			ok = ok && cs.When != nil
			var tok bool
			cs.To, cs.ToEnd, tok = c.targets(to, cpath+".to")
			ok = ok && tok
		}
		edge.Cases = append(edge.Cases, cs)
	}
	if ok && len(edge.Cases) > 0 && edge.Cases[len(edge.Cases)-1].When != nil {
		conds := make([]*expression.Program, len(edge.Cases))
		for i, cs := range edge.Cases {
			conds[i] = cs.When
		}
		if !expression.Complements(conds) && !expression.CoversEnum(conds, c.env) {
			c.dl.Add(diag.Diagnostic{Severity: diag.Warning, Code: diag.CodeBranchOpen, Pos: at, Path: path,
				Summary: "the cases of this branch may all be false and it has no else: the run would fail with no case matched",
				Detail:  "add a last case {else: NODE} (END to finish), or end with a condition the others leave true"})
		}
	}
	return ok
}

func (c *compiler) route(edge *Edge, s config.Settings, rn config.Value, path string) bool {
	edge.Route = c.compileExpr(rn, c.env, false)
	ok := edge.Route != nil
	choices := s.Value("choices")
	if !choices.Exists() {
		c.dl.Errorf(diag.CodeEdgeShape, s.Key("route").Pos(), path, "a route edge needs choices: the nodes its expression may yield")
		return false
	}
	edge.Choices = map[string]*Node{}
	cands := append(c.nodeNames(), endName)
	if edge.Route != nil {
		typ := edge.Route.Type()
		if t := edge.Route.ResultType(); t != nil && t.Kind() != reflect.String {
			c.dl.Errorf(diag.CodeRouteType, rn.Pos(), path+".route", "route yields %s, not a node's name (a string)", kindName(t))
			ok = false
		} else if typ.Known() && !typ.Allows("string") {
			c.dl.Errorf(diag.CodeRouteType, rn.Pos(), path+".route", "route yields %s, not a node's name (a string)", describeTypes(typ.WithoutNull()))
			ok = false
		} else if typ.MayBeNull() && !s.Value("default").Exists() {
			what := strings.TrimSpace(rn.Text())
			c.dl.Errorf(diag.CodeRouteYield, rn.Pos(), path+".route",
				"route can yield null (%s may be null), which is no choice, and the route has no default: give it a default, or write %s ?? 'a choice'", what, what)
			ok = false
		}
	}
	for _, ch := range choices.Items() {
		if ch.Text() == endName {
			edge.Choices[endName] = nil
			continue
		}
		n, found := c.g.nodes[ch.Text()]
		if !found {
			c.dl.Errorf(diag.CodeRouteChoice, ch.Pos(), path+".choices", "route choice %q is not a node", ch.Text()).
				Suggestion = diag.Suggest(ch.Text(), cands)
			ok = false
			continue
		}
		edge.Choices[ch.Text()] = n
	}
	if edge.Route != nil && len(edge.Choices) == len(choices.Items()) {
		// (with a choice that is not a node, what the route yields is
		// judged against what was meant: G010 says it)
		var names []string
		for _, ch := range choices.Items() {
			names = append(names, ch.Text())
		}
		if vals, ok := edge.Route.Enum(c.env); ok {
			c.routeEnum(edge, s, rn, path, names, vals)
		}
		lits, _ := edge.Route.Yields()
		for _, l := range lits {
			if !slices.Contains(names, l.Value) {
				c.dl.Errorf(diag.CodeRouteYield, rn.PosIn(l.Line, l.Col, l.EndCol), path+".route",
					"route can yield %q, which is not among its choices", l.Value).Suggestion = diag.Suggest(l.Value, names)
				ok = false
			}
		}
	}
	if d := s.Value("default"); d.Exists() {
		edge.HasDefault = true
		if d.Text() != endName {
			n, found := c.g.nodes[d.Text()]
			if !found {
				c.dl.Errorf(diag.CodeRouteChoice, d.Pos(), path+".default", "route default %q is not a node", d.Text()).
					Suggestion = diag.Suggest(d.Text(), cands)
				return false
			}
			edge.Default = n
		}
	}
	return ok
}

// assumeBest records the nodes a broken edge names, so that the graph
// checks do not report what is only a consequence of the broken edge.
func (c *compiler) assumeBest(e config.Value) {
	if c.assumeReached == nil {
		c.assumeReached, c.assumeEnds = map[*Node]bool{}, map[*Node]bool{}
	}
	var walk func(n config.Value, into map[*Node]bool)
	walk = func(n config.Value, into map[*Node]bool) {
		if n.IsScalar() {
			name := n.Text()
			if _, ok := c.g.nodes[name]; !ok {
				// a misspelt name most likely meant its suggestion
				name = diag.Suggest(name, c.nodeNames())
			}
			if node, ok := c.g.nodes[name]; ok {
				into[node] = true
			}
		}
		for _, ch := range n.Items() {
			walk(ch, into)
		}
		for _, en := range n.Entries() {
			walk(en.Key, into)
			walk(en.Value, into)
		}
	}
	for _, en := range e.Entries() {
		switch en.Name {
		case "from":
			walk(en.Value, c.assumeEnds)
		case "to", "branch", "choices", "default":
			walk(en.Value, c.assumeReached)
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

// describeTypes names a shape's types in words: "an integer or a boolean".
func describeTypes(s *schema.Shape) string {
	words := make([]string, len(s.Types))
	for i, t := range s.Types {
		words[i] = article(t)
	}
	return strings.Join(words, " or ")
}

// kindName says what kind of value a type holds, in the flow format's
// words.
func kindName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8,
		reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "a boolean"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "a " + t.String()
}

// routeEnum checks a route that reads an enum field against its choices:
// a value that has no choice fails the run unless there is a default; a
// choice no value leads to is never taken.
func (c *compiler) routeEnum(edge *Edge, s config.Settings, rn config.Value, path string, choices, values []string) {
	what := strings.TrimSpace(rn.Text())
	for _, v := range values {
		if !slices.Contains(choices, v) && !edge.HasDefault && !s.Value("default").Exists() {
			c.dl.Errorf(diag.CodeRouteEnum, rn.Pos(), path+".route",
				"%s can be %q, which is not among the route's choices, and the route has no default", what, v).Suggestion = diag.Suggest(v, choices)
		}
	}
	for _, ch := range s.Value("choices").Items() {
		if !slices.Contains(values, ch.Text()) {
			c.dl.Add(diag.Diagnostic{Severity: diag.Warning, Code: diag.CodeRouteEnum, Pos: ch.Pos(), Path: path + ".choices",
				Summary:    fmt.Sprintf("no value of %s is %q: the route never takes this choice", what, ch.Text()),
				Suggestion: diag.Suggest(ch.Text(), values)})
		}
	}
}
