package tmpl

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/template"
	"text/template/parse"

	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/schema"
)

// Problem is a template reading a field its data does not have or, when
// MayBeNull, reading a field of a value that may be null without a guard:
// text/template fails on that when the prompt is rendered.
type Problem struct {
	// Offset is the byte offset of the field name in the template text;
	// Len its length in runes.
	Offset, Len         int
	Message, Suggestion string
	MayBeNull           bool
	// Path is the value that may be null (state.x), with MayBeNull.
	Path string
	// Open marks a field an object does not declare but, its schema not
	// closing it, may hold: most likely a misspelling (a warning).
	Open bool
}

// Root returns the shape of a template's data: state and input, and the
// extra top-level values a node adds (its variables, an error), each with
// its shape.
func Root(state, input *schema.Shape, extra map[string]*schema.Shape) *schema.Shape {
	props := map[string]*schema.Shape{"state": state, "input": input}
	order := []string{"state", "input"}
	for _, k := range slices.Sorted(maps.Keys(extra)) {
		props[k] = extra[k]
		order = append(order, k)
	}
	return schema.Object(props, order...)
}

// Check reports every field chain in t that root does not declare, and
// every chain that reads through a value its schema allows to be null
// outside a with or if on that value. Dot follows with and range (a
// range's dot is the list's item shape); where a shape is unknown, nothing
// below it is checked.
func Check(t *template.Template, root *schema.Shape) []Problem {
	c := &checker{root: root, vars: map[string]*schema.Shape{"$": root}, guards: map[guard]int{}}
	for _, tt := range t.Templates() {
		if tt.Tree == nil || tt.Tree.Root == nil {
			continue
		}
		dot := root
		if tt.Name() != t.Name() {
			dot = nil // a defined template's dot is whatever it is given
		}
		c.list(tt.Tree.Root, dot)
	}
	return c.probs
}

type checker struct {
	root  *schema.Shape
	vars  map[string]*schema.Shape
	probs []Problem
	// guards counts the enclosing ifs that test a chain, so that reading
	// through it inside them cannot meet a null
	guards map[guard]int
}

// guard names a chain: the shape it starts from and its identifiers.
type guard struct {
	base *schema.Shape
	path string
}

func (c *checker) list(l *parse.ListNode, dot *schema.Shape) {
	if l == nil {
		return
	}
	for _, n := range l.Nodes {
		c.node(n, dot)
	}
}

func (c *checker) node(n parse.Node, dot *schema.Shape) {
	switch x := n.(type) {
	case *parse.ActionNode:
		c.pipe(x.Pipe, dot)
	case *parse.IfNode:
		c.pipe(x.Pipe, dot)
		g, ok := c.guardOf(x.Pipe, dot)
		if ok {
			c.guards[g]++
		}
		c.list(x.List, dot)
		if ok {
			c.guards[g]--
		}
		c.list(x.ElseList, dot)
	case *parse.WithNode:
		inner := c.pipe(x.Pipe, dot).NonNull() // with skips null
		c.list(x.List, inner)
		c.list(x.ElseList, dot)
	case *parse.RangeNode:
		s := c.pipe(x.Pipe, dot)
		var item *schema.Shape
		if s != nil && s.Is("array") {
			item = s.Items
		}
		if len(x.Pipe.Decl) > 0 {
			c.vars[x.Pipe.Decl[len(x.Pipe.Decl)-1].Ident[0]] = item
		}
		c.list(x.List, item)
		c.list(x.ElseList, dot)
	case *parse.TemplateNode:
		c.pipe(x.Pipe, dot)
	}
}

// pipe checks a pipeline and returns its shape when it is a single field
// reference (nil when unknown).
func (c *checker) pipe(p *parse.PipeNode, dot *schema.Shape) *schema.Shape {
	if p == nil {
		return nil
	}
	var last *schema.Shape
	for i, cmd := range p.Cmds {
		last = nil
		for _, arg := range cmd.Args {
			s := c.arg(arg, dot)
			if len(cmd.Args) == 1 && i == 0 {
				last = s
			}
		}
	}
	if len(p.Cmds) != 1 {
		last = nil
	}
	for _, d := range p.Decl {
		c.vars[d.Ident[0]] = last
	}
	return last
}

func (c *checker) arg(n parse.Node, dot *schema.Shape) *schema.Shape {
	switch x := n.(type) {
	case *parse.DotNode:
		return dot
	case *parse.FieldNode:
		return c.chain(dot, "", x.Ident, chainStart(int(x.Position()), x.Ident, false))
	case *parse.VariableNode:
		base, ok := c.vars[x.Ident[0]]
		if !ok {
			return nil
		}
		name := strings.TrimPrefix(x.Ident[0], "$")
		return c.chain(base, name, x.Ident[1:], chainStart(int(x.Position()), x.Ident, true)+len(x.Ident[0]))
	case *parse.ChainNode:
		var base *schema.Shape
		if _, ok := x.Node.(*parse.PipeNode); ok {
			base = c.pipe(x.Node.(*parse.PipeNode), dot)
		} else {
			base = c.arg(x.Node, dot)
		}
		return c.chain(base, "value", x.Field, int(x.Position())) // a chain sits at its first dot
	case *parse.PipeNode:
		return c.pipe(x, dot)
	}
	return nil
}

// guardOf returns the chain an if tests, when its pipeline is just one.
func (c *checker) guardOf(p *parse.PipeNode, dot *schema.Shape) (guard, bool) {
	if p == nil || len(p.Decl) > 0 || len(p.Cmds) != 1 || len(p.Cmds[0].Args) != 1 {
		return guard{}, false
	}
	switch x := p.Cmds[0].Args[0].(type) {
	case *parse.FieldNode:
		return guard{dot, strings.Join(x.Ident, ".")}, true
	case *parse.VariableNode:
		if base, ok := c.vars[x.Ident[0]]; ok {
			return guard{base, strings.Join(x.Ident[1:], ".")}, true
		}
	}
	return guard{}, false
}

// chain resolves .a.b.c (starting at offset, the first dot) against s.
func (c *checker) chain(s *schema.Shape, path string, idents []string, offset int) *schema.Shape {
	base := s
	for i, id := range idents {
		offset++ // the dot
		if s == nil {
			return nil
		}
		if s.Nullable() && c.guards[guard{base, strings.Join(idents[:i], ".")}] == 0 {
			what := path
			if what == "" {
				what = "dot"
			}
			c.probs = append(c.probs, Problem{Offset: offset, Len: len([]rune(id)), MayBeNull: true, Path: what,
				Message: fmt.Sprintf("%s may be null, and reading %q of null fails when the prompt is rendered; read it inside a with or an if on %s", what, id, what)})
			return nil
		}
		child, ok := s.Prop(id)
		_, declared := s.Props[id]
		if !ok || !declared && len(s.Props) > 0 {
			what := path
			if what == "" {
				what = "the template data"
			}
			pr := Problem{Offset: offset, Len: len([]rune(id)),
				Message:    fmt.Sprintf("%s has no field %q", what, id),
				Suggestion: diag.Suggest(id, s.Order)}
			if ok {
				pr.Open = true
				pr.Message = fmt.Sprintf("%s declares no field %q (its schema does not close it, so the read is allowed, and renders nothing when absent)", what, id)
			}
			c.probs = append(c.probs, pr)
			return nil
		}
		if path == "" {
			path = id
		} else {
			path += "." + id
		}
		s = child
		offset += len(id)
	}
	return s
}

// chainStart returns the offset where a chain of identifiers begins: the
// parser places a chain at its second identifier. A variable's first
// identifier ($x) has no dot before it.
func chainStart(pos int, idents []string, variable bool) int {
	if len(idents) < 2 {
		return pos
	}
	pos -= len(idents[0])
	if !variable {
		pos-- // its dot
	}
	return pos
}
