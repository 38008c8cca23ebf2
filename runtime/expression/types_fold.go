// Constants folded: an operation over constants, or a pure built-in's
// call on them, has a value the checker knows before any run.

package expression

import (
	"math"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
)

// pure are the built-ins whose value over constants is itself constant.
var pure = map[string]bool{"int": true, "float": true, "round": true, "floor": true, "ceil": true, "abs": true,
	"len": true, "upper": true, "lower": true, "trim": true, "string": true, "max": true, "min": true}

// fold computes an operation over constants (1 + 2, int(0.5),
// len('a')), as the machine would.
func (t *typer) fold(n ast.Node) (any, bool) {
	var args []ast.Node
	switch x := n.(type) {
	case *ast.BinaryNode:
		switch x.Operator {
		case "+", "-", "*", "/", "%", "<", ">", "<=", ">=":
			args = []ast.Node{x.Left, x.Right}
		}
	case *ast.UnaryNode:
		args = []ast.Node{x.Node}
	case *ast.BuiltinNode:
		if pure[x.Name] {
			args = x.Arguments
		}
	}
	if len(args) == 0 {
		return nil, false
	}
	for _, a := range args {
		switch t.consts[a].(type) {
		case int, float64, string, bool:
		default:
			return nil, false
		}
	}
	if b, ok := n.(*ast.BinaryNode); ok {
		// integers that overflow fail the run: nothing to fold
		x, xi := t.consts[b.Left].(int)
		y, yi := t.consts[b.Right].(int)
		if op, checked := checked[b.Operator]; checked && xi && yi {
			if _, err := op.exact(x, y); err != nil {
				return nil, false
			}
		}
	}
	if u, ok := n.(*ast.UnaryNode); ok && t.consts[u.Node] == math.MinInt {
		return nil, false
	}
	v, err := expr.Eval(n.String(), nil)
	if err != nil {
		return nil, false
	}
	switch v.(type) {
	case int, float64, string, bool:
		return v, true
	}
	return nil, false
}

// numberBounds is a number's range: the number itself.
func numberBounds(v any) bounds {
	switch x := v.(type) {
	case int:
		f := float64(x)
		return bounds{&f, &f}
	case float64:
		return bounds{&x, &x}
	}
	return bounds{}
}

func (t *typer) constant(n ast.Node, v any) { t.consts[n] = v }
