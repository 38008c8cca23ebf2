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
	"unicode"

	"github.com/expr-lang/expr"
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

// tests is what holds of the values cond reads where cond is (holds) or
// is not true.
func (t *typer) tests(cond ast.Node, holds bool, fs facts) facts {
	if p, ok := cond.(*ast.PredicateNode); ok {
		cond = p.Node
	}
	switch c := unchain(cond).(type) {
	case *ast.ConditionalNode:
		// c ? a : b holds (fails) where c and a, or not c and b, do; a
		// branch that is the other literal boolean is not a way
		way := func(cond bool, br ast.Node) (facts, bool) {
			if b, ok := br.(*ast.BoolNode); ok && b.Value != holds {
				return nil, false
			}
			return facts{}.with(t.tests(c.Cond, cond, fs)).with(t.tests(br, holds, fs)), true
		}
		a, aok := way(true, c.Exp1)
		b, bok := way(false, c.Exp2)
		switch {
		case aok && bok:
			return agreed(a, b)
		case aok:
			return a
		case bok:
			return b
		}
		return nil
	case *ast.UnaryNode:
		if c.Operator == "!" || c.Operator == "not" {
			return t.tests(c.Node, !holds, fs)
		}
	case *ast.BinaryNode:
		switch c.Operator {
		case "&&", "and":
			l, r := t.tests(c.Left, holds, fs), t.tests(c.Right, holds, fs)
			if holds {
				return facts{}.with(l).with(r)
			}
			return agreed(l, r)
		case "||", "or":
			l, r := t.tests(c.Left, holds, fs), t.tests(c.Right, holds, fs)
			if !holds {
				return facts{}.with(l).with(r)
			}
			return agreed(l, r)
		case "==", "!=":
			if f := t.lengthTest(c, holds); f != nil {
				return f
			}
			eq := (c.Operator == "==") == holds
			for _, side := range [][2]ast.Node{{c.Left, c.Right}, {c.Right, c.Left}} {
				path := t.pathOf(side[0])
				if path == "" {
					continue
				}
				switch v := side[1].(type) {
				case *ast.NilNode:
					if eq {
						return facts{path: {null: true}}
					}
					return t.notNull(path)
				case *ast.StringNode:
					if eq {
						out := t.notNull(path)
						out[path] = fact{notNull: true, texts: []string{v.Value}}
						return out
					}
				case *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode:
					if eq {
						return t.notNull(path)
					}
				}
			}
		case "in":
			path := t.pathOf(c.Left)
			arr, ok := c.Right.(*ast.ArrayNode)
			if path == "" || !ok || !holds {
				return nil
			}
			var texts []string
			hasNil := false
			for _, m := range arr.Nodes {
				switch v := m.(type) {
				case *ast.StringNode:
					texts = append(texts, v.Value)
				case *ast.NilNode:
					hasNil = true
				}
			}
			if hasNil {
				return nil
			}
			out := t.notNull(path)
			if len(texts) == len(arr.Nodes) {
				out[path] = fact{notNull: true, texts: texts}
			}
			return out
		case "<", ">", "<=", ">=":
			if f := t.lengthTest(c, holds); f != nil {
				return f
			}
			// an ordering that held read both sides as they are
			if holds {
				out := facts{}
				for _, side := range []ast.Node{c.Left, c.Right} {
					if p := t.pathOf(side); p != "" {
						out = out.with(t.notNull(p))
					}
				}
				return out
			}
		}
	case *ast.IdentifierNode:
		if b := t.let(c.Value); b != nil && b.value != nil {
			// a name bound to a test: what the test established
			out := t.tests(b.value, holds, fs)
			if holds {
				out = facts{}.with(out).with(t.notNull(b.path))
			}
			return out
		}
		if p := t.pathOf(cond); p != "" && holds {
			return t.notNull(p)
		}
	case *ast.MemberNode:
		// a boolean value that held is not null
		if p := t.pathOf(cond); p != "" && holds {
			return t.notNull(p)
		}
	}
	return nil
}

// nonEmpty is what a comparison of len(x) with a number establishes
// where it holds (holds) or fails: x not null, and when len(x) > 0 is
// known, x not empty (so that first(x) and last(x) are not null).
func (t *typer) lengthTest(c *ast.BinaryNode, holds bool) facts {
	l, r, op := c.Left, c.Right, c.Operator
	if _, ok := l.(*ast.IntegerNode); ok {
		flip := map[string]string{"<": ">", ">": "<", "<=": ">=", ">=": "<=", "==": "==", "!=": "!="}
		l, r, op = r, l, flip[op]
	}
	b, ok := l.(*ast.BuiltinNode)
	k, isInt := r.(*ast.IntegerNode)
	if !ok || !isInt || b.Name != "len" || len(b.Arguments) != 1 {
		return nil
	}
	path := t.pathOf(b.Arguments[0])
	if path == "" {
		return nil
	}
	if !holds {
		neg := map[string]string{"<": ">=", ">": "<=", "<=": ">", ">=": "<", "==": "!=", "!=": "=="}
		op = neg[op]
	}
	out := t.notNull(path)
	n := k.Value
	if op == ">" && n >= 0 || op == ">=" && n >= 1 || op == "==" && n >= 1 || op == "!=" && n == 0 {
		out[path+"[]"] = fact{notNull: true}
	}
	return out
}

// notNull is the fact that the value at path is not null, nor any value
// it was read through.
func (t *typer) notNull(path string) facts {
	out := facts{}
	for p := path; ; {
		out[p] = fact{notNull: true}
		i := strings.LastIndexByte(p, '.')
		if i < 0 {
			return out
		}
		p = p[:i]
	}
}

// shapeOfValue is the shape of a constant.
func shapeOfValue(v any) *schema.Shape {
	switch x := v.(type) {
	case nil:
		return schema.Of("null")
	case bool:
		return schema.Of("boolean")
	case string:
		return schema.Of("string")
	case int, int64, int32:
		return schema.Of("integer")
	case float64:
		if x == math.Trunc(x) && !math.IsInf(x, 0) {
			return schema.Of("integer")
		}
		return schema.Of("number")
	case []any:
		var items *schema.Shape
		for i, e := range x {
			if i == 0 {
				items = shapeOfValue(e)
			} else {
				items = schema.Union(items, shapeOfValue(e))
			}
		}
		return &schema.Shape{Types: []string{"array"}, Items: orAny(items)}
	case map[string]any:
		props := map[string]*schema.Shape{}
		for k, e := range x {
			props[k] = shapeOfValue(e)
		}
		s := schema.Object(props)
		s.Required = slices.Clone(s.Order)
		return s
	}
	return anyShape()
}

// notBoolean reports a condition whose value is of a known type that is
// not a boolean: a condition takes a boolean, or null as false.
func notBoolean(src string, s *schema.Shape) (Problem, bool) {
	if !s.Known() {
		return Problem{}, false
	}
	var other []string
	for _, ty := range s.Types {
		if ty != "boolean" && ty != "null" {
			other = append(other, ty)
		}
	}
	if len(other) == 0 {
		return Problem{}, false
	}
	what := describeTypes(s.Types)
	return Problem{Line: 1, Col: 1, EndCol: 1 + len([]rune(firstLine(src))), Code: diag.CodeExprNotBool,
		Message: "condition is not boolean: it yields " + what}, true
}

// describeTypes names JSON types in words: "an integer", "an object or null".
func describeTypes(types []string) string {
	words := make([]string, len(types))
	for i, t := range types {
		words[i] = article(t)
		if t == "null" {
			words[i] = "null"
		}
	}
	return strings.Join(words, " or ")
}

// Type is the shape of the expression's value as the checker knows it:
// its JSON types with null among them when it may be null, and what its
// schema states (an object's members, a list's items); no types when it
// is not known.
func (p *Program) Type() *schema.Shape { return p.typ }

// Value returns the expression's value when the checker knows it without
// running it (a literal, a list or map of literals), and whether it does.
func (p *Program) Value() (any, bool) { return p.value, p.hasValue }

// Leaf is one value an expression can yield through its choices (the
// sides of ?: and if/else, of ??, the value of a let): its shape, its
// value when the checker knows it, and its place in the expression's
// text (1-based line and columns).
type Leaf struct {
	Shape             *schema.Shape
	Value             any
	Known             bool
	Line, Col, EndCol int
	// Reads is the value the leaf reads as it is (state.q.text, also
	// through a name let bound to it), "" when it computes one.
	Reads string
	// NotNull is set for a leaf known not to be null whatever its shape:
	// the left of ??, which yields it only when it is not null.
	NotNull bool
}

// leaves lists the values n can yield through its choices.
func (t *typer) leaves(n ast.Node) []Leaf {
	switch x := n.(type) {
	case *ast.ConditionalNode:
		return append(t.leaves(x.Exp1), t.leaves(x.Exp2)...)
	case *ast.BinaryNode:
		if x.Operator == "??" {
			l := t.leaves(x.Left)
			if len(l) == 1 && l[0].Shape.Known() && !l[0].Shape.MayBeNull() {
				return l // never null: the default is never taken
			}
			for i := range l {
				l[i].Shape, l[i].NotNull = l[i].Shape.WithoutNull(), true
			}
			return append(l, t.leaves(x.Right)...)
		}
	case *ast.VariableDeclaratorNode:
		return t.leaves(x.Expr)
	case *ast.SequenceNode:
		if len(x.Nodes) > 0 {
			return t.leaves(x.Nodes[len(x.Nodes)-1])
		}
	}
	loc := n.Location()
	line, col := position(t.src, loc.From)
	s := t.types[n]
	if s == nil {
		s = anyShape()
	}
	v, known := t.consts[n]
	reads := t.paths[unchain(n)]
	if strings.HasPrefix(reads, "let ") || strings.HasPrefix(reads, "#") {
		reads = ""
	}
	return []Leaf{{Shape: s, Value: v, Known: known, Line: line, Col: col, EndCol: col + max(loc.To-loc.From, 1), Reads: reads}}
}

// Leaves lists the values the expression can yield through its choices
// (itself when it has none).
func (p *Program) Leaves() []Leaf { return p.leaves }

// TypeIn is the shape of the expression's value were its variables of
// the shapes env gives (a reducer's update, given what a node writes).
func (p *Program) TypeIn(env *Env) *schema.Shape {
	tree, err := p.parsed()
	if err != nil {
		return anyShape()
	}
	return typeTree(p.src, tree.Node, env).types[tree.Node]
}

// bracketName is the declared name that the text at rune offset from
// starts with, when it has a character a name after a dot cannot have
// (first-name, read as first - name): "" when there is none.
func (t *typer) bracketName(from int, names []string) string {
	r := []rune(t.src)
	if from < 0 || from > len(r) {
		return ""
	}
	rest := string(r[from:])
	best := ""
	for _, n := range names {
		if nonIdent(n) != "" && strings.HasPrefix(rest, n) && len(n) > len(best) {
			best = n
		}
	}
	return best
}

// nonIdent is the first character of name an identifier cannot hold,
// quoted ("" when there is none).
func nonIdent(name string) string {
	for i, c := range name {
		if c == '_' || unicode.IsLetter(c) || i > 0 && unicode.IsDigit(c) {
			continue
		}
		return fmt.Sprintf("%q", string(c))
	}
	return ""
}

// NotNullAfter lists the values (state.x, state.o.n) known not to be null
// where case i of a branch whose conditions are conds is taken: its own
// condition holds, and those before it failed (i == len(conds): the
// else, where all of them failed).
func NotNullAfter(conds []*Program, i int) []string {
	t := &typer{types: map[ast.Node]*schema.Shape{}, consts: map[ast.Node]any{}, reported: map[[2]int]bool{}, paths: map[ast.Node]string{}}
	fs := facts{}
	for j, c := range conds {
		if j > i || c == nil {
			break
		}
		tree, err := c.parsed()
		if err != nil {
			return nil
		}
		fs = fs.with(t.tests(tree.Node, j == i, facts{}))
	}
	var out []string
	for p, f := range fs {
		if f.notNull && !strings.HasSuffix(p, "[]") {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// NullUse says what reading field (of state) as null would make of the
// expression: whether an operation then fails on it (ops), and the shape
// of its value then. A field nothing wrote reads as null: an unset read
// matters where an operation fails on it, or where its value then does
// not fit where it goes.
func (p *Program) NullUse(field string) (ops bool, value *schema.Shape) {
	tree, err := p.parsed()
	if err != nil || p.env == nil {
		return true, schema.Of("null")
	}
	typed := func(unset map[string]bool) (*schema.Shape, int) {
		t := &typer{src: p.src, env: p.env, types: map[ast.Node]*schema.Shape{}, consts: map[ast.Node]any{}, reported: map[[2]int]bool{},
			unset: unset, paths: map[ast.Node]string{}}
		got := t.typeOf(tree.Node, facts{})
		n := 0
		for _, pr := range t.probs {
			if pr.Code == diag.CodeExprMayBeNil {
				n++
			}
		}
		return got, n
	}
	_, before := typed(nil)
	got, after := typed(map[string]bool{"state." + field: true})
	return after > before, got
}

// comparable reports whether a constant compares with == as expr does
// (a scalar of the same Go type as the other).
func comparable(v any) bool {
	switch v.(type) {
	case nil, bool, string, int, float64:
		return true
	}
	return false
}
