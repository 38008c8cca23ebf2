// The fast path's operators: integer arithmetic exact as the machine's
// (native where no overflow can happen), equality and ordering over
// scalars.

package expression

import (
	"math"

	"github.com/expr-lang/expr/ast"
)

// exactOps are the int operations that report overflow.
var exactOps = map[string]func(a, b int) (int, bool){
	"+": func(a, b int) (int, bool) {
		s := a + b
		return s, (s > a) == (b > 0)
	},
	"-": func(a, b int) (int, bool) {
		d := a - b
		return d, (d < a) == (b > 0)
	},
	"*": func(a, b int) (int, bool) {
		if a == 0 || b == 0 {
			return 0, true
		}
		p := a * b
		if p/b != a || (a == -1 && b == math.MinInt) || (b == -1 && a == math.MinInt) {
			return 0, false
		}
		return p, true
	},
}

// nativeOps are the int operations as Go (and the machine) computes them.
var nativeOps = map[string]func(a, b int) (int, bool){
	"+": func(a, b int) (int, bool) { return a + b, true },
	"-": func(a, b int) (int, bool) { return a - b, true },
	"*": func(a, b int) (int, bool) { return a * b, true },
}

// addConstant is a + k, or a - k with sub, exactly: the commonest
// arithmetic of all, a counter's step.
func addConstant(a func(*Frame) (int, bool), k int, sub bool) func(*Frame) (int, bool) {
	if sub {
		if k == math.MinInt {
			return func(*Frame) (int, bool) { return 0, false }
		}
		k = -k
	}
	if k >= 0 {
		return func(f *Frame) (int, bool) {
			x, ok := a(f)
			s := x + k
			return s, ok && s >= x
		}
	}
	return func(f *Frame) (int, bool) {
		x, ok := a(f)
		s := x + k
		return s, ok && s < x
	}
}

// intOp specialises the common operations, whose closures then call no
// further function.
func intOp(op func(a, b int) (int, bool), a, b func(*Frame) (int, bool)) func(*Frame) (int, bool) {
	return func(f *Frame) (int, bool) {
		x, ok := a(f)
		if !ok {
			return 0, false
		}
		y, ok := b(f)
		if !ok {
			return 0, false
		}
		return op(x, y)
	}
}

// arith is +, -, * or / over values whose types are known at run time
// only: ints (exact when the patcher made the operation exact, else as
// Go computes them), floats, an int with a float (as a float), and for +
// two strings.
func (c *fastCompiler) arith(op string, l, r fn, exact bool) fn {
	a, b := c.any(l), c.any(r)
	intOp := exactOps[op]
	if !exact {
		switch op {
		case "+":
			intOp = func(x, y int) (int, bool) { return x + y, true }
		case "-":
			intOp = func(x, y int) (int, bool) { return x - y, true }
		case "*":
			intOp = func(x, y int) (int, bool) { return x * y, true }
		}
	}
	var flOp func(x, y float64) float64
	switch op {
	case "+":
		flOp = func(x, y float64) float64 { return x + y }
	case "-":
		flOp = func(x, y float64) float64 { return x - y }
	case "*":
		flOp = func(x, y float64) float64 { return x * y }
	case "/":
		flOp = func(x, y float64) float64 { return x / y }
	}
	concat := op == "+"
	return fn{k: kAny, a: func(f *Frame) (any, bool) {
		x, ok := a(f)
		if !ok {
			return nil, false
		}
		y, ok := b(f)
		if !ok {
			return nil, false
		}
		switch xv := x.(type) {
		case int:
			switch yv := y.(type) {
			case int:
				if intOp == nil { // division: always a float
					return flOp(float64(xv), float64(yv)), true
				}
				v, ok := intOp(xv, yv)
				if !ok {
					return nil, false
				}
				return v, true
			case float64:
				return flOp(float64(xv), yv), true
			}
		case float64:
			switch yv := y.(type) {
			case int:
				return flOp(xv, float64(yv)), true
			case float64:
				return flOp(xv, yv), true
			}
		case string:
			if ys, ok := y.(string); ok && concat {
				return xv + ys, true
			}
		}
		return nil, false
	}}
}

func (c *fastCompiler) binary(x *ast.BinaryNode) (fn, bool) {
	l, ok := c.compile(x.Left)
	if !ok {
		return fn{}, false
	}
	r, ok := c.compile(x.Right)
	if !ok {
		return fn{}, false
	}
	switch x.Operator {
	case "&&", "and", "||", "or":
		a, b := c.boolean(l), c.boolean(r)
		or := x.Operator == "||" || x.Operator == "or"
		return fn{k: kBool, b: func(f *Frame) (bool, bool) {
			v, ok := a(f)
			if !ok || v == or {
				return v, ok
			}
			return b(f)
		}}, true
	case "??":
		a, b := c.any(l), c.any(r)
		return fn{k: kAny, a: func(f *Frame) (any, bool) {
			v, ok := a(f)
			if !ok {
				return nil, false
			}
			switch v := v.(type) {
			case nil:
				return b(f)
			case int, float64, string, bool:
				return v, true
			case map[string]any:
				if v == nil {
					return b(f)
				}
				return v, true
			case []any:
				if v == nil {
					return b(f)
				}
				return v, true
			}
			return nil, false
		}}, true
	case "==", "!=":
		return c.equal(l, r, x.Operator == "!="), true
	case "<", ">", "<=", ">=":
		return c.compare(x.Operator, l, r), true
	case "+", "-", "*":
		if l.k == kInt && r.k == kInt {
			// left to the machine's own operation by the exact patcher:
			// no value of the operands overflows (see exact.bounds)
			return fn{k: kInt, i: intOp(nativeOps[x.Operator], l.i, r.i)}, true
		}
		if l.k == kString && r.k == kString && x.Operator == "+" {
			a, b := l.s, r.s
			return fn{k: kString, s: func(f *Frame) (string, bool) {
				x, ok := a(f)
				if !ok {
					return "", false
				}
				y, ok := b(f)
				return x + y, ok
			}}, true
		}
		return c.arith(x.Operator, l, r, false), true
	case "/":
		return c.arith("/", l, r, false), true
	case "%":
		a, b := c.any(l), c.any(r)
		return fn{k: kAny, a: func(f *Frame) (any, bool) {
			x, ok := a(f)
			if !ok {
				return nil, false
			}
			y, ok := b(f)
			if !ok {
				return nil, false
			}
			xi, ok := x.(int)
			if !ok {
				return nil, false
			}
			yi, ok := y.(int)
			if !ok || yi == 0 {
				return nil, false
			}
			return xi % yi, true
		}}, true
	}
	return fn{}, false
}

// equal is == (or != with not) as the machine's Equal decides it for
// scalars and nil: numbers by value (an int and a float too), strings and
// bools by value, values of different kinds unequal, nil equal to nil
// only. Anything else gives up.
func (c *fastCompiler) equal(l, r fn, not bool) fn {
	if l.k == kInt && r.k == kInt {
		a, b := l.i, r.i
		return fn{k: kBool, b: func(f *Frame) (bool, bool) {
			x, ok := a(f)
			if !ok {
				return false, false
			}
			y, ok := b(f)
			return (x == y) != not, ok
		}}
	}
	if l.k == kString && r.k == kString {
		a, b := l.s, r.s
		return fn{k: kBool, b: func(f *Frame) (bool, bool) {
			x, ok := a(f)
			if !ok {
				return false, false
			}
			y, ok := b(f)
			return (x == y) != not, ok
		}}
	}
	a, b := c.any(l), c.any(r)
	return fn{k: kBool, b: func(f *Frame) (bool, bool) {
		x, ok := a(f)
		if !ok {
			return false, false
		}
		y, ok := b(f)
		if !ok {
			return false, false
		}
		eq, ok := scalarEqual(x, y)
		return eq != not, ok
	}}
}

func scalarEqual(x, y any) (eq, ok bool) {
	switch xv := x.(type) {
	case nil:
		switch y.(type) {
		case nil:
			return true, true
		case int, float64, string, bool:
			return false, true
		}
	case int:
		switch yv := y.(type) {
		case int:
			return xv == yv, true
		case float64:
			return float64(xv) == yv, true
		case nil, string, bool:
			return false, true
		}
	case float64:
		switch yv := y.(type) {
		case int:
			return xv == float64(yv), true
		case float64:
			return xv == yv, true
		case nil, string, bool:
			return false, true
		}
	case string:
		switch yv := y.(type) {
		case string:
			return xv == yv, true
		case nil, int, float64, bool:
			return false, true
		}
	case bool:
		switch yv := y.(type) {
		case bool:
			return xv == yv, true
		case nil, int, float64, string:
			return false, true
		}
	}
	return false, false
}

// compare is <, >, <= or >= over numbers (an int and a float compare as
// floats) or strings; anything else gives up.
func (c *fastCompiler) compare(op string, l, r fn) fn {
	if l.k == kInt && r.k == kInt {
		a, b := l.i, r.i
		var cmp func(x, y int) bool
		switch op {
		case "<":
			cmp = func(x, y int) bool { return x < y }
		case ">":
			cmp = func(x, y int) bool { return x > y }
		case "<=":
			cmp = func(x, y int) bool { return x <= y }
		default:
			cmp = func(x, y int) bool { return x >= y }
		}
		if k, ok := r.constInt(); ok {
			// a field against a constant, the common condition
			switch op {
			case "<":
				return fn{k: kBool, b: func(f *Frame) (bool, bool) { x, ok := a(f); return x < k, ok }}
			case ">":
				return fn{k: kBool, b: func(f *Frame) (bool, bool) { x, ok := a(f); return x > k, ok }}
			case "<=":
				return fn{k: kBool, b: func(f *Frame) (bool, bool) { x, ok := a(f); return x <= k, ok }}
			default:
				return fn{k: kBool, b: func(f *Frame) (bool, bool) { x, ok := a(f); return x >= k, ok }}
			}
		}
		return fn{k: kBool, b: func(f *Frame) (bool, bool) {
			x, ok := a(f)
			if !ok {
				return false, false
			}
			y, ok := b(f)
			return cmp(x, y), ok
		}}
	}
	a, b := c.any(l), c.any(r)
	return fn{k: kBool, b: func(f *Frame) (bool, bool) {
		x, ok := a(f)
		if !ok {
			return false, false
		}
		y, ok := b(f)
		if !ok {
			return false, false
		}
		var s int // sign of x - y
		switch xv := x.(type) {
		case int:
			switch yv := y.(type) {
			case int:
				s = cmpOrdered(xv, yv)
			case float64:
				s = cmpFloat(float64(xv), yv)
			default:
				return false, false
			}
		case float64:
			switch yv := y.(type) {
			case int:
				s = cmpFloat(xv, float64(yv))
			case float64:
				s = cmpFloat(xv, yv)
			default:
				return false, false
			}
		case string:
			yv, ok := y.(string)
			if !ok {
				return false, false
			}
			s = cmpOrdered(xv, yv)
		default:
			return false, false
		}
		switch op {
		case "<":
			return s == -1, true
		case ">":
			return s == 1, true
		case "<=":
			return s == -1 || s == 0, true
		}
		return s == 1 || s == 0, true
	}}
}

// cmpFloat is -1, 0 or 1 as x is less than, equal to or greater than y,
// and 2 when either is NaN (no comparison holds).
func cmpFloat(x, y float64) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	case x == y:
		return 0
	}
	return 2
}

func cmpOrdered[T int | string](x, y T) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}
