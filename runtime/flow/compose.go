package flow

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/expression"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/schema"
	"github.com/trellisflow/trellis/runtime/value"
)

// ConfigField is one entry of a flow's run configuration: a value each
// run may set (which model, a stricter limit), read as config.NAME by
// expressions and .config.NAME by templates.
type ConfigField struct {
	Name  string
	Shape *schema.Shape
	// Validator checks a value given for it.
	Validator *schema.Validator
	// Secret values are never written to a checkpoint: a resumed run
	// must be given them again.
	Secret bool
	// Default is the value a run that sets none gets, when HasDefault.
	Default    any
	HasDefault bool
}

// configBlock compiles the flow's config block: each entry is the JSON
// Schema of one value (with secret: true for one that is never
// checkpointed). Expressions then read config, typed by those schemas; an
// entry without a default may be null.
func (c *compiler) configBlock(v config.Value) {
	if !v.IsMapping() {
		return
	}
	props := map[string]*schema.Shape{}
	var order []string
	for _, e := range v.Entries() {
		raw, err := e.Value.JSON()
		m, ok := raw.(map[string]any)
		if err != nil || !ok {
			continue // the format check reported it
		}
		m = maps.Clone(m)
		secret, _ := m["secret"].(bool)
		delete(m, "secret")
		url := c.files.URL(c.doc.Path + ".config." + e.Name + ".json")
		resolve := schema.Resolver(m, url, c.readURL)
		compiled, err := schema.NewCompiler(c.readURL).Compile(url, m)
		path := "config." + e.Name
		if err != nil {
			ptr, msg := schemaProblem(err)
			at := e.Value.Pos()
			if base, ok := e.Value.Pointer(); ok {
				if x := e.Value.File().At(base + ptr); x.Exists() {
					at = x.Pos()
				}
			}
			c.dl.Errorf(diag.CodeConfig, at, path, "config %q: invalid schema: %s", e.Name, msg)
			// still a name expressions may read, of no known type
			props[e.Name], order = nil, append(order, e.Name)
			continue
		}
		shape := schema.ShapeOf(m, resolve)
		f := &ConfigField{Name: e.Name, Shape: shape, Validator: schema.NewValidator(compiled, shape), Secret: secret}
		if shape.HasDefault {
			d, err := value.Normalize(shape.Default)
			if err == nil {
				d = schema.Coerce(shape, d)
				err = f.Validator.Validate(d)
			}
			if err != nil {
				at := e.Value
				if x := e.Value.Get("default"); x.Exists() {
					at = x
				}
				c.dl.Errorf(diag.CodeConfig, at.Pos(), path, "config %q: the default is invalid: %v", e.Name, err)
				props[e.Name], order = shape, append(order, e.Name)
				continue
			}
			f.Default, f.HasDefault = d, true
		}
		exprShape := shape
		if !shape.HasDefault && len(shape.Types) > 0 && !shape.Nullable() {
			// unset when a run gives none
			s := *shape
			s.Types = append(slices.Clone(shape.Types), "null")
			exprShape = &s
		}
		c.g.Config = append(c.g.Config, f)
		props[e.Name] = exprShape
		order = append(order, e.Name)
	}
	c.g.ConfigShape = schema.Object(props, order...)
	c.g.ConfigShape.Closed = true
	c.env = c.env.With("config", c.g.ConfigShape)
}

// unsetAtEnd maps the fields a run may end with unset (no default, not
// nullable, not required; some way to END writes nothing to them) to such
// a way.
func (c *compiler) unsetAtEnd() map[string]string {
	if c.abs == nil || c.abs.overflow || c.stateShape == nil {
		return nil
	}
	out := map[string]string{}
	for _, f := range c.g.Fields {
		if f.HasDefault || f.Shape.Nullable() || slices.Contains(c.stateShape.Required, f.Name) {
			continue
		}
		for si, s := range c.abs.states {
			if len(s.triggered) > 0 || s.must == nil || s.must.has(f.Index) {
				continue
			}
			if steps := c.abs.witness(f.Index, si); steps != nil {
				out[f.Name] = c.showSteps(steps[:len(steps)-1]) + " → END"
				break
			}
		}
	}
	return out
}

// ConfigField returns a run configuration entry by name.
func (g *Graph) ConfigField(name string) (*ConfigField, bool) {
	for _, f := range g.Config {
		if f.Name == name {
			return f, true
		}
	}
	return nil, false
}

// Fits implements kind.Builder.
func (b *builder) Fits(p *expression.Program, dst *schema.Shape, at config.Value, what string) {
	if p == nil || dst == nil {
		return
	}
	if why := fitsShape(p, dst); why != "" {
		b.c.dl.Errorf(diag.CodeWriteType, at.Pos(), at.Path(), "%s %s", what, why)
	}
}

// ExprFits says how what p yields may not be a value of shape dst (""
// when it fits as far as is known), as a node's write is checked.
func ExprFits(p *expression.Program, dst *schema.Shape) string { return fitsShape(p, dst) }

// fitsShape says how what p yields may not be a value of shape dst (""
// when it fits as far as is known): its declared shape member by member,
// its type, a constant out of range.
func fitsShape(p *expression.Program, dst *schema.Shape) string {
	if src := p.Shape(); src != nil {
		if why := schema.Fits(src, dst, p.Source()); len(why) > 0 {
			return "cannot hold what this expression gives: " + strings.Join(why, "; ")
		}
	}
	got := resultType(p)
	if got == "number" && !dst.Takes(got) && dst.Allows("integer") && !p.Whole() {
		return "takes " + dst.Describe() + " only, but this expression yields a number that may have a fraction (/, a float literal or a number field); write int(...) to drop the fraction or round(...) to round it"
	}
	if got != "" && !dst.Allows(got) {
		return "takes " + dst.Describe() + ", but this expression yields " + article(got)
	}
	if v, ok := p.Constant(); ok {
		if why := dst.OutOfRange(v); why != "" {
			return "is " + why + ", but this expression is always " + fmt.Sprint(v)
		}
	}
	return ""
}

// Nested implements kind.Builder: the block is built by its kind through
// a builder of its own whose expressions also see vars, and whose writes
// are the host's.
func (b *builder) Nested(v config.Value, vars kind.Vars) *kind.Nested {
	c := b.c
	if !v.IsMapping() {
		return nil // the format check reported it
	}
	spec, ok := c.reg.Lookup(v.Get("kind").Text())
	if !ok {
		return nil
	}
	for _, key := range []string{"interrupt_before", "interrupt_after", "on_error"} {
		if k := v.KeyOf(key); k.Exists() {
			c.dl.Errorf(diag.CodeMapNode, k.Pos(), v.Path(), "%s acts on a run's steps, not on a node run inside %q: set it on %q itself", key, b.name, b.name)
		}
	}
	extra := maps.Clone(b.extra)
	if extra == nil {
		extra = kind.Vars{}
	}
	maps.Copy(extra, vars)
	nb := &builder{c: c, name: b.name, body: v, path: v.Path(), spec: spec, extra: extra, track: map[string]config.Value{}}
	n := &Node{Name: b.name, Kind: spec.Name, Pos: v.Pos(), Path: v.Path(), Writes: map[string]bool{}}
	n.Impl = spec.New(nb)
	c.common(n, nb, config.NewSettings(v, CommonFields))
	for _, name := range slices.Sorted(maps.Keys(nb.track)) {
		if f, ok := c.g.fields[name]; ok && f.Reducer != nil && !f.Reducer.Spec.Concurrent {
			c.dl.Errorf(diag.CodeMapNode, nb.track[name].Pos(), v.Path(), "field %q has reducer %s, which takes one write per step, but %q runs this node once per item: give the field a reducer that folds several writes (append, union, merge, add, ...)", name, f.Reducer.Spec.Name, b.name)
		}
	}
	n.OnError = OnError{}
	n.InterruptBefore, n.InterruptAfter = false, false
	n.Inline = spec.Inline && n.Timeout == 0
	if n.Impl == nil {
		return nil
	}
	if _, asks := n.Impl.(kind.Asker); asks {
		c.dl.Errorf(diag.CodeMapNode, v.Get("kind").Pos(), v.Path(), "a %s node pauses the run to ask, which a node run inside %q cannot do", spec.Name, b.name)
		return nil
	}
	if _, pauses := n.Impl.(kind.Interrupter); pauses {
		c.dl.Errorf(diag.CodeMapNode, v.Get("kind").Pos(), v.Path(), "this %s node may pause the run for a person's approval of a tool call, which a node run inside %q cannot do: run it as a node of the flow", spec.Name, b.name)
		return nil
	}
	return &kind.Nested{Kind: spec.Name, Impl: n}
}

// Subflow implements kind.Builder: the child file is compiled with the
// same kinds and files, once per load however many nodes name it, with
// the chain of files that include it, so that a cycle is caught.
func (b *builder) Subflow(v config.Value) *kind.Subflow {
	c := b.c
	if !v.IsString() || v.Text() == "" {
		return nil // the format check reported it
	}
	path := c.files.Join(c.dir, v.Text())
	id := c.files.URL(path)
	chain := append(slices.Clone(c.chain), c.files.URL(c.g.Path))
	if i := slices.Index(chain, id); i >= 0 {
		names := append(slices.Clone(c.chainNames[i:]), c.g.Path, path)
		c.dl.Errorf(diag.CodeSubflowCycle, v.Pos(), v.Path(), "flows include each other: %s", strings.Join(names, " → "))
		return nil
	}
	if sf, ok := c.children[id]; ok {
		if sf == nil {
			c.dl.Errorf(diag.CodeSubflow, v.Pos(), v.Path(), "subflow %s has errors (reported in its file)", path)
		}
		return sf
	}
	var res *compiled
	if e := c.batch.reusable(id, chain, c.seq); e != nil {
		// compiled already in this batch (loaded itself, or run by
		// another flow): the same result
		res = e
		maps.Copy(c.sources, res.sources)
	} else {
		src, err := c.readFile(path)
		if err != nil {
			d := c.dl.Errorf(diag.CodeSubflow, v.Pos(), v.Path(), "cannot read subflow %q: %v", v.Text(), err)
			folder := c.files.Rel(c.dir, c.files.Dir(path))
			var names []string
			for _, n := range b.Names(folder, ".yaml") {
				names = append(names, c.files.Join(folder, n)+".yaml")
			}
			d.Suggestion = diag.Suggest(v.Text(), names)
			return nil
		}
		child := &compiler{reg: c.reg, files: c.files, dir: c.files.Dir(path), sources: diag.Sources{}, shared: map[string]any{},
			chain: chain, chainNames: append(slices.Clone(c.chainNames), c.g.Path), children: c.children, batch: c.batch, seq: c.seq,
			included: map[string]bool{id: true}}
		child.sources[path] = src
		g := child.compile(path, src)
		res = child.result(g)
		maps.Copy(c.sources, res.sources)
		c.batch.keep(id, res)
	}
	maps.Copy(c.included, res.includes)
	c.dl = append(c.dl, res.dl...)
	g := res.g
	if g == nil || res.dl.HasErrors() || g.root == nil {
		c.children[id] = nil
		c.dl.Errorf(diag.CodeSubflow, v.Pos(), v.Path(), "subflow %s has errors (reported in its file)", path)
		return nil
	}
	sf := &kind.Subflow{Name: g.Name, Path: path, Description: g.Description, State: res.state, Config: g.ConfigShape, Graph: g}
	if sf.Config == nil {
		sf.Config = schema.Object(nil)
		sf.Config.Closed = true
	}
	for _, name := range res.state.Required {
		if f, ok := g.Field(name); ok && !f.HasDefault {
			sf.Required = append(sf.Required, name)
		}
	}
	sf.Unset = res.unset
	sf.Schema = g.stateRaw
	for _, f := range g.Inputs {
		sf.Inputs = append(sf.Inputs, f.Name)
		if f.ReadAt != nil {
			sf.Needed = append(sf.Needed, f.Name)
		}
	}
	if g.Output != nil {
		sf.Output = g.Output.Render
	}
	var pauses []string
	for _, n := range g.Nodes {
		_, asks := n.Impl.(kind.Asker)
		_, approves := n.Impl.(kind.Interrupter)
		if asks || approves || n.InterruptBefore || n.InterruptAfter {
			pauses = append(pauses, n.Name)
		}
	}
	if len(pauses) > 0 {
		c.dl.Errorf(diag.CodeSubflow, v.Pos(), v.Path(), "subflow %s can pause (at %s), which a flow run as a node cannot do: its questions would have no one to answer them", path, strings.Join(pauses, ", "))
		c.children[id] = nil
		return nil
	}
	c.children[id] = sf
	return sf
}
