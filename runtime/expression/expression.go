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
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/builtin"
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

// Reads lists the expression's unguarded reads of state fields.
func (p *Program) Reads() []Read { return p.reads }

// Refs lists every value the expression reads of the variables roots
// names, guarded or not: "state.x" for a field, "state" for the whole
// object (json(state)), sorted and once each.
func (p *Program) Refs(roots ...string) []string {
	tree, err := p.parsed()
	if err != nil {
		return nil
	}
	seen := map[string]bool{}
	member := map[ast.Node]bool{}
	root := tree.Node
	ast.Walk(&root, &visitor{fn: func(n ast.Node) {
		m, ok := n.(*ast.MemberNode)
		if !ok {
			return
		}
		id, ok := m.Node.(*ast.IdentifierNode)
		if !ok || !slices.Contains(roots, id.Value) {
			return
		}
		member[id] = true
		if prop, ok := m.Property.(*ast.StringNode); ok {
			seen[id.Value+"."+prop.Value] = true
		} else {
			seen[id.Value] = true // state[k]: any field
		}
	}})
	ast.Walk(&root, &visitor{fn: func(n ast.Node) {
		if id, ok := n.(*ast.IdentifierNode); ok && !member[id] && slices.Contains(roots, id.Value) {
			seen[id.Value] = true
		}
	}})
	return slices.Sorted(maps.Keys(seen))
}

// ReadsOf lists the expression's unguarded reads of the fields of the
// object variable root (output.x, for root output), as Reads does for
// state.
func (p *Program) ReadsOf(root string) []Read {
	tree, err := p.parsed()
	if err != nil {
		return nil
	}
	return readsOf(p.src, tree.Node, root)
}

// stateReads finds the unguarded reads of state fields in an expression.
func stateReads(src string, root ast.Node) []Read { return readsOf(src, root, "state") }

// readsOf finds the unguarded reads of the fields of variable name.
func readsOf(src string, root ast.Node, name string) []Read {
	guarded := map[ast.Node]bool{}
	tested := map[string]bool{}
	mark := func(sub ast.Node) {
		ast.Walk(&sub, &visitor{fn: func(n ast.Node) { guarded[n] = true }})
	}
	ast.Walk(&root, &visitor{fn: func(n ast.Node) {
		switch x := n.(type) {
		case *ast.BinaryNode:
			switch x.Operator {
			case "??":
				mark(x.Left)
			case "==", "!=":
				for _, side := range [][2]ast.Node{{x.Left, x.Right}, {x.Right, x.Left}} {
					if _, isNil := side[1].(*ast.NilNode); isNil {
						if f, ok := fieldOf(side[0], name); ok {
							tested[f] = true
						}
						mark(side[0])
					}
				}
			}
		case *ast.MemberNode:
			if x.Optional {
				mark(x.Node)
			}
		case *ast.ChainNode:
			mark(x.Node)
		}
	}})
	var reads []Read
	ast.Walk(&root, &visitor{fn: func(n ast.Node) {
		f, ok := fieldOf(n, name)
		if !ok || guarded[n] || tested[f] {
			return
		}
		prop := n.(*ast.MemberNode).Property
		line, col := position(src, prop.Location().From)
		reads = append(reads, Read{Field: f, Line: line, Col: col, EndCol: col + len([]rune(f))})
	}})
	return reads
}

// fieldOf reports whether n reads VAR.NAME (VAR the variable name), and
// NAME.
func fieldOf(n ast.Node, name string) (string, bool) {
	m, ok := n.(*ast.MemberNode)
	if !ok {
		return "", false
	}
	id, ok := m.Node.(*ast.IdentifierNode)
	prop, isStr := m.Property.(*ast.StringNode)
	if !ok || !isStr || id.Value != name {
		return "", false
	}
	return prop.Value, true
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
		return s[:i]
	}
	return s
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
	for _, p := range checkFields(src, tree.Node, env) {
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
	warnings = append(warnings, checkNullable(src, tree.Node, env)...)
	opts := append([]expr.Option{env.option()}, functions...)
	num := &numeric{of: map[ast.Node]numKind{}}
	ex := &exact{ops: map[*ast.CallNode]opCall{}, env: env}
	pt := &patcher{num: num, ex: ex}
	if len(env.flat) > 0 {
		pt.flat = &flattener{env: env}
	}
	opts = append(opts, expr.Patch(pt))
	if wantBool {
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
	p := &Program{src: src, prog: prog, shape: env.shapeAt(tree.Node), reads: stateReads(src, tree.Node), num: num.of[num.root], branches: num.leaves[num.root], tree: tree}
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
	}
	return p
}

// checkFields resolves member chains rooted at environment variables against
// their shapes and reports every field a closed object does not declare.
func checkFields(src string, root ast.Node, env *Env) []Problem {
	var probs []Problem
	v := &visitor{fn: func(n ast.Node) {
		m, ok := n.(*ast.MemberNode)
		if !ok {
			return
		}
		prop, isStr := m.Property.(*ast.StringNode)
		if !isStr {
			return
		}
		parent := env.shapeAt(m.Node)
		if parent == nil {
			return
		}
		if _, declared := parent.Props[prop.Value]; declared {
			return
		}
		_, allowed := parent.Prop(prop.Value)
		if allowed && len(parent.Props) == 0 {
			return // an object that declares nothing may hold anything
		}
		loc := prop.Location()
		line, col := position(src, loc.From)
		p := Problem{Line: line, Col: col, EndCol: col + len([]rune(prop.Value)), Code: diag.CodeExprUnknown,
			Message: fmt.Sprintf("%s has no field %q", describePath(m.Node), prop.Value)}
		if allowed {
			// an open object may hold it, but does not declare it: most
			// likely a misspelling, which reads nothing
			p.Warning = true
			p.Message = fmt.Sprintf("%s declares no field %q (its schema does not close it, so the read is allowed, and yields nil when absent)",
				describePath(m.Node), prop.Value)
		}
		p.Suggestion = diag.Suggest(prop.Value, parent.Order)
		probs = append(probs, p)
	}}
	ast.Walk(&root, v)
	return probs
}

// shapeAt resolves a chain of constant member reads rooted at a variable
// (state.a.b) to its shape; nil when any step is unknown.
func (e *Env) shapeAt(n ast.Node) *schema.Shape {
	switch x := n.(type) {
	case *ast.IdentifierNode:
		return e.shapes[x.Value]
	case *ast.MemberNode:
		prop, isStr := x.Property.(*ast.StringNode)
		if parent := e.shapeAt(x.Node); parent != nil && isStr {
			child, _ := parent.Prop(prop.Value)
			return child
		}
	}
	return nil
}

// checkNullable reports member reads through a value whose schema allows
// null (x.y where x may be null): expr fails on them at run time. x?.y
// reads are safe, and so are reads on the guarded side of x != nil && ...,
// of x != nil ? ... : ..., or of x == nil ? ... : ....
func checkNullable(src string, root ast.Node, env *Env) []Problem {
	// first the paths each node is guarded against null by, then the reads
	guards := map[ast.Node][]string{}
	guard := func(sub ast.Node, paths []string) {
		if len(paths) > 0 {
			ast.Walk(&sub, &visitor{fn: func(n ast.Node) { guards[n] = append(guards[n], paths...) }})
		}
	}
	ast.Walk(&root, &visitor{fn: func(n ast.Node) {
		switch x := n.(type) {
		case *ast.BinaryNode:
			if x.Operator == "&&" || x.Operator == "and" {
				guard(x.Right, nilTests(x.Left, "!="))
			}
		case *ast.ConditionalNode:
			guard(x.Exp1, nilTests(x.Cond, "!="))
			guard(x.Exp2, nilTests(x.Cond, "=="))
		}
	}})
	var probs []Problem
	ast.Walk(&root, &visitor{fn: func(n ast.Node) {
		x, ok := n.(*ast.MemberNode)
		if !ok {
			return
		}
		prop, isStr := x.Property.(*ast.StringNode)
		path := describePath(x.Node)
		if isStr && !x.Optional && env.shapeAt(x.Node).Nullable() && !slices.Contains(guards[n], path) {
			line, col := position(src, prop.Location().From)
			probs = append(probs, Problem{Line: line, Col: col, EndCol: col + len([]rune(prop.Value)), Code: diag.CodeExprMayBeNil,
				Warning: true, Path: path,
				Message: fmt.Sprintf("%s may be null here, and reading %q of null fails at run time; write %s?.%s, or test %s != nil first",
					path, prop.Value, path, prop.Value, path)})
		}
	}})
	return probs
}

// nilTests lists the paths that cond compares with nil using op, alone or
// joined by && (for !=): where cond holds, they are known not to be null
// (op !=) or, where it fails, known not to be null (op ==).
func nilTests(cond ast.Node, op string) []string {
	x, ok := cond.(*ast.BinaryNode)
	if !ok {
		return nil
	}
	if x.Operator == "&&" || x.Operator == "and" {
		if op == "!=" {
			return append(nilTests(x.Left, op), nilTests(x.Right, op)...)
		}
		return nil
	}
	if x.Operator != op {
		return nil
	}
	if _, isNil := x.Right.(*ast.NilNode); isNil {
		return []string{describePath(x.Left)}
	}
	if _, isNil := x.Left.(*ast.NilNode); isNil {
		return []string{describePath(x.Right)}
	}
	return nil
}

func describePath(n ast.Node) string {
	switch x := n.(type) {
	case *ast.IdentifierNode:
		return x.Value
	case *ast.MemberNode:
		if s, ok := x.Property.(*ast.StringNode); ok {
			return describePath(x.Node) + "." + s.Value
		}
	}
	return "value"
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

// Whole reports whether the expression always gives a whole number (an
// int, or a float with no fraction: round, floor, ceil, int, whole
// literals and +, -, *, % over them), so that an integer field holds it;
// a division, a power, a mean or a fractional literal may not.
func (p *Program) Whole() bool { return p.num == numWhole }

// Branches lists the values the expression can yield through its choices
// (the branches of ?: and ??, themselves when it has none), each with its
// JSON type where the checker knows it; columns are 1-based on the
// expression's first line, or Line gives the line.
func (p *Program) Branches() []Branch {
	out := make([]Branch, len(p.branches))
	for i, b := range p.branches {
		line, col := position(p.src, b.from)
		out[i] = Branch{Type: b.typ, Line: line, Col: col, EndCol: col + max(b.to-b.from, 1)}
	}
	return out
}

// Number reports whether the expression gives a number, even where the
// checker cannot tell its type (mean and median give any).
func (p *Program) Number() bool { return p.num != numUnknown }

// ResultType is the type the checker gives the expression's value, or nil
// when it cannot tell (a value of any type, such as a field of an
// untyped object); a nullable value has the type it has when not nil.
func (p *Program) ResultType() reflect.Type {
	t := p.prog.Node().Type()
	if t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem() // a nullable field's value: nil, or this
	}
	if t == nil || t.Kind() == reflect.Interface {
		return nil
	}
	return t
}

// Yield is a string literal an expression can yield as its value, with
// its place in the expression's text (1-based line and columns).
type Yield struct {
	Value             string
	Line, Col, EndCol int
}

// Yields lists the string literals the expression can yield as its value:
// itself, or the branches of conditionals (?: and if/else) and ?? that
// are literals. all reports whether those literals are all it can yield.
func (p *Program) Yields() (lits []Yield, all bool) {
	tree, err := p.parsed()
	if err != nil {
		return nil, false
	}
	all = true
	var walk func(n ast.Node)
	walk = func(n ast.Node) {
		switch n := n.(type) {
		case *ast.StringNode:
			loc := n.Location()
			line, col := position(p.src, loc.From)
			end := col + max(loc.To-loc.From, 1)
			lits = append(lits, Yield{Value: n.Value, Line: line, Col: col, EndCol: end})
		case *ast.ConditionalNode:
			walk(n.Exp1)
			walk(n.Exp2)
		case *ast.BinaryNode:
			if n.Operator != "??" {
				all = false
				return
			}
			walk(n.Left)
			walk(n.Right)
		default:
			all = false
		}
	}
	walk(tree.Node)
	return lits, all
}

// NumberLiteral is a number literal an expression can yield as its value, with
// its place in the expression's text.
type NumberLiteral struct {
	Value             float64
	Line, Col, EndCol int
}

// Numbers lists the number literals the expression can yield as its
// value: itself, or the branches of conditionals (?: and if/else) and ??
// that are literals (negated ones too).
func (p *Program) Numbers() []NumberLiteral {
	tree, err := p.parsed()
	if err != nil {
		return nil
	}
	var lits []NumberLiteral
	add := func(n, last ast.Node, v float64) {
		from, to := n.Location().From, last.Location().To
		line, col := position(p.src, from)
		lits = append(lits, NumberLiteral{Value: v, Line: line, Col: col, EndCol: col + max(to-from, 1)})
	}
	var walk func(n ast.Node)
	walk = func(n ast.Node) {
		switch n := n.(type) {
		case *ast.IntegerNode:
			add(n, n, float64(n.Value))
		case *ast.FloatNode:
			add(n, n, n.Value)
		case *ast.UnaryNode:
			switch x := n.Node.(type) {
			case *ast.IntegerNode:
				if n.Operator == "-" {
					add(n, x, -float64(x.Value))
				}
			case *ast.FloatNode:
				if n.Operator == "-" {
					add(n, x, -x.Value)
				}
			}
		case *ast.ConditionalNode:
			walk(n.Exp1)
			walk(n.Exp2)
		case *ast.BinaryNode:
			if n.Operator == "??" {
				walk(n.Left)
				walk(n.Right)
			}
		}
	}
	walk(tree.Node)
	return lits
}

// Complements reports whether, whatever the state, at least one of the
// conditions holds, as far as their text shows: one is the literal true,
// or two are each other's negation (!c and c, a == b and a != b, a < b
// and a >= b, a in b and a not in b, ...).
func Complements(conds []*Program) bool {
	seen := map[string]bool{}
	var negs []string
	for _, c := range conds {
		if c == nil {
			continue
		}
		tree, err := c.parsed()
		if err != nil {
			continue
		}
		if b, ok := tree.Node.(*ast.BoolNode); ok && b.Value {
			return true
		}
		seen[tree.Node.String()] = true
		if neg := negation(tree.Node); neg != "" {
			negs = append(negs, neg)
		}
	}
	for _, n := range negs {
		if seen[n] {
			return true
		}
	}
	return false
}

// negation is the text of n's negation, when n is a negation or a
// comparison ("" otherwise).
func negation(n ast.Node) string {
	switch n := n.(type) {
	case *ast.UnaryNode:
		if n.Operator == "!" || n.Operator == "not" {
			return n.Node.String()
		}
	case *ast.BinaryNode:
		flip := map[string]string{"==": "!=", "!=": "==", "<": ">=", ">=": "<", ">": "<=", "<=": ">"}
		if op, ok := flip[n.Operator]; ok {
			return (&ast.BinaryNode{Operator: op, Left: n.Left, Right: n.Right}).String()
		}
	}
	return ""
}

// checkEnums reports comparisons (==, !=, in, not in) of a field whose
// schema is a string enum with a string literal the enum does not allow:
// the field can never equal it, so the comparison is constant, and most
// likely misspelt.
func checkEnums(src string, root ast.Node, env *Env) []Problem {
	var probs []Problem
	check := func(field ast.Node, lit ast.Node) {
		str, ok := lit.(*ast.StringNode)
		if !ok {
			return
		}
		values, isEnum := env.shapeAt(field).Strings()
		if !isEnum || slices.Contains(values, str.Value) {
			return
		}
		loc := str.Location()
		line, col := position(src, loc.From)
		probs = append(probs, Problem{Line: line, Col: col, EndCol: col + max(loc.To-loc.From, 1), Code: diag.CodeExprEnum,
			Message:    fmt.Sprintf("%s is one of %s, never %q", describePath(field), quoteAll(values), str.Value),
			Suggestion: diag.Suggest(str.Value, values)})
	}
	ast.Walk(&root, &visitor{fn: func(n ast.Node) {
		b, ok := n.(*ast.BinaryNode)
		if !ok {
			return
		}
		switch b.Operator {
		case "==", "!=":
			check(b.Left, b.Right)
			check(b.Right, b.Left)
		case "in":
			if arr, ok := b.Right.(*ast.ArrayNode); ok {
				for _, el := range arr.Nodes {
					check(b.Left, el)
				}
			}
		}
	}})
	return probs
}

// article names a JSON type with its article.
func article(t string) string {
	switch t {
	case "integer", "array", "object":
		return "an " + t
	}
	return "a " + t
}

func quoteAll(values []string) string {
	q := make([]string, len(values))
	for i, v := range values {
		q[i] = strconv.Quote(v)
	}
	return strings.Join(q, ", ")
}

// Enum returns the strings the expression can yield when it reads a field
// whose schema is a string enum (state.x, or state.x ?? 'literal'), and
// whether it is such a read.
func (p *Program) Enum(env *Env) ([]string, bool) {
	tree, err := p.parsed()
	if err != nil {
		return nil, false
	}
	var values func(n ast.Node) ([]string, bool)
	values = func(n ast.Node) ([]string, bool) {
		switch x := n.(type) {
		case *ast.StringNode:
			return []string{x.Value}, true
		case *ast.BinaryNode:
			if x.Operator != "??" {
				return nil, false
			}
			l, lok := values(x.Left)
			r, rok := values(x.Right)
			return append(l, r...), lok && rok
		}
		return env.shapeAt(n).Strings()
	}
	vals, ok := values(tree.Node)
	if _, isLit := tree.Node.(*ast.StringNode); isLit {
		return nil, false
	}
	return vals, ok
}

// Constant returns the expression's value when it is a constant (a
// literal, or what constant folding left), and whether it is one.
func (p *Program) Constant() (any, bool) { return p.lit, p.hasLit }
