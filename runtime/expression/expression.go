// Package expression is the glue between flows and expr-lang/expr.
// Expressions are compiled once, at load, against a typed environment derived
// from the flow's state schema, so a misspelt field or a non-boolean
// condition is a load error with a position and a suggestion, never a runtime
// surprise. Evaluation reuses virtual machines and allocates nothing beyond
// what the expression itself builds. Programs over an environment whose
// state and input fields are slotted (see Env.Slotted) also get a fast
// path of closures that read those fields straight from a Frame and hand
// every case they do not cover to the machine (see fast.go).
package expression

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/builtin"
	"github.com/expr-lang/expr/checker"
	"github.com/expr-lang/expr/checker/nature"
	"github.com/expr-lang/expr/conf"
	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/parser"
	"github.com/expr-lang/expr/types"
	"github.com/expr-lang/expr/vm"

	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/schema"
)

// Env describes the variables an expression may read.
type Env struct {
	vars   types.Map
	shapes map[string]*schema.Shape
	names  []string
	// flat names the object variables whose declared fields are also bound
	// as variables of their own ("state.count"), see WithFields.
	flat map[string]bool
	// nature is the checker's view of vars, worked out once for every
	// expression compiled against the environment.
	natureOnce sync.Once
	nature     nature.Nature
	// checking is held while expr checks an expression against nature,
	// whose method sets it works out and keeps as it goes: expressions
	// compiled against one environment at once (several flow tests on
	// one compiled graph) take turns there.
	checking sync.Mutex
	// slots gives the frame slot of each field of state and input, see
	// Slotted
	slots map[string]int
}

// option gives expr the environment, its nature worked out once.
func (e *Env) option() expr.Option {
	e.natureOnce.Do(func() { e.nature = e.vars.Nature() })
	return func(c *conf.Config) {
		c.EnvObject, c.Env, c.Strict = e.vars, e.nature, e.nature.Strict
	}
}

// NewEnv returns an empty environment.
func NewEnv() *Env {
	return &Env{vars: types.Map{}, shapes: map[string]*schema.Shape{}, flat: map[string]bool{}}
}

// With returns a copy of e with variable name of the given shape added
// (nil shape: any value).
func (e *Env) With(name string, shape *schema.Shape) *Env {
	n := e.clone()
	delete(n.flat, name)
	n.names = append(n.names, name)
	n.vars[name] = TypeOf(shape)
	n.shapes[name] = shape
	return n
}

// clone copies e.
func (e *Env) clone() *Env {
	n := &Env{vars: make(types.Map, len(e.vars)+1), shapes: make(map[string]*schema.Shape, len(e.shapes)+1), flat: map[string]bool{},
		names: slices.Clone(e.names), slots: e.slots}
	for k, v := range e.vars {
		n.vars[k] = v
	}
	for k, v := range e.shapes {
		n.shapes[k] = v
	}
	for k := range e.flat {
		n.flat[k] = true
	}
	return n
}

// WithFields is With for an object variable whose declared fields are
// also bound as variables named "name.field". Expressions reading
// name.field with a constant field name compile to a direct load of that
// variable instead of a reflective lookup in the object. Variable maps for
// such an environment must be built with Bind and kept current with
// BindField.
func (e *Env) WithFields(name string, shape *schema.Shape) *Env {
	n := e.With(name, shape)
	if shape != nil {
		n.flat[name] = true
		for f, p := range shape.Props {
			n.vars[name+"."+f] = TypeOf(p)
		}
	}
	return n
}

// Bind sets variable name to the object m in vars, with a "name.field"
// variable per field of m.
func Bind(vars map[string]any, name string, m map[string]any) {
	vars[name] = m
	for k, v := range m {
		vars[name+"."+k] = v
	}
}

// BindField updates one field variable after the object's field changed;
// key is name+"."+field, precomputed by the caller.
func BindField(vars map[string]any, key string, v any) { vars[key] = v }

// Names lists the variables in the order they were added.
func (e *Env) Names() []string { return e.names }

// TypeOf maps a schema shape to the expression type checker's types. A
// nullable scalar (type [T, "null"], or anyOf T and null) is a pointer to
// T: the checker sees through it, so a string compared with a nullable
// number is still an error, and ?? gives the value or a default.
func TypeOf(s *schema.Shape) types.Type {
	if s != nil && len(s.Types) == 0 && len(s.Enum) > 0 {
		// an enum with no type: strings when it lists only strings
		if _, ok := s.Strings(); ok {
			if slices.Contains(s.Enum, nil) {
				return types.TypeOf(new(string))
			}
			return types.String
		}
	}
	if s.Nullable() && len(s.Types) == 2 {
		switch s.NonNull().Types[0] {
		case "integer":
			return types.TypeOf(new(int))
		case "number":
			return types.TypeOf(new(float64))
		case "string":
			return types.TypeOf(new(string))
		case "boolean":
			return types.TypeOf(new(bool))
		}
		return types.Any
	}
	if s == nil || len(s.Types) != 1 {
		return types.Any
	}
	switch s.Types[0] {
	case "integer":
		return types.Int
	case "number":
		return types.Float64
	case "string":
		return types.String
	case "boolean":
		return types.Bool
	case "array":
		return types.Array(TypeOf(s.Items))
	case "object":
		m := types.Map{}
		for name, p := range s.Props {
			m[name] = TypeOf(p)
		}
		if !s.Closed {
			m[types.Extra] = types.Any
		}
		return m
	}
	return types.Any
}

// Problem is one compile problem, positioned inside the expression text
// (1-based line and column).
type Problem struct {
	Line, Col, EndCol int
	Code              diag.Code
	Message           string
	Suggestion        string
	// Warning marks a problem that does not stop the expression compiling;
	// Path is then the value it is about (state.x).
	Warning bool
	Path    string
}

// Program is a compiled expression.
type Program struct {
	src  string
	prog *vm.Program
	// lit is the value of a program that is a scalar literal once
	// compiled ('n0', 3, true, or what constant folding left), which
	// every run would compute again.
	lit    any
	hasLit bool
	// shape is the shape of a program that is a chain of member reads
	// (output.review), nil when not known
	shape *schema.Shape
	reads []Read
	// num says whether the value is a number, whole or not (see numeric).
	num numKind
	// branches are the values it can yield through its choices.
	branches []branch
	// typ is the shape of its value, as the checker's own types know it
	// (see types.go); value is its value when the checker knows it
	// (literals, and lists and maps of them).
	typ      *schema.Shape
	value    any
	hasValue bool
	leaves   []Leaf
	// env is the environment it was compiled against.
	env *Env
	// tree is the parsed expression, which the questions asked of the
	// program after it compiled read (never changed).
	tree *parser.Tree
	// fast is the program's fast path, nil when it has none (see
	// fast.go); fastInt and fastBool are its unboxed forms, when its
	// value is an int or a bool
	fast     func(*Frame) (any, bool)
	fastInt  func(*Frame) (int, bool)
	fastBool func(*Frame) (bool, bool)
}

// parsed is the program's syntax tree.
func (p *Program) parsed() (*parser.Tree, error) {
	if p.tree != nil {
		return p.tree, nil
	}
	return parser.Parse(p.src)
}

// Branch is one value an expression can yield through its choices (?:,
// ??): its JSON type ("" when the checker does not know it) and place.
type Branch struct {
	Type              string
	Line, Col, EndCol int
}

// Read is a read of a state field (state.NAME) that nothing in the
// expression guards against the field being unset: not under ?? or a
// ?. chain, and the expression never compares the field with nil.
type Read struct {
	Field             string
	Line, Col, EndCol int
}

// Shape is the shape of the value of an expression that reads a variable
// or a chain of its members (output, output.review.score), as declared,
// or of a list literal whose elements share a type; nil for any other
// expression.
func (p *Program) Shape() *schema.Shape { return p.shape }

// Atomic reports whether the expression is one operand (a name, a member
// read, a call, a literal, a bracketed expression), so that it keeps its
// meaning written beside an operator without parentheses.
func (p *Program) Atomic() bool {
	tree, err := p.parsed()
	if err != nil {
		return false
	}
	switch tree.Node.(type) {
	case *ast.BinaryNode, *ast.ConditionalNode, *ast.UnaryNode, *ast.SequenceNode, *ast.VariableDeclaratorNode:
		return false
	}
	return true
}

// Source is the expression text.
func (p *Program) Source() string { return p.src }

// String renders the expression for graphs and messages.
func (p *Program) String() string { return p.src }

var vms = sync.Pool{New: func() any { return new(vm.VM) }}

// Machine evaluates programs with a virtual machine of its own; the zero
// value is ready. A Machine must not be used by two goroutines at once.
type Machine struct{ vm vm.VM }

// Eval runs p over vars.
func (m *Machine) Eval(p *Program, vars map[string]any) (any, error) {
	if p.hasLit {
		return p.lit, nil
	}
	v, err := m.vm.Run(p.prog, vars)
	if err != nil {
		return nil, errors.New(trimSnippet(err.Error()))
	}
	return v, nil
}

// EvalBool runs a condition.
func (m *Machine) EvalBool(p *Program, vars map[string]any) (bool, error) {
	v, err := m.Eval(p, vars)
	if err != nil {
		return false, err
	}
	return asBool(p, v)
}

// Eval runs the program over vars (a map from variable name to value).
func (p *Program) Eval(vars map[string]any) (any, error) {
	if p.hasLit {
		return p.lit, nil
	}
	m := vms.Get().(*vm.VM)
	v, err := m.Run(p.prog, vars)
	vms.Put(m)
	if err != nil {
		return nil, errors.New(trimSnippet(err.Error()))
	}
	return v, nil
}

// EvalBool runs a condition.
func (p *Program) EvalBool(vars map[string]any) (bool, error) {
	v, err := p.Eval(vars)
	if err != nil {
		return false, err
	}
	return asBool(p, v)
}

func asBool(p *Program, v any) (bool, error) {
	b, ok := v.(bool)
	if !ok {
		if v == nil {
			return false, nil
		}
		return false, fmt.Errorf("condition %q yielded %T, not a boolean", p.src, v)
	}
	return b, nil
}

func trimSnippet(s string) string {
	if i := strings.Index(s, "\n"); i >= 0 {
		s = s[:i]
	}
	// a typed operation given another value (null, mostly: a field not
	// written yet, find or first of nothing) says so in the flow's words
	// rather than Go's
	if m := conversion().FindStringSubmatch(s); m != nil {
		got, want := valueName(m[1]), valueName(m[2])
		if m[1] == "nil" {
			got = "null"
		} else if got == want {
			// two of Go's kinds of one value (int64, int)
			got, want = fmt.Sprintf("%s (%s)", got, m[1]), fmt.Sprintf("%s (%s)", want, m[2])
		}
		s = fmt.Sprintf("%s where %s is needed%s", got, want, m[3])
		if m[1] == "nil" {
			s += ": a value not written yet, or a function's empty result? Give it a default, or read it as (x ?? a value)"
		}
	}
	return s
}

var conversion = diag.Pattern(`^interface conversion: interface \{\} is (nil|.+?), not (.+?)( \(\d+:\d+\))?$`)

// valueName is a Go type of the values expressions see, as a flow names it.
func valueName(goType string) string {
	switch goType {
	case "string":
		return "a text"
	case "int", "int64", "float64", "json.Number":
		return "a number"
	case "bool":
		return "a boolean"
	case "[]interface {}":
		return "a list"
	case "map[string]interface {}":
		return "an object"
	}
	return "a " + goType
}

// Compile compiles src against env. With wantBool the result must be a
// boolean. It returns every problem it can find: all unknown fields at once,
// else the first syntax or type error. Warnings come with a program.
func Compile(src string, env *Env, wantBool bool) (*Program, []Problem) {
	tree, err := parser.Parse(src)
	if err != nil {
		return nil, []Problem{fromError(src, err, env)}
	}
	var warnings, errs []Problem
	ty := typeTree(src, tree.Node, env)
	for _, p := range ty.probs {
		if p.Warning {
			warnings = append(warnings, p)
		} else {
			errs = append(errs, p)
		}
	}
	errs = append(errs, checkEnums(src, tree.Node, env)...)
	if len(errs) > 0 {
		return nil, errs
	}
	typ := ty.types[tree.Node]
	if wantBool && !choice(tree.Node) {
		// (a choice has each of its branches judged, below)
		if p, bad := notBoolean(src, typ); bad {
			return nil, []Problem{p}
		}
	}
	env.checking.Lock()
	defer env.checking.Unlock()
	opts := append([]expr.Option{env.option()}, functions...)
	// the expression as written is checked before any patch: the checker
	// takes the type a patched operation was given and does not look into
	// its operands again, so an unknown name there would pass
	if err := checkAsWritten(src, opts); err != nil {
		return nil, []Problem{fromError(src, err, env)}
	}
	num := &numeric{of: map[ast.Node]numKind{}}
	ex := &exact{ops: map[*ast.CallNode]opCall{}, env: env}
	pt := &patcher{num: num, ex: ex}
	if len(env.flat) > 0 {
		pt.flat = &flattener{env: env}
	}
	opts = append(opts, expr.Patch(pt))
	if wantBool && !typ.Known() {
		// (a condition of a known type is judged above: a boolean, or
		// null, which a condition takes as false)
		opts = append(opts, expr.AsBool())
	}
	prog, err := expr.Compile(src, opts...)
	if err != nil {
		p := fromError(src, err, env)
		if wantBool && strings.HasPrefix(p.Message, "expected bool") {
			p.Code = diag.CodeExprNotBool
			p.Message = "condition is not boolean: " + strings.TrimPrefix(p.Message, "expected bool, but got ") + " expression"
			p.Line, p.Col, p.EndCol = 1, 1, 1+len([]rune(firstLine(src)))
		}
		return nil, []Problem{p}
	}
	p := &Program{src: src, prog: prog, shape: env.shapeAt(tree.Node), reads: stateReads(src, tree.Node, ty.consts), num: num.of[num.root], branches: num.leaves[num.root], tree: tree,
		typ: typ}
	if v, ok := ty.consts[tree.Node]; ok {
		p.value, p.hasValue = v, true
	}
	p.leaves = ty.leaves(tree.Node)
	p.env = env
	if p.shape == nil && num.items != "" {
		// a list literal: the type its elements share
		p.shape = &schema.Shape{Types: []string{"array"}, Items: &schema.Shape{Types: []string{num.items}}}
	}
	if wantBool && len(p.branches) > 1 {
		// a choice typed any as a whole: each branch must be a boolean
		var probs []Problem
		for _, b := range p.Branches() {
			if b.Type != "" && b.Type != "boolean" && b.Type != "null" {
				probs = append(probs, Problem{Line: b.Line, Col: b.Col, EndCol: b.EndCol, Code: diag.CodeExprNotBool,
					Message: "condition is not boolean: this branch yields " + article(b.Type)})
			}
		}
		if len(probs) > 0 {
			return nil, probs
		}
	}
	if literal(prog.Node()) {
		// the literal is what the machine would return, every time
		if v, err := new(vm.VM).Run(prog, map[string]any{}); err == nil {
			p.lit, p.hasLit = v, true
		}
	}
	if !p.hasLit {
		compileFast(p, prog.Node(), env, ex.ops, wantBool)
	}
	return p, warnings
}

// choice reports whether n yields one of several branches (?:, if/else,
// ??).
func choice(n ast.Node) bool {
	switch x := n.(type) {
	case *ast.ConditionalNode:
		return true
	case *ast.BinaryNode:
		return x.Operator == "??"
	}
	return false
}

// checkAsWritten type-checks src with opts, unpatched, as expr.Compile
// would.
func checkAsWritten(src string, opts []expr.Option) error {
	cfg := conf.CreateNew()
	for _, op := range opts {
		op(cfg)
	}
	for name := range cfg.Disabled {
		delete(cfg.Builtins, name)
	}
	cfg.Check()
	_, err := checker.ParseCheck(src, cfg)
	return err
}

// literal reports whether n is a scalar constant.
func literal(n ast.Node) bool {
	switch n := n.(type) {
	case *ast.NilNode, *ast.BoolNode, *ast.IntegerNode, *ast.FloatNode, *ast.StringNode:
		return true
	case *ast.ConstantNode:
		switch n.Value.(type) {
		case nil, bool, int, float64, string:
			return true
		}
	}
	return false
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

func fromError(src string, err error, env *Env) Problem {
	var fe *file.Error
	if !errors.As(err, &fe) {
		return Problem{Line: 1, Col: 1, Code: diag.CodeExprSyntax, Message: err.Error()}
	}
	p := Problem{Line: max(fe.Line, 1), Col: fe.Column + 1, Code: diag.CodeExprSyntax, Message: fe.Message}
	if fe.To > fe.From {
		p.EndCol = p.Col + (fe.To - fe.From)
	}
	if words := inWords(src, fe.Message, fe.From); words != "" {
		p.Message = words
	}
	if name, ok := strings.CutPrefix(fe.Message, "unknown name "); ok {
		p.Code = diag.CodeExprUnknown
		p.Message = fmt.Sprintf("unknown name %q", name)
		p.Suggestion = diag.Suggest(name, append(slices.Clone(env.names), FunctionNames()...))
		if p.Suggestion == "" {
			// most likely a text meant, written without its quotes
			p.Message += fmt.Sprintf(": a text is written in quotes ('%s'); a value of the state is read as state.NAME", name)
		}
	}
	return p
}

func position(src string, offset int) (line, col int) {
	line, col = 1, 1
	for i, r := range []rune(src) {
		if i == offset {
			break
		}
		if r == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return line, col
}

// patcher makes one pass over the checked tree (the checker types the
// tree again before each pass, so one pass is the cheapest): it records
// what numbers each node gives (numeric), then rewrites integer
// arithmetic into exact operations (exact) and flattened fields into
// variables (flattener), keeping each rewritten node's type and what
// numeric found of it.
type patcher struct {
	num  *numeric
	flat *flattener
	ex   *exact
	// keyed holds the groupBy closures whose key goes through groupKey
	keyed map[*ast.PredicateNode]bool
}

func (p *patcher) Visit(n *ast.Node) {
	p.num.Visit(n)
	old := *n
	if p.flat != nil {
		p.flat.Visit(n)
		if *n != old {
			// a field read as its own variable keeps its type, which the
			// node reading it asks (exact's choice of operation over
			// ints); a call exact makes is left untyped, for the checker
			// to type, and so compile to a direct call
			(*n).SetType(old.Type())
		}
	}
	p.ex.Visit(n)
	if *n != old {
		p.num.of[*n], p.num.leaves[*n], p.num.root = p.num.of[old], p.num.leaves[old], *n
	}
	if b, ok := (*n).(*ast.BuiltinNode); ok && b.Name == "groupBy" && len(b.Arguments) == 2 {
		if c, ok := b.Arguments[1].(*ast.PredicateNode); ok && !p.keyed[c] {
			if p.keyed == nil {
				p.keyed = map[*ast.PredicateNode]bool{}
			}
			p.keyed[c] = true
			c.Node = direct(groupKey, c.Node)
		}
	}
}

// flattener rewrites name.field (a constant field of a flattened object
// variable) into the variable "name.field".
type flattener struct{ env *Env }

func (f *flattener) Visit(n *ast.Node) {
	m, ok := (*n).(*ast.MemberNode)
	if !ok {
		return
	}
	id, ok := m.Node.(*ast.IdentifierNode)
	if !ok || !f.env.flat[id.Value] {
		return
	}
	prop, ok := m.Property.(*ast.StringNode)
	if !ok {
		return
	}
	if _, declared := f.env.shapes[id.Value].Props[prop.Value]; !declared {
		return
	}
	ast.Patch(n, &ast.IdentifierNode{Value: id.Value + "." + prop.Value})
}

type visitor struct{ fn func(ast.Node) }

func (v *visitor) Visit(n *ast.Node) { v.fn(*n) }

// FunctionNames lists the built-in and registered function names, for
// suggestions.
func FunctionNames() []string {
	names := slices.Clone(registered)
	for _, f := range builtin.Builtins {
		names = append(names, f.Name)
	}
	return names
}
