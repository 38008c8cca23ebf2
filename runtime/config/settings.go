package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Settings reads a block of settings (a mapping) through its
// declaration: each accessor names a declared field, and asking for one
// that is not declared is a programmer error that panics, so the
// declaration stays the one list of what a block may hold.
//
// The file format's schema, generated from the same declaration, has
// already reported values of the wrong type; an accessor reads such a
// value as absent.
type Settings struct {
	v      Value
	fields []Field
}

// NewSettings reads v as a block declared by fields.
func NewSettings(v Value, fields []Field) Settings { return Settings{v: v, fields: fields} }

// Block is the mapping the settings are read from.
func (s Settings) Block() Value { return s.v }

func (s Settings) field(name string, types ...Type) Field {
	f, ok := Lookup(s.fields, name)
	if !ok {
		panic(fmt.Sprintf("config: setting %q is not declared", name))
	}
	if len(types) > 0 && !contains(types, f.Type) {
		panic(fmt.Sprintf("config: setting %q is declared as %s", name, f.TypeName()))
	}
	return f
}

func contains(ts []Type, t Type) bool {
	for _, x := range ts {
		if x == t {
			return true
		}
	}
	return false
}

// Value returns a declared setting as written (the zero Value when
// absent).
func (s Settings) Value(name string) Value {
	s.field(name)
	return s.v.Get(name)
}

// Key returns the key of a declared setting, for positions.
func (s Settings) Key(name string) Value {
	s.field(name)
	return s.v.KeyOf(name)
}

// Has reports whether a declared setting is present.
func (s Settings) Has(name string) bool { return s.Value(name).Exists() }

// String returns a string setting (or an expression, condition or
// template as text).
func (s Settings) String(name string) (string, bool) {
	s.field(name, TypeString, TypeExpression, TypeCondition, TypeTemplate, TypeRef)
	v := s.v.Get(name)
	if !v.IsScalar() {
		return "", false
	}
	return v.Text(), true
}

// Int returns an integer setting.
func (s Settings) Int(name string) (int, bool) {
	s.field(name, TypeInteger)
	v := s.v.Get(name)
	n, err := strconv.Atoi(v.Text())
	if !v.IsScalar() || err != nil {
		return 0, false
	}
	return n, true
}

// Float returns a number setting.
func (s Settings) Float(name string) (float64, bool) {
	s.field(name, TypeNumber, TypeInteger)
	v := s.v.Get(name)
	var x float64
	if !v.IsScalar() || v.Decode(&x) != nil {
		return 0, false
	}
	return x, true
}

// Bool returns a boolean setting.
func (s Settings) Bool(name string) (bool, bool) {
	s.field(name, TypeBool)
	v := s.v.Get(name)
	var x bool
	if !v.IsScalar() || v.Decode(&x) != nil {
		return false, false
	}
	return x, true
}

// Duration returns a duration setting.
func (s Settings) Duration(name string) (time.Duration, bool) {
	s.field(name, TypeDuration)
	v := s.v.Get(name)
	d, err := time.ParseDuration(strings.ReplaceAll(v.Text(), "µs", "us"))
	if !v.IsScalar() || err != nil {
		return 0, false
	}
	return d, true
}

// Entries returns a map or object setting's entries.
func (s Settings) Entries(name string) []Entry {
	s.field(name, TypeMap, TypeObject, TypeAny)
	return s.v.Get(name).Entries()
}

// Items returns a list setting's items.
func (s Settings) Items(name string) []Value {
	s.field(name, TypeList, TypeAny)
	return s.v.Get(name).Items()
}

// Object returns a declared object setting (or the object form of a
// setting with alternatives) as settings of its own.
func (s Settings) Object(name string) Settings {
	f := s.field(name)
	fields := f.Fields
	for _, a := range f.Alts {
		if a.Type == TypeObject {
			fields = a.Fields
		}
	}
	return Settings{v: s.v.Get(name), fields: fields}
}
