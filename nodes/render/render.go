// Package render is the render node kind: it renders text templates over
// state and input and writes the text to state fields, for messages a
// flow composes without a model.
//
//	closing:
//	  kind: render
//	  set:
//	    next_message: |
//	      Thank you, {{.state.resume_structured.name}}. We will be in touch.
//
// A template sees .state, .input and .vars (the node's vars, expressions
// over state and input); every field it reads is checked when the flow
// loads.
package render

import (
	"context"
	"fmt"
	"math"
	"text/template"

	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/expression"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/schema"
	"github.com/trellisflow/trellis/runtime/tmpl"
)

// Spec registers the kind.
var Spec = kind.Spec{
	Name:    "render",
	Summary: "Render text templates over state and input and write the text to state fields.",
	Fields: []config.Field{
		config.Map("set", "Field to template: Go text/template over .state, .input and .vars.",
			config.Elem(config.Template("", ""))).NonEmpty(1).Require(),
		config.Map("vars", "Template variables ({{.vars.NAME}}): expressions over state and input.",
			config.Elem(config.Expression("", ""))),
	},
	New:    build,
	Inline: true,
}

type field struct {
	name string
	t    *template.Template
}

type variable struct {
	name string
	p    *expression.Program
}

type node struct {
	fields []field
	vars   []variable
}

func build(b kind.Builder) kind.Node {
	s := b.Settings()
	n := &node{}
	shapes := map[string]*schema.Shape{}
	ok := true
	for _, e := range s.Entries("vars") {
		p := b.Expr(e.Value, nil)
		ok = ok && p != nil
		n.vars = append(n.vars, variable{e.Name, p})
		shapes[e.Name] = nil
	}
	for _, e := range s.Entries("set") {
		b.Writes(e.Name, e.Key)
		if shape := b.Field(e.Name); shape != nil && !shape.Allows("string") {
			b.Errorf(e.Key, "set.%s: a template renders text, but field %q is %s", e.Name, e.Name, shape.Describe())
			ok = false
		}
		t := b.Template(e.Value, b.Node()+"."+e.Name, kind.Vars{"vars": schema.Object(shapes)})
		ok = ok && t != nil
		if shape := b.Field(e.Name); t != nil && shape != nil {
			// what the template can render, against the field's enum,
			// pattern and lengths, where it is known
			forms, known := tmpl.FormsOf(t, fieldChain(b))
			broken := false
			for _, f := range forms {
				if why, shown := f.Breaks(shape); why != "" {
					b.Report(diag.CodeWriteType, e.Value.Pos(), e.Value.Path(), "field %q %s, but this template can render %q", e.Name, why, shown)
					ok, broken = false, true
					break
				}
			}
			// text it cannot know, into a field that takes only some
			// texts: the run fails when the text is not one of them
			least, open := math.MaxInt, false
			for _, f := range forms {
				long := shape.MaxLength != nil && (f.Most() < 0 || f.Most() > *shape.MaxLength)
				if (f.Open() || long) && !f.Keeps(shape) {
					least, open = min(least, f.Least()), true
				}
			}
			if rule := shape.TextRules(least); !broken && known && open && rule != "" {
				b.Report(diag.CodeWriteType, e.Value.Pos(), e.Value.Path(), "field %q %s, but this template prints text it does not control; the run fails when the text breaks that (render a choice of literal texts with if/else, or make what it prints an enum)", e.Name, rule).
					Severity = diag.Warning
			}
		}
		n.fields = append(n.fields, field{e.Name, t})
	}
	if !ok {
		return nil
	}
	return n
}

// fieldChain resolves a printed chain of state or input fields to its
// shape, for what a template can print.
func fieldChain(b kind.Builder) tmpl.Resolver {
	return func(idents []string) *schema.Shape {
		if len(idents) < 2 || idents[0] != "state" && idents[0] != "input" {
			return nil
		}
		s := b.Field(idents[1])
		for _, id := range idents[2:] {
			if s == nil {
				return nil
			}
			s, _ = s.Prop(id)
		}
		return s
	}
}

// Run implements kind.Node.
func (n *node) Run(_ context.Context, s kind.State) (kind.Update, error) {
	vars := make(map[string]any, len(n.vars))
	for _, v := range n.vars {
		x, err := s.Eval(v.p)
		if err != nil {
			return nil, fmt.Errorf("vars.%s: %w", v.name, err)
		}
		vars[v.name] = x
	}
	st, _ := s.Vars()["state"].(map[string]any)
	in, _ := s.Vars()["input"].(map[string]any)
	data := map[string]any{"state": st, "input": in, "vars": vars}
	if cfg, ok := s.Vars()["config"]; ok {
		data["config"] = cfg
	}
	upd := s.NewUpdate(len(n.fields))
	for _, f := range n.fields {
		text, err := tmpl.Execute(f.t, data)
		if err != nil {
			return nil, fmt.Errorf("set.%s: %w", f.name, err)
		}
		upd = append(upd, kind.FieldValue{Field: f.name, Value: text})
	}
	return upd, nil
}
