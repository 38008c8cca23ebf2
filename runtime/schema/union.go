// Shapes as the types of values an expression computes: unions of JSON
// types (null among them), narrowed and joined as the expression's
// branches go.

package schema

import (
	"maps"
	"slices"
)

// Of is the shape of a value of one of the JSON types given (no types:
// any value).
func Of(types ...string) *Shape { return &Shape{Types: slices.Clone(types)} }

// Known reports whether the shape names its types: a value of an unknown
// type (a field whose schema names none) is not judged.
func (s *Shape) Known() bool { return s != nil && len(s.Types) > 0 }

// MayBeNull reports whether a value of the shape may be null: null is
// among its types (alone too), or its enum lists null.
func (s *Shape) MayBeNull() bool {
	if s == nil {
		return false
	}
	if slices.Contains(s.Types, "null") {
		return true
	}
	return len(s.Types) == 0 && s.Enum != nil && slices.Contains(s.Enum, nil)
}

// IsNull reports whether null is the only value of the shape.
func (s *Shape) IsNull() bool {
	return s != nil && len(s.Types) == 1 && s.Types[0] == "null"
}

// WithoutNull is s where null is ruled out (a test found the value not
// null): null leaves its types and its enum. A shape that is only null
// has no value left, and is then unknown.
func (s *Shape) WithoutNull() *Shape {
	if !s.MayBeNull() {
		return s
	}
	if s.IsNull() {
		return &Shape{}
	}
	c := *s
	c.Types = slices.DeleteFunc(slices.Clone(s.Types), func(t string) bool { return t == "null" })
	if c.Enum != nil {
		c.Enum = slices.DeleteFunc(slices.Clone(s.Enum), func(v any) bool { return v == nil })
	}
	return &c
}

// OrNull is s with null among its types.
func (s *Shape) OrNull() *Shape {
	if s == nil || !s.Known() || s.MayBeNull() {
		return s
	}
	c := *s
	c.Types = append(slices.Clone(s.Types), "null")
	if c.Enum != nil {
		c.Enum = append(slices.Clone(s.Enum), nil)
	}
	return &c
}

// Extra is the shape of the properties an object's schema does not name
// (its additionalProperties schema), nil when it gives none.
func (s *Shape) Extra() *Shape {
	if s == nil {
		return nil
	}
	return s.extra
}

// Unique reports whether the shape is a list whose items must differ
// (uniqueItems), or are known to.
func (s *Shape) Unique() bool { return s != nil && s.unique }

// Distinct is the shape of a list s whose items are known to differ.
func Distinct(s *Shape) *Shape {
	c := *s
	c.unique = true
	return &c
}

// Union is the shape of a value that is of shape a or of shape b: their
// types together, and of what both state, what holds for either (an
// object's members one by one, a member required by both, a list's
// items, an enum of both, the wider bounds). Either unknown makes the
// union unknown.
func Union(a, b *Shape) *Shape {
	switch {
	case a == nil || b == nil || !a.Known() || !b.Known():
		return &Shape{}
	case a == b:
		return a
	}
	u := &Shape{Types: slices.Clone(a.Types)}
	for _, t := range b.Types {
		if !slices.Contains(u.Types, t) {
			u.Types = append(u.Types, t)
		}
	}
	// integer is a number: both together are a number
	if slices.Contains(u.Types, "integer") && slices.Contains(u.Types, "number") {
		u.Types = slices.DeleteFunc(u.Types, func(t string) bool { return t == "integer" })
	}
	if a.Enum != nil && b.Enum != nil {
		u.Enum = slices.Clone(a.Enum)
		for _, v := range b.Enum {
			if !slices.ContainsFunc(u.Enum, func(e any) bool { return e == v }) {
				u.Enum = append(u.Enum, v)
			}
		}
	} else if a.Enum != nil && b.IsNull() || b.Enum != nil && a.IsNull() {
		// an enum or null: the enum with null
		e := a.Enum
		if e == nil {
			e = b.Enum
		}
		u.Enum = append(slices.Clone(e), nil)
	}
	ao, bo := a.mayBe("object"), b.mayBe("object")
	switch {
	case ao && bo:
		u.Props = map[string]*Shape{}
		for name, p := range a.Props {
			if q, ok := b.Props[name]; ok {
				u.Props[name] = Union(p, q)
			} else if !b.Closed {
				u.Props[name] = &Shape{}
			} else {
				u.Props[name] = p
			}
		}
		for name, q := range b.Props {
			if _, ok := u.Props[name]; !ok {
				if a.Closed {
					u.Props[name] = q
				} else {
					u.Props[name] = &Shape{}
				}
			}
		}
		u.Order = slices.Sorted(maps.Keys(u.Props))
		u.Closed = a.Closed && b.Closed
		for _, r := range a.Required {
			if slices.Contains(b.Required, r) {
				u.Required = append(u.Required, r)
			}
		}
	case ao:
		u.Props, u.Order, u.Closed, u.Required, u.extra = a.Props, a.Order, a.Closed, a.Required, a.extra
	case bo:
		u.Props, u.Order, u.Closed, u.Required, u.extra = b.Props, b.Order, b.Closed, b.Required, b.extra
	}
	switch al, bl := a.mayBe("array"), b.mayBe("array"); {
	case al && bl:
		u.Items = Union(a.Items, b.Items)
	case al:
		u.Items = a.Items
	case bl:
		u.Items = b.Items
	}
	if a.mayBe("number") || a.mayBe("integer") {
		if b.mayBe("number") || b.mayBe("integer") {
			u.Minimum, u.ExclusiveMinimum = looser(a.Minimum, a.ExclusiveMinimum, b.Minimum, b.ExclusiveMinimum, -1)
			u.Maximum, u.ExclusiveMaximum = looser(a.Maximum, a.ExclusiveMaximum, b.Maximum, b.ExclusiveMaximum, 1)
		} else {
			u.Minimum, u.ExclusiveMinimum, u.Maximum, u.ExclusiveMaximum = a.Minimum, a.ExclusiveMinimum, a.Maximum, a.ExclusiveMaximum
		}
	} else if b.mayBe("number") || b.mayBe("integer") {
		u.Minimum, u.ExclusiveMinimum, u.Maximum, u.ExclusiveMaximum = b.Minimum, b.ExclusiveMinimum, b.Maximum, b.ExclusiveMaximum
	}
	as, bs := a.mayBe("string"), b.mayBe("string")
	switch {
	case as && bs:
		if a.Pattern == b.Pattern {
			u.Pattern, u.re = a.Pattern, a.re
		}
		u.MinLength = min(a.MinLength, b.MinLength)
		if a.MaxLength != nil && b.MaxLength != nil {
			m := max(*a.MaxLength, *b.MaxLength)
			u.MaxLength = &m
		}
	case as:
		u.Pattern, u.re, u.MinLength, u.MaxLength = a.Pattern, a.re, a.MinLength, a.MaxLength
	case bs:
		u.Pattern, u.re, u.MinLength, u.MaxLength = b.Pattern, b.re, b.MinLength, b.MaxLength
	}
	return u
}

// mayBe reports whether a value of the shape may be of JSON type t.
func (s *Shape) mayBe(t string) bool { return s != nil && slices.Contains(s.Types, t) }

// looser is the wider of two bounds (dir -1: the lower, 1: the upper);
// none on either side is no bound.
func looser(a *float64, ax bool, b *float64, bx bool, dir float64) (*float64, bool) {
	if a == nil || b == nil {
		return nil, false
	}
	switch {
	case *a == *b:
		return a, ax && bx
	case (*a-*b)*dir > 0:
		return a, ax
	}
	return b, bx
}
