// Package kind is the contract between the runtime and node kinds.
//
// A kind registers one declarative Spec: its name, a summary, the
// declaration of its own settings (config.Field) and a constructor. The
// flow loader checks a node's block against the declaration (through the
// published flow schema), then calls the constructor with a Builder: the
// hooks a kind uses to read its settings, compile expressions and
// templates against the flow's state, read the files it refers to (a
// prompt, a schema), declare the fields it writes and report problems at
// their file positions. A Builder does no I/O beyond reading the flow's
// files, so validation works offline with no credentials.
//
// A tool kind registers a ToolSpec the same way (see tool.go): the tools
// block of a flow is read through it, and an llm node calls the tools it
// builds.
//
// A built Node runs with a context and a read-only State and returns an
// Update. The runtime sees only the Registry interface and imports no
// kind; a kind imports nothing of the runtime but this package and the
// compilers it hands out (expression, tmpl, schema, config).
package kind

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"

	"github.com/trellisflow/trellis/runtime/config"
)

// Spec declares a node kind.
type Spec struct {
	// Name is snake_case and unique.
	Name string
	// Summary is one sentence for docs and editor hovers.
	Summary string
	// Fields declare the kind's own keys in a node block; the settings
	// every node shares (retry, timeout, on_error, ...) are added by the
	// runtime. The flow schema, the reference docs and Builder.Settings
	// come from them.
	Fields []config.Field
	// FlowFields declare top-level keys of a flow file that the kind
	// reads (the llm kind's default model); Builder.FlowSettings reads
	// them. Two kinds may declare the same key only identically.
	FlowFields []config.Field
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
// the fields to update; it never mutates the view. It must honour ctx: the
// engine cancels it at the node's timeout and when the run is cancelled,
// then waits a grace for Run to return, and goes on without it when it
// does not. What a Run it went on without does through its State after
// that (streamed text, measures, nested runs, child flows) is dropped,
// and what it returns is ignored; but whatever it does outside the State
// (a container it started, a file it writes) is its own to stop. Run
// keeps no reference to its State once it returns.
type Node interface {
	Run(ctx context.Context, s State) (Update, error)
}

// Contained is a node of a kind that may block whose Run acts on nothing
// outside the run but through its State, and reads nothing of the run's
// thread from the store (a model's call with no tools): the engine may
// start it while the steps before it are still being committed, since a
// run resumed after a crash that lost them runs it again with no effect
// left behind. Contained reports whether this node is.
type Contained interface {
	Contained() bool
}

// PutsWithStep is a node of a kind that may block whose Run, where the
// run's memory writes puts with their step (the engine's own
// StepMemory), acts on nothing outside the run but through its State and
// the documents it puts, reads nothing from the store, and waits on
// nothing: it computes as an inline node does, and what it puts is
// written with its step or not at all. The engine then keeps the steps
// before it held (uncommitted) while it runs, as before an inline step.
// PutsWithStep reports whether this node is.
type PutsWithStep interface {
	PutsWithStep() bool
}

// Asker is a node that needs an answer from outside the run before it
// runs, such as a person's approval. When its step comes and the run
// holds no answer for it, the run pauses before the step with what Ask
// returns (the question, any JSON value); a later run resumes the thread
// with the answer (by node name), and Run reads it with State.Answer.
// Answers given for some of a step's askers are kept (as the nodes'
// pending writes) until the others are answered. An asker run by
// another node (a map's item, see State.RunNested) asks when it is run,
// and its host pauses (see Paused); one in a child flow pauses the child,
// and so the node that runs it.
type Asker interface {
	Ask(s State) (any, error)
}

// Update lists the fields a node writes and their values. Each value goes
// through the field's reducer at the superstep barrier. A field appears
// once, unless its reducer folds concurrent writes (append, union, merge,
// add, ...): its writes then fold in the order they appear, as the writes
// of successive nodes do (a map's items, in item order).
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

// Map returns the update as a map, for events and display. A field
// written several times maps to the list of its writes, in order.
func (u Update) Map() map[string]any {
	if u == nil {
		return nil
	}
	m := make(map[string]any, len(u))
	var repeated map[string]bool
	for _, fv := range u {
		prev, seen := m[fv.Field]
		switch {
		case !seen:
			m[fv.Field] = fv.Value
		case repeated[fv.Field]:
			m[fv.Field] = append(prev.([]any), fv.Value)
		default:
			if repeated == nil {
				repeated = map[string]bool{}
			}
			repeated[fv.Field] = true
			m[fv.Field] = []any{prev, fv.Value}
		}
	}
	return m
}

// Fallback is implemented by nodes that can still produce an update when
// their work fails (a model that does not answer): after the last attempt
// fails, the engine calls Fallback, commits its update like any other and
// marks the node degraded in the run's events. on_error applies only when
// Fallback fails too.
type Fallback interface {
	Fallback(ctx context.Context, s State, err error) (Update, error)
}

// Outputter is implemented by nodes whose work produces one output value
// that expressions then write to state (a model's reply). Flow tests
// script such a node's output and still exercise its writes.
type Outputter interface {
	WithOutput(s State, output any) (Update, error)
}

// Previewer is implemented by nodes that send a request somewhere (a
// prompt to a model), so that a designer can see exactly what they would
// send for a given state without sending it.
type Previewer interface {
	Preview(s State) (*Preview, error)
}

// Preview is what a node would send: a title line, named sections of
// text (a system message, a user message, a reply schema), and the whole
// request as a JSON-encodable value.
type Preview struct {
	Title    string
	Sections []Section
	Request  any
}

// Section is one named part of a Preview.
type Section struct {
	Name, Text string
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

// Registry looks up kinds by name.
type Registry interface {
	Lookup(name string) (*Spec, bool)
	// Specs lists every kind, sorted by name.
	Specs() []*Spec
}

// Set is the standard Registry.
type Set struct {
	specs   map[string]*Spec
	tools   map[string]*ToolSpec
	offline Registry
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
	for _, f := range sp.Fields {
		if !kindName.MatchString(f.Name) {
			panic(fmt.Sprintf("kind: %q: setting %q is not snake_case", sp.Name, f.Name))
		}
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
type Func func(ctx context.Context, s State) (Update, error)

// Run implements Node.
func (f Func) Run(ctx context.Context, s State) (Update, error) { return f(ctx, s) }
