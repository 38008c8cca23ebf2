// Package kind is the contract between the runtime and node kinds. A kind
// registers one declarative Spec: its name, a summary, the JSON Schema of its
// own settings and a constructor. The flow loader validates a node's block
// against that schema (through the published flow schema), then calls the
// constructor with a Builder that compiles expressions against the flow's
// state and records which fields the node writes. The runtime sees only the
// Registry interface and imports no kind.
package kind

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"

	"gopkg.in/yaml.v3"

	"github.com/trellisflow/trellis/runtime/expression"
	"github.com/trellisflow/trellis/runtime/prompt"
	"github.com/trellisflow/trellis/runtime/schema"
)

// Spec declares a node kind.
type Spec struct {
	// Name is snake_case and unique.
	Name string
	// Summary is one sentence for docs and editor hovers.
	Summary string
	// Settings is the JSON Schema of the kind's own keys in a node block,
	// written as a JSON object with "properties" (and optionally
	// "required"); the common keys (kind, retry, timeout, on_error, ...) are
	// added by the runtime.
	Settings string
	// New builds a node from its settings. It reports problems through the
	// builder and may return nil when it found any; it does no I/O.
	New func(b Builder) Node
	// Inline declares that Run never blocks: no I/O, no waiting, bounded
	// computation. The engine then runs such nodes on its own goroutine
	// instead of starting one per node; they still see the superstep's
	// snapshot and merge in declaration order like every other node.
	Inline bool
}

// Node is one built node. Run receives a read-only view of state and returns
// the fields to update; it never mutates the view. It must honour ctx.
type Node interface {
	Run(ctx context.Context, s *State) (Update, error)
}

// Update lists the fields a node writes and their values. Each value goes
// through the field's reducer at the superstep barrier. A field appears at
// most once.
type Update []FieldValue

// FieldValue is one written field.
type FieldValue struct {
	Field string
	Value any
}

// Get returns the value written to field, if any.
func (u Update) Get(field string) (any, bool) {
	for _, fv := range u {
		if fv.Field == field {
			return fv.Value, true
		}
	}
	return nil, false
}

// Map returns the update as a map, for events and display.
func (u Update) Map() map[string]any {
	if u == nil {
		return nil
	}
	m := make(map[string]any, len(u))
	for _, fv := range u {
		m[fv.Field] = fv.Value
	}
	return m
}

// State is the read-only view a node runs on: the committed state of the
// superstep's snapshot, the run's input, and the prepared expression
// variables.
type State struct {
	// Node is the name of the running node, Attempt its 1-based attempt.
	Node     string
	Attempt  int
	vars     map[string]any
	machine  expression.Machine
	buf      Update
	stream   func(text string)
	degraded string
}

// Fallback is implemented by nodes that can still produce an update when
// their work fails (a model that does not answer): after the last attempt
// fails, the engine calls Fallback, commits its update like any other and
// marks the node degraded in the run's events. on_error applies only when
// Fallback fails too.
type Fallback interface {
	Fallback(ctx context.Context, s *State, err error) (Update, error)
}

// Renderer is implemented by nodes that send a prompt to a model, so a
// designer can see exactly what they would send for a given state.
type Renderer interface {
	Render(s *State) (prompt.Request, error)
}

// Permanent marks an error that retrying cannot fix (a missing model, a
// malformed setting): the engine does not retry it. It unwraps to err.
func Permanent(err error) error { return permanent{err} }

// IsPermanent reports whether err was marked by Permanent.
func IsPermanent(err error) bool {
	var p permanent
	return errors.As(err, &p)
}

type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

// Outputter is implemented by nodes whose work produces one output value
// that expressions then write to state (a model's reply). Flow tests
// script such a node's output and still exercise its writes.
type Outputter interface {
	WithOutput(s *State, output any) (Update, error)
}

// Observed reports whether anyone receives the run's events, so a node can
// skip work (such as streaming) that only events need.
func (s *State) Observed() bool { return s.stream != nil }

// Stream reports a piece of output as it is produced (a model's tokens);
// it reaches the run's events as a node_output event.
func (s *State) Stream(text string) {
	if s.stream != nil {
		s.stream(text)
	}
}

// Degrade marks this attempt's result as a stand-in (a fallback), with the
// reason; the node's end event carries it.
func (s *State) Degrade(reason string) { s.degraded = reason }

// Degraded returns the reason given to Degrade, or "".
func (s *State) Degraded() string { return s.degraded }

// SetStream directs Stream to f (nil: nobody listens). For the engine.
func (s *State) SetStream(f func(text string)) { s.stream = f }

// NewUpdate returns an empty update with room for n fields, in a buffer
// the engine reuses from step to step: return it from Run and keep no
// reference to it afterwards.
func (s *State) NewUpdate(n int) Update {
	if cap(s.buf) < n {
		s.buf = make(Update, 0, n)
	}
	return s.buf[:0]
}

// Eval evaluates a compiled expression over the state's variables.
func (s *State) Eval(p *expression.Program) (any, error) { return s.machine.Eval(p, s.vars) }

// NewState returns a view over the given expression variables, which must
// hold at least "state" and "input".
func NewState(vars map[string]any) *State { return &State{vars: vars} }

// Reset points s at new variables, for reuse by the engine.
func (s *State) Reset(vars map[string]any, node string, attempt int) {
	s.vars, s.Node, s.Attempt, s.degraded = vars, node, attempt, ""
}

// Get returns the value of a state field (nil when unset).
func (s *State) Get(field string) any { return s.vars["state"].(map[string]any)[field] }

// Input returns a run input value (nil when not given).
func (s *State) Input(field string) any {
	in, _ := s.vars["input"].(map[string]any)
	return in[field]
}

// Vars is the variable map expressions are evaluated over: state and input.
// It is shared by every node of a superstep and must not be modified.
func (s *State) Vars() map[string]any { return s.vars }

// Builder is what a kind's constructor uses to read its settings.
type Builder interface {
	// Node is the node's name.
	Node() string
	// Setting returns the YAML node of one of the kind's settings, or nil.
	Setting(key string) *yaml.Node
	// Decode decodes a setting into v; a failure is reported and false returned.
	Decode(key string, v any) bool
	// Expr compiles the expression held by a string scalar against the
	// flow's state and input (and any variables added by ExprWith). A
	// condition must be boolean. It returns nil after reporting a problem.
	Expr(n *yaml.Node, condition bool) *expression.Program
	// ExprWith compiles like Expr with extra variables of the given shapes.
	ExprWith(n *yaml.Node, condition bool, vars map[string]*schema.Shape) *expression.Program
	// Writes declares that the node writes field; at is its position.
	Writes(field string, at *yaml.Node)
	// Field returns the shape of a state field, or nil when undeclared.
	Field(name string) *schema.Shape
	// Prompt loads the prompt named by a string scalar (see package
	// prompt), checks its templates against the state, the input and the
	// given vars, and compiles its fallback for this node. It returns nil
	// after reporting a problem.
	Prompt(at *yaml.Node, vars map[string]*schema.Shape) *prompt.Prompt
	// Model is the flow's model setting, or "".
	Model() string
	// Errorf reports a problem with the node's settings at a position.
	Errorf(at *yaml.Node, format string, args ...any)
}

// Registry looks up kinds by name.
type Registry interface {
	Lookup(name string) (*Spec, bool)
	// Specs lists every kind, sorted by name.
	Specs() []*Spec
}

// Set is the standard Registry.
type Set struct {
	specs map[string]*Spec
}

// NewSet returns a registry holding specs.
func NewSet(specs ...Spec) *Set {
	s := &Set{specs: map[string]*Spec{}}
	for _, sp := range specs {
		s.Register(sp)
	}
	return s
}

var kindName = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// Register adds a kind. A duplicate or malformed spec is a programmer error
// and panics.
func (s *Set) Register(sp Spec) {
	if !kindName.MatchString(sp.Name) {
		panic(fmt.Sprintf("kind: name %q is not snake_case", sp.Name))
	}
	if _, dup := s.specs[sp.Name]; dup {
		panic(fmt.Sprintf("kind: %q registered twice", sp.Name))
	}
	if sp.New == nil || sp.Summary == "" {
		panic(fmt.Sprintf("kind: %q needs a summary and a constructor", sp.Name))
	}
	if sp.Settings == "" {
		sp.Settings = `{"properties": {}}`
	}
	s.specs[sp.Name] = &sp
}

// Lookup implements Registry.
func (s *Set) Lookup(name string) (*Spec, bool) {
	sp, ok := s.specs[name]
	return sp, ok
}

// Specs implements Registry.
func (s *Set) Specs() []*Spec {
	out := slices.Collect(maps.Values(s.specs))
	slices.SortFunc(out, func(a, b *Spec) int {
		if a.Name < b.Name {
			return -1
		}
		return 1
	})
	return out
}

// Func adapts a function to Node.
type Func func(ctx context.Context, s *State) (Update, error)

// Run implements Node.
func (f Func) Run(ctx context.Context, s *State) (Update, error) { return f(ctx, s) }

// Pairs returns a mapping's key and value nodes in order. A repeated key
// (which the loader reports) keeps its first value.
func Pairs(m *yaml.Node) [][2]*yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	var out [][2]*yaml.Node
	seen := map[string]bool{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if seen[m.Content[i].Value] {
			continue
		}
		seen[m.Content[i].Value] = true
		out = append(out, [2]*yaml.Node{m.Content[i], m.Content[i+1]})
	}
	return out
}
