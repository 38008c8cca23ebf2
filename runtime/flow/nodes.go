package flow

import (
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/expression"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/schema"
)

// nodes builds every node: its kind's constructor reads the kind's own
// settings through a builder, then the common settings are compiled.
func (c *compiler) nodes(nodes config.Value) {
	for _, e := range nodes.Entries() {
		name, body := e.Name, e.Value
		path := "nodes." + name
		if name == startName || name == endName {
			c.dl.Errorf(diag.CodeReserved, e.Key.Pos(), path, "%s is reserved and cannot name a node", name)
			continue
		}
		n := &Node{Name: name, Index: len(c.g.Nodes), Pos: e.Key.Pos(), Path: path, Writes: map[string]bool{}}
		n.Kind = body.Get("kind").Text()
		n.Description = body.Get("description").Text()
		c.g.Nodes = append(c.g.Nodes, n)
		c.g.nodes[name] = n
		if c.badNodes[name] {
			continue
		}
		spec, ok := c.reg.Lookup(n.Kind)
		if !ok {
			continue // reported by the format check
		}
		b := &builder{c: c, name: name, body: body, path: path, spec: spec}
		c.reader, c.readerRan = n, false
		n.Impl = spec.New(b)
		c.common(n, b, config.NewSettings(body, CommonFields))
		c.reader = nil
		n.Inline = spec.Inline && n.Timeout == 0
		for f := range c.writes[name] {
			n.Writes[f] = true
		}
		n.WriteList = slices.Sorted(maps.Keys(n.Writes))
	}
}

// common compiles the settings every kind shares.
func (c *compiler) common(n *Node, b *builder, s config.Settings) {
	n.Retry = Retry{Attempts: 1, Backoff: 100 * time.Millisecond, MaxBackoff: 10 * time.Second, Factor: 2}
	retry := s.Object("retry")
	if a, ok := retry.Int("attempts"); ok {
		n.Retry.Attempts = a
	}
	if d, ok := retry.Duration("backoff"); ok {
		n.Retry.Backoff = d
	}
	if d, ok := retry.Duration("max_backoff"); ok {
		n.Retry.MaxBackoff = d
	}
	if f, ok := retry.Float("factor"); ok {
		n.Retry.Factor = f
	}
	n.Timeout, _ = s.Duration("timeout")
	n.InterruptBefore, _ = s.Bool("interrupt_before")
	n.InterruptAfter, _ = s.Bool("interrupt_after")
	if cs := s.Object("cache"); cs.Block().IsMapping() {
		c.inKey = c.reader == n // (a nested node's key is its host's read)
		p := c.compileExpr(cs.Value("key"), b.env(nil), false)
		c.inKey = false
		if p != nil {
			n.Cache = &Cache{Key: p}
			n.Cache.TTL, _ = cs.Duration("ttl")
			if k, ok := c.keys[n]; ok {
				k.at = cs.Value("key")
				c.keys[n] = k
			}
		}
	}
	oe := s.Object("on_error")
	if !oe.Block().IsMapping() {
		return
	}
	n.OnError.Handled = true
	if set := oe.Value("set"); set.Exists() {
		n.OnError.Set = map[string]*expression.Program{}
		env := b.env(nil).With("error", &schema.Shape{Types: []string{"string"}})
		b.onError = true
		defer func() { b.onError = false }()
		for _, e := range set.Entries() {
			b.Writes(e.Name, e.Key)
			if p := c.compileExpr(e.Value, env, false); p != nil {
				n.OnError.Set[e.Name] = p
			}
		}
		n.OnError.SetOrder = slices.Sorted(maps.Keys(n.OnError.Set))
	}
	if r := oe.Value("route"); r.Exists() {
		// resolved with the edges, once every node is known
		c.pendingRoutes = append(c.pendingRoutes, pendingRoute{n, r})
	}
}

type pendingRoute struct {
	n  *Node
	at config.Value
}

// compileExpr compiles the expression in scalar v and reports problems at
// their exact position in its file.
func (c *compiler) compileExpr(v config.Value, env *expression.Env, condition bool) *expression.Program {
	if !v.IsScalar() {
		return nil
	}
	path := v.Path()
	p, probs := expression.Compile(v.Text(), env, condition)
	for _, pr := range probs {
		msg := pr.Message
		if pr.Code == diag.CodeExprSyntax {
			msg = "expression: " + msg
		}
		d := diag.Diagnostic{Severity: diag.Error, Code: pr.Code, Pos: v.PosIn(pr.Line, pr.Col, pr.EndCol), Path: path,
			Summary: msg, Suggestion: pr.Suggestion, Detail: "in expression: " + strings.TrimSpace(v.Text())}
		if pr.Warning {
			d.Severity = diag.Warning
			c.noteNullRead(pr.Path, d)
			continue
		}
		c.dl.Add(d)
	}
	if p != nil && c.reader != nil && !c.readerRan {
		c.noteRefs(c.reader, p.Refs(refRoots...))
	}
	if p != nil && c.reader != nil {
		for _, r := range p.Reads() {
			c.fieldReads = append(c.fieldReads, fieldRead{node: c.reader, ran: c.readerRan, field: r.Field,
				at: v, line: r.Line, col: r.Col, end: r.EndCol, path: path})
		}
	}
	if p != nil && slices.Contains(env.Names(), "input") {
		for _, r := range p.ReadsOf("input") {
			c.inputRead(r.Field, func() diag.Pos { return v.PosIn(r.Line, r.Col, r.EndCol) })
		}
	}
	return p
}

// inputRead notes a read of input.name that does not guard against its
// absence (?? or a nil test): a run of the flow must give the input (see
// Field.ReadAt). The first such read is kept, at where it is.
func (c *compiler) inputRead(name string, pos func() diag.Pos) {
	if f, ok := c.g.fields[name]; ok && f.Input && f.ReadAt == nil {
		p := pos()
		f.ReadAt = &p
	}
}

// builder implements kind.Builder for one node.
type builder struct {
	c    *compiler
	name string
	body config.Value
	path string
	spec *kind.Spec
	// extra are the variables of a nested node's host (Builder.Nested);
	// track, when set, records where a nested node declares its writes.
	extra kind.Vars
	track map[string]config.Value
	// onError is set while the node's on_error.set is compiled: those
	// writes happen only when the node fails.
	onError bool
	// envs are the expression environments made for the node, by their
	// variables.
	envs map[string]*expression.Env
	// tool is set for the builder of a tools entry (name is the entry's)
	tool bool
}

func addWrite(m map[string]map[string]bool, node, field string) {
	if m[node] == nil {
		m[node] = map[string]bool{}
	}
	m[node][field] = true
}

func (b *builder) Node() string { return b.name }

func (b *builder) Settings() config.Settings { return config.NewSettings(b.body, b.spec.Fields) }

func (b *builder) FlowSettings() config.Settings {
	return config.NewSettings(b.c.root, b.spec.FlowFields)
}

func (b *builder) env(vars kind.Vars) *expression.Env {
	if len(vars) == 0 && len(b.extra) == 0 {
		return b.c.env
	}
	// the same variables (names and shapes) make the same environment:
	// made once per node, its types worked out once (see expression.Env)
	var key strings.Builder
	for _, name := range slices.Sorted(maps.Keys(vars)) {
		fmt.Fprintf(&key, "%s=%p;", name, vars[name])
	}
	if env, ok := b.envs[key.String()]; ok {
		return env
	}
	env := b.c.env
	for _, name := range slices.Sorted(maps.Keys(b.extra)) {
		if _, own := vars[name]; !own {
			env = env.With(name, b.extra[name])
		}
	}
	for _, name := range slices.Sorted(maps.Keys(vars)) {
		env = env.With(name, vars[name])
	}
	if b.envs == nil {
		b.envs = map[string]*expression.Env{}
	}
	b.envs[key.String()] = env
	return env
}

// templateVars are the extra template data a node's templates read: the
// run configuration, and vars. (A nested node's item reaches its
// templates through its kind's own variables, as any value does.)
func (b *builder) templateVars(vars kind.Vars) kind.Vars {
	if b.c.g.ConfigShape == nil {
		return vars
	}
	all := kind.Vars{"config": b.c.g.ConfigShape}
	maps.Copy(all, vars)
	return all
}

func (b *builder) Expr(v config.Value, vars kind.Vars) *expression.Program {
	return b.c.compileExpr(v, b.env(vars), false)
}

func (b *builder) Condition(v config.Value, vars kind.Vars) *expression.Program {
	return b.c.compileExpr(v, b.env(vars), true)
}

func (b *builder) Writes(field string, at config.Value) {
	if b.tool {
		b.toolWrite(field, at)
		return
	}
	if b.track != nil {
		if _, dup := b.track[field]; !dup {
			b.track[field] = at
		}
	}
	w := b.c.writes[b.name]
	if w == nil {
		w = map[string]diag.Pos{}
		b.c.writes[b.name] = w
	}
	if _, dup := w[field]; !dup {
		w[field] = at.Pos()
	}
	// what a run of the node writes whenever it succeeds: not a nested
	// node's (a map's items, which may be none), not on_error's
	switch {
	case b.onError:
		addWrite(b.c.errorWrites, b.name, field)
	case b.track == nil:
		addWrite(b.c.definite, b.name, field)
	}
	f, ok := b.c.g.fields[field]
	switch {
	case b.c.stateShape == nil:
		// the state schema is broken; reported once, where it is
	case !ok:
		b.c.dl.Errorf(diag.CodeUndeclaredWrite, at.Pos(), b.path, "node %q writes field %q, which the state schema does not declare", b.name, field).
			Suggestion = diag.Suggest(field, b.c.stateShape.Order)
	case f.ReadOnly:
		b.c.dl.Errorf(diag.CodeReadOnlyWrite, at.Pos(), b.path, "node %q writes read-only field %q", b.name, field)
	}
}

func (b *builder) WritesValue(field string, p *expression.Program, at config.Value) {
	f, ok := b.c.g.fields[field]
	if p == nil || !ok || f.Reducer == nil {
		return
	}
	if f.Reducer.Spec.Name != "replace" {
		b.reducedFits(field, f, p, at)
		return
	}
	// the value as it is, against the field: its declared shape member
	// by member, its type, a constant's range
	if why := fitsShape(p, f.Shape); why != "" {
		b.c.dl.Errorf(diag.CodeWriteType, at.Pos(), b.path, "field %q %s", field, why)
		return
	}
	// a choice's branch of a type the field does not take (the whole is
	// typed any when its branches differ)
	if bs := p.Branches(); len(bs) > 1 {
		for _, br := range bs {
			switch {
			case br.Type == "" || br.Type == "null" && f.Shape.Nullable():
			case br.Type == "number" && !f.Shape.Takes("number") && f.Shape.Allows("integer"):
				b.c.dl.Errorf(diag.CodeWriteType, at.PosIn(br.Line, br.Col, br.EndCol), b.path, "field %q takes %s only, but this branch yields a number that may have a fraction", field, f.Shape.Describe())
			case !f.Shape.Allows(br.Type):
				b.c.dl.Errorf(diag.CodeWriteType, at.PosIn(br.Line, br.Col, br.EndCol), b.path, "field %q takes %s, but this branch yields %s", field, f.Shape.Describe(), article(br.Type))
			}
		}
	}
	// a number literal it may yield that the field's bounds refuse
	if _, constant := p.Constant(); !constant {
		for _, l := range p.Numbers() {
			if why := f.Shape.OutOfRange(l.Value); why != "" {
				b.c.dl.Errorf(diag.CodeWriteType, at.PosIn(l.Line, l.Col, l.EndCol), b.path, "field %q is %s, but this expression can yield %v", field, why, l.Value)
			}
		}
	}
	if jsonType(p.ResultType()) == "" {
		return
	}
	// a string literal it may yield that the field's enum, pattern or
	// lengths refuse, written as it is
	values, isEnum := f.Shape.Strings()
	lits, all := p.Yields()
	for _, l := range lits {
		pos := at.PosIn(l.Line, l.Col, l.EndCol)
		switch why := f.Shape.TextRule(l.Value); {
		case why == "":
		case isEnum && !slices.Contains(values, l.Value):
			b.c.dl.Errorf(diag.CodeWriteType, pos, b.path, "field %q is one of %s, never %q", field, quoteEach(values), l.Value).
				Suggestion = diag.Suggest(l.Value, values)
		default:
			b.c.dl.Errorf(diag.CodeWriteType, pos, b.path, "field %q %s, but this expression can yield %q", field, why, l.Value)
		}
	}
	// text it cannot know (a field with no such rules, a function's
	// result), into a field that takes only some texts: the run fails
	// when the text breaks them
	// (a field read as it is may be empty; what else an expression makes
	// is not known to be short, and a minimum length is not judged)
	least := math.MaxInt
	if p.Shape() != nil {
		least = 0
	}
	if rule := f.Shape.TextRules(least); rule != "" && !all && jsonType(p.ResultType()) == "string" && p.Shape().TextRules(0) == "" {
		b.c.dl.Errorf(diag.CodeWriteType, at.Pos(), b.path, "field %q %s, but this expression yields text it does not control; the run fails when the text breaks that (choose among literal texts with ?: or if/else, yield it only where a condition compared it with the texts allowed, or make what it reads an enum)", field, rule).
			Severity = diag.Warning
	}
}

// reducedFits reports (as W004) what p yields that cannot be written to
// a field whose reducer is not replace: an append or union takes a list
// of the field's items or one item, checked member by member when its
// shape is declared; a typed reducer takes its type.
func (b *builder) reducedFits(field string, f *Field, p *expression.Program, at config.Value) {
	spec := f.Reducer.Spec
	// max keeps the larger, min the smaller: a number the update may be
	// that its bound refuses is kept when it wins, or when the field has
	// no value yet
	if spec.Name == "max" || spec.Name == "min" {
		for _, l := range p.Numbers() {
			hi := f.Shape.Maximum != nil && (l.Value > *f.Shape.Maximum || f.Shape.ExclusiveMaximum && l.Value == *f.Shape.Maximum)
			lo := f.Shape.Minimum != nil && (l.Value < *f.Shape.Minimum || f.Shape.ExclusiveMinimum && l.Value == *f.Shape.Minimum)
			// (a field with no value yet takes the update as it is)
			if spec.Name == "max" && hi || spec.Name == "min" && lo || !f.HasDefault && (hi || lo) {
				b.c.dl.Errorf(diag.CodeWriteType, at.PosIn(l.Line, l.Col, l.EndCol), b.path, "field %q is %s, but this expression can yield %v, which %s keeps", field, f.Shape.OutOfRange(l.Value), l.Value, spec.Name)
			}
		}
	}
	if src := p.Shape(); src != nil && (spec.Appends || spec.Name == "union") {
		path := p.Source()
		if src.Is("array") || src.Items != nil {
			src, path = src.Items, path+"[]"
		}
		if why := schema.Fits(src, f.Shape.Items, path); len(why) > 0 {
			b.c.dl.Errorf(diag.CodeWriteType, at.Pos(), b.path, "the items of field %q cannot hold what this expression gives: %s", field, strings.Join(why, "; "))
			return
		}
	}
	got := resultType(p)
	if got == "" {
		// a choice is typed any when its branches differ: each branch is
		// judged as the whole would be
		if bs := p.Branches(); len(bs) > 1 {
			for _, br := range bs {
				if br.Type == "" || br.Type == "null" {
					continue
				}
				if want, fits := reducedTakes(f, br.Type, br.Type != "number"); !fits {
					b.c.dl.Errorf(diag.CodeWriteType, at.PosIn(br.Line, br.Col, br.EndCol), b.path, "field %q takes %s, but this branch yields %s", field, want, article(br.Type))
				}
			}
		}
		return
	}
	if want, fits := reducedTakes(f, got, p.Whole()); !fits {
		b.c.dl.Errorf(diag.CodeWriteType, at.Pos(), b.path, "field %q takes %s, but this expression yields %s", field, want, article(got))
	}
}

// reducedTakes reports whether field f's reducer takes an update of JSON
// type got (whole: a number known to have no fraction), and if not, what
// it takes.
func reducedTakes(f *Field, got string, whole bool) (want string, fits bool) {
	spec := f.Reducer.Spec
	switch {
	case spec.Name == "expr":
	case spec.Appends || spec.Name == "union":
		// a list adds its items, any other value is one item
		return "a list or an item of " + f.Shape.Items.Describe() + " (" + spec.Name + ")",
			got == "array" || f.Shape.Items.Takes(got) || got == "number" && whole && f.Shape.Items.Allows("integer")
	case spec.Type != "":
		want, fits = article(spec.Type)+" ("+spec.Name+")", (&schema.Shape{Types: []string{spec.Type}}).Allows(got)
		if fits && got == "number" && !f.Shape.Takes(got) && !whole {
			// the field holds integers: a fraction added makes it a number
			return "an integer (" + spec.Name + " into an integer field)", false
		}
		return want, fits
	default:
		return f.Shape.Describe(), f.Shape.Allows(got)
	}
	return "", true
}

func quoteEach(values []string) string {
	q := make([]string, len(values))
	for i, v := range values {
		q[i] = strconv.Quote(v)
	}
	return strings.Join(q, ", ")
}

// resultType names the JSON type of what p yields ("" when it cannot
// tell): its checked type, or number for one known to give numbers.
func resultType(p *expression.Program) string {
	t := jsonType(p.ResultType())
	if t == "" && p.Number() {
		if p.Whole() {
			return "integer"
		}
		return "number"
	}
	return t
}

// jsonType names the JSON type of values of t ("" when it cannot tell).
func jsonType(t reflect.Type) string {
	if t == nil {
		return ""
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8,
		reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Map, reflect.Struct:
		return "object"
	}
	return ""
}

func article(t string) string {
	switch t {
	case "integer", "array", "object":
		return "an " + t
	case "number":
		return "a number"
	}
	return "a " + t
}

func (b *builder) Field(name string) *schema.Shape {
	if f, ok := b.c.g.fields[name]; ok {
		return f.Shape
	}
	return nil
}

func (b *builder) Errorf(at config.Value, format string, args ...any) {
	if !at.Exists() {
		at = b.body
	}
	b.c.dl.Errorf(diag.CodeKindSetting, at.Pos(), b.path, format, args...)
}

func (b *builder) Report(code diag.Code, pos diag.Pos, path, format string, args ...any) *diag.Diagnostic {
	return b.c.dl.Errorf(code, pos, path, format, args...)
}

func (b *builder) Shared(key string, build func() any) any {
	if v, ok := b.c.shared[key]; ok {
		return v
	}
	v := build()
	b.c.shared[key] = v
	return v
}

// File implements kind.Builder: a file named relative to the flow.
func (b *builder) File(name string) (*kind.Resource, error) {
	p := b.c.files.Join(b.c.dir, name)
	src, err := b.c.readFile(p)
	if err != nil {
		return nil, err
	}
	return &kind.Resource{Path: p, Data: src}, nil
}

// Find implements kind.Builder: folder/name beside the flow or above it.
func (b *builder) Find(folder, name string) (*kind.Resource, bool) {
	fs := b.c.files
	for _, dir := range fs.Up(b.c.dir) {
		p := fs.Join(fs.Join(dir, folder), name)
		if !fs.Exists(p) {
			continue
		}
		p = fs.Display(p)
		src, err := b.c.readFile(p)
		if err != nil {
			return nil, false
		}
		return &kind.Resource{Path: p, Data: src}, true
	}
	return nil, false
}

// Names implements kind.Builder.
func (b *builder) Names(folder, ext string) []string {
	var names []string
	fs := b.c.files
	for _, dir := range fs.Up(b.c.dir) {
		root := fs.Join(dir, folder)
		fs.Walk(root, func(p string) {
			if strings.HasSuffix(p, ext) {
				names = append(names, strings.TrimSuffix(fs.Rel(root, p), ext))
			}
		})
	}
	return names
}

// ParseYAML implements kind.Builder.
func (b *builder) ParseYAML(path string, src []byte) *config.File {
	if _, ok := b.c.sources[path]; !ok {
		b.c.sources[path] = src
	}
	return config.Parse(path, src, &b.c.dl)
}

func (b *builder) String() string { return fmt.Sprintf("builder(%s)", b.name) }
