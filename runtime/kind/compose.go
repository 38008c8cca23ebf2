package kind

import (
	"github.com/trellisflow/trellis/runtime/schema"
)

// Nested is a node compiled inside another node's settings (a map's
// per-item node, see Builder.Nested). Its host runs it with
// State.RunNested; what it writes counts as the host's writes.
type Nested struct {
	// Kind is the nested node's kind.
	Kind string
	// Impl is the runtime's compiled node; kinds pass it back untouched.
	Impl any
}

// Subflow is another flow file compiled for a node to run as a child
// (see Builder.Subflow and State.RunFlow).
type Subflow struct {
	// Name is the child flow's name, Path its file, Description its
	// description.
	Name, Path, Description string
	// State is the shape of the child's state (closed: its fields);
	// Required lists the fields a new child thread must be given, having
	// no default.
	State    *schema.Shape
	Required []string
	// Config is the shape of the child's run configuration.
	Config *schema.Shape
	// Unset maps the fields of the child's state that may be unset when
	// it ends (no default, not required, and some way to END writes
	// nothing to them) to such a way, START → ... → END, unless the
	// thread is given them.
	Unset map[string]string
	// Schema is the child's state schema standing alone (every $ref
	// inlined; nil when it could not be read).
	Schema map[string]any
	// Inputs lists the child's input fields (those a caller may set when
	// it starts a run), in declaration order; Needed those of them a run
	// must be given (the child reads them as input.NAME with nothing to
	// fall back on).
	Inputs, Needed []string
	// Output renders the child's declared output over a final state;
	// nil when the child declares none.
	Output func(state map[string]any) (string, error)
	// Graph is the runtime's compiled flow; kinds pass it back untouched.
	Graph any
}

// Composite is implemented by nodes made of other parts, so that
// drawings and tools can show them: a subflow, a nested node run per item.
type Composite interface {
	Parts() Parts
}

// Parts are what a Composite node is made of.
type Parts struct {
	// Flow is the child flow the node runs, if any.
	Flow *Subflow
	// Each is the source of the expression whose items the node runs
	// Nested for, if any; MaxConcurrency how many at once.
	Each           string
	Nested         *Nested
	MaxConcurrency int
}
