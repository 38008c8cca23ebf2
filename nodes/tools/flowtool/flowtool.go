// Package flowtool is the flow tool kind: another flow file as a tool.
// Its input fields are the tool's parameters (each with its schema from
// the child's state); a call runs the child to its end on a thread of its
// own under the calling node's (THREAD|NODE[SEQ]:CHECKPOINT, as a subflow
// node's child runs), starting from the arguments; the result is the
// child's output rendered over its final state, or the final state when
// it declares no output.
//
//	tools:
//	  summarize:
//	    kind: flow
//	    flow: summarize.yaml                # relative to this file
//	    description: Summarize a text in one sentence.
//
// A call resumed after a crash resumes the child where it stopped. A
// child that can pause (it asks a question) cannot be a tool: nobody
// would answer it.
package flowtool

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/schema"
)

// Spec registers the tool kind.
var Spec = kind.ToolSpec{
	Name:    "flow",
	Summary: "Run another flow file as a tool: its input fields are the parameters, its output (or its final state, when it declares none) the result; it runs on a thread of its own under the calling node's.",
	Fields: []config.Field{
		config.String("flow", "The flow file to run, relative to this file.").NonEmpty(1).Require(),
	},
	New: build,
}

type tool struct {
	flow *kind.Subflow
}

func build(b kind.Builder) []*kind.Tool {
	s := b.Settings()
	fv := s.Value("flow")
	sf := b.Subflow(fv)
	if sf == nil {
		return nil
	}
	props := map[string]any{}
	var required []any
	stateProps, _ := sf.Schema["properties"].(map[string]any)
	for _, name := range sf.Inputs {
		p, ok := stateProps[name]
		if !ok {
			p = map[string]any{}
		}
		props[name] = p
		if slices.Contains(sf.Required, name) || slices.Contains(sf.Needed, name) {
			required = append(required, name)
		}
	}
	ok := true
	for _, name := range sf.Required {
		if !slices.Contains(sf.Inputs, name) {
			b.Report(diag.CodeToolSetting, fv.Pos(), fv.Path(), "flow %s requires field %q, which has no default and is not one of its inputs: a call could not give it", sf.Name, name)
			ok = false
		}
	}
	if !ok {
		return nil
	}
	raw := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		raw["required"] = required
	}
	v, err := compile(sf.Name, raw)
	if err != nil {
		b.Report(diag.CodeToolSetting, fv.Pos(), fv.Path(), "the inputs of flow %s make no parameters schema: %v", sf.Name, err)
		return nil
	}
	var result *schema.Shape
	if sf.Output != nil {
		result = &schema.Shape{Types: []string{"string"}}
	} else {
		result = sf.State
	}
	t := &kind.Tool{Name: b.Node(), Description: sf.Description, Parameters: raw, Params: v, Result: result, Impl: &tool{flow: sf}}
	return []*kind.Tool{t}
}

func compile(name string, raw map[string]any) (*schema.Validator, error) {
	b, err := json.Marshal(raw)
	if err != nil {
		return nil, err
	}
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, err
	}
	c, err := schema.NewCompiler(nil).Compile("trellis:tool-"+name+".parameters.json", doc)
	if err != nil {
		return nil, err
	}
	return schema.NewValidator(c, schema.ShapeOf(doc, nil)), nil
}

// Call implements kind.Caller.
func (t *tool) Call(ctx context.Context, s kind.State, c *kind.Call) (any, error) {
	key := c.Key
	if key == "" {
		key = strconv.Itoa(c.Seq)
	}
	// the arguments are the child's input, as a run of it is given one
	state, err := s.RunFlow(ctx, t.flow, key, nil, c.Args, nil)
	if err != nil {
		return nil, err
	}
	if t.flow.Output == nil {
		return state, nil
	}
	out, err := t.flow.Output(state)
	if err != nil {
		return nil, fmt.Errorf("flow %s: %w", t.flow.Name, err)
	}
	return out, nil
}

var _ kind.Caller = (*tool)(nil)
