// What a test establishes of the values it reads where it holds or not
// (not null, only null, one of some texts), and the values the checker
// knows: constants' shapes, the leaves of a choice, a condition's type.

package expression

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"unicode"

	"github.com/expr-lang/expr/ast"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/schema"
)

// tests is what holds of the values cond reads where cond is (holds) or
// is not true.
func (t *typer) tests(cond ast.Node, holds bool, fs facts) facts {
	if p, ok := cond.(*ast.PredicateNode); ok {
		cond = p.Node
	}
	switch c := unchain(cond).(type) {
	case *ast.ConditionalNode:
		// c ? a : b holds (fails) where c and a, or not c and b, do; a
		// branch that is the other literal boolean is not a way
		way := func(cond bool, br ast.Node) (facts, bool) {
			if b, ok := br.(*ast.BoolNode); ok && b.Value != holds {
				return nil, false
			}
			return facts{}.with(t.tests(c.Cond, cond, fs)).with(t.tests(br, holds, fs)), true
		}
		a, aok := way(true, c.Exp1)
		b, bok := way(false, c.Exp2)
		switch {
		case aok && bok:
			return agreed(a, b)
		case aok:
			return a
		case bok:
			return b
		}
		return nil
	case *ast.UnaryNode:
		if c.Operator == "!" || c.Operator == "not" {
			return t.tests(c.Node, !holds, fs)
		}
	case *ast.BinaryNode:
		switch c.Operator {
		case "&&", "and":
			l, r := t.tests(c.Left, holds, fs), t.tests(c.Right, holds, fs)
			if holds {
				return facts{}.with(l).with(r)
			}
			return agreed(l, r)
		case "||", "or":
			l, r := t.tests(c.Left, holds, fs), t.tests(c.Right, holds, fs)
			if !holds {
				return facts{}.with(l).with(r)
			}
			return agreed(l, r)
		case "==", "!=":
			if f := t.lengthTest(c, holds); f != nil {
				return f
			}
			eq := (c.Operator == "==") == holds
			for _, side := range [][2]ast.Node{{c.Left, c.Right}, {c.Right, c.Left}} {
				path := t.pathOf(side[0])
				if path == "" {
					continue
				}
				switch v := side[1].(type) {
				case *ast.NilNode:
					if eq {
						return facts{path: {null: true}}
					}
					return t.notNull(path)
				case *ast.StringNode:
					if eq {
						out := t.notNull(path)
						out[path] = fact{notNull: true, texts: []string{v.Value}}
						return out
					}
				case *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode:
					if eq {
						return t.notNull(path)
					}
				}
			}
		case "in":
			path := t.pathOf(c.Left)
			arr, ok := c.Right.(*ast.ArrayNode)
			if path == "" || !ok || !holds {
				return nil
			}
			var texts []string
			hasNil := false
			for _, m := range arr.Nodes {
				switch v := m.(type) {
				case *ast.StringNode:
					texts = append(texts, v.Value)
				case *ast.NilNode:
					hasNil = true
				}
			}
			if hasNil {
				return nil
			}
			out := t.notNull(path)
			if len(texts) == len(arr.Nodes) {
				out[path] = fact{notNull: true, texts: texts}
			}
			return out
		case "<", ">", "<=", ">=":
			if f := t.lengthTest(c, holds); f != nil {
				return f
			}
			// an ordering that held read both sides as they are
			if holds {
				out := facts{}
				for _, side := range []ast.Node{c.Left, c.Right} {
					if p := t.pathOf(side); p != "" {
						out = out.with(t.notNull(p))
					}
				}
				return out
			}
		}
	case *ast.IdentifierNode:
		if b := t.let(c.Value); b != nil && b.value != nil {
			// a name bound to a test: what the test established
			out := t.tests(b.value, holds, fs)
			if holds {
				out = facts{}.with(out).with(t.notNull(b.path))
			}
			return out
		}
		if p := t.pathOf(cond); p != "" && holds {
			return t.notNull(p)
		}
	case *ast.MemberNode:
		// a boolean value that held is not null
		if p := t.pathOf(cond); p != "" && holds {
			return t.notNull(p)
		}
	}
	return nil
}

// refineMembers applies what fs knows of the value at path, and of its
// members at any depth (path.f, path.f.g), to its shape: a member known
// not to be null is present and not null, so an object's shape then
// requires it. The items filter keeps are so refined by what its
// predicate establishes of # where it holds.
func (t *typer) refineMembers(path string, s *schema.Shape, fs facts) *schema.Shape {
	s = t.refine(path, s, fs)
	if s == nil || len(s.Props) == 0 {
		return s
	}
	var c *schema.Shape
	for _, name := range slices.Sorted(maps.Keys(s.Props)) {
		sub := path + "." + name
		if _, ok := fs[sub]; !ok {
			continue
		}
		p := s.Props[name]
		if p == nil {
			continue
		}
		np := t.refineMembers(sub, p, fs)
		notNull := fs[sub].notNull && !slices.Contains(s.Required, name)
		if np == p && !notNull {
			continue
		}
		if c == nil {
			cp := *s
			cp.Props = maps.Clone(s.Props)
			cp.Required = slices.Clone(s.Required)
			c = &cp
		}
		c.Props[name] = np
		if notNull {
			c.Required = append(c.Required, name)
		}
	}
	if c == nil {
		return s
	}
	return c
}

// nonEmpty is what a comparison of len(x) with a number establishes
// where it holds (holds) or fails: x not null, and when len(x) > 0 is
// known, x not empty (so that first(x) and last(x) are not null).
func (t *typer) lengthTest(c *ast.BinaryNode, holds bool) facts {
	l, r, op := c.Left, c.Right, c.Operator
	if _, ok := l.(*ast.IntegerNode); ok {
		flip := map[string]string{"<": ">", ">": "<", "<=": ">=", ">=": "<=", "==": "==", "!=": "!="}
		l, r, op = r, l, flip[op]
	}
	b, ok := l.(*ast.BuiltinNode)
	k, isInt := r.(*ast.IntegerNode)
	if !ok || !isInt || b.Name != "len" || len(b.Arguments) != 1 {
		return nil
	}
	path := t.pathOf(b.Arguments[0])
	if path == "" {
		return nil
	}
	if !holds {
		neg := map[string]string{"<": ">=", ">": "<=", "<=": ">", ">=": "<", "==": "!=", "!=": "=="}
		op = neg[op]
	}
	out := t.notNull(path)
	n := k.Value
	if op == ">" && n >= 0 || op == ">=" && n >= 1 || op == "==" && n >= 1 || op == "!=" && n == 0 {
		out[path+"[]"] = fact{notNull: true}
	}
	return out
}

// notNull is the fact that the value at path is not null, nor any value
// it was read through.
func (t *typer) notNull(path string) facts {
	out := facts{}
	for p := path; ; {
		out[p] = fact{notNull: true}
		i := strings.LastIndexByte(p, '.')
		if i < 0 {
			return out
		}
		p = p[:i]
	}
}

// shapeOfValue is the shape of a constant.
func shapeOfValue(v any) *schema.Shape {
	switch x := v.(type) {
	case nil:
		return schema.Of("null")
	case bool:
		return schema.Of("boolean")
	case string:
		return schema.Of("string")
	case int, int64, int32:
		return schema.Of("integer")
	case float64:
		if x == math.Trunc(x) && !math.IsInf(x, 0) {
			return schema.Of("integer")
		}
		return schema.Of("number")
	case []any:
		var items *schema.Shape
		for i, e := range x {
			if i == 0 {
				items = shapeOfValue(e)
			} else {
				items = schema.Union(items, shapeOfValue(e))
			}
		}
		return &schema.Shape{Types: []string{"array"}, Items: orAny(items)}
	case map[string]any:
		props := map[string]*schema.Shape{}
		for k, e := range x {
			props[k] = shapeOfValue(e)
		}
		s := schema.Object(props)
		s.Required = slices.Clone(s.Order)
		return s
	}
	return anyShape()
}

// notBoolean reports a condition whose value is of a known type that is
// not a boolean: a condition takes a boolean, or null as false.
func notBoolean(src string, s *schema.Shape) (Problem, bool) {
	if !s.Known() {
		return Problem{}, false
	}
	var other []string
	for _, ty := range s.Types {
		if ty != "boolean" && ty != "null" {
			other = append(other, ty)
		}
	}
	if len(other) == 0 {
		return Problem{}, false
	}
	what := describeTypes(s.Types)
	return Problem{Line: 1, Col: 1, EndCol: 1 + len([]rune(firstLine(src))), Code: diag.CodeExprNotBool,
		Message: "condition is not boolean: it yields " + what}, true
}

// describeTypes names JSON types in words: "an integer", "an object or null".
func describeTypes(types []string) string {
	words := make([]string, len(types))
	for i, t := range types {
		words[i] = article(t)
		if t == "null" {
			words[i] = "null"
		}
	}
	return strings.Join(words, " or ")
}

// Type is the shape of the expression's value as the checker knows it:
// its JSON types with null among them when it may be null, and what its
// schema states (an object's members, a list's items); no types when it
// is not known.
func (p *Program) Type() *schema.Shape { return p.typ }

// Value returns the expression's value when the checker knows it without
// running it (a literal, a list or map of literals), and whether it does.
func (p *Program) Value() (any, bool) { return p.value, p.hasValue }

// Leaf is one value an expression can yield through its choices (the
// sides of ?: and if/else, of ??, the value of a let): its shape, its
// value when the checker knows it, and its place in the expression's
// text (1-based line and columns).
type Leaf struct {
	Shape             *schema.Shape
	Value             any
	Known             bool
	Line, Col, EndCol int
	// Reads is the value the leaf reads as it is (state.q.text, also
	// through a name let bound to it), "" when it computes one.
	Reads string
	// NotNull is set for a leaf known not to be null whatever its shape:
	// the left of ??, which yields it only when it is not null.
	NotNull bool
}

// leaves lists the values n can yield through its choices.
func (t *typer) leaves(n ast.Node) []Leaf {
	switch x := n.(type) {
	case *ast.ConditionalNode:
		return append(t.leaves(x.Exp1), t.leaves(x.Exp2)...)
	case *ast.BinaryNode:
		if x.Operator == "??" {
			l := t.leaves(x.Left)
			if len(l) == 1 && l[0].Shape.Known() && !l[0].Shape.MayBeNull() {
				return l // never null: the default is never taken
			}
			for i := range l {
				l[i].Shape, l[i].NotNull = l[i].Shape.WithoutNull(), true
			}
			return append(l, t.leaves(x.Right)...)
		}
	case *ast.VariableDeclaratorNode:
		return t.leaves(x.Expr)
	case *ast.SequenceNode:
		if len(x.Nodes) > 0 {
			return t.leaves(x.Nodes[len(x.Nodes)-1])
		}
	}
	loc := n.Location()
	line, col := position(t.src, loc.From)
	s := t.types[n]
	if s == nil {
		s = anyShape()
	}
	v, known := t.consts[n]
	reads := t.paths[unchain(n)]
	if strings.HasPrefix(reads, "let ") || strings.HasPrefix(reads, "#") {
		reads = ""
	}
	return []Leaf{{Shape: s, Value: v, Known: known, Line: line, Col: col, EndCol: col + max(loc.To-loc.From, 1), Reads: reads}}
}

// Leaves lists the values the expression can yield through its choices
// (itself when it has none).
func (p *Program) Leaves() []Leaf { return p.leaves }

// TypeIn is the shape of the expression's value were its variables of
// the shapes env gives (a reducer's update, given what a node writes).
func (p *Program) TypeIn(env *Env) *schema.Shape {
	tree, err := p.parsed()
	if err != nil {
		return anyShape()
	}
	return typeTree(p.src, tree.Node, env).types[tree.Node]
}

// bracketName is the declared name that the text at rune offset from
// starts with, when it has a character a name after a dot cannot have
// (first-name, read as first - name): "" when there is none.
func (t *typer) bracketName(from int, names []string) string {
	r := []rune(t.src)
	if from < 0 || from > len(r) {
		return ""
	}
	rest := string(r[from:])
	best := ""
	for _, n := range names {
		if nonIdent(n) != "" && strings.HasPrefix(rest, n) && len(n) > len(best) {
			best = n
		}
	}
	return best
}

// nonIdent is the first character of name an identifier cannot hold,
// quoted ("" when there is none).
func nonIdent(name string) string {
	for i, c := range name {
		if c == '_' || unicode.IsLetter(c) || i > 0 && unicode.IsDigit(c) {
			continue
		}
		return fmt.Sprintf("%q", string(c))
	}
	return ""
}

// NotNullAfter lists the values (state.x, state.o.n) known not to be null
// where case i of a branch whose conditions are conds is taken: its own
// condition holds, and those before it failed (i == len(conds): the
// else, where all of them failed).
func NotNullAfter(conds []*Program, i int) []string {
	t := &typer{types: map[ast.Node]*schema.Shape{}, consts: map[ast.Node]any{}, reported: map[[2]int]bool{}, paths: map[ast.Node]string{}}
	fs := facts{}
	for j, c := range conds {
		if j > i || c == nil {
			break
		}
		tree, err := c.parsed()
		if err != nil {
			return nil
		}
		fs = fs.with(t.tests(tree.Node, j == i, facts{}))
	}
	var out []string
	for p, f := range fs {
		if f.notNull && !strings.HasSuffix(p, "[]") {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// NullUse says what reading field (of state) as null would make of the
// expression: whether an operation then fails on it (ops), and the shape
// of its value then. A field nothing wrote reads as null: an unset read
// matters where an operation fails on it, or where its value then does
// not fit where it goes.
func (p *Program) NullUse(field string) (ops bool, value *schema.Shape) {
	tree, err := p.parsed()
	if err != nil || p.env == nil {
		return true, schema.Of("null")
	}
	typed := func(unset map[string]bool) (*schema.Shape, int) {
		t := &typer{src: p.src, env: p.env, types: map[ast.Node]*schema.Shape{}, consts: map[ast.Node]any{}, reported: map[[2]int]bool{},
			unset: unset, paths: map[ast.Node]string{}}
		got := t.typeOf(tree.Node, facts{})
		n := 0
		for _, pr := range t.probs {
			if pr.Code == diag.CodeExprMayBeNil {
				n++
			}
		}
		return got, n
	}
	_, before := typed(nil)
	got, after := typed(map[string]bool{"state." + field: true})
	return after > before, got
}

// comparable reports whether a constant compares with == as expr does
// (a scalar of the same Go type as the other).
func comparable(v any) bool {
	switch v.(type) {
	case nil, bool, string, int, float64:
		return true
	}
	return false
}
