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

	"gopkg.in/yaml.v3"

	"github.com/trellisflow/trellis/runtime/expression"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/value"
)

// Spec registers the kind.
var Spec = kind.Spec{
	Name:    "assign",
	Summary: "Evaluate expressions over state and input and write the results to state fields.",
	Settings: `{
	  "required": ["set"],
	  "properties": {
	    "set": {
	      "type": "object",
	      "minProperties": 1,
	      "description": "Field to value: a string is an expression over state and input; any other YAML value is written as it is.",
	      "additionalProperties": true
	    }
	  }
	}`,
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
	set := b.Setting("set")
	if set == nil || set.Kind != yaml.MappingNode {
		return nil
	}
	n := &node{}
	for i := 0; i+1 < len(set.Content); i += 2 {
		k, v := set.Content[i], set.Content[i+1]
		for v.Kind == yaml.AliasNode && v.Alias != nil {
			v = v.Alias // an alias of an expression is that expression
		}
		b.Writes(k.Value, k)
		f := field{name: k.Value}
		if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!str" {
			f.program = b.Expr(v, false)
			if f.program == nil {
				continue
			}
		} else {
			lit, err := value.FromYAML(v)
			if err != nil {
				b.Errorf(v, "set.%s: %v", k.Value, err)
				continue
			}
			if shape := b.Field(k.Value); shape != nil && !shape.Allows(value.TypeOf(lit)) {
				b.Errorf(v, "set.%s: a literal %s cannot be written to a field of type %s", k.Value, value.TypeOf(lit), shape.Describe())
				continue
			}
			f.literal = lit
		}
		n.fields = append(n.fields, f)
	}
	return n
}

// Run implements kind.Node.
func (n *node) Run(_ context.Context, s *kind.State) (kind.Update, error) {
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
