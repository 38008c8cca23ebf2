package flow

import (
	"path/filepath"
	"slices"
	"strings"

	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/expression"
	"github.com/trellisflow/trellis/runtime/schema"
	"github.com/trellisflow/trellis/runtime/value"
)

// state compiles the state block: the schema and its fields, reducers,
// read-only fields and inputs, and the expression environment they make.
func (c *compiler) state(st config.Settings) {
	sn := st.Value("schema")
	if !sn.Exists() {
		c.env = expression.NewEnv().With("state", nil).With("input", nil)
		return
	}
	ls, ok := c.loadSchema(sn, strings.TrimSuffix(c.doc.Path, filepath.Ext(c.doc.Path))+".state.json")
	if !ok {
		c.dl.Errorf(diag.CodeStateSchema, sn.Pos(), "state.schema", "cannot read state schema %q", sn.Text())
		c.env = expression.NewEnv().With("state", nil).With("input", nil)
		return
	}
	if ls.err != nil {
		c.dl.Errorf(diag.CodeStateSchema, ls.errPos, "state.schema", "invalid state schema: %s", ls.errMsg)
	}
	shape := ls.shape
	c.stateShape = shape
	if ls.err == nil && (!shape.Is("object") || len(shape.Props) == 0) {
		c.dl.Errorf(diag.CodeStateShape, sn.Pos(), "state.schema", "state schema must be an object (type: object) with properties")
	}
	// The state is closed: its fields are the declared properties.
	shape.Closed = true
	compiled := ls.compiled
	c.g.stateRaw, _ = schema.Bundle(ls.raw, ls.resolve).(map[string]any)
	if compiled != nil {
		c.g.root = schema.NewValidator(compiled, shape)
		c.g.FullValidation = rootHasConstraints(ls.raw)
	}
	for i, name := range shape.Order {
		fs := shape.Props[name]
		f := &Field{Name: name, Index: i, Shape: fs, Reducer: NewReducer(Reducers[0]), Var: "state." + name, InputVar: "input." + name}
		if compiled != nil {
			if sub := compiled.Properties[name]; sub != nil {
				f.Validator = schema.NewValidator(sub, fs)
				if fs.Is("array") && fs.Items != nil && arrayOnlyItems(ls.raw, name, ls.resolve) {
					items := sub.Items2020
					if items == nil && sub.Ref != nil {
						items = sub.Ref.Items2020
					}
					if items != nil {
						f.Items = schema.NewValidator(items, fs.Items)
					}
				}
			}
		}
		if fs.HasDefault {
			v, err := value.Normalize(fs.Default)
			if err == nil {
				f.Default, f.HasDefault = schema.Coerce(fs, v), true
				if f.Validator != nil {
					if err := f.Validator.Validate(f.Default); err != nil {
						c.dl.Errorf(diag.CodeBadDefault, ls.propertyPos(name), "state.schema", "default of field %q is invalid: %v", name, err)
					}
				}
				// held as a store hands it back
				f.Default, _ = value.Settle(f.Default)
			}
		}
		f.Required = slices.Contains(shape.Required, name)
		c.g.Fields = append(c.g.Fields, f)
		c.g.fields[name] = f
	}
	c.env = expression.NewEnv().WithFields("state", shape)
	if len(shape.Props) == 0 {
		// no fields to check names against: every name would be reported
		c.env = expression.NewEnv().With("state", nil).With("input", nil)
		c.stateShape = nil
		return
	}
	c.reducers(st.Value("reducers"))
	c.readonly(st.Value("readonly"))
	c.inputs(config.NewSettings(c.root, flowFields(c.kindKeys)).Value("input"))
	props, order := map[string]*schema.Shape{}, []string{}
	for _, f := range c.g.Inputs {
		props[f.Name] = f.Shape
		order = append(order, f.Name)
	}
	inShape := schema.Object(props, order...)
	// the engine keeps state and input by field index: expressions read
	// them by slot
	c.env = c.env.WithFields("input", inShape).Slotted(shape.Order)
	c.inShape = inShape
}

// rootHasConstraints reports whether the root schema constrains the state
// beyond type, properties, required and additionalProperties.
func rootHasConstraints(raw any) bool {
	m, _ := raw.(map[string]any)
	for k := range m {
		switch k {
		case "type", "properties", "required", "additionalProperties", "$defs", "definitions",
			"title", "description", "$schema", "$id", "$comment", "examples", "default":
		default:
			return true
		}
	}
	if ap, ok := m["additionalProperties"]; ok {
		if _, isBool := ap.(bool); !isBool {
			return true
		}
	}
	return false
}

// arrayOnlyItems reports whether a field's array schema has no keyword that
// looks at the whole list (minItems, uniqueItems, contains, ...), so that
// validating appended items alone is exact.
func arrayOnlyItems(raw any, field string, resolve func(string) any) bool {
	m, _ := raw.(map[string]any)
	props, _ := m["properties"].(map[string]any)
	fm, _ := props[field].(map[string]any)
	if ref, ok := fm["$ref"].(string); ok && len(fm) <= 2 {
		fm, _ = resolve(ref).(map[string]any)
	}
	for k := range fm {
		switch k {
		case "type", "items", "default", "title", "description", "examples", "$comment", "deprecated", "readOnly", "writeOnly":
		default:
			return false
		}
	}
	return fm != nil
}

func (c *compiler) reducers(rn config.Value) {
	for _, e := range rn.Entries() {
		k, v := e.Key, e.Value
		f, ok := c.g.fields[e.Name]
		if !ok {
			c.dl.Errorf(diag.CodeReducerField, k.Pos(), "state.reducers."+e.Name, "reducer for field %q, which the state schema does not declare", e.Name).
				Suggestion = diag.Suggest(e.Name, c.stateShape.Order)
			continue
		}
		var spec *ReducerSpec
		var option config.Value
		switch {
		case v.IsScalar():
			spec, _ = LookupReducer(v.Text())
		case v.IsMapping():
			for _, r := range Reducers {
				if r.Option != nil && v.Get(r.Name).Exists() {
					spec, option = r, v.Get(r.Name)
					break
				}
			}
		}
		if spec == nil {
			continue // the format check reported it
		}
		r := NewReducer(spec)
		if option.Exists() {
			switch spec.Option.Type {
			case config.TypeExpression:
				env := expression.NewEnv().With("current", f.Shape).With("update", nil)
				r.expr = c.compileExpr(option, env, false)
			case config.TypeObject:
				r.Key, _ = config.NewSettings(option, spec.Option.Fields).String("key")
			}
		}
		if want := spec.Type; want != "" && !f.Shape.Allows(want) {
			c.dl.Errorf(diag.CodeReducerType, v.Pos(), "state.reducers."+e.Name, "reducer %s needs a field of type %s, but %q is %s", spec.Name, want, e.Name, f.Shape.Describe())
		}
		if r.Key != "" && f.Shape.Items != nil && len(f.Shape.Items.Types) > 0 && !f.Shape.Items.Allows("object") {
			at := option
			if k := option.Get("key"); k.Exists() {
				at = k
			}
			c.dl.Errorf(diag.CodeReducerType, at.Pos(), "state.reducers."+e.Name, "union key %q: the items of %q are %s, which have no properties", r.Key, e.Name, f.Shape.Items.Describe())
		}
		if r.Key != "" && f.Shape.Items != nil && f.Shape.Items.Is("object") {
			if _, ok := f.Shape.Items.Prop(r.Key); !ok {
				c.dl.Errorf(diag.CodeReducerType, v.Pos(), "state.reducers."+e.Name, "union key %q is not a property of the items of %q", r.Key, e.Name).
					Suggestion = diag.Suggest(r.Key, f.Shape.Items.Order)
			}
		}
		f.Reducer = r
	}
}

func (c *compiler) readonly(rn config.Value) {
	for _, n := range rn.Items() {
		f, ok := c.g.fields[n.Text()]
		if !ok {
			c.dl.Errorf(diag.CodeReadOnly, n.Pos(), "state.readonly", "read-only field %q is not in the state schema", n.Text()).
				Suggestion = diag.Suggest(n.Text(), c.stateShape.Order)
			continue
		}
		f.ReadOnly = true
	}
}

func (c *compiler) inputs(in config.Value) {
	for _, n := range in.Items() {
		f, ok := c.g.fields[n.Text()]
		if !ok {
			c.dl.Errorf(diag.CodeUnknownInput, n.Pos(), "input", "input field %q is not in the state schema", n.Text()).
				Suggestion = diag.Suggest(n.Text(), c.stateShape.Order)
			continue
		}
		if f.ReadOnly {
			c.dl.Errorf(diag.CodeReadOnly, n.Pos(), "input", "input field %q is read-only: it is set when the thread is created", n.Text())
			continue
		}
		if !f.Input {
			f.Input = true
			c.g.Inputs = append(c.g.Inputs, f)
		}
	}
}

// conversation compiles the conversation block: the input and attachment
// fields must be inputs, the output a state field.
func (c *compiler) conversation(cn config.Settings) {
	if !cn.Block().IsMapping() || c.stateShape == nil {
		return
	}
	conv := &Conversation{Attachments: map[string]string{}}
	input := func(n config.Value, path string) string {
		if !n.Exists() {
			return ""
		}
		f, ok := c.g.fields[n.Text()]
		if !ok || !f.Input {
			var names []string
			for _, in := range c.g.Inputs {
				names = append(names, in.Name)
			}
			c.dl.Errorf(diag.CodeUnknownInput, n.Pos(), path, "%q is not an input of this flow", n.Text()).Suggestion = diag.Suggest(n.Text(), names)
			return ""
		}
		return n.Text()
	}
	conv.Input = input(cn.Value("input"), "conversation.input")
	if out := cn.Value("output"); out.Exists() {
		if _, ok := c.g.fields[out.Text()]; !ok {
			c.dl.Errorf(diag.CodeUnknownInput, out.Pos(), "conversation.output", "output %q is not a state field", out.Text()).
				Suggestion = diag.Suggest(out.Text(), c.stateShape.Order)
		}
		conv.Output = out.Text()
	}
	if u := cn.Value("until"); u.Exists() {
		conv.Until = c.compileExpr(u, c.env, true)
	}
	for _, e := range cn.Entries("attachments") {
		if f := input(e.Value, "conversation.attachments."+e.Name); f != "" {
			conv.Attachments[e.Name] = f
		}
	}
	c.g.Conversation = conv
}
