// The types of the built-in and registered functions: what each gives,
// from what it is given, and which arguments it cannot take null for.

package expression

import (
	"fmt"
	"math"
	"unicode/utf8"

	"github.com/expr-lang/expr/ast"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/schema"
)

// nullSafe are the built-ins that take null for any argument: they give
// null, false, "null", or a default for it.
var nullSafe = map[string]bool{
	"string": true, "toJSON": true, "type": true, "first": true, "last": true, "get": true,
	"sort": true, "now": true, "fromJSON": false,
}

// predicates are the built-ins whose second argument is a predicate over
// the items of their first.
var predicates = map[string]bool{
	"all": true, "none": true, "any": true, "one": true, "filter": true, "map": true, "count": true,
	"sum": true, "find": true, "findIndex": true, "findLast": true, "findLastIndex": true,
	"groupBy": true, "sortBy": true, "reduce": true,
}

// pointerPath is the path # stands for in the innermost predicate.
func (t *typer) pointerPath() string { return fmt.Sprintf("#%d", len(t.items)) }

func listOf(items *schema.Shape) *schema.Shape {
	return &schema.Shape{Types: []string{"array"}, Items: orAny(items)}
}

// itemsOf is the shape of the items of a list of shape s (unknown when
// it is not known to be a list).
func itemsOf(s *schema.Shape) *schema.Shape {
	s = s.WithoutNull()
	if s.Is("array") {
		return orAny(s.Items)
	}
	return anyShape()
}

func (t *typer) builtin(x *ast.BuiltinNode, fs facts) *schema.Shape {
	args := make([]*schema.Shape, len(x.Arguments))
	if predicates[x.Name] && len(x.Arguments) >= 2 {
		args[0] = t.typeOf(x.Arguments[0], fs)
		t.nullOperand(x.Arguments[0], args[0], x.Name)
		t.items = append(t.items, itemsOf(args[0]))
		inner := fs.withoutItems()
		for i := 1; i < len(x.Arguments); i++ {
			args[i] = t.typeOf(x.Arguments[i], inner)
		}
		t.items = t.items[:len(t.items)-1]
	} else {
		for i, a := range x.Arguments {
			args[i] = t.typeOf(a, fs)
		}
		if !nullSafe[x.Name] {
			for i, a := range x.Arguments {
				t.nullOperand(a, args[i], x.Name)
			}
		}
	}
	// the builtins that take each item of a list as a number or a text
	// fail on a null item
	switch x.Name {
	case "mean", "median", "sort", "join", "sum", "max", "min":
		if len(args) >= 1 && (len(args) == 1 || x.Name == "join" || x.Name == "sort") && itemsOf(args[0]).MayBeNull() {
			t.nullItems(x.Arguments[0], x.Name)
		}
	}
	arg := func(i int) *schema.Shape {
		if i < len(args) {
			return args[i]
		}
		return anyShape()
	}
	zero := 0.0
	switch x.Name {
	case "len":
		if len(x.Arguments) != 1 {
			return schema.Of("integer") // (the checker says what is wrong)
		}
		return ranged(schema.Of("integer"), t.lengths(x.Arguments[0], arg(0)))
	case "count":
		return ranged(schema.Of("integer"), bounds{lo: &zero})
	case "int", "round", "floor", "ceil":
		return ranged(schema.Of("integer"), rounded(boundsOf(arg(0))))
	case "findIndex", "findLastIndex", "indexOf", "lastIndexOf",
		"bitand", "bitor", "bitxor", "bitnand", "bitnot", "bitshl", "bitshr", "bitushr":
		return schema.Of("integer")
	case "float":
		return ranged(schema.Of("number"), boundsOf(arg(0)))
	case "mean", "median":
		return ranged(schema.Of("number"), boundsOf(itemsOf(arg(0))))
	case "abs":
		b := boundsOf(arg(0))
		out := bounds{lo: &zero}
		if b.lo != nil && b.hi != nil {
			out.hi = num(max(math.Abs(*b.lo), math.Abs(*b.hi)))
		}
		return ranged(numberOf(arg(0).WithoutNull()), out)
	case "max", "min":
		var s *schema.Shape
		ops := args
		if len(args) == 1 {
			ops = []*schema.Shape{itemsOf(arg(0))}
		}
		bs := make([]bounds, len(ops))
		for i, a := range ops {
			bs[i] = boundsOf(a)
			if i == 0 {
				s = numberOf(a.WithoutNull())
			} else {
				s = arith(s, a.WithoutNull())
			}
		}
		if s == nil {
			return anyShape()
		}
		return ranged(s, minMax(bs, x.Name == "min"))
	case "sum":
		if len(args) == 2 {
			return numberOf(args[1])
		}
		return numberOf(itemsOf(arg(0)))
	case "all", "none", "any", "one", "hasPrefix", "hasSuffix":
		return schema.Of("boolean")
	case "string", "toJSON", "upper", "lower", "trim", "trimPrefix", "trimSuffix", "repeat", "replace",
		"toBase64", "fromBase64", "type":
		return schema.Of("string")
	case "split", "splitAfter", "keys":
		return listOf(schema.Of("string"))
	case "join":
		return schema.Of("string")
	case "filter":
		// the items the predicate keeps: what it tests holds of them
		s := arg(0).WithoutNull()
		if !s.Is("array") || len(x.Arguments) < 2 {
			return listOf(nil)
		}
		return listOf(t.kept(x, s, fs))
	case "sortBy", "sort", "reverse", "uniq":
		s := arg(0).WithoutNull()
		if x.Name == "sort" && arg(0).MayBeNull() {
			return s.OrNull()
		}
		if !s.Is("array") {
			s = listOf(nil)
		}
		if x.Name == "uniq" {
			c := *s
			c.MinItems, c.MaxItems = min(s.MinItems, 1), s.MaxItems
			return schema.Distinct(&c)
		}
		return s
	case "map":
		if len(args) == 2 {
			return listOf(args[1])
		}
		return listOf(nil)
	case "first", "last":
		// an empty list gives null, one known not to be empty an item
		if len(x.Arguments) == 0 {
			return anyShape()
		}
		if p := t.pathOf(x.Arguments[0]); p != "" {
			if f, ok := fs[p+"[]"]; ok && f.notNull {
				return itemsOf(arg(0))
			}
		}
		return itemsOf(arg(0)).OrNull()
	case "find", "findLast":
		// the item the predicate held of, or null when none did
		s := arg(0).WithoutNull()
		if !s.Is("array") || len(x.Arguments) < 2 {
			return itemsOf(arg(0)).OrNull()
		}
		return t.kept(x, s, fs).OrNull()
	case "concat":
		var items *schema.Shape
		for i, a := range args {
			if i == 0 {
				items = itemsOf(a)
			} else {
				items = schema.Union(items, itemsOf(a))
			}
		}
		return listOf(items)
	case "flatten", "values":
		return listOf(nil)
	case "get":
		b := arg(0).WithoutNull()
		if b.Is("array") {
			return itemsOf(b).OrNull()
		}
		if len(x.Arguments) < 2 {
			return anyShape()
		}
		if k, ok := t.consts[x.Arguments[1]].(string); ok && b.Is("object") {
			if p, ok := b.Props[k]; ok && p != nil {
				return p.OrNull()
			}
		}
		return anyShape()
	case "groupBy":
		return schema.Of("object")
	}
	return anyShape()
}

// kept is the shape of the items of the list x reads (of shape s) that the
// predicate of x (filter, find) holds of: what it tests of # and of its
// members holds of them.
func (t *typer) kept(x *ast.BuiltinNode, s *schema.Shape, fs facts) *schema.Shape {
	t.items = append(t.items, itemsOf(s))
	defer func() { t.items = t.items[:len(t.items)-1] }()
	held := t.tests(x.Arguments[1], true, fs.withoutItems())
	return t.refineMembers(t.pointerPath(), itemsOf(s), held)
}

// calls are the registered functions (see functions; a test holds the
// two to each other): their parameters' types ("" for any value) and
// what they give.
var calls = map[string]struct {
	params []string
	result *schema.Shape
}{
	"normalize":     {[]string{"string"}, schema.Of("string")},
	"word_overlap":  {[]string{"string", "string"}, schema.Of("number")},
	"split_words":   {[]string{"string"}, listOf(schema.Of("string"))},
	"mentions":      {[]string{"string", "string"}, schema.Of("boolean")},
	"written_words": {[]string{"string"}, listOf(schema.Of("string"))},
	"word_stems":    {[]string{"string"}, listOf(schema.Of("string"))},
	"fence":         {[]string{"string"}, schema.Of("string")},
	"truncate":      {[]string{"string", "integer"}, schema.Of("string")},
	"uuid":          {nil, schema.Of("string")},
	"slug":          {[]string{"string"}, schema.Of("string")},
	"json":          {[]string{""}, schema.Of("string")},
}

func (t *typer) call(x *ast.CallNode, fs facts) *schema.Shape {
	name := ""
	if id, ok := x.Callee.(*ast.IdentifierNode); ok {
		name = id.Value
	} else {
		t.typeOf(x.Callee, fs)
	}
	fn, known := calls[name]
	for i, a := range x.Arguments {
		s := t.typeOf(a, fs)
		if known && i < len(fn.params) && fn.params[i] != "" {
			t.nullOperand(a, s, name)
		}
	}
	if known {
		return fn.result
	}
	return anyShape()
}

// nullItems reports a list whose items may be null given to fn, which
// fails on a null item.
func (t *typer) nullItems(n ast.Node, fn string) {
	loc := n.Location()
	line, col := position(t.src, loc.From)
	what := t.describe(n)
	t.report(Problem{Line: line, Col: col, EndCol: col + max(loc.To-loc.From, 1), Code: diag.CodeExprMayBeNil, Warning: true, Path: t.valuePath(n),
		Message: fmt.Sprintf("%s may hold null, and %s fails on a null item at run time; write filter(%s, # != nil), or give each item a value with ??", what, fn, what)})
}

// lengths is the range of len of n (of shape s): a known value's length,
// or what its schema bounds (lengths of a text, items of a list).
func (t *typer) lengths(n ast.Node, s *schema.Shape) bounds {
	zero := 0.0
	switch v := t.consts[n].(type) {
	case string:
		lo, hi := float64(utf8.RuneCountInString(v)), float64(len(v))
		return bounds{&lo, &hi}
	case []any:
		l := float64(len(v))
		return bounds{&l, &l}
	}
	s = s.WithoutNull()
	out := bounds{lo: &zero}
	switch {
	case s.Is("string"):
		lo := float64(s.MinLength)
		out.lo = &lo
		if s.MaxLength != nil {
			hi := float64(*s.MaxLength) * 4 // (len counts bytes, a rune is up to 4)
			out.hi = &hi
		}
	case s.Is("array"):
		lo := float64(s.MinItems)
		out.lo = &lo
		if s.MaxItems != nil {
			hi := float64(*s.MaxItems)
			out.hi = &hi
		}
	}
	return out
}
