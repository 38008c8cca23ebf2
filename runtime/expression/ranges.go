// The ranges of numbers: a literal is its value, a field its schema's
// bounds, and +, -, *, %, min, max, abs, rounding, len and a choice's
// branches carry them through, so that a computed number is known to
// stay within a field's bounds where it does.

package expression

import (
	"math"

	"github.com/expr-lang/expr/ast"
	"github.com/trellisflow/trellis/runtime/schema"
)

// bounds are a number's lower and upper bounds (nil: none known).
type bounds struct{ lo, hi *float64 }

func boundsOf(s *schema.Shape) bounds {
	if s == nil {
		return bounds{}
	}
	return bounds{s.Minimum, s.Maximum}
}

func num(f float64) *float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil
	}
	return &f
}

// ranged is the shape s with bounds b (s's type kept).
func ranged(s *schema.Shape, b bounds) *schema.Shape {
	if b.lo == nil && b.hi == nil {
		return s
	}
	c := *s
	c.Minimum, c.Maximum, c.ExclusiveMinimum, c.ExclusiveMaximum = b.lo, b.hi, false, false
	return &c
}

// combine applies op to both bounds where they are known, the result's
// bounds the least and greatest of the corners.
func combine(a, b bounds, op func(x, y float64) float64) bounds {
	if a.lo == nil || a.hi == nil || b.lo == nil || b.hi == nil {
		return bounds{}
	}
	c := []float64{op(*a.lo, *b.lo), op(*a.lo, *b.hi), op(*a.hi, *b.lo), op(*a.hi, *b.hi)}
	lo, hi := c[0], c[0]
	for _, x := range c[1:] {
		lo, hi = math.Min(lo, x), math.Max(hi, x)
	}
	return bounds{num(lo), num(hi)}
}

// add is a + b, each side where both are known.
func add(a, b bounds) bounds {
	var out bounds
	if a.lo != nil && b.lo != nil {
		out.lo = num(*a.lo + *b.lo)
	}
	if a.hi != nil && b.hi != nil {
		out.hi = num(*a.hi + *b.hi)
	}
	return out
}

func negated(b bounds) bounds {
	var out bounds
	if b.hi != nil {
		out.lo = num(-*b.hi)
	}
	if b.lo != nil {
		out.hi = num(-*b.lo)
	}
	return out
}

// arithRange is the range of a binary arithmetic node.
func (t *typer) arithRange(x *ast.BinaryNode, l, r *schema.Shape) bounds {
	a, b := boundsOf(l), boundsOf(r)
	switch x.Operator {
	case "+":
		return add(a, b)
	case "-":
		return add(a, negated(b))
	case "*":
		return combine(a, b, func(x, y float64) float64 { return x * y })
	case "/":
		// by a divisor known to be positive
		if b.lo == nil || b.hi == nil || *b.lo <= 0 {
			return bounds{}
		}
		var out bounds
		if a.lo != nil {
			d := *b.hi
			if *a.lo < 0 {
				d = *b.lo
			}
			out.lo = num(*a.lo / d)
		}
		if a.hi != nil {
			d := *b.lo
			if *a.hi < 0 {
				d = *b.hi
			}
			out.hi = num(*a.hi / d)
		}
		return out
	case "%":
		k, ok := x.Right.(*ast.IntegerNode)
		if !ok || k.Value <= 0 {
			return bounds{}
		}
		m := float64(k.Value - 1)
		if a.lo != nil && *a.lo >= 0 {
			return bounds{num(0), num(m)}
		}
		return bounds{num(-m), num(m)}
	}
	return bounds{}
}

// minMax is the range of min (least) or max of values of ranges bs: min
// is at most each one's upper bound, and at least the least lower one.
func minMax(bs []bounds, least bool) bounds {
	var out bounds
	allLo, allHi := true, true
	for i, b := range bs {
		if b.lo == nil {
			allLo = false
		}
		if b.hi == nil {
			allHi = false
		}
		pick := func(cur, x *float64, smaller bool) *float64 {
			if x == nil {
				return cur
			}
			if cur == nil || smaller == (*x < *cur) {
				return x
			}
			return cur
		}
		if i == 0 {
			out = b
			continue
		}
		if least {
			out.hi = pick(out.hi, b.hi, true) // any known upper bound caps min
			out.lo = pick(out.lo, b.lo, true)
		} else {
			out.lo = pick(out.lo, b.lo, false) // any known lower bound floors max
			out.hi = pick(out.hi, b.hi, false)
		}
	}
	if least && !allLo {
		out.lo = nil
	}
	if !least && !allHi {
		out.hi = nil
	}
	return out
}

// rounded widens b to whole numbers.
func rounded(b bounds) bounds {
	var out bounds
	if b.lo != nil {
		out.lo = num(math.Floor(*b.lo))
	}
	if b.hi != nil {
		out.hi = num(math.Ceil(*b.hi))
	}
	return out
}

// Within reports whether every number of shape s is within the bounds
// of shape dst, as far as s's range is known.
func Within(s, dst *schema.Shape) bool {
	if dst == nil {
		return true
	}
	if m := dst.Minimum; m != nil && (s.Minimum == nil || *s.Minimum < *m || dst.ExclusiveMinimum && *s.Minimum == *m) {
		return false
	}
	if m := dst.Maximum; m != nil && (s.Maximum == nil || *s.Maximum > *m || dst.ExclusiveMaximum && *s.Maximum == *m) {
		return false
	}
	return true
}

// MultipleOf reports whether every number the expression yields is known
// to be a multiple of m: a literal that is, a field whose own step is a
// multiple of m, a product with such a factor, a sum or difference of
// such, either branch of a choice.
func (p *Program) MultipleOf(m float64) bool {
	tree, err := p.parsed()
	if err != nil || m <= 0 {
		return false
	}
	t := typeTree(p.src, tree.Node, p.env)
	return t.multipleOf(tree.Node, m)
}

func (t *typer) multipleOf(n ast.Node, m float64) bool {
	divides := func(v float64) bool { return v == math.Trunc(v/m)*m }
	switch x := n.(type) {
	case *ast.IntegerNode:
		return divides(float64(x.Value))
	case *ast.FloatNode:
		return divides(x.Value)
	case *ast.UnaryNode:
		return x.Operator == "-" && t.multipleOf(x.Node, m)
	case *ast.BinaryNode:
		switch x.Operator {
		case "*":
			return t.multipleOf(x.Left, m) || t.multipleOf(x.Right, m)
		case "+", "-":
			return t.multipleOf(x.Left, m) && t.multipleOf(x.Right, m)
		case "??":
			return t.multipleOf(x.Left, m) && t.multipleOf(x.Right, m)
		}
	case *ast.ConditionalNode:
		return t.multipleOf(x.Exp1, m) && t.multipleOf(x.Exp2, m)
	case *ast.VariableDeclaratorNode:
		return t.multipleOf(x.Expr, m)
	}
	if s := t.types[n]; s != nil && s.MultipleOf != nil {
		return divides(*s.MultipleOf)
	}
	return false
}
