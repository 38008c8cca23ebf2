// Package subflow is the subflow node kind: it runs another flow file as
// one node. The child runs on a thread of its own under this thread's
// namespace (THREAD|NODE:SEQ), with its own checkpoints, so its history,
// time travel and crash recovery work inside it; its events reach this
// run's stream tagged with the namespace.
//
//	review:
//	  kind: subflow
//	  flow: resume_review.yaml         # relative to this file
//	  input:                           # the child run's input
//	    resume: "state.resume"
//	    target_role: "state.target_role"
//	  state: {max_iterations: "1"}     # the child thread's starting values
//	  config: {threshold: "8.0"}       # the child run's configuration
//	  writes:                          # over output: the child's final state
//	    review_score: "output.integrated_score"
//
// input is the child run's input, as a caller's run input would be (the
// child reads it as input.NAME, and its input fields take it as state.NAME
// too): the validator checks it against the child's declared inputs (one
// it does not declare is an error, as is one it reads with nothing to fall
// back on and is not given), and the engine checks it at run time as it
// checks any run's input. state seeds any field of the child's state
// before its run, as a thread created with values. Each field the child's
// state requires without a default is given under one or the other. The
// validator checks config against the child's config block and writes
// against this flow's fields; flows that include each other are a load
// error. A child that pauses (it asks a person, at any depth) pauses this
// run at the node: the resumed run runs the node again, and the child
// goes on where it stopped.
package subflow

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/expression"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/schema"
)

// Spec registers the kind.
var Spec = kind.Spec{
	Name:    "subflow",
	Summary: "Run another flow file as one node: its state and checkpoints live in a thread under this one's namespace, it starts from values mapped from this flow, and its final state is written back through expressions.",
	Fields: []config.Field{
		config.String("flow", "The flow file to run, relative to this file.").NonEmpty(1).Require(),
		config.Map("input", "Child input to expression over this flow's state, input and config: the child run's input, as a caller's run input (the child reads it as input.NAME; each of its declared inputs it reads with nothing to fall back on must be given, and no other name).",
			config.Elem(config.Expression("", ""))),
		config.Map("state", "Child field to expression over this flow's state, input and config: the child thread's starting values (any field of its state). Each field its state requires without a default is given here or under input.",
			config.Elem(config.Expression("", ""))),
		config.Map("config", "Child config key to expression over this flow's state, input and config: the child run's configuration.",
			config.Elem(config.Expression("", ""))),
		config.Map("writes", "Field to expression over output (the child's final state), state, input and config.",
			config.Elem(config.Expression("", ""))),
	},
	New: build,
}

type binding struct {
	name    string
	program *expression.Program
}

type node struct {
	flow   *kind.Subflow
	input  []binding
	state  []binding
	config []binding
	writes kind.Writes
}

var _ kind.Composite = (*node)(nil)

func build(b kind.Builder) kind.Node {
	s := b.Settings()
	sf := b.Subflow(s.Value("flow"))
	n := &node{flow: sf}
	var out = kind.Vars{"output": nil}
	if sf != nil {
		// the child's final state: a field with a default is there, one
		// without is judged by what may leave it unset (unsetReads)
		final := *sf.State
		final.Required = slices.Clone(final.Order)
		out["output"] = &final
	}
	writes, ok := kind.CompileWrites(b, "writes", out)
	n.writes = writes
	var inputShape, stateShape, configShape *schema.Shape
	if sf != nil {
		inputShape, stateShape, configShape = inputsOf(sf), sf.State, sf.Config
	}
	var inputs, seeded map[string]bool
	var iok, sok, cok bool
	n.input, inputs, iok = mapping(b, "input", inputShape, sf, "input")
	n.state, seeded, sok = mapping(b, "state", stateShape, sf, "field")
	n.config, _, cok = mapping(b, "config", configShape, sf, "config")
	ok = ok && iok && sok && cok
	given := map[string]bool{}
	for name := range inputs {
		given[name] = true
	}
	for name := range seeded {
		given[name] = true
	}
	if sf != nil {
		ok = required(b, sf, inputs, given) && ok
	}
	if sf == nil || !ok {
		return nil
	}
	unsetReads(b, sf, n.writes, given)
	return n
}

// inputsOf is the shape of the child's run input: its input fields.
func inputsOf(sf *kind.Subflow) *schema.Shape {
	props := make(map[string]*schema.Shape, len(sf.Inputs))
	for _, name := range sf.Inputs {
		props[name], _ = sf.State.Prop(name)
	}
	in := schema.Object(props, sf.Inputs...)
	in.Closed = true
	return in
}

// required reports (false) what the child needs and is not given: an
// input it reads as input.NAME with nothing to fall back on, under input;
// a field its state requires without a default, under input when it is
// an input, else under state.
func required(b kind.Builder, sf *kind.Subflow, inputs, given map[string]bool) bool {
	s := b.Settings()
	at := func(keys ...string) config.Value {
		for _, k := range keys {
			if v := s.Key(k); v.Exists() {
				return v
			}
		}
		return s.Key("flow")
	}
	ok := true
	for _, name := range sf.Needed {
		if !inputs[name] {
			v := at("input", "state")
			b.Report(diag.CodeSubflowMapping, v.Pos(), v.Path(), "subflow %s reads input.%s with nothing to fall back on: give it under input", sf.Name, name)
			ok = false
		}
	}
	for _, name := range sf.Required {
		if given[name] || slices.Contains(sf.Needed, name) {
			continue
		}
		if slices.Contains(sf.Inputs, name) {
			v := at("input", "state")
			b.Report(diag.CodeSubflowMapping, v.Pos(), v.Path(), "subflow %s requires input %q, which has no default: give it under input", sf.Name, name)
		} else {
			v := at("state", "input")
			b.Report(diag.CodeSubflowMapping, v.Pos(), v.Path(), "subflow %s requires field %q, which has no default and is not an input: give it under state", sf.Name, name)
		}
		ok = false
	}
	return ok
}

// unsetReads warns of the writes that read a field of the child's final
// state that it may end without (and the thread is not given): the write
// would see nothing.
func unsetReads(b kind.Builder, sf *kind.Subflow, writes kind.Writes, given map[string]bool) {
	at := map[string]config.Value{}
	for _, e := range b.Settings().Entries("writes") {
		at[e.Name] = e.Value
	}
	for _, w := range writes {
		for _, r := range w.Program.ReadsOf("output") {
			way, unset := sf.Unset[r.Field]
			if !unset || given[r.Field] {
				continue
			}
			v := at[w.Field]
			under := "state"
			if slices.Contains(sf.Inputs, r.Field) {
				under = "input"
			}
			d := b.Report(diag.CodeExprUnset, v.PosIn(r.Line, r.Col, r.EndCol), v.Path(),
				"output.%s may be unset here: subflow %s ends without writing %s on the way %s, and it has no default; give it a default in the child, pass it under %s, or read it as output.%s ?? a value",
				r.Field, sf.Name, r.Field, way, under, r.Field)
			d.Severity = diag.Warning
			d.Detail = "in expression: " + strings.TrimSpace(v.Text())
		}
	}
}

// mapping compiles a setting that maps the child's names (its state
// fields, or its config keys: what) to expressions over this flow, each
// checked against the child's shape dst. It returns the names given.
func mapping(b kind.Builder, setting string, dst *schema.Shape, sf *kind.Subflow, what string) (bs []binding, given map[string]bool, ok bool) {
	ok, given = true, map[string]bool{}
	for _, e := range b.Settings().Entries(setting) {
		given[e.Name] = true
		p := b.Expr(e.Value, nil)
		if p == nil {
			ok = false
			continue
		}
		if dst != nil {
			shape, has := dst.Prop(e.Name)
			if !has {
				d := b.Report(diag.CodeSubflowMapping, e.Key.Pos(), e.Key.Path(), "subflow %s has no %s %q", sf.Name, what, e.Name)
				d.Suggestion = diag.Suggest(e.Name, dst.Order)
				if _, field := sf.State.Prop(e.Name); field && setting == "input" {
					// a field of its state that a run may not set
					d.Summary = fmt.Sprintf("subflow %s has no input %q: it is a field of its state, which its input does not set (inputs: %s); seed it under state", sf.Name, e.Name, listOrNone(sf.Inputs))
					d.Suggestion = ""
				}
				ok = false
				continue
			}
			b.Fits(p, shape, e.Value, fmt.Sprintf("%s %q of subflow %s", what, e.Name, sf.Name))
		}
		bs = append(bs, binding{e.Name, p})
	}
	return bs, given, ok
}

func eval(bs []binding, vars map[string]any) (map[string]any, error) {
	if len(bs) == 0 {
		return nil, nil
	}
	m := make(map[string]any, len(bs))
	for _, x := range bs {
		v, err := x.program.Eval(vars)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", x.name, err)
		}
		m[x.name] = v
	}
	return m, nil
}

// Run implements kind.Node: it runs the child to its end and writes what
// the writes make of its final state.
func (n *node) Run(ctx context.Context, s kind.State) (kind.Update, error) {
	vars := s.Vars()
	input, err := eval(n.input, vars)
	if err != nil {
		return nil, fmt.Errorf("input.%w", err)
	}
	values, err := eval(n.state, vars)
	if err != nil {
		return nil, fmt.Errorf("state.%w", err)
	}
	cfg, err := eval(n.config, vars)
	if err != nil {
		return nil, fmt.Errorf("config.%w", err)
	}
	out, err := s.RunFlow(ctx, n.flow, "", values, input, cfg)
	if err != nil {
		return nil, err
	}
	wv := make(map[string]any, len(vars)+1)
	maps.Copy(wv, vars)
	wv["output"] = out
	return n.writes.Eval(wv)
}

func listOrNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// Parts implements kind.Composite.
func (n *node) Parts() kind.Parts { return kind.Parts{Flow: n.flow} }
