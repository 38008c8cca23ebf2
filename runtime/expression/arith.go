package expression

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"

	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/builtin"
	"github.com/expr-lang/expr/vm/runtime"
)

// Integer arithmetic is exact or an error. The expression machine adds,
// subtracts, multiplies and negates ints as Go does, wrapping around on
// overflow, so a counter at the largest int would become the smallest and
// be committed. The checker below rewrites those operations whose operands
// are, or may be, integers into calls that fail on overflow instead; the
// rest (floats, strings, lists, a mix) keep the machine's own operation.
// So do abs (of the smallest int) and int (of a float no int holds).

// overflow is the error of an integer operation whose result does not
// fit in 64 bits.
type overflow struct {
	Op   string
	A, B int // B unused for negation
}

func (e *overflow) Error() string {
	if e.Op == "neg" {
		return fmt.Sprintf("integer overflow: -(%d) is outside the 64-bit integer range", e.A)
	}
	return fmt.Sprintf("integer overflow: %d %s %d is outside the 64-bit integer range", e.A, e.Op, e.B)
}

func addInt(a, b int) (int, error) {
	c := a + b
	if (c > a) != (b > 0) {
		return 0, &overflow{"+", a, b}
	}
	return c, nil
}

func subInt(a, b int) (int, error) {
	c := a - b
	if (c < a) != (b > 0) {
		return 0, &overflow{"-", a, b}
	}
	return c, nil
}

func mulInt(a, b int) (int, error) {
	if a == 0 || b == 0 {
		return 0, nil
	}
	c := a * b
	if c/b != a || (a == -1 && b == math.MinInt) || (b == -1 && a == math.MinInt) {
		return 0, &overflow{"*", a, b}
	}
	return c, nil
}

// The exact operations are Go functions of types the machine calls
// directly (no argument list is built); they panic on overflow, which the
// machine turns into the evaluation's error.
func exactly(f func(a, b int) (int, error), other func(a, b any) any) func(a, b any) any {
	return func(a, b any) any {
		if x, ok := asInt(a); ok {
			if y, ok := asInt(b); ok {
				c, err := f(x, y)
				if err != nil {
					panic(err)
				}
				return c
			}
		}
		return other(a, b)
	}
}

// ints is the exact operation over two ints.
func ints(f func(a, b int) (int, error)) func(a, b int) int {
	return func(a, b int) int {
		c, err := f(a, b)
		if err != nil {
			panic(err)
		}
		return c
	}
}

// operation is an operator's exact forms: over operands the checker knows
// are ints (the result stays an int for it), and over others.
type operation struct {
	exact func(a, b int) (int, error)
	ints  func(a, b int) int
	any   func(a, b any) any
}

var checked = map[string]operation{
	"+": {addInt, ints(addInt), exactly(addInt, runtime.Add)},
	"-": {subInt, ints(subInt), exactly(subInt, runtime.Subtract)},
	"*": {mulInt, ints(mulInt), exactly(mulInt, runtime.Multiply)},
}

func negateInt(a int) int {
	if a == math.MinInt {
		panic(&overflow{Op: "neg", A: a})
	}
	return -a
}

func negate(a any) any {
	if x, ok := asInt(a); ok {
		if x == math.MinInt {
			panic(&overflow{Op: "neg", A: x})
		}
		return -x
	}
	return runtime.Negate(a)
}

// abs of the smallest int is itself in Go; here it is an overflow.
func absInt(a int) int {
	if a < 0 {
		return negateInt(a)
	}
	return a
}

func absAny(a any) any {
	if x, ok := asInt(a); ok {
		return absInt(x)
	}
	return builtin.Abs(a)
}

// toInt is int() refusing a float that no int holds (beyond the 64-bit
// range, NaN, an infinity), which Go converts to whatever the machine
// gives, such as the smallest int for 1e19.
func toInt(a any) int {
	var f float64
	switch x := a.(type) {
	case float64:
		f = x
	case float32:
		f = float64(x)
	default:
		return builtin.Int(a).(int)
	}
	if !(f >= -(1<<63) && f < 1<<63) {
		panic(fmt.Errorf("integer overflow: int(%v) is outside the 64-bit integer range", f))
	}
	return int(f)
}

func asInt(v any) (int, bool) {
	switch x := v.(type) {
	case int:
		return x, true
	case int64:
		return int(x), true
	}
	return 0, false
}

// exact rewrites +, -, * and unary - over operands that are ints, or of
// a type the checker cannot tell, into the exact operations. It records
// the calls it makes by operator ("neg" for negation), for the fast path.
type exact struct {
	ops map[*ast.CallNode]opCall
	env *Env
}

// direct is a call of fn with args whose callee carries fn's type from
// the start. The machine calls a callee left untyped by reflection, at
// every evaluation, and the checker does not type every call patched in
// (one in an argument of concat stayed untyped); a callee typed here, of
// one of the machine's common signatures, is called directly.
func direct(fn any, args ...ast.Node) *ast.CallNode {
	callee := &ast.ConstantNode{Value: fn}
	callee.SetType(reflect.TypeOf(fn))
	return &ast.CallNode{Callee: callee, Arguments: args}
}

// opCall is an exact operation the patcher put in: its operator, and
// whether it is the form over ints (whose operands the machine asserts
// are ints).
type opCall struct {
	op   string
	ints bool
}

func (e *exact) Visit(n *ast.Node) {
	switch x := (*n).(type) {
	case *ast.BinaryNode:
		if e.byValue(n, x) {
			return
		}
		op, ok := checked[x.Operator]
		if !ok || !mayBeInt(x.Left.Type()) || !mayBeInt(x.Right.Type()) {
			return
		}
		if _, _, ok := e.bounds(x); ok {
			// no value the operands can hold overflows: the machine's own
			// operation is exact here
			return
		}
		if a, ok := x.Left.(*ast.IntegerNode); ok {
			if b, ok := x.Right.(*ast.IntegerNode); ok {
				if c, err := op.exact(a.Value, b.Value); err == nil {
					ast.Patch(n, &ast.IntegerNode{Value: c}) // folded, as the machine would
					return
				}
			}
		}
		var fn any = op.any
		if allInts(x.Left, x.Right) {
			fn = op.ints
		}
		call := direct(fn, x.Left, x.Right)
		e.ops[call] = opCall{x.Operator, allInts(x.Left, x.Right)}
		ast.Patch(n, call)
	case *ast.BuiltinNode:
		switch {
		case x.Name == "int" && len(x.Arguments) == 1 && mayBeFloat(x.Arguments[0].Type()):
			ast.Patch(n, direct(toInt, x.Arguments...))
			return
		case x.Name == "abs" && len(x.Arguments) == 1 && mayBeInt(x.Arguments[0].Type()):
			var fn any = absAny
			if allInts(x.Arguments[0]) {
				fn = absInt
			}
			ast.Patch(n, direct(fn, x.Arguments...))
			return
		}
		// sum adds with the machine's own operation: the same as a reduce
		// with the exact one
		if x.Name != "sum" || len(x.Arguments) == 0 || len(x.Arguments) > 2 {
			return
		}
		var item ast.Node = &ast.PointerNode{}
		if len(x.Arguments) == 2 {
			p, ok := x.Arguments[1].(*ast.PredicateNode)
			if !ok {
				return
			}
			item = p.Node
		}
		add := direct(checked["+"].any, &ast.PointerNode{Name: "acc"}, item)
		ast.Patch(n, &ast.BuiltinNode{Name: "reduce", Arguments: []ast.Node{x.Arguments[0], &ast.PredicateNode{Node: add}, &ast.IntegerNode{Value: 0}}})
	case *ast.UnaryNode:
		if x.Operator != "-" || !mayBeInt(x.Node.Type()) {
			return
		}
		if _, _, ok := e.bounds(x); ok {
			return
		}
		if a, ok := x.Node.(*ast.IntegerNode); ok && a.Value != math.MinInt {
			ast.Patch(n, &ast.IntegerNode{Value: -a.Value})
			return
		}
		var fn any = negate
		if allInts(x.Node) {
			fn = negateInt
		}
		call := direct(fn, x.Node)
		e.ops[call] = opCall{"neg", allInts(x.Node)}
		ast.Patch(n, call)
	}
}

// allInts reports whether the checker knows every operand is an int. The
// machine then calls the operation over ints directly, as it does for
// Go functions of that type; the values it is given are ints, since state,
// input and node outputs are normalised to the schema's types.
func allInts(operands ...ast.Node) bool {
	for _, o := range operands {
		if t := o.Type(); t == nil || t.Kind() != reflect.Int {
			return false
		}
	}
	return true
}

// mayBeFloat reports whether a value of type t may be a float at run time.
func mayBeFloat(t reflect.Type) bool {
	if t == nil {
		return true
	}
	switch t.Kind() {
	case reflect.Float64, reflect.Float32, reflect.Interface:
		return true
	case reflect.Pointer:
		return t.Elem().Kind() == reflect.Float64
	}
	return false
}

// mayBeInt reports whether a value of type t may be an int at run time.
func mayBeInt(t reflect.Type) bool {
	if t == nil {
		return true
	}
	switch t.Kind() {
	case reflect.Int:
		return true
	case reflect.Interface:
		return true
	case reflect.Pointer:
		return t.Elem().Kind() == reflect.Int
	}
	return false
}

// numeric records, bottom-up over the checked tree, which nodes give a
// whole number (an int, a whole float literal, round, floor, ceil or int
// of anything, and +, -, *, %, ?: and ?? over whole numbers) and which a
// number that may have a fraction (a float, a division, a power, a mean
// or median). It runs before the tree is rewritten (see exact), on the
// checker's types; root is the last node visited, the tree's root.
type numeric struct {
	of   map[ast.Node]numKind
	root ast.Node
	// items is the JSON type of every element of the root, when it is a
	// list literal whose elements share one ("" when not known).
	items string
	// leaves are, per node, the values it can yield: itself, or the
	// branches of ?: and ?? (see Program.Branches).
	leaves map[ast.Node][]branch
}

// branch is one value an expression can yield, through its choices (?:,
// ??): its JSON type ("" when not known) and its rune offsets.
type branch struct {
	typ      string
	from, to int
}

// numKind is what kind of number a node gives.
type numKind int

const (
	numUnknown numKind = iota // not a number, or not known
	numWhole                  // a whole number
	numAny                    // a number, which may have a fraction
)

func (v *numeric) Visit(n *ast.Node) {
	v.of[*n] = v.kind(*n)
	v.root = *n
	if v.leaves == nil {
		v.leaves = map[ast.Node][]branch{}
	}
	if x, ok := (*n).(*ast.ConditionalNode); ok {
		v.leaves[*n] = append(slices.Clone(v.leaves[x.Exp1]), v.leaves[x.Exp2]...)
	} else if x, ok := (*n).(*ast.BinaryNode); ok && x.Operator == "??" {
		v.leaves[*n] = append(slices.Clone(v.leaves[x.Left]), v.leaves[x.Right]...)
	} else {
		loc := (*n).Location()
		v.leaves[*n] = []branch{{typ: v.jsonType(*n), from: loc.From, to: loc.To}}
	}
	v.items = ""
	if a, ok := (*n).(*ast.ArrayNode); ok {
		v.items = v.itemType(a)
	}
}

// itemType is the JSON type all of a list literal's elements share: a
// number when one may have a fraction, an integer when all are whole
// ("" when they differ or one is not known).
func (v *numeric) itemType(a *ast.ArrayNode) string {
	t := ""
	for _, e := range a.Nodes {
		et := ""
		switch k := v.of[e]; {
		case k == numWhole:
			et = "integer"
		case k == numAny:
			et = "number"
		default:
			if typ := e.Type(); typ != nil {
				switch typ.Kind() {
				case reflect.String:
					et = "string"
				case reflect.Bool:
					et = "boolean"
				}
			}
		}
		switch {
		case et == "":
			return ""
		case t == "" || t == et:
			t = et
		case t == "integer" && et == "number" || t == "number" && et == "integer":
			t = "number"
		default:
			return ""
		}
	}
	return t
}

// jsonType is the JSON type of what n gives, "" when not known.
func (v *numeric) jsonType(n ast.Node) string {
	switch v.of[n] {
	case numWhole:
		return "integer"
	case numAny:
		return "number"
	}
	if _, ok := n.(*ast.NilNode); ok {
		return "null"
	}
	t := n.Type()
	if t == nil {
		return ""
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Map, reflect.Struct:
		return "object"
	}
	return ""
}

// both is the kind of an operation over two numbers: whole when both
// are, a number when both are numbers.
func both(a, b numKind) numKind {
	if a == numUnknown || b == numUnknown {
		return numUnknown
	}
	return max(a, b)
}

func (v *numeric) kind(n ast.Node) numKind {
	if x, ok := n.(*ast.BuiltinNode); ok && (x.Name == "abs" || x.Name == "max" || x.Name == "min") && len(x.Arguments) > 1 {
		// what the operands are decides (the checker types max(1, 2.5)
		// as its first operand, an int; the machine gives 2.5)
		k := numWhole
		for _, a := range x.Arguments {
			k = both(k, v.of[a])
		}
		if k != numUnknown {
			return k
		}
	}
	t := n.Type()
	if t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil && t.Kind() == reflect.Int {
		return numWhole
	}
	float := t != nil && t.Kind() == reflect.Float64
	switch x := n.(type) {
	case *ast.IntegerNode:
		return numWhole
	case *ast.FloatNode:
		if x.Value == math.Trunc(x.Value) && !math.IsInf(x.Value, 0) {
			return numWhole
		}
		return numAny
	case *ast.ConstantNode:
		switch c := x.Value.(type) {
		case int:
			return numWhole
		case float64:
			if c == math.Trunc(c) && !math.IsInf(c, 0) {
				return numWhole
			}
			return numAny
		}
	case *ast.UnaryNode:
		if x.Operator == "-" || x.Operator == "+" {
			return v.of[x.Node]
		}
	case *ast.BinaryNode:
		switch x.Operator {
		case "+", "-", "*", "??":
			if k := both(v.of[x.Left], v.of[x.Right]); k != numUnknown {
				return k
			}
		case "%":
			return numWhole
		case "/", "**", "^":
			return numAny
		}
	case *ast.ConditionalNode:
		if k := both(v.of[x.Exp1], v.of[x.Exp2]); k != numUnknown {
			return k
		}
	case *ast.BuiltinNode:
		switch x.Name {
		case "round", "floor", "ceil", "int":
			return numWhole
		case "mean", "median", "float":
			return numAny
		case "abs", "max", "min":
			k := numWhole
			for _, a := range x.Arguments {
				k = both(k, v.of[a])
			}
			if len(x.Arguments) > 0 && k != numUnknown {
				return k
			}
		}
	}
	if float {
		return numAny
	}
	return numUnknown
}

// bounds is the range of an int expression that no value of its operands
// can take outside: an int literal, a state field whose schema bounds it
// (minimum and maximum) and gives it a default (so it is never unset),
// and +, - and * of those whose range the computation proves within the
// 64-bit range. ok is false for anything else. Operations within bounds
// keep the machine's own operation: checking them for an overflow that
// cannot happen is all cost.
func (e *exact) bounds(n ast.Node) (lo, hi int, ok bool) {
	switch x := n.(type) {
	case *ast.IntegerNode:
		return x.Value, x.Value, true
	case *ast.IdentifierNode, *ast.MemberNode:
		// state.NAME, read as a member or, flattened, as a variable
		field, isState := stateField(x)
		if id, ok := x.(*ast.IdentifierNode); ok {
			field, isState = strings.CutPrefix(id.Value, "state.")
		}
		if !isState || e.env == nil || e.env.shapes["state"] == nil {
			return 0, 0, false
		}
		s := e.env.shapes["state"].Props[field]
		if !s.Is("integer") || !s.HasDefault || s.Minimum == nil || s.Maximum == nil {
			return 0, 0, false
		}
		const limit = 1 << 53 // exact in a float64, far from overflowing
		min, max := math.Ceil(*s.Minimum), math.Floor(*s.Maximum)
		if s.ExclusiveMinimum && min == *s.Minimum {
			min++
		}
		if s.ExclusiveMaximum && max == *s.Maximum {
			max--
		}
		if min < -limit || max > limit || min > max {
			return 0, 0, false
		}
		return int(min), int(max), true
	case *ast.UnaryNode:
		if x.Operator != "-" {
			return 0, 0, false
		}
		l, h, ok := e.bounds(x.Node)
		if !ok || l == math.MinInt {
			return 0, 0, false
		}
		return -h, -l, true
	case *ast.BinaryNode:
		l1, h1, ok1 := e.bounds(x.Left)
		l2, h2, ok2 := e.bounds(x.Right)
		if !ok1 || !ok2 {
			return 0, 0, false
		}
		var corners []int
		switch x.Operator {
		case "+":
			corners = []int{}
			for _, p := range [][2]int{{l1, l2}, {h1, h2}} {
				c, err := addInt(p[0], p[1])
				if err != nil {
					return 0, 0, false
				}
				corners = append(corners, c)
			}
		case "-":
			for _, p := range [][2]int{{l1, h2}, {h1, l2}} {
				c, err := subInt(p[0], p[1])
				if err != nil {
					return 0, 0, false
				}
				corners = append(corners, c)
			}
		case "*":
			for _, p := range [][2]int{{l1, l2}, {l1, h2}, {h1, l2}, {h1, h2}} {
				c, err := mulInt(p[0], p[1])
				if err != nil {
					return 0, 0, false
				}
				corners = append(corners, c)
			}
		default:
			return 0, 0, false
		}
		return slices.Min(corners), slices.Max(corners), true
	}
	return 0, 0, false
}

// stateField reports whether n reads state.NAME, and NAME.
func stateField(n ast.Node) (string, bool) {
	m, ok := n.(*ast.MemberNode)
	if !ok {
		return "", false
	}
	id, ok := m.Node.(*ast.IdentifierNode)
	prop, isStr := m.Property.(*ast.StringNode)
	if !ok || !isStr || id.Value != "state" {
		return "", false
	}
	return prop.Value, true
}
