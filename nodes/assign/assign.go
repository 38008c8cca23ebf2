// Package assign is the assign node kind: it evaluates expressions over state
// and input and writes their values to state fields.
//
//	count_turn:
//	  kind: assign
//	  set:
//	    turn_count: "state.turn_count + 1"
//	    phase: "'exploration'"
//	    tags: [intro]          # a non-string YAML value is a literal
package assign

import (
	"context"
	"fmt"

	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/expression"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/value"
)

// Spec registers the kind.
var Spec = kind.Spec{
	Name:    "assign",
	Summary: "Evaluate expressions over state and input and write the results to state fields.",
	Fields: []config.Field{
		config.Map("set", "Field to value: a string is an expression over state and input; any other YAML value is written as it is.", nil).
			NonEmpty(1).Require(),
	},
	New:    build,
	Inline: true,
}

type field struct {
	name    string
	program *expression.Program
	literal any
}

type node struct{ fields []field }

func build(b kind.Builder) kind.Node {
	n := &node{}
	for _, e := range b.Settings().Entries("set") {
		v := e.Value
		b.Writes(e.Name, e.Key)
		f := field{name: e.Name}
		if v.IsString() {
			f.program = b.Expr(v, nil)
			if f.program == nil {
				continue
			}
			b.WritesValue(e.Name, f.program, v)
		} else {
			lit, err := v.JSON()
			if err != nil {
				b.Errorf(v, "set.%s: %v", e.Name, err)
				continue
			}
			if shape := b.Field(e.Name); shape != nil && !shape.Takes(value.TypeOf(lit)) {
				b.Errorf(v, "set.%s: a literal %s cannot be written to a field of type %s", e.Name, value.TypeOf(lit), shape.Describe())
				continue
			} else if why := shape.OutOfRange(lit); why != "" {
				b.Errorf(v, "set.%s: the field is %s, never %v", e.Name, why, lit)
				continue
			}
			f.literal = lit
		}
		n.fields = append(n.fields, f)
	}
	return n
}

// Run implements kind.Node.
func (n *node) Run(_ context.Context, s kind.State) (kind.Update, error) {
	upd := s.NewUpdate(len(n.fields))
	for _, f := range n.fields {
		v := f.literal
		if f.program != nil {
			var err error
			if v, err = s.Eval(f.program); err != nil {
				return nil, fmt.Errorf("set %s: %w", f.name, err)
			}
		}
		upd = append(upd, kind.FieldValue{Field: f.name, Value: v})
	}
	return upd, nil
}
