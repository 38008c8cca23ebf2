// Package schema wraps JSON Schema (draft 2020-12, through
// santhosh-tekuri/jsonschema) for state and structured outputs. Besides the
// compiled validator it derives a Shape: the part of a schema Trellis reasons
// about statically (field names, types, item types), which drives the
// expression type environment, "did you mean" on field names, value coercion
// and a fast exact check for schemas made only of type constraints.
package schema

import (
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Shape is the statically known structure of a schema. Nil or empty Types
// means "any".
type Shape struct {
	Types []string
	// Props are the declared properties of an object, Order their
	// declaration order.
	Props map[string]*Shape
	Order []string
	// Closed is additionalProperties: false.
	Closed bool
	// Required lists required property names.
	Required []string
	Items    *Shape
	// Enum lists the values the schema allows (enum, or const), nil when
	// it does not list them.
	Enum []any
	// Minimum and Maximum bound a number (nil: unbounded); the exclusive
	// forms are recorded with Exclusive set for that side.
	Minimum, Maximum                   *float64
	ExclusiveMinimum, ExclusiveMaximum bool
	// Pattern, MinLength and MaxLength (nil: none) constrain a string.
	Pattern   string
	MinLength int
	MaxLength *int
	// Format is the string format the schema names (email, date-time,
	// ...), which the run asserts; MultipleOf (nil: none) divides a
	// number; MinItems and MaxItems (nil: none) bound a list's length.
	Format     string
	MultipleOf *float64
	MinItems   int
	MaxItems   *int
	// Unmodelled lists the schema's keywords the shape does not model
	// (allOf, a oneOf other than the optional-value idiom, if, not, ...):
	// only the schema itself judges a value against them.
	Unmodelled []string
	// Default is the schema's default, when HasDefault.
	Default    any
	HasDefault bool
	// simple means every keyword of this schema (recursively) is a type
	// constraint (type, properties, required, items, closed objects).
	simple bool
	// exact means the fast check decides every keyword of this schema
	// (recursively): the type constraints, and enums and consts of
	// scalars, patterns Go's regexp reads, string lengths, whole-number
	// bounds, a lone $ref and the optional-value idiom. A value it finds
	// valid is valid; any other goes to the library, which says why.
	exact bool
	// orNull: the shape is the optional-value idiom, anyOf [X, {type:
	// null}], so null is valid whatever X's other keywords say
	orNull bool
	// re is Pattern compiled (nil: no pattern, or one Go cannot read)
	re *regexp.Regexp
	// extra is the shape of the properties Props does not name, when
	// additionalProperties is a schema
	extra *Shape
	// unique is uniqueItems: true
	unique bool
}

// Nullable reports whether the shape names null beside other types: a
// value that may or may not be there.
func (s *Shape) Nullable() bool {
	return s != nil && len(s.Types) > 1 && slices.Contains(s.Types, "null")
}

// NonNull is s without null among its types.
func (s *Shape) NonNull() *Shape {
	if !s.Nullable() {
		return s
	}
	c := *s
	c.Types = slices.DeleteFunc(slices.Clone(s.Types), func(t string) bool { return t == "null" })
	return &c
}

// Exact reports whether the validator's fast check decides the schema
// the shape was derived from (see Shape.exact): a valid value is then
// known valid without the library.
func (s *Shape) Exact() bool { return s != nil && s.exact }

// Is reports whether the shape allows exactly one type, t.
func (s *Shape) Is(t string) bool { return s != nil && len(s.Types) == 1 && s.Types[0] == t }

// Allows reports whether the shape allows type t (an untyped shape allows all).
func (s *Shape) Allows(t string) bool {
	if s == nil || len(s.Types) == 0 {
		return true
	}
	return slices.Contains(s.Types, t) ||
		(t == "integer" && slices.Contains(s.Types, "number")) ||
		(t == "number" && slices.Contains(s.Types, "integer"))
}

// Takes reports whether every value of JSON type t fits the shape's
// types. Unlike Allows, a number (which may have a fraction) does not fit
// a shape that allows integers only.
func (s *Shape) Takes(t string) bool {
	if t == "number" && s != nil && len(s.Types) > 0 && !slices.Contains(s.Types, "number") {
		return false
	}
	return s.Allows(t)
}

// Describe renders the types for messages.
func (s *Shape) Describe() string {
	if s == nil || len(s.Types) == 0 {
		return "any"
	}
	return strings.Join(s.Types, " or ")
}

// Object returns the shape of a closed object with these properties (a nil
// shape is unknown), ordered as given or, without an order, by name:
// an object the runtime makes, with every one of them.
func Object(props map[string]*Shape, order ...string) *Shape {
	if order == nil {
		order = slices.Sorted(maps.Keys(props))
	}
	return &Shape{Types: []string{"object"}, Props: props, Order: order, Closed: true, Required: slices.Clone(order)}
}

// Prop returns the shape of property name, or nil with ok false when the
// object is closed and has no such property.
func (s *Shape) Prop(name string) (*Shape, bool) {
	if s == nil {
		return nil, true
	}
	if p, ok := s.Props[name]; ok {
		return p, true
	}
	return nil, !s.Closed
}

// annotation keywords never change whether a value is valid.
var annotations = map[string]bool{
	"title": true, "description": true, "default": true, "examples": true,
	"$comment": true, "deprecated": true, "readOnly": true, "writeOnly": true,
	"$schema": true, "$id": true, "$anchor": true,
}

// ShapeOf derives the shape of a raw (JSON-decoded) schema. resolve maps a
// $ref to its raw target, or nil when it cannot be resolved.
func ShapeOf(raw any, resolve func(ref string) any) *Shape {
	return shapeOf(raw, resolve, 0)
}

func shapeOf(raw any, resolve func(string) any, depth int) *Shape {
	s := &Shape{}
	m, ok := raw.(map[string]any)
	if !ok || depth > 32 {
		// true / false / malformed: nothing known
		return s
	}
	simple, exact := true, true
	if ref, ok := m["$ref"].(string); ok {
		// what the reference names, with what stands beside it on top
		// (in 2020-12 both apply)
		var target any
		if resolve != nil {
			target = resolve(ref)
		}
		if target == nil {
			simple, exact = false, false
		} else {
			r := shapeOf(target, resolve, depth+1)
			if onlyBeside(m, "$ref") {
				c := *r
				if d, ok := m["default"]; ok {
					c.Default, c.HasDefault = d, true
				}
				return &c
			}
			*s = *r
			if s.Props != nil {
				s.Props = maps.Clone(s.Props)
			}
			simple, exact = false, false
		}
	}
	for k, v := range m {
		switch k {
		case "type":
			switch t := v.(type) {
			case string:
				s.Types = []string{t}
			case []any:
				for _, x := range t {
					if str, ok := x.(string); ok {
						s.Types = append(s.Types, str)
					}
				}
			}
		case "properties":
			props, _ := v.(map[string]any)
			if s.Props == nil {
				s.Props = make(map[string]*Shape, len(props))
			}
			for name, p := range props {
				c := shapeOf(p, resolve, depth+1)
				s.Props[name] = c
				simple = simple && c.simple
				exact = exact && c.exact
			}
		case "additionalProperties":
			b, isBool := v.(bool)
			s.Closed = isBool && !b
			simple = simple && isBool
			if !isBool {
				s.extra = shapeOf(v, resolve, depth+1)
				exact = exact && s.extra.exact
			}
		case "required":
			s.Required = slices.Clone(s.Required)
			for _, x := range asSlice(v) {
				if str, ok := x.(string); ok {
					s.Required = append(s.Required, str)
				}
			}
		case "items":
			s.Items = shapeOf(v, resolve, depth+1)
			simple = simple && s.Items.simple
			exact = exact && s.Items.exact
		case "uniqueItems":
			simple = false
			b, isBool := v.(bool)
			s.unique = isBool && b
			exact = exact && isBool
		case "default":
			s.Default, s.HasDefault = v, true
		case "enum":
			// beside a const, the shape keeps one of them
			exact = exact && s.Enum == nil
			s.Enum = slices.Clone(asSlice(v))
			simple = false
			_, isList := v.([]any)
			exact = exact && isList && !slices.ContainsFunc(s.Enum, func(e any) bool { return !plainScalar(e) })
		case "const":
			exact = exact && s.Enum == nil
			s.Enum = []any{v}
			simple = false
			exact = exact && plainScalar(v)
		case "pattern":
			simple = false
			s.Pattern, _ = v.(string)
			s.re = s.PatternRE()
			exact = exact && s.re != nil
		case "minLength", "maxLength":
			simple = false
			f, ok := number(v)
			ok = ok && f >= 0 && f == math.Trunc(f) && f < 1<<31
			if ok {
				if n := int(f); k == "minLength" {
					s.MinLength = n
				} else {
					s.MaxLength = &n
				}
			}
			exact = exact && ok
		case "minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum":
			simple = false
			f, ok := number(v)
			// a bound is compared exactly when it is a whole number a
			// float64 holds exactly (the library compares as rationals:
			// 0.1 as a bound is not the float 0.1)
			exact = exact && ok && fitsInt(f)
			if !ok {
				break
			}
			if strings.HasSuffix(k, "inimum") && s.Minimum != nil || strings.HasSuffix(k, "aximum") && s.Maximum != nil {
				// both forms of a bound: the shape keeps one
				exact = false
			}
			switch k {
			case "minimum":
				s.Minimum = &f
			case "exclusiveMinimum":
				s.Minimum, s.ExclusiveMinimum = &f, true
			case "maximum":
				s.Maximum = &f
			default:
				s.Maximum, s.ExclusiveMaximum = &f, true
			}
		case "$ref":
			// resolved above
		case "anyOf", "oneOf":
			simple = false
			r := orNull(v, resolve, depth)
			if r == nil {
				s.Unmodelled = append(s.Unmodelled, k)
			}
			if r != nil {
				s.Types, s.Props, s.Closed, s.Required, s.Items, s.Enum = r.Types, r.Props, r.Closed, r.Required, r.Items, r.Enum
				s.Minimum, s.Maximum, s.ExclusiveMinimum, s.ExclusiveMaximum = r.Minimum, r.Maximum, r.ExclusiveMinimum, r.ExclusiveMaximum
				s.Pattern, s.MinLength, s.MaxLength, s.re, s.extra, s.unique = r.Pattern, r.MinLength, r.MaxLength, r.re, r.extra, r.unique
				s.Format, s.MultipleOf, s.MinItems, s.MaxItems = r.Format, r.MultipleOf, r.MinItems, r.MaxItems
				s.Unmodelled = append(s.Unmodelled, r.Unmodelled...)
				s.orNull = true
			}
			// the idiom is decided exactly when nothing but annotations
			// stands beside it (X's keywords replace the shape's own)
			exact = exact && r != nil && r.exact && onlyBeside(m, k)
		case "$defs", "definitions":
			// definitions do not constrain the value itself
		case "format":
			simple, exact = false, false
			s.Format, _ = v.(string)
		case "multipleOf":
			simple, exact = false, false
			if f, ok := number(v); ok && f > 0 {
				s.MultipleOf = &f
			}
		case "minItems", "maxItems":
			simple, exact = false, false
			if f, ok := number(v); ok && f >= 0 && f == math.Trunc(f) && f < 1<<31 {
				if n := int(f); k == "minItems" {
					s.MinItems = n
				} else {
					s.MaxItems = &n
				}
			}
		default:
			if !annotations[k] {
				simple, exact = false, false
				s.Unmodelled = append(s.Unmodelled, k)
			}
		}
	}
	slices.Sort(s.Unmodelled)
	if s.Props != nil {
		s.Order = make([]string, 0, len(s.Props))
		for name := range s.Props {
			s.Order = append(s.Order, name)
		}
		slices.Sort(s.Order)
	}
	s.simple = simple
	s.exact = exact
	return s
}

// onlyBeside reports whether every keyword of m but k is an annotation
// or holds definitions.
func onlyBeside(m map[string]any, k string) bool {
	for o := range m {
		if o != k && !annotations[o] && o != "$defs" && o != "definitions" {
			return false
		}
	}
	return true
}

// plainScalar reports whether an enum's value is one the fast check
// compares exactly: null, a boolean, a string, or a whole number a
// float64 holds exactly.
func plainScalar(v any) bool {
	switch x := v.(type) {
	case nil, bool, string:
		return true
	case int:
		return x > -(1<<53) && x < 1<<53
	case float64:
		return fitsInt(x)
	}
	return false
}

// orNull reads the optional-value idiom, anyOf [X, {type: null}], as X's
// shape with null added to its types; nil for any other combination.
func orNull(v any, resolve func(string) any, depth int) *Shape {
	branches := asSlice(v)
	if len(branches) != 2 {
		return nil
	}
	for i, b := range branches {
		if m, ok := b.(map[string]any); ok && len(m) == 1 && m["type"] == "null" {
			r := shapeOf(branches[1-i], resolve, depth+1)
			if len(r.Types) == 0 || slices.Contains(r.Types, "null") {
				return nil
			}
			r.Types = append(slices.Clip(r.Types), "null")
			return r
		}
	}
	return nil
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

// Strings returns the strings an enum allows (null aside), and whether
// the shape is such an enum: one that lists its values, all strings.
func (s *Shape) Strings() ([]string, bool) {
	if s == nil || len(s.Enum) == 0 {
		return nil, false
	}
	var out []string
	for _, v := range s.Enum {
		switch x := v.(type) {
		case string:
			out = append(out, x)
		case nil:
		default:
			return nil, false
		}
	}
	return out, len(out) > 0
}

// OutOfRange describes how a number breaks the shape's bounds, such as
// "at least 0" ("" when it does not, or v is not a number).
func (s *Shape) OutOfRange(v any) string {
	x, ok := number(v)
	if s == nil || !ok {
		return ""
	}
	if m := s.Minimum; m != nil && (x < *m || s.ExclusiveMinimum && x == *m) {
		if s.ExclusiveMinimum {
			return "more than " + strconv.FormatFloat(*m, 'g', -1, 64)
		}
		return "at least " + strconv.FormatFloat(*m, 'g', -1, 64)
	}
	if m := s.Maximum; m != nil && (x > *m || s.ExclusiveMaximum && x == *m) {
		if s.ExclusiveMaximum {
			return "less than " + strconv.FormatFloat(*m, 'g', -1, 64)
		}
		return "at most " + strconv.FormatFloat(*m, 'g', -1, 64)
	}
	return ""
}

// TextRule says which of a string shape's rules (enum, pattern, length)
// text breaks, in words ("" when it keeps them all, or the shape has
// none). A pattern Go's regexp cannot read is not judged.
func (s *Shape) TextRule(text string) string {
	if s == nil {
		return ""
	}
	if values, ok := s.Strings(); ok && !slices.Contains(values, text) {
		return "is one of " + quoteList(values)
	}
	if n := utf8.RuneCountInString(text); n < s.MinLength {
		return fmt.Sprintf("is at least %d characters long", s.MinLength)
	} else if s.MaxLength != nil && n > *s.MaxLength {
		return fmt.Sprintf("is at most %d characters long", *s.MaxLength)
	}
	if re := s.PatternRE(); re != nil && !re.MatchString(text) {
		return fmt.Sprintf("matches the pattern %q", s.Pattern)
	}
	return ""
}

// PatternRE is the shape's pattern compiled, nil when it has none or Go's
// regexp cannot read it.
func (s *Shape) PatternRE() *regexp.Regexp {
	if s == nil || s.Pattern == "" {
		return nil
	}
	re, err := regexp.Compile(s.Pattern)
	if err != nil {
		return nil
	}
	return re
}

func quoteList(vs []string) string {
	q := make([]string, len(vs))
	for i, v := range vs {
		q[i] = strconv.Quote(v)
	}
	return strings.Join(q, ", ")
}

// number reads a JSON number of any Go type the decoders produce.
func number(v any) (float64, bool) {
	switch x := v.(type) {
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}
