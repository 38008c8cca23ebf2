package expression

import (
	"math"
	"reflect"

	"github.com/expr-lang/expr/ast"
)

// The fast path. A program whose every variable is a slotted field
// (state.NAME, input.NAME, see Slotted) and whose every operation is a
// plain one over scalars (arithmetic, comparison, logic, conditionals,
// ??, member reads of objects) is also compiled into Go closures that
// read the fields straight from a Frame, by slot. They compute what the
// machine computes, for the operand types they know (int, float64,
// string, bool, nil, objects): each closure checks the types it meets and
// gives up on anything else, as on an integer overflow, a division by
// zero or a read from a value that is not an object; the machine then
// runs the program over the variable map and decides, so that every
// error and every unusual case is the machine's own. The closures box no
// intermediate value: an int sum of ints stays an int until the end.

// Frame holds the values that programs compiled against a slotted
// environment read by slot: the state and the input fields, each at the
// index of the field in the order given to Slotted (nil: unset).
type Frame struct {
	State, Input []any
}

// Source gives the variable map a program runs over when the fast path
// gives up (see Machine.EvalFrame).
type Source interface {
	Vars() map[string]any
}

// Slotted returns a copy of e whose object variables state and input
// (bound WithFields) read their declared fields from a Frame: field f of
// either at the index f has in order.
func (e *Env) Slotted(order []string) *Env {
	n := e.clone()
	n.slots = make(map[string]int, len(order))
	for i, f := range order {
		n.slots[f] = i
	}
	return n
}

// EvalFrame runs p over the frame when its fast path can, else over the
// variables src gives.
func (m *Machine) EvalFrame(p *Program, f *Frame, src Source) (any, error) {
	if p.hasLit {
		return p.lit, nil
	}
	switch {
	case p.fastInt != nil:
		if v, ok := p.fastInt(f); ok {
			return v, nil
		}
	case p.fast != nil:
		if v, ok := p.fast(f); ok {
			return v, nil
		}
	}
	return m.Eval(p, src.Vars())
}

// EvalBoolFrame runs a condition as EvalFrame does.
func (m *Machine) EvalBoolFrame(p *Program, f *Frame, src Source) (bool, error) {
	if p.fastBool != nil {
		if b, ok := p.fastBool(f); ok {
			return b, nil
		}
	}
	v, err := m.EvalFrame(p, f, src)
	if err != nil {
		return false, err
	}
	return asBool(p, v)
}

// Fast reports whether p has a fast path.
func (p *Program) Fast() bool { return p.fast != nil }

// kinds of a fast closure's value, as far as the checker knows it
const (
	kAny = iota
	kInt
	kString
	kBool
)

// fn is a compiled fast closure: one of its functions, by kind. Each
// returns false when it gives up.
type fn struct {
	k int
	// konst marks an int constant, kv its value
	konst bool
	kv    int
	a     func(*Frame) (any, bool)
	i     func(*Frame) (int, bool)
	s     func(*Frame) (string, bool)
	b     func(*Frame) (bool, bool)
}

// fastCompiler compiles a checked, patched tree into closures.
type fastCompiler struct {
	env *Env
	// ops are the calls the exact patcher made, by operator
	ops map[*ast.CallNode]opCall
}

// compileFast compiles the program's tree into p's fast path; none when
// some part of it has no fast form.
func compileFast(p *Program, root ast.Node, env *Env, ops map[*ast.CallNode]opCall, wantBool bool) {
	if len(env.slots) == 0 {
		return
	}
	c := &fastCompiler{env: env, ops: ops}
	f, ok := c.compile(root)
	if !ok {
		return
	}
	if wantBool && f.k != kBool {
		// the machine converts the value to a bool, failing on anything
		// else: the fast path answers for bools only
		f = typed(kBool, c.any(f))
	}
	p.fast = c.any(f)
	switch f.k {
	case kInt:
		p.fastInt = f.i
	case kBool:
		p.fastBool = f.b
	}
}

func kindOf(t reflect.Type) int {
	if t == nil {
		return kAny
	}
	switch t.Kind() {
	case reflect.Int:
		return kInt
	case reflect.String:
		return kString
	case reflect.Bool:
		return kBool
	}
	return kAny
}

func (c *fastCompiler) compile(n ast.Node) (fn, bool) {
	switch x := n.(type) {
	case *ast.NilNode:
		return constant(nil), true
	case *ast.IntegerNode:
		return intConstant(x.Value), true
	case *ast.FloatNode:
		return constant(x.Value), true
	case *ast.StringNode:
		v := x.Value
		return fn{k: kString, s: func(*Frame) (string, bool) { return v, true }}, true
	case *ast.BoolNode:
		v := x.Value
		return fn{k: kBool, b: func(*Frame) (bool, bool) { return v, true }}, true
	case *ast.ConstantNode:
		switch v := x.Value.(type) {
		case nil, float64:
			return constant(v), true
		case int:
			return intConstant(v), true
		case string:
			return fn{k: kString, s: func(*Frame) (string, bool) { return v, true }}, true
		case bool:
			return fn{k: kBool, b: func(*Frame) (bool, bool) { return v, true }}, true
		}
		return fn{}, false
	case *ast.IdentifierNode:
		return c.identifier(x)
	case *ast.MemberNode:
		return c.member(x)
	case *ast.UnaryNode:
		return c.unary(x)
	case *ast.BinaryNode:
		return c.binary(x)
	case *ast.ConditionalNode:
		return c.conditional(x)
	case *ast.CallNode:
		return c.call(x)
	}
	return fn{}, false
}

func intConstant(v int) fn {
	return fn{k: kInt, konst: true, kv: v, i: func(*Frame) (int, bool) { return v, true }}
}

func constant(v any) fn {
	return fn{k: kAny, a: func(*Frame) (any, bool) { return v, true }}
}

// identifier reads a slotted field.
func (c *fastCompiler) identifier(x *ast.IdentifierNode) (fn, bool) {
	return c.identifierAs(x, kindOf(x.Type()))
}

// identifierAs reads a slotted field as a value of kind k.
func (c *fastCompiler) identifierAs(x *ast.IdentifierNode, k int) (fn, bool) {
	var input bool
	var field string
	switch {
	case len(x.Value) > 6 && x.Value[:6] == "state." && c.env.flat["state"]:
		field = x.Value[6:]
	case len(x.Value) > 6 && x.Value[:6] == "input." && c.env.flat["input"]:
		field, input = x.Value[6:], true
	default:
		return fn{}, false
	}
	i, ok := c.env.slots[field]
	if !ok {
		return fn{}, false
	}
	return slotRead(k, input, i), true
}

// slotRead reads slot i of the frame's state (or input), as a value of
// kind k: a value of another type gives up.
func slotRead(k int, input bool, i int) fn {
	slots := func(f *Frame) []any { return f.State }
	if input {
		slots = func(f *Frame) []any { return f.Input }
	}
	switch {
	case k == kInt && !input:
		return fn{k: kInt, i: func(f *Frame) (int, bool) {
			if i >= len(f.State) {
				return 0, false
			}
			n, ok := f.State[i].(int)
			return n, ok
		}}
	case !input:
		return typed(k, func(f *Frame) (any, bool) {
			if i >= len(f.State) {
				return nil, false
			}
			return f.State[i], true
		})
	}
	return typed(k, func(f *Frame) (any, bool) {
		s := slots(f)
		if i >= len(s) {
			return nil, false
		}
		return s[i], true
	})
}

// typed narrows a closure of any value to the kind the checker gives
// it: a value of another type gives up.
func typed(k int, a func(*Frame) (any, bool)) fn {
	switch k {
	case kInt:
		return fn{k: kInt, i: func(f *Frame) (int, bool) {
			v, ok := a(f)
			if !ok {
				return 0, false
			}
			n, ok := v.(int)
			return n, ok
		}}
	case kString:
		return fn{k: kString, s: func(f *Frame) (string, bool) {
			v, ok := a(f)
			if !ok {
				return "", false
			}
			s, ok := v.(string)
			return s, ok
		}}
	case kBool:
		return fn{k: kBool, b: func(f *Frame) (bool, bool) {
			v, ok := a(f)
			if !ok {
				return false, false
			}
			b, ok := v.(bool)
			return b, ok
		}}
	}
	return fn{k: kAny, a: a}
}

// boxed is g, its value boxed.
func boxed[T int | string | bool](g func(*Frame) (T, bool)) func(*Frame) (any, bool) {
	return func(fr *Frame) (any, bool) {
		v, ok := g(fr)
		if !ok {
			return nil, false
		}
		return v, true
	}
}

// any is f's value boxed.
func (c *fastCompiler) any(f fn) func(*Frame) (any, bool) {
	switch f.k {
	case kInt:
		return boxed(f.i)
	case kString:
		return boxed(f.s)
	case kBool:
		return boxed(f.b)
	}
	return f.a
}

// boolean is f as a bool: a value of another type gives up (the
// machine's logic fails on it).
func (c *fastCompiler) boolean(f fn) func(*Frame) (bool, bool) {
	if f.k == kBool {
		return f.b
	}
	if f.k != kAny {
		return func(*Frame) (bool, bool) { return false, false }
	}
	return typed(kBool, f.a).b
}

// integer is f as an int: a value of another type gives up.
func (c *fastCompiler) integer(f fn) func(*Frame) (int, bool) {
	switch f.k {
	case kInt:
		return f.i
	case kAny:
		return typed(kInt, f.a).i
	}
	return func(*Frame) (int, bool) { return 0, false }
}

// member reads a constant key of an object: a map[string]any (a missing
// key reads nil, as the machine reads it); anything else gives up.
func (c *fastCompiler) member(x *ast.MemberNode) (fn, bool) {
	prop, ok := x.Property.(*ast.StringNode)
	if !ok || x.Optional {
		return fn{}, false
	}
	obj, ok := c.compile(x.Node)
	if !ok || obj.k != kAny {
		return fn{}, false
	}
	get, key := obj.a, prop.Value
	return typed(kindOf(x.Type()), func(f *Frame) (any, bool) {
		v, ok := get(f)
		if !ok {
			return nil, false
		}
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		return m[key], true
	}), true
}

func (c *fastCompiler) unary(x *ast.UnaryNode) (fn, bool) {
	a, ok := c.compile(x.Node)
	if !ok {
		return fn{}, false
	}
	switch x.Operator {
	case "!", "not":
		b := c.boolean(a)
		return fn{k: kBool, b: func(f *Frame) (bool, bool) {
			v, ok := b(f)
			return !v, ok
		}}, true
	case "-":
		// what the exact patcher left: not an int, as far as the checker
		// knows; the machine negates floats, and ints as Go does
		g := c.any(a)
		return fn{k: kAny, a: func(f *Frame) (any, bool) {
			v, ok := g(f)
			if !ok {
				return nil, false
			}
			switch n := v.(type) {
			case float64:
				return -n, true
			case int:
				return -n, true
			}
			return nil, false
		}}, true
	}
	return fn{}, false
}

func (c *fastCompiler) conditional(x *ast.ConditionalNode) (fn, bool) {
	cond, ok := c.compile(x.Cond)
	if !ok {
		return fn{}, false
	}
	a, ok := c.compile(x.Exp1)
	if !ok {
		return fn{}, false
	}
	b, ok := c.compile(x.Exp2)
	if !ok {
		return fn{}, false
	}
	test := c.boolean(cond)
	if a.k == b.k {
		switch a.k {
		case kInt:
			ai, bi := a.i, b.i
			return fn{k: kInt, i: func(f *Frame) (int, bool) {
				t, ok := test(f)
				if !ok {
					return 0, false
				}
				if t {
					return ai(f)
				}
				return bi(f)
			}}, true
		case kString:
			as, bs := a.s, b.s
			return fn{k: kString, s: func(f *Frame) (string, bool) {
				t, ok := test(f)
				if !ok {
					return "", false
				}
				if t {
					return as(f)
				}
				return bs(f)
			}}, true
		case kBool:
			ab, bb := a.b, b.b
			return fn{k: kBool, b: func(f *Frame) (bool, bool) {
				t, ok := test(f)
				if !ok {
					return false, false
				}
				if t {
					return ab(f)
				}
				return bb(f)
			}}, true
		}
	}
	aa, ba := c.any(a), c.any(b)
	return fn{k: kAny, a: func(f *Frame) (any, bool) {
		t, ok := test(f)
		if !ok {
			return nil, false
		}
		if t {
			return aa(f)
		}
		return ba(f)
	}}, true
}

// call compiles the exact operations the patcher put in (see arith.go).
func (c *fastCompiler) call(x *ast.CallNode) (fn, bool) {
	call, ok := c.ops[x]
	if !ok {
		return fn{}, false
	}
	op := call.op
	if op == "in" {
		// (the machine runs it)
		return fn{}, false
	}
	args := make([]fn, len(x.Arguments))
	for i, a := range x.Arguments {
		id, isIdent := a.(*ast.IdentifierNode)
		switch {
		case call.ints && isIdent:
			// the machine asserts the operands are ints: read one so
			args[i], ok = c.identifierAs(id, kInt)
		default:
			args[i], ok = c.compile(a)
			if ok && call.ints {
				args[i] = fn{k: kInt, i: c.integer(args[i]), konst: args[i].konst, kv: args[i].kv}
			}
		}
		if !ok {
			return fn{}, false
		}
	}
	if op == "neg" {
		if len(args) != 1 {
			return fn{}, false
		}
		if args[0].k == kInt {
			g := args[0].i
			return fn{k: kInt, i: func(f *Frame) (int, bool) {
				v, ok := g(f)
				if !ok || v == math.MinInt {
					return 0, false
				}
				return -v, true
			}}, true
		}
		g := c.any(args[0])
		return fn{k: kAny, a: func(f *Frame) (any, bool) {
			v, ok := g(f)
			if !ok {
				return nil, false
			}
			switch n := v.(type) {
			case int:
				if n == math.MinInt {
					return nil, false
				}
				return -n, true
			case float64:
				return -n, true
			}
			return nil, false
		}}, true
	}
	if len(args) != 2 {
		return fn{}, false
	}
	if op == "==" || op == "!=" {
		// scalars compared here, anything else by the call (valueEq)
		return c.equal(args[0], args[1], op == "!="), true
	}
	exact := exactOps[op]
	if exact == nil {
		return fn{}, false
	}
	if args[0].k == kInt && args[1].k == kInt {
		if k, ok := args[1].constInt(); ok && (op == "+" || op == "-") {
			return fn{k: kInt, i: addConstant(args[0].i, k, op == "-")}, true
		}
		return fn{k: kInt, i: intOp(exact, args[0].i, args[1].i)}, true
	}
	return c.arith(op, args[0], args[1], true), true
}

// constInt reports whether f is an int constant, and its value.
func (f fn) constInt() (int, bool) { return f.kv, f.konst }
