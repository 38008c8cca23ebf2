// Validating a value against a compiled schema, with a fast path for
// simple shapes, integers checked exactly, and errors in words.

package schema

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v5"
	"github.com/trellisflow/trellis/runtime/config"
)

// Validator checks values against one compiled schema, taking the exact
// fast path when the schema consists of type constraints only.
type Validator struct {
	Shape    *Shape
	compiled *jsonschema.Schema
	// scalars are the scalar types a simple shape allows, by typeBit (all
	// of them when it names no type); zero when the shape is not simple
	scalars uint8
}

// NewValidator pairs a compiled schema with its shape.
func NewValidator(compiled *jsonschema.Schema, shape *Shape) *Validator {
	v := &Validator{Shape: shape, compiled: compiled}
	if shape != nil && shape.simple {
		v.scalars = bitNull | bitBoolean | bitString | bitInteger | bitNumber | bitSimple
		if len(shape.Types) > 0 {
			v.scalars = bitSimple
			for _, t := range shape.Types {
				v.scalars |= typeBits[t]
			}
		}
	}
	return v
}

// The JSON types of scalars, as bits; bitSimple marks a validator whose
// shape is simple.
const (
	bitNull = 1 << iota
	bitBoolean
	bitString
	bitInteger
	bitNumber
	bitSimple
)

var typeBits = map[string]uint8{"null": bitNull, "boolean": bitBoolean, "string": bitString, "integer": bitInteger, "number": bitNumber}

// Validate returns nil when v is valid, else an error describing every
// violation.
func (v *Validator) Validate(x any) error {
	if v.scalars != 0 {
		// a scalar against a simple shape: its type decides
		var bits uint8
		switch n := x.(type) {
		case nil:
			bits = bitNull
		case bool:
			bits = bitBoolean
		case string:
			bits = bitString
		case int:
			bits = bitInteger | bitNumber
		case float64:
			bits = bitNumber
			if fitsInt(n) {
				bits |= bitInteger
			}
		}
		if v.scalars&bits != 0 {
			return nil
		}
	}
	if v.Shape != nil && v.Shape.exact && fastCheck(v.Shape, x) {
		return nil
	}
	if v.compiled == nil {
		return nil
	}
	if err := v.compiled.Validate(x); err != nil {
		return describe(err)
	}
	if causes := v.Shape.wideIntegers(x, "", nil); len(causes) > 0 {
		return &Error{Causes: causes}
	}
	return nil
}

// WideIntegers refuses the whole floats in x, a normalised value, that
// sit where the shape wants an integer but that the state does not take
// as its 64-bit integers (see wideIntegers); nil when there are none.
func (s *Shape) WideIntegers(x any) error {
	if causes := s.wideIntegers(x, "", nil); len(causes) > 0 {
		return &Error{Causes: causes}
	}
	return nil
}

// wideIntegers finds the numbers in integer positions that JSON Schema
// calls integers (a zero fraction) but that the state does not take as
// its 64-bit integers: those outside their range, such as 1e23, and
// floats of 2^53 or more, which may be a rounding of the integer meant.
func (s *Shape) wideIntegers(x any, at string, out []Cause) []Cause {
	if s == nil {
		return out
	}
	switch v := x.(type) {
	case float64:
		if slices.Contains(s.Types, "integer") && !slices.Contains(s.Types, "number") && v == math.Trunc(v) && !fitsInt(v) {
			msg := fmt.Sprintf("%v is outside the 64-bit integer range [-9223372036854775808, 9223372036854775807]", v)
			if v > -(1<<63) && v < 1<<63 {
				msg = fmt.Sprintf("%v is a float of 2^53 or more, which may be a rounding of the integer meant: write the integer in full", v)
			}
			out = append(out, Cause{Pointer: at, Keyword: "type", Message: msg})
		}
	case []any:
		for i, e := range v {
			out = s.Items.wideIntegers(e, at+"/"+strconv.Itoa(i), out)
		}
	case map[string]any:
		for k, e := range v {
			if p := s.Props[k]; p != nil {
				out = p.wideIntegers(e, at+"/"+config.Escape(k), out)
			}
		}
	}
	return out
}

// fitsInt reports whether f is a whole number that stands for an int
// exactly: below 2^53 in magnitude, where every integer is exactly a
// float64. A larger float may be a rounding of the integer meant
// (9007199254740993.0 reads as 9007199254740992, and 2^63 is what
// 9223372036854775808 and larger read as): an integer written in full
// decodes as an int, exactly, and a float that size is refused where an
// integer is due rather than taken silently.
func fitsInt(f float64) bool {
	return f == math.Trunc(f) && f > -(1<<53) && f < 1<<53
}

// Error is a validation failure: one line per violated constraint, each
// with the JSON pointer of the offending value inside the validated one
// (none when it is the validated value itself).
type Error struct {
	Causes []Cause
}

// Cause is one violated constraint.
type Cause struct {
	Pointer string // JSON pointer into the validated value
	Message string
	// Keyword is the schema keyword that failed (type, required, ...).
	Keyword string
}

func (e *Error) Error() string {
	parts := make([]string, len(e.Causes))
	for i, c := range e.Causes {
		parts[i] = c.String()
	}
	return strings.Join(parts, "; ")
}

// String is the cause as a message says it: the pointer of the value
// it is about, unless that is the validated value itself (whose name the
// message around it gives), and what is wrong.
func (c Cause) String() string {
	if c.Pointer == "" {
		return c.Message
	}
	return c.Pointer + ": " + c.Message
}

// Under is the cause as it reads about the value at pointer prefix (a
// field of the validated object, /NAME): its pointer made relative to
// it. ok is false when the cause is not about that value or inside it.
func (c Cause) Under(prefix string) (Cause, bool) {
	if c.Pointer == prefix {
		c.Pointer = ""
		return c, true
	}
	rest, ok := strings.CutPrefix(c.Pointer, prefix)
	if !ok || !strings.HasPrefix(rest, "/") {
		return c, false
	}
	c.Pointer = rest
	return c, true
}

func describe(err error) error {
	ve, ok := err.(*jsonschema.ValidationError)
	if !ok {
		return err
	}
	out := &Error{}
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			kw := e.KeywordLocation
			if i := strings.LastIndexByte(kw, '/'); i >= 0 {
				kw = kw[i+1:]
			}
			out.Causes = append(out.Causes, Cause{Pointer: e.InstanceLocation, Message: e.Message, Keyword: kw})
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	return out
}

// fastCheck reports whether x is surely valid against an exact shape.
// False is no verdict: x may hold a Go type the check does not know, or
// a number it cannot compare exactly, and the library decides.
func fastCheck(s *Shape, x any) bool {
	switch x.(type) {
	case nil:
		if s.orNull {
			return true
		}
	case bool, string, int, float64, []any, map[string]any:
	default:
		return false
	}
	if len(s.Types) > 0 {
		matched := false
		for _, t := range s.Types {
			m, known := typeMatches(t, x)
			if !known {
				return false
			}
			if m {
				matched = true
				break
			}
		}
		if !matched {
			return false
		}
	}
	if s.Enum != nil && !slices.ContainsFunc(s.Enum, func(e any) bool { return sameScalar(e, x) }) {
		return false
	}
	switch v := x.(type) {
	case string:
		if s.MinLength > 0 || s.MaxLength != nil {
			n := utf8.RuneCountInString(v)
			if n < s.MinLength || s.MaxLength != nil && n > *s.MaxLength {
				return false
			}
		}
		if s.re != nil && !s.re.MatchString(v) {
			return false
		}
	case int, float64:
		if s.Minimum != nil || s.Maximum != nil {
			f, ok := exactFloat(v)
			if !ok {
				return false
			}
			if m := s.Minimum; m != nil && (f < *m || s.ExclusiveMinimum && f == *m) {
				return false
			}
			if m := s.Maximum; m != nil && (f > *m || s.ExclusiveMaximum && f == *m) {
				return false
			}
		}
	case []any:
		if s.Items != nil {
			for _, e := range v {
				if !fastCheck(s.Items, e) {
					return false
				}
			}
		}
		if s.unique && !uniqueStrings(v) {
			return false
		}
	case map[string]any:
		for _, r := range s.Required {
			if _, ok := v[r]; !ok {
				return false
			}
		}
		if s.Props != nil || s.Closed || s.extra != nil {
			for k, e := range v {
				p, ok := s.Props[k]
				switch {
				case ok:
				case s.Closed:
					return false
				case s.extra != nil:
					p = s.extra
				default:
					continue
				}
				if !fastCheck(p, e) {
					return false
				}
			}
		}
	}
	return true
}

// uniqueStrings reports whether l holds strings only, no two the same
// (a list of other values is left to the library).
func uniqueStrings(l []any) bool {
	seen := make(map[string]struct{}, len(l))
	for _, e := range l {
		s, ok := e.(string)
		if !ok {
			return false
		}
		if _, dup := seen[s]; dup {
			return false
		}
		seen[s] = struct{}{}
	}
	return true
}

// exactFloat is a number as the float64 that is exactly it, when there
// is one: any float64, an int below 2^53 in magnitude.
func exactFloat(x any) (float64, bool) {
	switch n := x.(type) {
	case int:
		return float64(n), n > -(1<<53) && n < 1<<53
	case float64:
		return n, !math.IsNaN(n) && !math.IsInf(n, 0)
	}
	return 0, false
}

// sameScalar reports whether x is surely the enum's value e (a
// plainScalar): JSON equality, a number equal to another whatever its
// Go type.
func sameScalar(e, x any) bool {
	switch ev := e.(type) {
	case nil:
		return x == nil
	case bool:
		xv, ok := x.(bool)
		return ok && xv == ev
	case string:
		xv, ok := x.(string)
		return ok && xv == ev
	}
	ef, ok := exactFloat(e)
	if !ok {
		return false
	}
	xf, ok := exactFloat(x)
	return ok && xf == ef
}

func typeMatches(t string, x any) (match, known bool) {
	switch v := x.(type) {
	case nil:
		return t == "null", true
	case bool:
		return t == "boolean", true
	case string:
		return t == "string", true
	case int:
		return t == "integer" || t == "number", true
	case float64:
		if t == "number" {
			return true, true
		}
		return t == "integer" && fitsInt(v), true
	case []any:
		return t == "array", true
	case map[string]any:
		return t == "object", true
	}
	return false, false
}
