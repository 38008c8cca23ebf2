// What the validator asks of a compiled program: the fields it reads,
// the kind of number and the literals it can yield, its branches, its
// enum and constant value, and whether conditions cover every case.

package expression

import (
	"maps"
	"reflect"
	"slices"

	"github.com/expr-lang/expr/ast"
)

// Reads lists the expression's unguarded reads of state fields.
func (p *Program) Reads() []Read { return p.reads }

// Refs lists every value the expression reads of the variables roots
// names, guarded or not: "state.x" for a field, "state" for the whole
// object (json(state)), sorted and once each.
func (p *Program) Refs(roots ...string) []string {
	tree, err := p.parsed()
	if err != nil {
		return nil
	}
	seen := map[string]bool{}
	member := map[ast.Node]bool{}
	root := tree.Node
	ast.Walk(&root, &visitor{fn: func(n ast.Node) {
		m, ok := n.(*ast.MemberNode)
		if !ok {
			return
		}
		id, ok := m.Node.(*ast.IdentifierNode)
		if !ok || !slices.Contains(roots, id.Value) {
			return
		}
		member[id] = true
		if prop, ok := m.Property.(*ast.StringNode); ok {
			seen[id.Value+"."+prop.Value] = true
		} else {
			seen[id.Value] = true // state[k]: any field
		}
	}})
	ast.Walk(&root, &visitor{fn: func(n ast.Node) {
		if id, ok := n.(*ast.IdentifierNode); ok && !member[id] && slices.Contains(roots, id.Value) {
			seen[id.Value] = true
		}
	}})
	return slices.Sorted(maps.Keys(seen))
}

// ReadsOf lists the expression's unguarded reads of the fields of the
// object variable root (output.x, for root output), as Reads does for
// state.
func (p *Program) ReadsOf(root string) []Read {
	tree, err := p.parsed()
	if err != nil {
		return nil
	}
	return readsOf(p.src, tree.Node, root, nil)
}

// stateReads finds the unguarded reads of state fields in an expression;
// consts are the values the checker folded (a condition that is one
// leaves a side that never runs).
func stateReads(src string, root ast.Node, consts map[ast.Node]any) []Read {
	return readsOf(src, root, "state", consts)
}

// readsOf finds the unguarded reads of the fields of variable name.
func readsOf(src string, root ast.Node, name string, consts map[ast.Node]any) []Read {
	constBool := func(n ast.Node) (bool, bool) {
		if b, ok := n.(*ast.BoolNode); ok {
			return b.Value, true
		}
		b, ok := consts[n].(bool)
		return b, ok
	}
	guarded := map[ast.Node]bool{}
	tested := map[string]bool{}
	mark := func(sub ast.Node) {
		ast.Walk(&sub, &visitor{fn: func(n ast.Node) { guarded[n] = true }})
	}
	ast.Walk(&root, &visitor{fn: func(n ast.Node) {
		switch x := n.(type) {
		case *ast.ConditionalNode:
			// a constant condition: the other branch never runs
			if b, ok := constBool(x.Cond); ok {
				if b {
					mark(x.Exp2)
				} else {
					mark(x.Exp1)
				}
			}
		case *ast.BinaryNode:
			// false && ..., true || ...: the right side never runs
			if b, ok := constBool(x.Left); ok && (b == (x.Operator == "||" || x.Operator == "or")) &&
				(x.Operator == "&&" || x.Operator == "and" || x.Operator == "||" || x.Operator == "or") {
				mark(x.Right)
			}
			switch x.Operator {
			case "??":
				mark(x.Left)
			case "==", "!=":
				for _, side := range [][2]ast.Node{{x.Left, x.Right}, {x.Right, x.Left}} {
					if _, isNil := side[1].(*ast.NilNode); isNil {
						if f, ok := fieldOf(side[0], name); ok {
							tested[f] = true
						}
						mark(side[0])
					}
				}
			}
		case *ast.MemberNode:
			if x.Optional {
				mark(x.Node)
			}
		case *ast.ChainNode:
			mark(x.Node)
		case *ast.BuiltinNode:
			// these give a value for null too ("<nil>", "null", "nil"):
			// a read given to them as it is (not one an operation inside
			// them takes, len(state.x))
			if x.Name == "string" || x.Name == "toJSON" || x.Name == "type" {
				for _, a := range x.Arguments {
					if plainRead(a) {
						mark(a)
					}
				}
			}
		}
	}})
	var reads []Read
	ast.Walk(&root, &visitor{fn: func(n ast.Node) {
		f, ok := fieldOf(n, name)
		if !ok || guarded[n] || tested[f] {
			return
		}
		prop := n.(*ast.MemberNode).Property
		line, col := position(src, prop.Location().From)
		reads = append(reads, Read{Field: f, Line: line, Col: col, EndCol: col + len([]rune(f))})
	}})
	return reads
}

// fieldOf reports whether n reads VAR.NAME (VAR the variable name), and
// NAME.
func fieldOf(n ast.Node, name string) (string, bool) {
	m, ok := n.(*ast.MemberNode)
	if !ok {
		return "", false
	}
	id, ok := m.Node.(*ast.IdentifierNode)
	prop, isStr := m.Property.(*ast.StringNode)
	if !ok || !isStr || id.Value != name {
		return "", false
	}
	return prop.Value, true
}

// Whole reports whether the expression always gives a whole number (an
// int, or a float with no fraction: round, floor, ceil, int, whole
// literals and +, -, *, % over them), so that an integer field holds it;
// a division, a power, a mean or a fractional literal may not.
func (p *Program) Whole() bool { return p.num == numWhole }

// Branches lists the values the expression can yield through its choices
// (the branches of ?: and ??, themselves when it has none), each with its
// JSON type where the checker knows it; columns are 1-based on the
// expression's first line, or Line gives the line.
func (p *Program) Branches() []Branch {
	out := make([]Branch, len(p.branches))
	for i, b := range p.branches {
		line, col := position(p.src, b.from)
		out[i] = Branch{Type: b.typ, Line: line, Col: col, EndCol: col + max(b.to-b.from, 1)}
	}
	return out
}

// Number reports whether the expression gives a number, even where the
// checker cannot tell its type (mean and median give any).
func (p *Program) Number() bool { return p.num != numUnknown }

// ResultType is the type the checker gives the expression's value, or nil
// when it cannot tell (a value of any type, such as a field of an
// untyped object); a nullable value has the type it has when not nil.
func (p *Program) ResultType() reflect.Type {
	t := p.prog.Node().Type()
	if t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem() // a nullable field's value: nil, or this
	}
	if t == nil || t.Kind() == reflect.Interface {
		return nil
	}
	return t
}

// Yield is a string literal an expression can yield as its value, with
// its place in the expression's text (1-based line and columns).
type Yield struct {
	Value             string
	Line, Col, EndCol int
}

// Yields lists the string literals the expression can yield as its value:
// itself, or the branches of conditionals (?: and if/else) and ?? that
// are literals. all reports whether those literals are all it can yield.
func (p *Program) Yields() (lits []Yield, all bool) {
	tree, err := p.parsed()
	if err != nil {
		return nil, false
	}
	all = true
	add := func(n *ast.StringNode) {
		loc := n.Location()
		line, col := position(p.src, loc.From)
		end := col + max(loc.To-loc.From, 1)
		lits = append(lits, Yield{Value: n.Value, Line: line, Col: col, EndCol: end})
	}
	var walk func(n ast.Node)
	walk = func(n ast.Node) {
		switch n := n.(type) {
		case *ast.VariableDeclaratorNode:
			walk(n.Expr)
		case *ast.SequenceNode:
			walk(n.Nodes[len(n.Nodes)-1])
		case *ast.StringNode:
			add(n)
		case *ast.ConditionalNode:
			// a branch that is what its condition compared with texts
			// yields those texts: `s in ['a', 'b'] ? s : 'a'`
			for i, br := range []ast.Node{n.Exp1, n.Exp2} {
				if texts, ok := narrowed(n.Cond, br, i == 0); ok {
					for _, t := range texts {
						add(t)
					}
					continue
				}
				walk(br)
			}
		case *ast.BinaryNode:
			if n.Operator != "??" {
				all = false
				return
			}
			walk(n.Left)
			walk(n.Right)
		default:
			all = false
		}
	}
	walk(tree.Node)
	return lits, all
}

// narrowed reports the text literals x must equal for cond to hold
// (when holds is true) or to fail (when false): cond compares x itself,
// the same expression, with literal texts by ==, != or in, possibly
// negated or joined by && and ||.
func narrowed(cond, x ast.Node, holds bool) ([]*ast.StringNode, bool) {
	same := func(n ast.Node) bool { return n.String() == x.String() }
	switch c := cond.(type) {
	case *ast.UnaryNode:
		if c.Operator == "not" || c.Operator == "!" {
			return narrowed(c.Node, x, !holds)
		}
	case *ast.BinaryNode:
		switch c.Operator {
		case "&&", "and", "||", "or":
			// a && b holds when both do, and fails when either fails (a
			// || b the other way round): one side's texts narrow x when
			// both must, either side's when either may
			both := (c.Operator == "&&" || c.Operator == "and") == holds
			l, lok := narrowed(c.Left, x, holds)
			r, rok := narrowed(c.Right, x, holds)
			switch {
			case both && lok:
				return l, true
			case both:
				return r, rok
			case lok && rok:
				return append(l, r...), true
			}
		case "==", "!=":
			if holds != (c.Operator == "==") {
				return nil, false
			}
			if s, ok := c.Right.(*ast.StringNode); ok && same(c.Left) {
				return []*ast.StringNode{s}, true
			}
			if s, ok := c.Left.(*ast.StringNode); ok && same(c.Right) {
				return []*ast.StringNode{s}, true
			}
		case "in":
			arr, ok := c.Right.(*ast.ArrayNode)
			if !holds || !ok || !same(c.Left) {
				return nil, false
			}
			var texts []*ast.StringNode
			for _, m := range arr.Nodes {
				s, ok := m.(*ast.StringNode)
				if !ok {
					return nil, false
				}
				texts = append(texts, s)
			}
			return texts, true
		}
	}
	return nil, false
}

// NumberLiteral is a number literal an expression can yield as its value, with
// its place in the expression's text.
type NumberLiteral struct {
	Value             float64
	Line, Col, EndCol int
}

// Numbers lists the number literals the expression can yield as its
// value: itself, or the branches of conditionals (?: and if/else) and ??
// that are literals (negated ones too).
func (p *Program) Numbers() []NumberLiteral {
	tree, err := p.parsed()
	if err != nil {
		return nil
	}
	var lits []NumberLiteral
	add := func(n, last ast.Node, v float64) {
		from, to := n.Location().From, last.Location().To
		line, col := position(p.src, from)
		lits = append(lits, NumberLiteral{Value: v, Line: line, Col: col, EndCol: col + max(to-from, 1)})
	}
	var walk func(n ast.Node)
	walk = func(n ast.Node) {
		switch n := n.(type) {
		case *ast.VariableDeclaratorNode:
			walk(n.Expr)
		case *ast.SequenceNode:
			walk(n.Nodes[len(n.Nodes)-1])
		case *ast.IntegerNode:
			add(n, n, float64(n.Value))
		case *ast.FloatNode:
			add(n, n, n.Value)
		case *ast.UnaryNode:
			switch x := n.Node.(type) {
			case *ast.IntegerNode:
				if n.Operator == "-" {
					add(n, x, -float64(x.Value))
				}
			case *ast.FloatNode:
				if n.Operator == "-" {
					add(n, x, -x.Value)
				}
			}
		case *ast.ConditionalNode:
			walk(n.Exp1)
			walk(n.Exp2)
		case *ast.BinaryNode:
			if n.Operator == "??" {
				walk(n.Left)
				walk(n.Right)
			}
		}
	}
	walk(tree.Node)
	return lits
}

// Complements reports whether, whatever the state, at least one of the
// conditions holds, as far as their text shows: one is the literal true,
// or two are each other's negation (!c and c, a == b and a != b, a < b
// and a >= b, a in b and a not in b, ...).
func Complements(conds []*Program) bool {
	seen := map[string]bool{}
	var negs []string
	for _, c := range conds {
		if c == nil {
			continue
		}
		tree, err := c.parsed()
		if err != nil {
			continue
		}
		if b, ok := tree.Node.(*ast.BoolNode); ok && b.Value {
			return true
		}
		seen[tree.Node.String()] = true
		if neg := negation(tree.Node); neg != "" {
			negs = append(negs, neg)
		}
	}
	for _, n := range negs {
		if seen[n] {
			return true
		}
	}
	return false
}

// negation is the text of n's negation, when n is a negation or a
// comparison ("" otherwise).
func negation(n ast.Node) string {
	switch n := n.(type) {
	case *ast.UnaryNode:
		if n.Operator == "!" || n.Operator == "not" {
			return n.Node.String()
		}
	case *ast.BinaryNode:
		flip := map[string]string{"==": "!=", "!=": "==", "<": ">=", ">=": "<", ">": "<=", "<=": ">"}
		if op, ok := flip[n.Operator]; ok {
			return (&ast.BinaryNode{Operator: op, Left: n.Left, Right: n.Right}).String()
		}
	}
	return ""
}

// Enum returns the strings the expression can yield when it reads a field
// whose schema is a string enum (state.x, or state.x ?? 'literal'), and
// whether it is such a read.
func (p *Program) Enum(env *Env) ([]string, bool) {
	tree, err := p.parsed()
	if err != nil {
		return nil, false
	}
	var values func(n ast.Node) ([]string, bool)
	values = func(n ast.Node) ([]string, bool) {
		switch x := n.(type) {
		case *ast.StringNode:
			return []string{x.Value}, true
		case *ast.BinaryNode:
			if x.Operator != "??" {
				return nil, false
			}
			l, lok := values(x.Left)
			r, rok := values(x.Right)
			return append(l, r...), lok && rok
		}
		return env.shapeAt(n).Strings()
	}
	vals, ok := values(tree.Node)
	if _, isLit := tree.Node.(*ast.StringNode); isLit {
		return nil, false
	}
	return vals, ok
}

// Constant returns the expression's value when it is a constant (a
// literal, or what constant folding left), and whether it is one.
func (p *Program) Constant() (any, bool) { return p.lit, p.hasLit }

// CoversEnum reports whether the conditions together hold for every
// value of a field whose schema is an enum: each compares the same field
// (state.c) with texts by ==, in or ||, and the texts they name cover
// every value the enum lists (null too, where it lists null: compared
// with nil).
func CoversEnum(conds []*Program, env *Env) bool {
	var field string
	var node ast.Node
	seen := map[string]bool{}
	null := false
	for _, c := range conds {
		if c == nil {
			return false
		}
		tree, err := c.parsed()
		if err != nil {
			return false
		}
		var walk func(n ast.Node) bool
		walk = func(n ast.Node) bool {
			b, ok := n.(*ast.BinaryNode)
			if !ok {
				return false
			}
			var x ast.Node
			var lits []ast.Node
			switch b.Operator {
			case "||", "or":
				return walk(b.Left) && walk(b.Right)
			case "==":
				x, lits = b.Left, []ast.Node{b.Right}
				if isLiteral(b.Left) {
					x, lits = b.Right, []ast.Node{b.Left}
				}
			case "in":
				arr, ok := b.Right.(*ast.ArrayNode)
				if !ok {
					return false
				}
				x, lits = b.Left, arr.Nodes
			default:
				return false
			}
			path := describePath(x)
			if path == "value" || field != "" && path != field {
				return false
			}
			field, node = path, x
			for _, l := range lits {
				switch v := l.(type) {
				case *ast.StringNode:
					seen[v.Value] = true
				case *ast.NilNode:
					null = true
				default:
					return false
				}
			}
			return true
		}
		if !walk(tree.Node) {
			return false
		}
	}
	if node == nil {
		return false
	}
	s := env.shapeAt(node)
	values, ok := s.Strings()
	if !ok {
		return false
	}
	for _, v := range values {
		if !seen[v] {
			return false
		}
	}
	return null || !s.MayBeNull()
}

func isLiteral(n ast.Node) bool {
	switch n.(type) {
	case *ast.StringNode, *ast.NilNode:
		return true
	}
	return false
}

// plainRead reports whether n is a read of a value and nothing more: a
// name, or a chain of members of one (x.y?.z, x["y"]).
func plainRead(n ast.Node) bool {
	for {
		switch x := n.(type) {
		case *ast.ChainNode:
			n = x.Node
		case *ast.MemberNode:
			n = x.Node
		case *ast.IdentifierNode:
			return true
		default:
			return false
		}
	}
}
