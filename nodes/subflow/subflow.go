// Package subflow is the subflow node kind: it runs another flow file as
// one node. The child runs on a thread of its own under this thread's
// namespace (THREAD|NODE:SEQ), with its own checkpoints, so its history,
// time travel and crash recovery work inside it; its events reach this
// run's stream tagged with the namespace.
//
//	review:
//	  kind: subflow
//	  flow: resume_review.yaml         # relative to this file
//	  input:                           # the child's starting values
//	    resume: "state.resume"
//	    target_role: "state.target_role"
//	  config: {threshold: "8.0"}       # the child run's configuration
//	  writes:                          # over output: the child's final state
//	    review_score: "output.integrated_score"
//
// The validator checks input against the child's state schema (every
// field it requires without a default must be given), config against its
// config block, and writes against this flow's fields; flows that include
// each other are a load error.
package subflow

import (
	"context"
	"fmt"
	"maps"
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
		config.Map("input", "Child field to expression over this flow's state, input and config: the child thread's starting values (any field of its state; each field it requires without a default must be given).",
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
		out["output"] = sf.State
	}
	writes, ok := kind.CompileWrites(b, "writes", out)
	n.writes = writes
	var inputShape, configShape *schema.Shape
	if sf != nil {
		inputShape, configShape = sf.State, sf.Config
	}
	var given map[string]bool
	var iok, cok bool
	n.input, given, iok = mapping(b, "input", inputShape, sf, "field")
	n.config, _, cok = mapping(b, "config", configShape, sf, "config")
	ok = ok && iok && cok
	if sf != nil {
		for _, name := range sf.Required {
			if !given[name] {
				at := s.Key("input")
				if !at.Exists() {
					at = s.Key("flow")
				}
				b.Report(diag.CodeSubflowMapping, at.Pos(), at.Path(), "subflow %s requires field %q, which has no default: give it under input", sf.Name, name)
				ok = false
			}
		}
	}
	if sf == nil || !ok {
		return nil
	}
	unsetReads(b, sf, n.writes, given)
	return n
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
			d := b.Report(diag.CodeExprUnset, v.PosIn(r.Line, r.Col, r.EndCol), v.Path(),
				"output.%s may be unset here: subflow %s ends without writing %s on the way %s, and it has no default; give it a default in the child, pass it under input, or read it as output.%s ?? a value",
				r.Field, sf.Name, r.Field, way, r.Field)
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
				b.Report(diag.CodeSubflowMapping, e.Key.Pos(), e.Key.Path(), "subflow %s has no %s %q", sf.Name, what, e.Name).
					Suggestion = diag.Suggest(e.Name, dst.Order)
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
	values, err := eval(n.input, vars)
	if err != nil {
		return nil, fmt.Errorf("input.%w", err)
	}
	cfg, err := eval(n.config, vars)
	if err != nil {
		return nil, fmt.Errorf("config.%w", err)
	}
	out, err := s.RunFlow(ctx, n.flow, "", values, nil, cfg)
	if err != nil {
		return nil, err
	}
	wv := make(map[string]any, len(vars)+1)
	maps.Copy(wv, vars)
	wv["output"] = out
	return n.writes.Eval(wv)
}

// Parts implements kind.Composite.
func (n *node) Parts() kind.Parts { return kind.Parts{Flow: n.flow} }
