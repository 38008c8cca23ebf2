package flow

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/expression"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/schema"
)

// Graph is a compiled flow: everything resolved, every expression compiled,
// ready to execute. It is immutable and safe to share between runs.
type Graph struct {
	Name        string
	Description string
	// Path is the flow file the graph was compiled from.
	Path string
	// Fields are the top-level state fields, sorted by name.
	Fields []*Field
	// Nodes in declaration order; Node.Index is the position here.
	Nodes []*Node
	// Edges in declaration order; Edge.Index is the position here.
	Edges []*Edge
	// Entry holds the edges leaving START.
	Entry []*Edge
	// Inputs are the fields a run may set, in declaration order.
	Inputs []*Field
	// MaxSteps bounds the supersteps of one run, unless MaxStepsExpr
	// computes the bound of each run from its configuration.
	MaxSteps     int
	MaxStepsExpr *expression.Program
	// Joins counts join edges (each has its own arrival set per run).
	Joins int
	// Conversation is the flow's conversation block, or nil.
	Conversation *Conversation
	// Output is the flow's declared result, or nil (see output.go).
	Output *Output
	// Config lists the run configuration's entries, in declaration
	// order; ConfigShape is its shape (nil when the flow declares none).
	Config      []*ConfigField
	ConfigShape *schema.Shape
	// ToolEntries are the entries of the flow's tools block, in
	// declaration order.
	ToolEntries []*ToolEntry
	// Pauses is set when a node pauses runs (interrupt_before or
	// interrupt_after), Asks when a node asks a question (kind.Asker): a
	// run of a flow with neither checks no node for them.
	Pauses, Asks bool
	// FullValidation is set when the state schema has root-level
	// constraints beyond its properties; the whole state is then validated
	// at every commit instead of only the changed fields.
	FullValidation bool

	fields map[string]*Field
	nodes  map[string]*Node
	env    *expression.Env
	root   *schema.Validator
	// stateRaw is the state schema standing alone ($refs inlined)
	stateRaw map[string]any
	loops    [][]*Node // strongly connected components with a cycle
	// memo holds what executors derive from the graph (see Memo)
	memo sync.Map
}

// Memo returns what build derives from g for key, built on the first
// call: what an executor makes of the compiled graph for its own use
// (such as records a checkpoint can share from step to step), kept with
// the graph and dropped with it.
func (g *Graph) Memo(key any, build func(*Graph) any) any {
	if v, ok := g.memo.Load(key); ok {
		return v
	}
	v, _ := g.memo.LoadOrStore(key, build(g))
	return v
}

// Conversation declares how a person talks with the flow: each message is
// one run with Input set; Output is shown after the run; the conversation
// ends when Until holds.
type Conversation struct {
	Input, Output string
	Until         *expression.Program
	// Attachments maps an attachment name to the input field receiving it.
	Attachments map[string]string
}

// DefaultMaxSteps is the superstep limit of a flow that sets none.
const DefaultMaxSteps = 500

// Field is one top-level state field.
type Field struct {
	Name  string
	Index int
	Shape *schema.Shape
	// Validator checks the field's whole value; Items checks appended items
	// only, when the array schema constrains nothing but its items.
	Validator *schema.Validator
	Items     *schema.Validator
	Reducer   *Reducer
	ReadOnly  bool
	Input     bool
	// Var and InputVar are the field's expression variables,
	// "state.<name>" and "input.<name>".
	Var, InputVar string
	// Default is the schema default (a state value), when HasDefault.
	Default    any
	HasDefault bool
	// Required is set when the state schema requires the field.
	Required bool
	// ReadAt, for an input, is where the flow reads input.NAME without
	// guarding against its absence (?? or a nil test, with or if in a
	// template), the first such read; nil when it never does. A run
	// without the input is then refused before anything runs: the read
	// would meet nothing.
	ReadAt *diag.Pos
}

// Node is one compiled node.
type Node struct {
	Name  string
	Kind  string
	Index int
	Pos   diag.Pos
	// Path is the node's YAML path in its file (nodes.NAME, or inside
	// another node's settings for a nested node).
	Path string
	Impl kind.Node
	// Writes are the fields the node may write (its own and on_error's);
	// WriteList holds them in field order.
	Writes    map[string]bool
	WriteList []string
	// WriteMask[i] is set when the node may write Fields[i].
	WriteMask []bool
	// WriteFields are the fields of WriteList (nil entries for names
	// that are not fields; the validator reports those).
	WriteFields []*Field
	Retry       Retry
	Timeout     time.Duration
	// Cache, when set, keeps the node's writes by key in the store.
	Cache *Cache
	// InterruptBefore and InterruptAfter pause a run before the node's
	// step, or after it.
	InterruptBefore, InterruptAfter bool
	// Inline nodes run on the engine's goroutine (see kind.Spec.Inline).
	Inline  bool
	OnError OnError
	// Out are the edges leaving the node, in declaration order.
	Out []*Edge
	// Description from the flow file.
	Description string
}

// Cache is a node's cache setting: the writes of a run of the node are
// kept under the value of Key (with the flow's and node's names) for TTL
// (0: no expiry), and replayed by a later run with the same key.
type Cache struct {
	Key *expression.Program
	TTL time.Duration
}

// Retry is a node's retry policy. Attempts counts the first attempt.
type Retry struct {
	Attempts   int
	Backoff    time.Duration
	MaxBackoff time.Duration
	Factor     float64
}

// OnError is what a node's final failure does.
type OnError struct {
	// Set writes these fields (expressions over state, input and error).
	Set map[string]*expression.Program
	// SetOrder lists Set's fields sorted, for deterministic evaluation.
	SetOrder []string
	// Route runs this node next instead of the node's own edges.
	Route *Node
	// Handled is false for the default policy: the run fails.
	Handled bool
}

// Edge is one compiled edge.
type Edge struct {
	Index int
	Pos   diag.Pos
	// From lists the sources: one node (nil for START), or several for a
	// join, which fires once every source has run.
	From []*Node
	// Join is the edge's join slot, or -1.
	Join int
	// To are the static targets; an END target is simply absent, ToEnd set.
	To    []*Node
	ToEnd bool
	// Cases of a conditional edge, tried in order.
	Cases []*Case
	// Route computes the next node's name from state; Choices maps each
	// allowed name (END included) to its node (nil for END).
	Route   *expression.Program
	Choices map[string]*Node
	// Default is taken for a name not in Choices (HasDefault set).
	Default    *Node
	HasDefault bool
	// Bound limits how often per run the edge may re-enter its loop (0:
	// unbounded): a traversal to a target on a cycle through the edge's
	// source counts, one that leaves the loop does not.
	Bound int
	// loopTargets are the targets that re-enter a loop through a source.
	loopTargets map[*Node]bool
}

// Reenters reports whether taking the edge to targets re-enters a loop
// through its source, which is what its bound counts.
func (e *Edge) Reenters(targets []*Node) bool {
	for _, t := range targets {
		if e.loopTargets[t] {
			return true
		}
	}
	return false
}

// EdgeLoop is a shortest cycle the edge closes by going to target: from
// target back to one of the edge's sources and on to target, nil when
// target does not re-enter a loop through the edge.
func (g *Graph) EdgeLoop(e *Edge, target *Node) []*Node {
	if !e.loopTargets[target] {
		return nil
	}
	var scc []*Node
	for _, l := range g.loops {
		if slices.Contains(l, target) {
			scc = l
		}
	}
	in := map[*Node]bool{}
	for _, m := range scc {
		in[m] = true
	}
	prev := map[*Node]*Node{target: nil}
	queue := []*Node{target}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if slices.Contains(e.From, cur) {
			var path []*Node
			for x := cur; x != nil; x = prev[x] {
				path = append([]*Node{x}, path...)
			}
			return append(path, target)
		}
		for _, next := range successors(cur) {
			if _, seen := prev[next]; !seen && in[next] {
				prev[next] = cur
				queue = append(queue, next)
			}
		}
	}
	return nil
}

// Case is one case of a conditional edge; When is nil for else.
type Case struct {
	When  *expression.Program
	To    []*Node
	ToEnd bool
}

// Field returns a state field by name.
func (g *Graph) Field(name string) (*Field, bool) {
	f, ok := g.fields[name]
	return f, ok
}

// Node returns a node by name.
func (g *Graph) Node(name string) (*Node, bool) {
	n, ok := g.nodes[name]
	return n, ok
}

// Root is the validator of the whole state.
func (g *Graph) Root() *schema.Validator { return g.root }

// Env is the expression environment of the flow: state and input. Tools
// compile their own expressions (test assertions) against it.
func (g *Graph) Env() *expression.Env { return g.env }

// Vars returns expression variables for a state and an input, as the
// engine binds them.
func (g *Graph) Vars(state, input map[string]any) map[string]any {
	vars := make(map[string]any, 2*len(g.Fields)+2)
	for _, f := range g.Fields {
		vars[f.Var] = nil // unset fields read as nil
	}
	expression.Bind(vars, "state", state)
	if input == nil {
		input = map[string]any{}
	}
	expression.Bind(vars, "input", input)
	return vars
}

// InputNames lists the fields a run may set, in declaration order.
func (g *Graph) InputNames() []string {
	names := make([]string, len(g.Inputs))
	for i, in := range g.Inputs {
		names[i] = in.Name
	}
	return names
}

// Finished reports whether a conversation is over in state: whether the
// flow's conversation.until condition holds. A flow without one never
// finishes.
func (g *Graph) Finished(state map[string]any) (bool, error) {
	c := g.Conversation
	if c == nil || c.Until == nil {
		return false, nil
	}
	ok, err := c.Until.EvalBool(g.Vars(state, nil))
	if err != nil {
		return false, fmt.Errorf("conversation.until: %w", err)
	}
	return ok, nil
}

// Loop returns a cycle of nodes through n, when n is on one.
func (g *Graph) Loop(n *Node) []*Node {
	for _, scc := range g.loops {
		for _, m := range scc {
			if m == n {
				return cycleThrough(n, scc)
			}
		}
	}
	return nil
}

// cycleThrough finds a shortest cycle from n back to n inside scc.
func cycleThrough(n *Node, scc []*Node) []*Node {
	in := map[*Node]bool{}
	for _, m := range scc {
		in[m] = true
	}
	prev := map[*Node]*Node{}
	queue := []*Node{n}
	seen := map[*Node]bool{}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		for _, next := range successors(cur) {
			if !in[next] {
				continue
			}
			if next == n {
				path := []*Node{n}
				for c := cur; c != n; c = prev[c] {
					path = append(path, nil)
					copy(path[2:], path[1:])
					path[1] = c
				}
				return append(path, n)
			}
			if !seen[next] {
				seen[next] = true
				prev[next] = cur
				queue = append(queue, next)
			}
		}
	}
	return []*Node{n, n}
}

// successors lists every node an edge of n (or its error route) can trigger.
func successors(n *Node) []*Node {
	var out []*Node
	for _, e := range n.Out {
		out = append(out, e.Targets()...)
	}
	if n.OnError.Route != nil {
		out = append(out, n.OnError.Route)
	}
	return out
}

// Targets lists every node the edge can trigger.
func (e *Edge) Targets() []*Node {
	out := append([]*Node(nil), e.To...)
	for _, c := range e.Cases {
		out = append(out, c.To...)
	}
	for _, name := range sortedKeys(e.Choices) {
		if n := e.Choices[name]; n != nil {
			out = append(out, n)
		}
	}
	if e.Default != nil {
		out = append(out, e.Default)
	}
	return out
}

// BindState fills expression variables for evaluating the graph's

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
