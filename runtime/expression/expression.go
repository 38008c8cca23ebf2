// Package expression is the glue between flows and expr-lang/expr.
// Expressions are compiled once, at load, against a typed environment derived
// from the flow's state schema, so a misspelt field or a non-boolean
// condition is a load error with a position and a suggestion, never a runtime
// surprise. Evaluation reuses virtual machines and allocates nothing beyond
// what the expression itself builds.
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
}

// NewEnv returns an empty environment.
func NewEnv() *Env {
	return &Env{vars: types.Map{}, shapes: map[string]*schema.Shape{}}
}

// With returns a copy of e with variable name of the given shape added
// (nil shape: any value).
func (e *Env) With(name string, shape *schema.Shape) *Env {
	n := &Env{vars: make(types.Map, len(e.vars)+1), shapes: make(map[string]*schema.Shape, len(e.shapes)+1)}
	for k, v := range e.vars {
		n.vars[k] = v
	}
	for k, v := range e.shapes {
		n.shapes[k] = v
	}
	n.names = append(slices.Clone(e.names), name)
	n.vars[name] = TypeOf(shape)
	n.shapes[name] = shape
	return n
}

// Names lists the variables in the order they were added.
func (e *Env) Names() []string { return e.names }

// TypeOf maps a schema shape to the expression type checker's types.
func TypeOf(s *schema.Shape) types.Type {
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
	Code              string
	Message           string
	Suggestion        string
}

// Problem codes, shared with the flow validator.
const (
	CodeSyntax       = "E001" // does not parse or does not type-check
	CodeNotBool      = "E002" // a condition that is not boolean
	CodeUnknownField = "E003" // reads a field the schema does not have
)

// Program is a compiled expression.
type Program struct {
	src     string
	prog    *vm.Program
	IsConst bool
}

// Source is the expression text.
func (p *Program) Source() string { return p.src }

// String renders the expression for graphs and messages.
func (p *Program) String() string { return p.src }

var vms = sync.Pool{New: func() any { return new(vm.VM) }}

// Eval runs the program over vars (a map from variable name to value).
func (p *Program) Eval(vars map[string]any) (any, error) {
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
// else the first syntax or type error.
func Compile(src string, env *Env, wantBool bool) (*Program, []Problem) {
	tree, err := parser.Parse(src)
	if err != nil {
		return nil, []Problem{fromError(src, err, env)}
	}
	if probs := checkFields(src, tree.Node, env); len(probs) > 0 {
		return nil, probs
	}
	opts := append([]expr.Option{expr.Env(env.vars)}, functions...)
	if wantBool {
		opts = append(opts, expr.AsBool())
	}
	prog, err := expr.Compile(src, opts...)
	if err != nil {
		p := fromError(src, err, env)
		if wantBool && strings.HasPrefix(p.Message, "expected bool") {
			p.Code = CodeNotBool
			p.Message = "condition is not boolean: " + strings.TrimPrefix(p.Message, "expected bool, but got ") + " expression"
			p.Line, p.Col, p.EndCol = 1, 1, 1+len([]rune(firstLine(src)))
		}
		return nil, []Problem{p}
	}
	_, isConst := prog.Node().(*ast.BoolNode)
	return &Program{src: src, prog: prog, IsConst: isConst}, nil
}

// MustCompile compiles or panics; for expressions built by code, not users.
func MustCompile(src string, env *Env, wantBool bool) *Program {
	p, probs := Compile(src, env, wantBool)
	if len(probs) > 0 {
		panic(fmt.Sprintf("expression %q: %s", src, probs[0].Message))
	}
	return p
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
		return Problem{Line: 1, Col: 1, Code: CodeSyntax, Message: err.Error()}
	}
	p := Problem{Line: max(fe.Line, 1), Col: fe.Column + 1, Code: CodeSyntax, Message: fe.Message}
	if fe.To > fe.From {
		p.EndCol = p.Col + (fe.To - fe.From)
	}
	if name, ok := strings.CutPrefix(fe.Message, "unknown name "); ok {
		p.Code = CodeUnknownField
		p.Message = fmt.Sprintf("unknown name %q", name)
		p.Suggestion = diag.Suggest(name, append(slices.Clone(env.names), FunctionNames()...))
	}
	return p
}

// checkFields resolves member chains rooted at environment variables against
// their shapes and reports every field a closed object does not declare.
func checkFields(src string, root ast.Node, env *Env) []Problem {
	var probs []Problem
	var resolve func(n ast.Node) (*schema.Shape, bool)
	resolve = func(n ast.Node) (*schema.Shape, bool) {
		switch x := n.(type) {
		case *ast.IdentifierNode:
			s, ok := env.shapes[x.Value]
			return s, ok && s != nil
		case *ast.MemberNode:
			parent, ok := resolve(x.Node)
			prop, isStr := x.Property.(*ast.StringNode)
			if !ok || !isStr {
				return nil, false
			}
			child, ok := parent.Prop(prop.Value)
			return child, ok && child != nil
		}
		return nil, false
	}
	v := &visitor{fn: func(n ast.Node) {
		m, ok := n.(*ast.MemberNode)
		if !ok {
			return
		}
		prop, isStr := m.Property.(*ast.StringNode)
		if !isStr {
			return
		}
		parent, ok := resolve(m.Node)
		if !ok {
			return
		}
		if _, ok := parent.Prop(prop.Value); ok {
			return
		}
		loc := prop.Location()
		line, col := position(src, loc.From)
		p := Problem{Line: line, Col: col, EndCol: col + len([]rune(prop.Value)), Code: CodeUnknownField,
			Message: fmt.Sprintf("%s has no field %q", describePath(m.Node), prop.Value)}
		p.Suggestion = diag.Suggest(prop.Value, parent.Order)
		probs = append(probs, p)
	}}
	ast.Walk(&root, v)
	return probs
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
