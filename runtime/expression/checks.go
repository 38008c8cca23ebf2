// The checks Compile makes of an expression against its environment
// beyond the type checkers' (expr's, and the one in types.go):
// comparisons with values an enum does not list.

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
