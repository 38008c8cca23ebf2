package expression

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/builtin"
	"github.com/expr-lang/expr/conf"
	"github.com/expr-lang/expr/vm/runtime"

	"github.com/trellisflow/trellis/runtime/value"
)

// Equality over values that are not scalars of known types (objects,
// lists, a field of any type) is value.Equal's: the machine's own ==
// compares objects by their Go types, so {score: 0.0} would not equal
// the {score: 0} a store hands back, while 0.0 == 0 holds. The patcher
// puts these in for ==, != and in (and uniq is given the same equality,
// see uniqByValue), so a comparison answers alike before and after a
// reload.

func valueEq(a, b any) bool { return value.Equal(a, b) }

func valueNe(a, b any) bool { return !value.Equal(a, b) }

// valueIn is in: an item of a list equal to needle by value; a key of
// an object, a field of a struct as the machine has it.
func valueIn(needle, haystack any) bool {
	switch h := haystack.(type) {
	case nil:
		return false
	case []any:
		for _, v := range h {
			if value.Equal(v, needle) {
				return true
			}
		}
		return false
	}
	if v := reflect.ValueOf(haystack); v.Kind() == reflect.Slice || v.Kind() == reflect.Array {
		for i := range v.Len() {
			if value.Equal(v.Index(i).Interface(), needle) {
				return true
			}
		}
		return false
	}
	return runtime.In(needle, haystack)
}

// groupKey is a groupBy key as a value: numbers equal by value are one
// key (0 and 0.0, a caller's int64 and the int a store hands back), as
// they are equal to ==.
func groupKey(v any) any {
	if n, ok := wholeNumber(v); ok {
		return n
	}
	switch x := v.(type) {
	case float32:
		return float64(x)
	case json.Number:
		if f, err := x.Float64(); err == nil {
			return f
		}
	}
	return v
}

// byValue patches ==, != and in over values whose Go types the checker
// does not know to be scalars into calls of valueEq, valueNe and valueIn,
// recorded in ops for the fast path (which compares scalars itself and
// leaves anything else to the call). It reports whether it patched.
func (e *exact) byValue(n *ast.Node, x *ast.BinaryNode) bool {
	var fn any
	switch x.Operator {
	case "==", "!=":
		// (a scalar of a known type may still be null at run time: a
		// field with no default not yet written, a member an object
		// lacks, what first or find gives of nothing; the machine's typed
		// comparisons of two texts or two integers fail on it, so only
		// literals are left to them)
		if isNilNode(x.Left) || isNilNode(x.Right) || literal(x.Left) && literal(x.Right) {
			return false
		}
		fn = valueEq
		if x.Operator == "!=" {
			fn = valueNe
		}
	case "in":
		if !listLike(x.Right.Type()) {
			return false
		}
		fn = valueIn
	default:
		return false
	}
	call := direct(fn, x.Left, x.Right)
	e.ops[call] = opCall{op: x.Operator}
	ast.Patch(n, call)
	return true
}

func isNilNode(n ast.Node) bool {
	_, ok := n.(*ast.NilNode)
	return ok
}

// structural reports whether a value of type t may be other than a
// scalar the machine compares by value (a number, a text, a bool).
func structural(t reflect.Type) bool {
	if t == nil {
		return true
	}
	switch t.Kind() {
	case reflect.Interface, reflect.Map, reflect.Slice, reflect.Array, reflect.Struct, reflect.Pointer:
		return true
	}
	return false
}

// listLike reports whether a value of type t may be a list.
func listLike(t reflect.Type) bool {
	if t == nil {
		return true
	}
	switch t.Kind() {
	case reflect.Interface, reflect.Slice, reflect.Array:
		return true
	}
	return false
}

// uniqByValue replaces expr's uniq with one that keeps the first of the
// items equal by value (value.Equal): {a: 0} and {a: 0.0} are one item,
// as they are to ==. It type-checks its argument as expr's does.
func uniqByValue() expr.Option {
	i := slices.IndexFunc(builtin.Builtins, func(f *builtin.Function) bool { return f.Name == "uniq" })
	base := builtin.Builtins[i]
	fn := &builtin.Function{Name: base.Name, Validate: base.Validate, Func: func(args ...any) (any, error) {
		if len(args) != 1 {
			return nil, fmt.Errorf("invalid number of arguments (expected 1, got %d)", len(args))
		}
		v := reflect.ValueOf(args[0])
		if v.Kind() != reflect.Array && v.Kind() != reflect.Slice {
			return nil, fmt.Errorf("cannot uniq %s", v.Kind())
		}
		out := []any{}
	items:
		for i := range v.Len() {
			item := v.Index(i).Interface()
			for _, kept := range out {
				if value.Equal(kept, item) {
					continue items
				}
			}
			out = append(out, item)
		}
		return out, nil
	}}
	return func(c *conf.Config) { c.Functions[fn.Name] = fn }
}
