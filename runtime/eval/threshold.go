// Reading a score written as a comparison with a number: the expression
// is the score, the number its threshold.

package eval

import (
	"strings"

	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/parser"
)

// splitThreshold reads "EXPR <= N" (or <, >=, >, and the number on
// either side) as the score EXPR, the operator with the score on its
// left, and the bound; offset is where EXPR starts in src.
func splitThreshold(src string) (value, op string, bound float64, ok bool) {
	v, op, bound, _, ok := splitThresholdAt(src)
	return v, op, bound, ok
}

func splitThresholdAt(src string) (value, op string, bound float64, offset int, ok bool) {
	tree, err := parser.Parse(src)
	if err != nil {
		return "", "", 0, 0, false
	}
	b, isBinary := tree.Node.(*ast.BinaryNode)
	if !isBinary {
		return "", "", 0, 0, false
	}
	flip := map[string]string{"<=": ">=", "<": ">", ">=": "<=", ">": "<"}
	if _, cmp := flip[b.Operator]; !cmp {
		return "", "", 0, 0, false
	}
	if n, isNum := literal(b.Right); isNum {
		i := strings.LastIndex(src, b.Operator)
		if i < 0 {
			return "", "", 0, 0, false
		}
		value = strings.TrimSpace(src[:i])
		return value, b.Operator, n, strings.Index(src, value), value != ""
	}
	if n, isNum := literal(b.Left); isNum {
		i := strings.Index(src, b.Operator)
		if i < 0 {
			return "", "", 0, 0, false
		}
		rest := src[i+len(b.Operator):]
		value = strings.TrimSpace(rest)
		return value, flip[b.Operator], n, i + len(b.Operator) + strings.Index(rest, value), value != ""
	}
	return "", "", 0, 0, false
}

// literal reads a number literal, negative ones too.
func literal(n ast.Node) (float64, bool) {
	switch x := n.(type) {
	case *ast.IntegerNode:
		return float64(x.Value), true
	case *ast.FloatNode:
		return x.Value, true
	case *ast.UnaryNode:
		if x.Operator == "-" {
			if v, ok := literal(x.Node); ok {
				return -v, true
			}
		}
	}
	return 0, false
}
