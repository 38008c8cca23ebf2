// What a node writes, against the field it writes: the value's type as
// the checker knows it (null, an object member by member, a list by its
// items, the kind of number), the literals it can yield against the
// field's bounds, enum, pattern and lengths, and a value known before
// any run against the field's own schema, as the run will check it.
// Through a reducer, what the reducer makes of the update is checked.

package flow

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"

	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/expression"
	"github.com/trellisflow/trellis/runtime/schema"
	"github.com/trellisflow/trellis/runtime/value"
)

// WritesValue implements kind.Builder.
func (b *builder) WritesValue(field string, p *expression.Program, at config.Value) {
	f, ok := b.c.g.fields[field]
	if p == nil || !ok || f.Reducer == nil {
		return
	}
	w := written{shape: p.Type(), leaves: p.Leaves()}
	b.c.writtenShapes[field] = append(b.c.writtenShapes[field], w)
	if b.c.writtenBy[field] == nil {
		b.c.writtenBy[field] = map[string][]written{}
	}
	b.c.writtenBy[field][b.name] = append(b.c.writtenBy[field][b.name], w)
	b.c.dests[p] = f
	if f.Reducer.Spec.Name != "replace" {
		b.reducedFits(field, f, p, at)
		return
	}
	b.c.valueFits(p, f.Shape, f.Validator, at, b.path, fmt.Sprintf("field %q", field))
}

// Fits implements kind.Builder: a value given to another flow's field
// (a subflow's input) is checked as a write to it.
func (b *builder) Fits(p *expression.Program, dst *schema.Shape, at config.Value, what string) {
	if p == nil || dst == nil {
		return
	}
	b.c.valueFits(p, dst, b.c.validatorOf(dst), at, at.Path(), what)
}

// validatorOf finds the validator of a field of a flow this load
// compiled by the field's shape (nil when there is none).
func (c *compiler) validatorOf(s *schema.Shape) *schema.Validator {
	for _, sf := range c.children {
		if sf == nil {
			continue // a child with errors of its own
		}
		g, _ := sf.Graph.(*Graph)
		if g == nil {
			continue
		}
		for _, f := range g.Fields {
			if f.Shape == s {
				return f.Validator
			}
		}
	}
	return nil
}

// ExprFits says how what p yields may not be a value of shape dst (""
// when it fits as far as is known), as a node's write is checked.
func ExprFits(p *expression.Program, dst *schema.Shape) string {
	var dl diag.List
	c := &compiler{dl: dl}
	c.valueFits(p, dst, nil, config.Value{}, "", "the value")
	for _, d := range c.dl {
		if d.Severity == diag.Error {
			return strings.TrimPrefix(d.Summary, "the value ")
		}
	}
	return ""
}

// valueFits reports (as W004) how what p yields may not be a value of
// shape dst, which validator checks at run time: what names the place
// written ("field \"x\"").
func (c *compiler) valueFits(p *expression.Program, dst *schema.Shape, validator *schema.Validator, at config.Value, path, what string) {
	if p == nil || dst == nil {
		return
	}
	report := func(pos diag.Pos, format string, args ...any) *diag.Diagnostic {
		return c.dl.Errorf(diag.CodeWriteType, pos, path, "%s %s", what, fmt.Sprintf(format, args...))
	}
	before := len(c.dl)
	if !c.typeFits(p, dst, at, report) {
		return
	}
	// a number literal it may yield that the field's bounds refuse
	if _, constant := p.Constant(); !constant {
		for _, l := range p.Numbers() {
			if why := dst.OutOfRange(l.Value); why != "" {
				report(at.PosIn(l.Line, l.Col, l.EndCol), "is %s, but this expression can yield %v", why, l.Value)
			}
		}
	} else if v, _ := p.Constant(); dst.OutOfRange(v) != "" {
		report(at.Pos(), "is %s, but this expression is always %v", dst.OutOfRange(v), v)
		return
	}
	if jsonType(p.ResultType()) == "" && !p.Type().Is("string") {
		c.knownValues(p, dst, validator, at, before, report)
		c.undecided(p, dst, at, before, report)
		return
	}
	// a string literal it may yield that the field's enum, pattern or
	// lengths refuse, written as it is
	values, isEnum := dst.Strings()
	lits, all := p.Yields()
	for _, l := range lits {
		pos := at.PosIn(l.Line, l.Col, l.EndCol)
		switch why := dst.TextRule(l.Value); {
		case why == "":
		case isEnum && !slices.Contains(values, l.Value):
			report(pos, "is one of %s, never %q", quoteEach(values), l.Value).Suggestion = diag.Suggest(l.Value, values)
		default:
			report(pos, "%s, but this expression can yield %q", why, l.Value)
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
	if rule := dst.TextRules(least); rule != "" && !all && (jsonType(p.ResultType()) == "string" || p.Type().Is("string")) &&
		!leavesKeepText(p, dst) && (p.Shape() == nil || !p.Shape().WithoutNull().KeepsText(dst)) {
		report(at.Pos(), "%s, but this expression yields text it does not control; the run fails when the text breaks that (choose among literal texts with ?: or if/else, yield it only where a condition compared it with the texts allowed, or make what it reads an enum)", rule).
			Severity = diag.Warning
	}
	c.knownValues(p, dst, validator, at, before, report)
	c.undecided(p, dst, at, before, report)
}

// allKnown reports whether every value p may yield is known before the
// run (literals, and values the schema judged).
func allKnown(p *expression.Program) bool {
	for _, l := range p.Leaves() {
		if !l.Known {
			return false
		}
	}
	return true
}

// undecided warns, once per write, of the rules of dst the checker
// cannot decide for what p yields (nothing was reported of it before,
// and it is not a value known before the run, which the schema judged):
// a number that may leave the field's bounds or not be a multiple of
// its step, a list whose length or repeats the field limits, and once
// per field a schema keyword the checker does not reason about. The run
// checks them; the warning says so rather than pass them silently.
func (c *compiler) undecided(p *expression.Program, dst *schema.Shape, at config.Value, before int, report func(diag.Pos, string, ...any) *diag.Diagnostic) {
	if len(c.dl) > before || dst == nil {
		return
	}
	known := true
	for _, l := range p.Leaves() {
		known = known && l.Known
	}
	if known {
		return
	}
	src := p.Type()
	var rules []string
	if numericOnly(src.WithoutNull()) && src.Known() {
		if (dst.Minimum != nil || dst.Maximum != nil) && !expression.Within(src.WithoutNull(), dst) {
			rules = append(rules, "is "+boundsWords(dst))
		}
		if m := dst.MultipleOf; m != nil && !(src.WithoutNull().Is("integer") && *m == 1) && !p.MultipleOf(*m) {
			rules = append(rules, fmt.Sprintf("is a multiple of %v", *m))
		}
	}
	if s := src.WithoutNull(); s.Is("array") {
		if dst.MinItems > s.MinItems {
			rules = append(rules, fmt.Sprintf("holds at least %d items", dst.MinItems))
		}
		if dst.MaxItems != nil && (s.MaxItems == nil || *s.MaxItems > *dst.MaxItems) {
			rules = append(rules, fmt.Sprintf("holds at most %d items", *dst.MaxItems))
		}
		if dst.Unique() && !s.Unique() && !(s.MaxItems != nil && *s.MaxItems <= 1) {
			rules = append(rules, "holds no item twice (uniqueItems)")
		}
	}
	if len(rules) > 0 {
		report(at.Pos(), "%s, which the validator cannot decide for what this expression yields; the run fails when it does not (a literal, or min, max, uniq or a test that keeps it so, lets the validator see it)", strings.Join(rules, " and ")).
			Severity = diag.Warning
	}
	if len(dst.Unmodelled) > 0 {
		// said once per field: it is the schema's, whatever is written
		if c.undecidedSeen == nil {
			c.undecidedSeen = map[*schema.Shape]bool{}
		}
		if !c.undecidedSeen[dst] {
			c.undecidedSeen[dst] = true
			report(at.Pos(), "has a schema with %s, which the validator does not reason about: what is written to it is checked only when the run writes it", strings.Join(dst.Unmodelled, ", ")).
				Severity = diag.Warning
		}
	}
}

// numericOnly reports whether every type of s is a number.
func numericOnly(s *schema.Shape) bool {
	return s.Known() && !slices.ContainsFunc(s.Types, func(t string) bool { return t != "integer" && t != "number" })
}

// boundsWords says a shape's bounds in words: "at least 0 and at most 10".
func boundsWords(s *schema.Shape) string {
	var parts []string
	if m := s.Minimum; m != nil {
		w := "at least"
		if s.ExclusiveMinimum {
			w = "more than"
		}
		parts = append(parts, fmt.Sprintf("%s %v", w, *m))
	}
	if m := s.Maximum; m != nil {
		w := "at most"
		if s.ExclusiveMaximum {
			w = "less than"
		}
		parts = append(parts, fmt.Sprintf("%s %v", w, *m))
	}
	return strings.Join(parts, " and ")
}

// typeFits reports what p yields of a type dst does not take, member by
// member: at each branch of a choice whose branches differ in type, else
// at the whole. It returns whether the types fit.
func (c *compiler) typeFits(p *expression.Program, dst *schema.Shape, at config.Value, report func(diag.Pos, string, ...any) *diag.Diagnostic) bool {
	src := p.Type()
	if chain := p.Shape(); chain != nil && !src.Known() {
		src = chain
	}
	if p.Shape() != nil {
		// a value read as it is (state.x, output.review): named in the
		// message by what it reads
		if why := schema.Fits(src, dst, p.Source()); len(why) > 0 {
			report(at.Pos(), "cannot hold what this expression gives: %s", strings.Join(why, "; "))
			return false
		}
		return true
	}
	if !src.Known() {
		return true
	}
	why := schema.Fits(src, dst, "")
	if len(why) == 0 {
		return true
	}
	numeric := !slices.ContainsFunc(src.Types, func(t string) bool { return t != "integer" && t != "number" })
	leaves := p.Leaves()
	switch {
	case numeric && !dst.Takes("number") && dst.Allows("integer") && !src.Is("integer"):
		report(at.Pos(), "takes %s only, but this expression yields a number that may have a fraction (/, a float literal or a number field); write int(...) to drop the fraction or round(...) to round it", dst.Describe())
	case len(leaves) > 1:
		for _, l := range leaves {
			c.leafFits(l, dst, at, report)
		}
	default:
		if t, ok := oneType(src); ok && !dst.Allows(t) {
			report(at.Pos(), "takes %s, but this expression yields %s", dst.Describe(), article(t))
			break
		}
		report(at.Pos(), "cannot hold what this expression gives: %s", strings.Join(why, "; "))
	}
	return false
}

// leafFits reports a branch of a choice that dst cannot hold.
func (c *compiler) leafFits(l expression.Leaf, dst *schema.Shape, at config.Value, report func(diag.Pos, string, ...any) *diag.Diagnostic) {
	why := schema.Fits(l.Shape, dst, "")
	if len(why) == 0 {
		return
	}
	pos := at.PosIn(l.Line, l.Col, l.EndCol)
	t, one := oneType(l.Shape)
	switch {
	case one && t == "number" && !dst.Takes("number") && dst.Allows("integer"):
		report(pos, "takes %s only, but this branch yields a number that may have a fraction", dst.Describe())
	case one && !dst.Allows(t):
		report(pos, "takes %s, but this branch yields %s", dst.Describe(), article(t))
	default:
		report(pos, "cannot hold what this branch gives: %s", strings.Join(why, "; "))
	}
}

// oneType is the one JSON type of a shape, if it has one.
func oneType(s *schema.Shape) (string, bool) {
	if s == nil || len(s.Types) != 1 {
		return "", false
	}
	return s.Types[0], true
}

// knownValues checks each value p is known to yield (a literal, a list
// or map of literals, a branch that is one) against the field's schema,
// as the run will: what the shapes do not say (multipleOf, maxItems,
// uniqueItems, a format, a $ref's enum) is judged the same way. Nothing
// is checked once earlier checks reported (before: the list's length
// then).
func (c *compiler) knownValues(p *expression.Program, dst *schema.Shape, validator *schema.Validator, at config.Value, before int, report func(diag.Pos, string, ...any) *diag.Diagnostic) {
	if validator == nil || len(c.dl) > before {
		return
	}
	leaves := p.Leaves()
	for _, l := range leaves {
		if !l.Known {
			continue
		}
		v, err := value.Normalize(l.Value)
		if err != nil {
			continue
		}
		v = schema.Coerce(dst, v)
		err = validator.Validate(v)
		if err == nil {
			continue
		}
		pos := at.Pos()
		if len(leaves) > 1 {
			pos = at.PosIn(l.Line, l.Col, l.EndCol)
		}
		report(pos, "cannot hold %s: %s", show(v), inWords(err))
	}
}

// show renders a value as JSON text for a message, shortened.
func show(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	s := string(b)
	if r := []rune(s); len(r) > 60 {
		s = string(r[:57]) + "..."
	}
	return s
}

// inWords is a validation error without the pointer of a whole value.
func inWords(err error) string {
	return strings.ReplaceAll(strings.TrimPrefix(err.Error(), "/: "), "; /: ", "; ")
}

// reducedFits reports (as W004) what p yields that cannot be written to
// a field whose reducer is not replace: an append or union takes a list
// of the field's items or one item, checked member by member (by key, a
// union's items must have it); merge takes an object whose members the
// field's object holds, deep_merge one whose nested objects it merges
// the same way; a typed reducer takes its type; an expression reducer
// must give what the field holds from what the node writes.
func (b *builder) reducedFits(field string, f *Field, p *expression.Program, at config.Value) {
	spec := f.Reducer.Spec
	report := func(pos diag.Pos, format string, args ...any) *diag.Diagnostic {
		return b.c.dl.Errorf(diag.CodeWriteType, pos, b.path, format, args...)
	}
	// max keeps the larger, min the smaller: a number the update may be
	// that its bound refuses is kept when it wins, or when the field has
	// no value yet
	if spec.Name == "max" || spec.Name == "min" {
		for _, l := range p.Numbers() {
			hi := f.Shape.Maximum != nil && (l.Value > *f.Shape.Maximum || f.Shape.ExclusiveMaximum && l.Value == *f.Shape.Maximum)
			lo := f.Shape.Minimum != nil && (l.Value < *f.Shape.Minimum || f.Shape.ExclusiveMinimum && l.Value == *f.Shape.Minimum)
			// (a field with no value yet takes the update as it is)
			if spec.Name == "max" && hi || spec.Name == "min" && lo || !f.HasDefault && (hi || lo) {
				report(at.PosIn(l.Line, l.Col, l.EndCol), "field %q is %s, but this expression can yield %v, which %s keeps", field, f.Shape.OutOfRange(l.Value), l.Value, spec.Name)
			}
		}
	}
	src := p.Type()
	if chain := p.Shape(); chain != nil && !src.Known() {
		src = chain
	}
	before := len(b.c.dl)
	undecided := func(rule string) {
		if len(b.c.dl) > before {
			return // what was reported says more
		}
		report(at.Pos(), "field %q %s (%s): the validator cannot decide whether the run keeps it so; the run fails when it does not", field, rule, spec.Name).
			Severity = diag.Warning
	}
	if m := f.Shape.MultipleOf; m != nil && (spec.Name == "add" || spec.Name == "max" || spec.Name == "min") && !p.MultipleOf(*m) {
		// current is a multiple of m: the sum (or the update kept) is one
		// only when the update is
		known := true
		for _, l := range p.Leaves() {
			v, ok := l.Value.(int)
			if fv, isF := l.Value.(float64); isF {
				v, ok = int(fv), fv == math.Trunc(fv)
			}
			if !l.Known {
				known = false
				continue
			}
			if ok && float64(v) == math.Trunc(float64(v)/(*m))*(*m) {
				continue
			}
			report(at.PosIn(l.Line, l.Col, l.EndCol), "field %q is a multiple of %v, but this expression can yield %v, which %s makes a value that is not", field, *m, l.Value, spec.Name)
			return
		}
		if !known {
			defer undecided(fmt.Sprintf("is a multiple of %v, and what this expression gives may not be", *m))
		}
	}
	switch {
	case (spec.Name == "max" || spec.Name == "min") && numericOnly(src.WithoutNull()) && !allKnown(p):
		// the update is kept when it wins (when the field has no value
		// yet, as it is): max keeps a number above the maximum, min one
		// below the minimum; what the checker cannot bound is said
		bound := *f.Shape
		if spec.Name == "max" && f.HasDefault {
			bound.Minimum, bound.ExclusiveMinimum = nil, false
		}
		if spec.Name == "min" && f.HasDefault {
			bound.Maximum, bound.ExclusiveMaximum = nil, false
		}
		if (bound.Minimum != nil || bound.Maximum != nil) && (!src.Known() || !expression.Within(src.WithoutNull(), &bound)) {
			defer undecided("is " + boundsWords(&bound) + ", and what this expression gives may pass that")
		}
	case spec.Name == "add" && numericOnly(src.WithoutNull()):
		// what the sum reaches is the data's: said, not passed silently
		u := src.WithoutNull()
		up := f.Shape.Maximum != nil && (u.Maximum == nil || *u.Maximum > 0)
		down := f.Shape.Minimum != nil && (u.Minimum == nil || *u.Minimum < 0)
		if up || down {
			defer undecided("is " + boundsWords(f.Shape) + ", and what this expression adds may take it past that")
		}
	case spec.Appends || spec.Name == "union":
		if b.itemsFit(field, f, p, src, at, report) {
			return
		}
		if f.Shape.MaxItems != nil {
			defer undecided(fmt.Sprintf("holds at most %d items, and this expression adds to them", *f.Shape.MaxItems))
		} else if f.Shape.Unique() && spec.Appends {
			defer undecided("holds no item twice (uniqueItems), and this expression appends what it may hold already (union adds only what it does not)")
		}
	case spec.Name == "merge" || spec.Name == "deep_merge":
		if src.Known() && src.WithoutNull().Is("object") {
			var why []string
			from := ""
			if p.Shape() != nil {
				from = p.Source()
			}
			mergeFits(src.WithoutNull(), f.Shape, from, spec.Name == "deep_merge", 0, &why)
			if len(why) > 0 {
				report(at.Pos(), "field %q (%s) cannot take what this expression gives: %s", field, spec.Name, strings.Join(why, "; "))
				return
			}
		}
	case spec.Name == "expr" && f.Reducer.expr != nil && src.Known():
		// the reducer's expression, given what the node writes
		env := expression.NewEnv().With("current", f.Shape).With("update", src)
		got := f.Reducer.expr.TypeIn(env)
		if why := schema.Fits(got, f.Shape, ""); len(why) > 0 && got.Known() {
			if t, ok := oneType(got.WithoutNull()); ok && t == "number" && !f.Shape.Takes("number") && f.Shape.Allows("integer") {
				report(at.Pos(), "field %q takes %s only, but its reducer (%s) gives a number that may have a fraction from what this expression yields (%s)",
					field, f.Shape.Describe(), f.Reducer.expr.Source(), src.Describe())
			} else {
				report(at.Pos(), "field %q cannot hold what its reducer (%s) gives from what this expression yields (%s): %s",
					field, f.Reducer.expr.Source(), src.Describe(), strings.Join(why, "; "))
			}
			return
		}
	}
	got := resultType(p)
	if t, ok := oneType(src.WithoutNull()); got == "" && ok && len(p.Branches()) <= 1 {
		got = t
	}
	if got == "" {
		// a choice is typed any when its branches differ: each branch is
		// judged as the whole would be
		if bs := p.Branches(); len(bs) > 1 {
			for _, br := range bs {
				if br.Type == "" || br.Type == "null" {
					continue
				}
				if want, fits := reducedTakes(f, br.Type, br.Type != "number"); !fits {
					report(at.PosIn(br.Line, br.Col, br.EndCol), "field %q takes %s, but this branch yields %s", field, want, article(br.Type))
				}
			}
		}
		return
	}
	if want, fits := reducedTakes(f, got, p.Whole() || src.WithoutNull().Is("integer")); !fits {
		report(at.Pos(), "field %q takes %s, but this expression yields %s", field, want, article(got))
	}
}

// itemsFit checks what an append or union adds: a list's items, or one
// item, against the field's items, member by member, and known items
// against the items' schema. It returns whether it reported.
func (b *builder) itemsFit(field string, f *Field, p *expression.Program, src *schema.Shape, at config.Value, report func(diag.Pos, string, ...any) *diag.Diagnostic) bool {
	path := "the value"
	if p.Shape() != nil {
		path = p.Source()
	}
	item := src
	list := src.WithoutNull().Is("array") || src.Items != nil
	if list {
		item, path = src.WithoutNull().Items, path+"[]"
		if p.Shape() == nil {
			path = "an item"
		}
	}
	scalar := !list && !slices.ContainsFunc(item.Types, func(t string) bool { return t == "object" || t == "array" })
	if (list || scalar) && src.MayBeNull() && !f.Shape.Items.Allows("null") {
		// null, the whole value, is one item (as the engine appends it),
		// which the items must take
		what := "the value"
		if p.Shape() != nil {
			what = p.Source()
		}
		report(at.Pos(), "the items of field %q cannot hold what this expression gives: %s may be null, which is added as an item, where the items take %s",
			field, what, f.Shape.Items.Describe())
		return true
	}
	if item != nil && item.Known() && !scalar {
		// (one item of a scalar type is judged by its type, below)
		if why := schema.Fits(item, f.Shape.Items, path); len(why) > 0 {
			report(at.Pos(), "the items of field %q cannot hold what this expression gives: %s", field, strings.Join(why, "; "))
			return true
		}
	}
	if key := f.Reducer.Key; key != "" && item != nil && item.WithoutNull().Is("object") {
		it := item.WithoutNull()
		if _, has := it.Props[key]; !has && (it.Closed || len(it.Props) > 0) {
			report(at.Pos(), "field %q is a union by %q, but the items this expression gives have no %q: the run fails on them", field, key, key).
				Suggestion = diag.Suggest(key, it.Order)
			return true
		} else if has && !slices.Contains(it.Required, key) {
			report(at.Pos(), "field %q is a union by %q, but the items this expression gives may lack %q: the run fails on them", field, key, key)
			return true
		}
	}
	// known items against the items' own schema (their list's rules
	// depend on what the field holds already)
	v, known := p.Value()
	if !known || f.Shape.Items == nil {
		return false
	}
	items := []any{v}
	if l, ok := v.([]any); ok && list {
		items = l
	}
	validator := f.Items
	if validator == nil {
		return false
	}
	for i, it := range items {
		nv, err := value.Normalize(it)
		if err != nil {
			continue
		}
		nv = schema.Coerce(f.Shape.Items, nv)
		if err := validator.Validate(nv); err != nil {
			report(at.Pos(), "the items of field %q cannot hold item %d of this expression, %s: %s", field, i+1, show(nv), inWords(err))
			return true
		}
	}
	return false
}

// mergeFits lists how merging an object of shape src into field dst
// (deep: nested objects merged too) may make a value dst does not hold.
func mergeFits(src, dst *schema.Shape, path string, deep bool, depth int, why *[]string) {
	if dst == nil || !dst.Known() || depth > 16 {
		return
	}
	d := dst.WithoutNull()
	for _, name := range src.Order {
		sp := src.Props[name]
		at := name
		if path != "" {
			at = path + "." + name
		}
		dp, declared := d.Props[name]
		if !declared {
			if e := d.Extra(); e != nil {
				*why = append(*why, schema.Fits(sp, e, at)...)
			} else if d.Closed {
				*why = append(*why, fmt.Sprintf("it sets %q, which the field does not declare (additionalProperties: false)", name))
			}
			continue
		}
		if deep && sp != nil && sp.WithoutNull().Is("object") && dp != nil && dp.WithoutNull().Is("object") {
			mergeFits(sp.WithoutNull(), dp, at, deep, depth+1, why)
			continue
		}
		*why = append(*why, schema.Fits(sp, dp, at)...)
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

// resultType names the JSON type of what p yields ("" when it cannot
// tell): its checked type, or number for one known to give numbers.
func resultType(p *expression.Program) string {
	t := jsonType(p.ResultType())
	if (t == "" || t == "integer" || t == "number") && p.Number() {
		// (what the operands are decides over the checker's type, which
		// is the first operand's for max and min)
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
	case "null":
		return "null"
	}
	return "a " + t
}
