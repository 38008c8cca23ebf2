// The checks Compile makes of an expression against its environment
// beyond the type checker's: fields a closed shape does not declare,
// reads of what may be null, comparisons with values an enum does not
// list.

package expression

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/expr-lang/expr/ast"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/schema"
)

// checkFields resolves member chains rooted at environment variables against
// their shapes and reports every field a closed object does not declare.
func checkFields(src string, root ast.Node, env *Env) []Problem {
	var probs []Problem
	v := &visitor{fn: func(n ast.Node) {
		m, ok := n.(*ast.MemberNode)
		if !ok {
			return
		}
		prop, isStr := m.Property.(*ast.StringNode)
		if !isStr {
			return
		}
		parent := env.shapeAt(m.Node)
		if parent == nil {
			return
		}
		if _, declared := parent.Props[prop.Value]; declared {
			return
		}
		_, allowed := parent.Prop(prop.Value)
		if allowed && len(parent.Props) == 0 {
			return // an object that declares nothing may hold anything
		}
		loc := prop.Location()
		line, col := position(src, loc.From)
		p := Problem{Line: line, Col: col, EndCol: col + len([]rune(prop.Value)), Code: diag.CodeExprUnknown,
			Message: fmt.Sprintf("%s has no field %q", describePath(m.Node), prop.Value)}
		if allowed {
			// an open object may hold it, but does not declare it: most
			// likely a misspelling, which reads nothing
			p.Warning = true
			p.Message = fmt.Sprintf("%s declares no field %q (its schema does not close it, so the read is allowed, and yields nil when absent)",
				describePath(m.Node), prop.Value)
		}
		p.Suggestion = diag.Suggest(prop.Value, parent.Order)
		probs = append(probs, p)
	}}
	ast.Walk(&root, v)
	return probs
}

// shapeAt resolves a chain of constant member reads rooted at a variable
// (state.a.b) to its shape; nil when any step is unknown.
func (e *Env) shapeAt(n ast.Node) *schema.Shape {
	switch x := n.(type) {
	case *ast.IdentifierNode:
		return e.shapes[x.Value]
	case *ast.MemberNode:
		prop, isStr := x.Property.(*ast.StringNode)
		if parent := e.shapeAt(x.Node); parent != nil && isStr {
			child, _ := parent.Prop(prop.Value)
			return child
		}
	}
	return nil
}

// checkNullable reports member reads through a value whose schema allows
// null (x.y where x may be null): expr fails on them at run time. x?.y
// reads are safe, and so are reads on the guarded side of x != nil && ...,
// of x != nil ? ... : ..., or of x == nil ? ... : ....
func checkNullable(src string, root ast.Node, env *Env) []Problem {
	// first the paths each node is guarded against null by, then the reads
	guards := map[ast.Node][]string{}
	guard := func(sub ast.Node, paths []string) {
		if len(paths) > 0 {
			ast.Walk(&sub, &visitor{fn: func(n ast.Node) { guards[n] = append(guards[n], paths...) }})
		}
	}
	ast.Walk(&root, &visitor{fn: func(n ast.Node) {
		switch x := n.(type) {
		case *ast.BinaryNode:
			if x.Operator == "&&" || x.Operator == "and" {
				guard(x.Right, nilTests(x.Left, "!="))
			}
		case *ast.ConditionalNode:
			guard(x.Exp1, nilTests(x.Cond, "!="))
			guard(x.Exp2, nilTests(x.Cond, "=="))
		}
	}})
	var probs []Problem
	ast.Walk(&root, &visitor{fn: func(n ast.Node) {
		x, ok := n.(*ast.MemberNode)
		if !ok {
			return
		}
		prop, isStr := x.Property.(*ast.StringNode)
		path := describePath(x.Node)
		if isStr && !x.Optional && env.shapeAt(x.Node).Nullable() && !slices.Contains(guards[n], path) {
			line, col := position(src, prop.Location().From)
			probs = append(probs, Problem{Line: line, Col: col, EndCol: col + len([]rune(prop.Value)), Code: diag.CodeExprMayBeNil,
				Warning: true, Path: path,
				Message: fmt.Sprintf("%s may be null here, and reading %q of null fails at run time; write %s?.%s, or test %s != nil first",
					path, prop.Value, path, prop.Value, path)})
		}
	}})
	return probs
}

// nilTests lists the paths that cond compares with nil using op, alone or
// joined by && (for !=): where cond holds, they are known not to be null
// (op !=) or, where it fails, known not to be null (op ==).
func nilTests(cond ast.Node, op string) []string {
	x, ok := cond.(*ast.BinaryNode)
	if !ok {
		return nil
	}
	if x.Operator == "&&" || x.Operator == "and" {
		if op == "!=" {
			return append(nilTests(x.Left, op), nilTests(x.Right, op)...)
		}
		return nil
	}
	if x.Operator != op {
		return nil
	}
	if _, isNil := x.Right.(*ast.NilNode); isNil {
		return []string{describePath(x.Left)}
	}
	if _, isNil := x.Left.(*ast.NilNode); isNil {
		return []string{describePath(x.Right)}
	}
	return nil
}

func describePath(n ast.Node) string {
	switch x := n.(type) {
	case *ast.IdentifierNode:
		return x.Value
	case *ast.MemberNode:
		if s, ok := x.Property.(*ast.StringNode); ok {
			return describePath(x.Node) + "." + s.Value
		}
	}
	return "value"
}

// checkEnums reports comparisons (==, !=, in, not in) of a field whose
// schema is a string enum with a string literal the enum does not allow:
// the field can never equal it, so the comparison is constant, and most
// likely misspelt.
func checkEnums(src string, root ast.Node, env *Env) []Problem {
	var probs []Problem
	check := func(field ast.Node, lit ast.Node) {
		str, ok := lit.(*ast.StringNode)
		if !ok {
			return
		}
		values, isEnum := env.shapeAt(field).Strings()
		if !isEnum || slices.Contains(values, str.Value) {
			return
		}
		loc := str.Location()
		line, col := position(src, loc.From)
		probs = append(probs, Problem{Line: line, Col: col, EndCol: col + max(loc.To-loc.From, 1), Code: diag.CodeExprEnum,
			Message:    fmt.Sprintf("%s is one of %s, never %q", describePath(field), quoteAll(values), str.Value),
			Suggestion: diag.Suggest(str.Value, values)})
	}
	ast.Walk(&root, &visitor{fn: func(n ast.Node) {
		b, ok := n.(*ast.BinaryNode)
		if !ok {
			return
		}
		switch b.Operator {
		case "==", "!=":
			check(b.Left, b.Right)
			check(b.Right, b.Left)
		case "in":
			if arr, ok := b.Right.(*ast.ArrayNode); ok {
				for _, el := range arr.Nodes {
					check(b.Left, el)
				}
			}
		}
	}})
	return probs
}

// article names a JSON type with its article.
func article(t string) string {
	switch t {
	case "integer", "array", "object":
		return "an " + t
	}
	return "a " + t
}

func quoteAll(values []string) string {
	q := make([]string, len(values))
	for i, v := range values {
		q[i] = strconv.Quote(v)
	}
	return strings.Join(q, ", ")
}
