// The checker's own types: every expression's value has a shape (see
// schema.Shape) that knows null, objects member by member and lists by
// their items. Tests narrow what a value may be where they hold: != nil,
// ?? and ?., the two sides of ?: and if/else, && and ||, and names bound
// by let. An operation that fails on null (arithmetic, ordering, a
// member read, len, upper, ...) over a value that may be null is
// reported where it reads it, and a member a closed object does not
// declare is reported wherever the object comes from (a state field, a
// name bound by let, an item in a predicate).

package expression

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/expr-lang/expr/ast"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/schema"
)

// typer types one expression's tree.
type typer struct {
	src string
	env *Env
	// lets are the names let binds in scope, innermost last.
	lets []binding
	// items are the shapes # stands for in the predicates being typed,
	// innermost last.
	items []*schema.Shape
	// types and consts record each node's shape and, when known, its
	// value.
	types  map[ast.Node]*schema.Shape
	consts map[ast.Node]any
	probs  []Problem
	// reported keeps one problem per position and code.
	reported map[[2]int]bool
	// dead is set while typing what never runs.
	dead int
	// paths are the values nodes read (state.q, for q bound to it).
	paths map[ast.Node]string
	// unset are the paths (state.x) typed as null too, as a field may be
	// when nothing wrote it (see NullUse).
	unset map[string]bool
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// binding is a name let binds: its shape, the path of the value it
// stands for when it is one (let q = state.q: what holds of q holds of
// state.q), else a key of its own, and the expression it was bound to.
type binding struct {
	name  string
	shape *schema.Shape
	path  string
	value ast.Node
}

// facts are what holds of the values at paths (state.o, x, #.n) where a
// test is known to hold.
type facts map[string]fact

// fact is what a test established of one value: not null, only null, or
// one of some texts.
type fact struct {
	notNull, null bool
	texts         []string
}

func (f facts) with(more facts) facts {
	if len(more) == 0 {
		return f
	}
	out := make(facts, len(f)+len(more))
	for k, v := range f {
		out[k] = v
	}
	for k, v := range more {
		if old, ok := out[k]; ok {
			v.notNull = v.notNull || old.notNull
			v.null = v.null || old.null
			if v.texts == nil {
				v.texts = old.texts
			}
		}
		out[k] = v
	}
	return out
}

// agreed keeps the facts two ways agree on (either may have been taken).
func agreed(a, b facts) facts {
	out := facts{}
	for k, x := range a {
		y, ok := b[k]
		if !ok {
			continue
		}
		f := fact{notNull: x.notNull && y.notNull, null: x.null && y.null}
		if x.texts != nil && y.texts != nil {
			f.texts = append(slices.Clone(x.texts), y.texts...)
		}
		if f.notNull || f.null || f.texts != nil {
			out[k] = f
		}
	}
	return out
}

// typeTree types the tree of src against env, recording each node's shape.
func typeTree(src string, root ast.Node, env *Env) *typer {
	t := &typer{src: src, env: env, types: map[ast.Node]*schema.Shape{}, consts: map[ast.Node]any{}, reported: map[[2]int]bool{}, paths: map[ast.Node]string{}}
	t.typeOf(root, facts{})
	return t
}

func anyShape() *schema.Shape { return &schema.Shape{} }

// typeOf types n where fs hold.
func (t *typer) typeOf(n ast.Node, fs facts) *schema.Shape {
	s := t.infer(n, fs)
	if s == nil {
		s = anyShape()
	}
	if _, known := t.consts[n]; !known {
		if v, ok := t.fold(n); ok {
			t.constant(n, v)
			s = ranged(shapeOfValue(v), numberBounds(v))
		}
	}
	t.types[n] = s
	return s
}

func (t *typer) infer(n ast.Node, fs facts) *schema.Shape {
	switch x := n.(type) {
	case *ast.NilNode:
		t.constant(n, nil)
		return schema.Of("null")
	case *ast.IntegerNode:
		t.constant(n, x.Value)
		v := float64(x.Value)
		return ranged(schema.Of("integer"), bounds{&v, &v})
	case *ast.FloatNode:
		t.constant(n, x.Value)
		v := x.Value
		if x.Value == math.Trunc(x.Value) && !math.IsInf(x.Value, 0) {
			return ranged(schema.Of("integer"), bounds{&v, &v})
		}
		return ranged(schema.Of("number"), bounds{&v, &v})
	case *ast.BoolNode:
		t.constant(n, x.Value)
		return schema.Of("boolean")
	case *ast.StringNode:
		t.constant(n, x.Value)
		return schema.Of("string")
	case *ast.ConstantNode:
		t.constant(n, x.Value)
		return shapeOfValue(x.Value)
	case *ast.IdentifierNode:
		t.paths[n] = t.pathOf(x)
		return t.refine(t.pathOf(x), t.identifier(x.Value), fs)
	case *ast.PointerNode:
		if x.Name == "index" {
			return schema.Of("integer")
		}
		if x.Name == "" && len(t.items) > 0 {
			return t.refine(t.pathOf(x), t.items[len(t.items)-1], fs)
		}
		return anyShape()
	case *ast.ChainNode:
		return t.typeOf(x.Node, fs)
	case *ast.MemberNode:
		return t.member(x, fs)
	case *ast.SliceNode:
		base := t.typeOf(x.Node, fs)
		t.nullOperand(x.Node, base, "slicing")
		for _, b := range []ast.Node{x.From, x.To} {
			if b != nil {
				t.typeOf(b, fs)
			}
		}
		return base.WithoutNull()
	case *ast.UnaryNode:
		return t.unary(x, fs)
	case *ast.BinaryNode:
		return t.binary(x, fs)
	case *ast.ConditionalNode:
		c := t.typeOf(x.Cond, fs)
		t.nullOperand(x.Cond, c, "a condition of ?: or if")
		lit, constant := t.consts[x.Cond].(bool)
		t.dead += b2i(constant && !lit)
		a := t.typeOf(x.Exp1, fs.with(t.tests(x.Cond, true, fs)))
		t.dead += b2i(constant) - 2*b2i(constant && !lit)
		b := t.typeOf(x.Exp2, fs.with(t.tests(x.Cond, false, fs)))
		t.dead -= b2i(constant && lit)
		switch {
		case constant && lit:
			return a
		case constant:
			return b
		}
		return schema.Union(a, b)
	case *ast.VariableDeclaratorNode:
		v := t.typeOf(x.Value, fs)
		path := t.pathOf(x.Value)
		if path == "" {
			path = fmt.Sprintf("let %s %d", x.Name, len(t.lets))
		}
		t.lets = append(t.lets, binding{x.Name, v, path, x.Value})
		r := t.typeOf(x.Expr, fs)
		t.lets = t.lets[:len(t.lets)-1]
		if c, ok := t.consts[x.Expr]; ok {
			t.constant(n, c)
		}
		return r
	case *ast.SequenceNode:
		var last *schema.Shape
		for _, m := range x.Nodes {
			last = t.typeOf(m, fs)
		}
		if len(x.Nodes) > 0 {
			if c, ok := t.consts[x.Nodes[len(x.Nodes)-1]]; ok {
				t.constant(n, c)
			}
		}
		return last
	case *ast.ArrayNode:
		var items *schema.Shape
		vals, all := make([]any, 0, len(x.Nodes)), true
		for i, m := range x.Nodes {
			s := t.typeOf(m, fs)
			if i == 0 {
				items = s
			} else {
				items = schema.Union(items, s)
			}
			c, ok := t.consts[m]
			all = all && ok
			vals = append(vals, c)
		}
		if all {
			t.constant(n, vals)
		}
		if items == nil {
			items = anyShape() // [] holds anything
		}
		n := len(x.Nodes)
		return &schema.Shape{Types: []string{"array"}, Items: items, MinItems: n, MaxItems: &n}
	case *ast.MapNode:
		obj := &schema.Shape{Types: []string{"object"}, Props: map[string]*schema.Shape{}, Closed: true}
		vals, all := map[string]any{}, true
		for _, p := range x.Pairs {
			pair, ok := p.(*ast.PairNode)
			if !ok {
				continue
			}
			vs := t.typeOf(pair.Value, fs)
			key, isStr := pair.Key.(*ast.StringNode)
			if !isStr {
				t.typeOf(pair.Key, fs)
				obj.Props, obj.Closed, obj.Required, all = nil, false, nil, false
				continue
			}
			if obj.Props == nil {
				continue // a key not known before this one
			}
			obj.Props[key.Value] = vs
			obj.Order = append(obj.Order, key.Value)
			if !slices.Contains(obj.Required, key.Value) {
				obj.Required = append(obj.Required, key.Value)
			}
			c, ok := t.consts[pair.Value]
			all = all && ok
			vals[key.Value] = c
		}
		if obj.Props != nil {
			slices.Sort(obj.Order)
		}
		if all {
			t.constant(n, vals)
		}
		return obj
	case *ast.PairNode:
		t.typeOf(x.Key, fs)
		return t.typeOf(x.Value, fs)
	case *ast.CallNode:
		return t.call(x, fs)
	case *ast.BuiltinNode:
		return t.builtin(x, fs)
	case *ast.PredicateNode:
		return t.typeOf(x.Node, fs)
	}
	return anyShape()
}

// withoutItems drops what is known of the items of predicates: a new
// predicate's # is another value.
func (f facts) withoutItems() facts {
	out := facts{}
	for k, v := range f {
		if !strings.HasPrefix(k, "#") {
			out[k] = v
		}
	}
	return out
}

// let is the innermost binding of name by let, nil when none binds it.
func (t *typer) let(name string) *binding {
	for i := len(t.lets) - 1; i >= 0; i-- {
		if t.lets[i].name == name {
			return &t.lets[i]
		}
	}
	return nil
}

// identifier is the shape of a name: one let binds, or a variable of
// the environment.
func (t *typer) identifier(name string) *schema.Shape {
	if b := t.let(name); b != nil {
		return b.shape
	}
	if s, ok := t.env.shapes[name]; ok && s != nil {
		return s
	}
	return anyShape()
}

// refine applies what fs knows of the value at path to its shape.
func (t *typer) refine(path string, s *schema.Shape, fs facts) *schema.Shape {
	f, ok := fs[path]
	if !ok || path == "" {
		return s
	}
	if f.notNull {
		s = s.WithoutNull()
	}
	if f.null && s.Known() {
		s = schema.Of("null")
	}
	if f.texts != nil && s.Known() {
		c := *s.WithoutNull()
		c.Enum = nil
		for _, txt := range f.texts {
			c.Enum = append(c.Enum, txt)
		}
		s = &c
	}
	return s
}

// pathOf names the value n reads: a variable, a let name, # in a
// predicate, and constant member reads of them (state.o.n, also through
// ?.); "" for anything else.
func (t *typer) pathOf(n ast.Node) string {
	switch x := n.(type) {
	case *ast.IdentifierNode:
		if b := t.let(x.Value); b != nil {
			return b.path
		}
		return x.Value
	case *ast.PointerNode:
		if x.Name == "" {
			return fmt.Sprintf("#%d", len(t.items))
		}
	case *ast.ChainNode:
		return t.pathOf(x.Node)
	case *ast.MemberNode:
		prop, ok := x.Property.(*ast.StringNode)
		if !ok {
			return ""
		}
		if base := t.pathOf(x.Node); base != "" {
			return base + "." + prop.Value
		}
	}
	return ""
}

// describe names n for messages: its path as written (state.o?.n), or
// its text.
func (t *typer) describe(n ast.Node) string {
	if t.pathOf(n) != "" {
		return written(n)
	}
	return n.String()
}

// written renders a path as written: ?. where it was, # in a predicate
// left out (.n for #.n).
func written(n ast.Node) string {
	switch x := n.(type) {
	case *ast.IdentifierNode:
		return x.Value
	case *ast.PointerNode:
		return "#"
	case *ast.ChainNode:
		return written(x.Node)
	case *ast.MemberNode:
		prop, _ := x.Property.(*ast.StringNode)
		dot := "."
		if x.Optional {
			dot = "?."
		}
		if _, ok := x.Node.(*ast.PointerNode); ok {
			return dot + prop.Value
		}
		return written(x.Node) + dot + prop.Value
	}
	return n.String()
}

// member types x.y (and x?.y, x[i]).
func (t *typer) member(x *ast.MemberNode, fs facts) *schema.Shape {
	base := t.typeOf(x.Node, fs)
	path := t.pathOf(x)
	t.paths[x] = path
	prop, isStr := x.Property.(*ast.StringNode)
	if !isStr {
		t.typeOf(x.Property, fs)
	}
	optional := x.Optional || t.inOptionalChain(x)
	if base.MayBeNull() && !optional {
		if isStr {
			t.nullMember(x, prop, base)
		} else {
			t.nullOperand(x.Node, base, "indexing")
		}
	}
	var s *schema.Shape
	b := base.WithoutNull()
	switch {
	case isStr && b.Known() && !slices.Contains(b.Types, "object") && len(b.Types) > 0:
		// reading a field of a list or a text: the checker says so
		s = anyShape()
	case isStr:
		s = t.field(x, prop, b)
	case b.Is("array"):
		s = b.Items
		if s == nil {
			s = anyShape()
		}
	case b.Is("object"):
		if e := b.Extra(); e != nil {
			s = e
		} else {
			s = anyShape()
		}
	default:
		s = anyShape()
	}
	if s == nil {
		s = anyShape()
	}
	if x.Optional && base.MayBeNull() {
		s = s.OrNull()
	}
	if t.unset[path] {
		s = s.OrNull()
	}
	return t.refine(path, s, fs)
}

// inOptionalChain reports whether x sits below a ?. in its chain, so
// that a null there ends the chain before x is read.
func (t *typer) inOptionalChain(x *ast.MemberNode) bool {
	for n := x.Node; ; {
		m, ok := n.(*ast.MemberNode)
		if !ok {
			return false
		}
		if m.Optional {
			return true
		}
		n = m.Node
	}
}

// field is the shape of member prop of an object of shape b, reporting a
// member b does not declare.
func (t *typer) field(x *ast.MemberNode, prop *ast.StringNode, b *schema.Shape) *schema.Shape {
	if b == nil {
		return anyShape()
	}
	if p, declared := b.Props[prop.Value]; declared {
		if p == nil {
			return anyShape()
		}
		if t.mayLack(x.Node) && !slices.Contains(b.Required, prop.Value) && p.Known() {
			// a member the object's schema does not require may be
			// missing, which reads as null
			return p.OrNull()
		}
		return p
	}
	if e := b.Extra(); e != nil {
		return e
	}
	_, allowed := b.Prop(prop.Value)
	if allowed && len(b.Props) == 0 {
		return anyShape() // an object that declares nothing may hold anything
	}
	if !b.Is("object") && !(len(b.Types) == 0 && len(b.Props) > 0) && !b.Closed {
		return anyShape()
	}
	loc := prop.Location()
	line, col := position(t.src, loc.From)
	p := Problem{Line: line, Col: col, EndCol: col + len([]rune(prop.Value)), Code: diag.CodeExprUnknown,
		Message:    fmt.Sprintf("%s has no field %q", t.describe(x.Node), prop.Value),
		Suggestion: diag.Suggest(prop.Value, b.Order)}
	if name := t.bracketName(loc.From, b.Order); name != "" {
		// state.first-name reads state.first minus name
		p.Suggestion = ""
		p.EndCol = col + len([]rune(name))
		p.Message = fmt.Sprintf("%s has no field %q: a name with %s in it is read with brackets, %s[%q]",
			t.describe(x.Node), prop.Value, nonIdent(name), t.describe(x.Node), name)
	}
	if allowed {
		p.Warning = true
		p.Message = fmt.Sprintf("%s declares no field %q (its schema does not close it, so the read is allowed, and yields nil when absent)",
			t.describe(x.Node), prop.Value)
	}
	t.report(p)
	return anyShape()
}

// mayLack reports whether a member of the object n reads may be missing
// where its schema does not require it: any object but the state (an
// unset field is E006's), the input and the config (typed with their
// defaults), and a reducer's current value.
func (t *typer) mayLack(n ast.Node) bool {
	if id, ok := n.(*ast.IdentifierNode); ok && t.let(id.Value) == nil {
		switch id.Value {
		case "state", "input", "config", "current":
			return false
		}
	}
	return true
}

// nullMember reports a member read of a value that may be null.
func (t *typer) nullMember(x *ast.MemberNode, prop *ast.StringNode, base *schema.Shape) {
	path := t.describe(x.Node)
	line, col := position(t.src, prop.Location().From)
	p := Problem{Line: line, Col: col, EndCol: col + len([]rune(prop.Value)), Code: diag.CodeExprMayBeNil,
		Warning: true, Path: t.valuePath(x.Node),
		Message: fmt.Sprintf("%s may be null here, and reading %q of null fails at run time; write %s?.%s, or test %s != nil first",
			path, prop.Value, path, prop.Value, path)}
	t.report(p)
}

// nullOperand reports an operand that may be null where what (an
// operation, a function) fails on null.
func (t *typer) nullOperand(n ast.Node, s *schema.Shape, what string) {
	if !s.MayBeNull() {
		return
	}
	path := t.describe(n)
	loc := n.Location()
	line, col := position(t.src, loc.From)
	end := col + max(loc.To-loc.From, 1)
	if pth := t.pathOf(n); pth != "" {
		// the read's last name
		if m, ok := unchain(n).(*ast.MemberNode); ok {
			if prop, ok := m.Property.(*ast.StringNode); ok {
				line, col = position(t.src, prop.Location().From)
				end = col + len([]rune(prop.Value))
			}
		}
	}
	p := Problem{Line: line, Col: col, EndCol: end, Code: diag.CodeExprMayBeNil, Warning: true, Path: t.valuePath(n),
		Message: fmt.Sprintf("%s may be null here, and %s fails on null at run time; write (%s ?? a value), or test %s != nil first",
			path, what, path, path)}
	t.report(p)
}

// valuePath names the value n reads for Problem.Path: the path it
// stands for (state.q, for a name let bound to it), else its text.
func (t *typer) valuePath(n ast.Node) string {
	if p := t.pathOf(n); p != "" && !strings.HasPrefix(p, "let ") && !strings.HasPrefix(p, "#") {
		return p
	}
	return t.describe(n)
}

func unchain(n ast.Node) ast.Node {
	if c, ok := n.(*ast.ChainNode); ok {
		return c.Node
	}
	return n
}

func (t *typer) report(p Problem) {
	if t.dead > 0 {
		return // in what never runs (false && ..., true ? ... : ...)
	}
	key := [2]int{p.Line*10000 + p.Col, int(p.Code[len(p.Code)-1])}
	if t.reported[key] {
		return
	}
	t.reported[key] = true
	t.probs = append(t.probs, p)
}

func (t *typer) unary(x *ast.UnaryNode, fs facts) *schema.Shape {
	s := t.typeOf(x.Node, fs)
	switch x.Operator {
	case "!", "not":
		t.nullOperand(x.Node, s, x.Operator)
		if c, ok := t.consts[x.Node].(bool); ok {
			t.constant(x, !c)
		}
		return schema.Of("boolean")
	case "-", "+":
		t.nullOperand(x.Node, s, "unary "+x.Operator)
		switch c := t.consts[x.Node].(type) {
		case int:
			if x.Operator == "-" && c != math.MinInt {
				t.constant(x, -c)
			} else if x.Operator == "+" {
				t.constant(x, c)
			}
		case float64:
			if x.Operator == "-" {
				t.constant(x, -c)
			} else {
				t.constant(x, c)
			}
		}
		if x.Operator == "-" {
			return ranged(numberOf(s.WithoutNull()), negated(boundsOf(s)))
		}
		return ranged(numberOf(s.WithoutNull()), boundsOf(s))
	}
	return anyShape()
}

// numberOf is the number kind a numeric operand keeps (integer, number,
// or unknown).
func numberOf(s *schema.Shape) *schema.Shape {
	switch {
	case s.Is("integer"):
		return schema.Of("integer")
	case s.Is("number"), s.Known() && !slices.ContainsFunc(s.Types, func(t string) bool { return t != "integer" && t != "number" }):
		return schema.Of("number")
	}
	return anyShape()
}

// arith is the kind of number +, - and * give: integers from integers,
// a number when either may have a fraction.
func arith(a, b *schema.Shape) *schema.Shape {
	a, b = numberOf(a), numberOf(b)
	switch {
	case a.Is("integer") && b.Is("integer"):
		return schema.Of("integer")
	case a.Known() && b.Known():
		return schema.Of("number")
	}
	return anyShape()
}

func (t *typer) binary(x *ast.BinaryNode, fs facts) *schema.Shape {
	switch x.Operator {
	case "&&", "and":
		l := t.typeOf(x.Left, fs)
		never := t.consts[x.Left] == false // false && ...: never evaluated
		t.dead += b2i(never)
		r := t.typeOf(x.Right, fs.with(t.tests(x.Left, true, fs)))
		t.dead -= b2i(never)
		if rb, ok := t.consts[x.Right].(bool); never || ok && t.consts[x.Left] == true {
			t.constant(x, !never && rb)
		}
		return logical(l, r)
	case "||", "or":
		l := t.typeOf(x.Left, fs)
		never := t.consts[x.Left] == true
		t.dead += b2i(never)
		r := t.typeOf(x.Right, fs.with(t.tests(x.Left, false, fs)))
		t.dead -= b2i(never)
		if rb, ok := t.consts[x.Right].(bool); never || ok && t.consts[x.Left] == false {
			t.constant(x, never || rb)
		}
		return logical(l, r)
	case "??":
		l := t.typeOf(x.Left, fs)
		r := t.typeOf(x.Right, fs)
		if !l.MayBeNull() && l.Known() {
			if c, ok := t.consts[x.Left]; ok {
				t.constant(x, c)
			}
			return l
		}
		if l.IsNull() {
			return r
		}
		return schema.Union(l.WithoutNull(), r)
	}
	l := t.typeOf(x.Left, fs)
	r := t.typeOf(x.Right, fs)
	op := x.Operator
	lc, lk := t.consts[x.Left]
	rc, rk := t.consts[x.Right]
	switch op {
	case "==", "!=":
		if lk && rk && comparable(lc) && comparable(rc) && fmt.Sprintf("%T", lc) == fmt.Sprintf("%T", rc) {
			t.constant(x, (lc == rc) == (op == "=="))
		}
		return schema.Of("boolean")
	case "in", "not in", "contains", "startsWith", "endsWith", "matches", "not contains", "not startsWith", "not endsWith", "not matches":
		if op == "matches" || op == "not matches" {
			return schema.Of("boolean")
		}
		return schema.Of("boolean")
	case "<", ">", "<=", ">=":
		t.nullOperand(x.Left, l, op)
		t.nullOperand(x.Right, r, op)
		return schema.Of("boolean")
	case "..":
		t.nullOperand(x.Left, l, "..")
		t.nullOperand(x.Right, r, "..")
		return &schema.Shape{Types: []string{"array"}, Items: schema.Of("integer")}
	case "+":
		t.nullOperand(x.Left, l, "+")
		t.nullOperand(x.Right, r, "+")
		ln, rn := l.WithoutNull(), r.WithoutNull()
		switch {
		case ln.Is("string") && rn.Is("string"):
			if a, ok := t.consts[x.Left].(string); ok {
				if b, ok := t.consts[x.Right].(string); ok {
					t.constant(x, a+b)
				}
			}
			return schema.Of("string")
		case ln.Is("array") && rn.Is("array"):
			return &schema.Shape{Types: []string{"array"}, Items: schema.Union(orAny(ln.Items), orAny(rn.Items))}
		}
		return ranged(arith(ln, rn), t.arithRange(x, ln, rn))
	case "-", "*":
		t.nullOperand(x.Left, l, op)
		t.nullOperand(x.Right, r, op)
		return ranged(arith(l.WithoutNull(), r.WithoutNull()), t.arithRange(x, l, r))
	case "/", "**", "^":
		t.nullOperand(x.Left, l, op)
		t.nullOperand(x.Right, r, op)
		return ranged(schema.Of("number"), t.arithRange(x, l, r))
	case "%":
		t.nullOperand(x.Left, l, op)
		t.nullOperand(x.Right, r, op)
		return ranged(schema.Of("integer"), t.arithRange(x, l, r))
	}
	return anyShape()
}

func orAny(s *schema.Shape) *schema.Shape {
	if s == nil {
		return anyShape()
	}
	return s
}

// logical is the shape of && and ||: a boolean, or null where an operand
// may be null (the machine gives null then).
func logical(l, r *schema.Shape) *schema.Shape {
	if l.MayBeNull() || r.MayBeNull() {
		return schema.Of("boolean", "null")
	}
	return schema.Of("boolean")
}
