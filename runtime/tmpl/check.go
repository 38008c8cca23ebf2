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
	// Root names the top-level value a missing field's chain starts from
	// (state, input, vars, ...), when it starts from the data's root.
	Root string
	// Compare marks a comparison (eq, lt, ...) of values of kinds that
	// never compare, such as a number and a text: it fails when the
	// template renders.
	Compare bool
}

// Read is a read of a state field (.state.NAME, or $.state.NAME) that
// nothing in the template guards against the field being unset: not the
// test of an if or a with (or under one on it), not an argument of and,
// or or default. Offset and Len locate NAME.
type Read struct {
	Field       string
	Offset, Len int
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
	return Analyze(t, root).Problems
}

// Analysis is what Analyze finds in a template.
type Analysis struct {
	Problems []Problem
	// Reads are the unguarded reads of state fields, for definite
	// assignment; InputReads those of input fields, which a run must
	// then give.
	Reads      []Read
	InputReads []Read
	// Refs lists every value the template reads of its data's top-level
	// values, guarded or not: "state.x" for a field, "state" for the
	// whole value, "" for the whole data; sorted, once each.
	Refs []string
}

// Analyze is Check that also returns what the template reads.
func Analyze(t *template.Template, root *schema.Shape) Analysis {
	c := &checker{root: root, vars: map[string]*schema.Shape{"$": root}, guards: map[guard]int{}, refs: map[string]bool{}}
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
	return Analysis{Problems: c.probs, Reads: c.reads, InputReads: c.inputReads, Refs: slices.Sorted(maps.Keys(c.refs))}
}

type checker struct {
	root  *schema.Shape
	vars  map[string]*schema.Shape
	probs []Problem
	// guards counts the enclosing ifs that test a chain, so that reading
	// through it inside them cannot meet a null
	guards map[guard]int
	reads  []Read
	// inputReads are the unguarded reads of input fields
	inputReads []Read
	// refs collects what the template reads (see Analysis.Refs).
	refs map[string]bool
	// tested is set while the arguments being checked are only tested
	// for truth or replaced when empty (if, with, and, or, default):
	// reading an unset field there renders nothing and fails nothing.
	tested bool
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
		c.testedPipe(x.Pipe, dot)
		gs := c.guardsOf(x.Pipe, dot)
		for _, g := range gs {
			c.guards[g]++
		}
		c.list(x.List, dot)
		for _, g := range gs {
			c.guards[g]--
		}
		c.list(x.ElseList, dot)
	case *parse.WithNode:
		inner := c.testedPipe(x.Pipe, dot).NonNull() // with skips null
		gs := c.guardsOf(x.Pipe, dot)
		for _, g := range gs {
			c.guards[g]++
		}
		c.list(x.List, inner)
		for _, g := range gs {
			c.guards[g]--
		}
		c.list(x.ElseList, dot)
	case *parse.RangeNode:
		s := c.testedPipe(x.Pipe, dot) // a range over nothing runs no round
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

// testedPipe checks the pipeline of an if, a with or a range, which only
// tests its value (or runs no round on nothing): a single field read
// there is not a read of an unset value.
func (c *checker) testedPipe(p *parse.PipeNode, dot *schema.Shape) *schema.Shape {
	if p != nil && len(p.Cmds) == 1 && len(p.Cmds[0].Args) == 1 {
		was := c.tested
		c.tested = true
		defer func() { c.tested = was }()
	}
	return c.pipe(p, dot)
}

// truthFuncs only test their arguments, or replace an empty one.
var truthFuncs = map[string]bool{"and": true, "or": true, "not": true, "default": true}

// pipe checks a pipeline and returns its shape when it is a single field
// reference (nil when unknown).
func (c *checker) pipe(p *parse.PipeNode, dot *schema.Shape) *schema.Shape {
	if p == nil {
		return nil
	}
	var last *schema.Shape
	for i, cmd := range p.Cmds {
		last = nil
		fn := ""
		if id, ok := cmd.Args[0].(*parse.IdentifierNode); ok {
			fn = id.Ident
		}
		was := c.tested
		if truthFuncs[fn] {
			c.tested = true
		}
		shapes := make([]*schema.Shape, len(cmd.Args))
		for j, arg := range cmd.Args {
			s := c.arg(arg, dot)
			shapes[j] = s
			if len(cmd.Args) == 1 && i == 0 {
				last = s
			}
		}
		c.tested = was
		if compareFuncs[fn] {
			c.compare(fn, cmd, shapes, i > 0)
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
		if dot == c.root && dot != nil {
			c.refs[""] = true
		}
		return dot
	case *parse.FieldNode:
		start := chainStart(int(x.Position()), x.Ident, false)
		if dot == c.root && dot != nil {
			c.read(x.Ident, start+1)
			c.ref(x.Ident)
		}
		return c.chain(dot, "", x.Ident, start)
	case *parse.VariableNode:
		base, ok := c.vars[x.Ident[0]]
		if !ok {
			return nil
		}
		if x.Ident[0] == "$" && base == c.root && base != nil {
			c.read(x.Ident[1:], chainStart(int(x.Position()), x.Ident, true)+len(x.Ident[0])+1)
			c.ref(x.Ident[1:])
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

// ref records what a chain from the root reads (see Analysis.Refs).
func (c *checker) ref(idents []string) {
	switch {
	case len(idents) == 0:
		c.refs[""] = true
	case len(idents) == 1:
		c.refs[idents[0]] = true
	default:
		c.refs[idents[0]+"."+idents[1]] = true
	}
}

// read records a read of the root's chain idents (from its first
// identifier, at offset off) when it is an unguarded read of a state or
// an input field.
func (c *checker) read(idents []string, off int) {
	if c.tested || len(idents) < 2 || idents[0] != "state" && idents[0] != "input" {
		return
	}
	for i := 2; i <= len(idents); i++ {
		if c.guards[guard{c.root, strings.Join(idents[:i], ".")}] > 0 {
			return
		}
	}
	r := Read{Field: idents[1], Offset: off + len(idents[0]) + 1, Len: len([]rune(idents[1]))}
	if idents[0] == "input" {
		c.inputReads = append(c.inputReads, r)
		return
	}
	c.reads = append(c.reads, r)
}

// guardsOf returns the chains an if or a with tests: its pipeline when it
// is one chain, or the arguments of an and that are.
func (c *checker) guardsOf(p *parse.PipeNode, dot *schema.Shape) []guard {
	if p == nil || len(p.Decl) > 0 || len(p.Cmds) != 1 {
		return nil
	}
	args := p.Cmds[0].Args
	if id, ok := args[0].(*parse.IdentifierNode); ok && id.Ident == "and" && len(args) > 1 {
		args = args[1:]
	} else if len(args) != 1 {
		return nil
	}
	var out []guard
	for _, a := range args {
		switch x := a.(type) {
		case *parse.FieldNode:
			out = append(out, guard{dot, strings.Join(x.Ident, ".")})
		case *parse.VariableNode:
			if base, ok := c.vars[x.Ident[0]]; ok {
				out = append(out, guard{base, strings.Join(x.Ident[1:], ".")})
			}
		}
	}
	return out
}

// compareFuncs are the comparison functions; ordered ones need values
// with an order.
var compareFuncs = map[string]bool{"eq": true, "ne": true, "lt": true, "le": true, "gt": true, "ge": true}

// compare checks that a comparison's arguments can be compared: numbers
// with numbers (whole or not), texts with texts, booleans with booleans
// (and only for equality). piped: the pipeline's previous command gives
// the last argument, of a kind not known here.
func (c *checker) compare(fn string, cmd *parse.CommandNode, shapes []*schema.Shape, piped bool) {
	type operand struct {
		kind, what string
		at         int
	}
	var ops []operand
	for j, arg := range cmd.Args[1:] {
		k, what := kindOf(arg, shapes[j+1])
		if k != "" {
			ops = append(ops, operand{k, what, int(arg.Position())})
		}
	}
	ordered := fn != "eq" && fn != "ne"
	for _, o := range ops {
		if ordered && o.kind != "number" && o.kind != "string" {
			c.probs = append(c.probs, Problem{Offset: int(cmd.Args[0].Position()), Len: len(fn), Compare: true,
				Message: fmt.Sprintf("%s orders numbers or texts, but %s is %s", fn, o.what, article(o.kind))})
			return
		}
	}
	if len(ops) < 2 {
		return
	}
	for _, o := range ops[1:] {
		if o.kind != ops[0].kind {
			c.probs = append(c.probs, Problem{Offset: int(cmd.Args[0].Position()), Len: len(fn), Compare: true,
				Message: fmt.Sprintf("%s compares %s (%s) with %s (%s), which never compare: the template fails when it renders",
					fn, ops[0].what, article(ops[0].kind), o.what, article(o.kind))})
			return
		}
	}
}

// kindOf is the kind of value an argument gives (number, string,
// boolean, list, object), "" when not known, and how to name it.
func kindOf(arg parse.Node, s *schema.Shape) (kind, what string) {
	switch x := arg.(type) {
	case *parse.NumberNode:
		return "number", x.Text
	case *parse.StringNode:
		return "string", x.Quoted
	case *parse.BoolNode:
		return "boolean", x.String()
	case *parse.FieldNode, *parse.VariableNode, *parse.ChainNode:
		what = strings.TrimPrefix(arg.String(), ".")
	default:
		return "", ""
	}
	if s == nil {
		return "", ""
	}
	t := s.NonNull()
	if len(t.Types) != 1 {
		if vs, ok := s.Strings(); ok && len(vs) > 0 {
			return "string", what
		}
		return "", ""
	}
	switch t.Types[0] {
	case "integer", "number":
		return "number", what
	case "string", "boolean":
		return t.Types[0], what
	case "array":
		return "list", what
	case "object":
		return "object", what
	}
	return "", ""
}

func article(kind string) string {
	switch kind {
	case "object":
		return "an object"
	}
	return "a " + kind
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
			if base == c.root && i > 0 {
				pr.Root = idents[0]
			}
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
