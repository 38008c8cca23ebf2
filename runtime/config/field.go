package config

import (
	"fmt"
	"slices"
	"strings"
)

// Type is what a Field holds.
type Type int

// The types of fields. Expression, Condition and Template are strings to
// the file format; their type tells the reader (and the docs) how the
// string is compiled.
const (
	TypeAny Type = iota
	TypeString
	TypeInteger
	TypeNumber
	TypeBool
	TypeDuration
	TypeExpression
	TypeCondition
	TypeTemplate
	TypeObject
	TypeMap
	TypeList
	TypeRef
)

// Field declares one setting: its name, what it holds, its documentation
// and its constraints. One declaration drives the JSON Schema of the file
// format (editors complete and check from it), the Markdown reference and
// the typed accessors of Settings.
type Field struct {
	Name string
	Doc  string
	Type Type
	// Required fields must be present.
	Required bool
	// Fields are an object's settings; the object allows no others unless
	// Open.
	Fields []Field
	Open   bool
	// Elem is what a map's values or a list's items hold (nil: anything).
	Elem *Field
	// Alts are the alternatives a value may take (any one of them).
	Alts []Field
	// Def names the shared definition a TypeRef field refers to.
	Def string
	// Const and Enum restrict the values.
	Const    any
	HasConst bool
	Enum     []any
	// Numeric bounds, lengths and other constraints.
	Minimum, Maximum    *float64
	MinLength, MinItems int
	MinProps            int
	Pattern             string
	Unique              bool
	// Names constrains a map's keys (a TypeRef or TypeString field).
	Names *Field
	// Types lists the JSON types of a field that may hold more than one
	// (a schema given inline or as a path: object or string).
	Types []string
	// AtMostOne names settings of an object of which at most one may be
	// given (an edge's to, branch and route).
	AtMostOne []string
}

// String declares a string setting.
func String(name, doc string) Field { return Field{Name: name, Doc: doc, Type: TypeString} }

// Integer declares an integer setting.
func Integer(name, doc string) Field { return Field{Name: name, Doc: doc, Type: TypeInteger} }

// Number declares a number setting.
func Number(name, doc string) Field { return Field{Name: name, Doc: doc, Type: TypeNumber} }

// Bool declares a boolean setting.
func Bool(name, doc string) Field { return Field{Name: name, Doc: doc, Type: TypeBool} }

// Duration declares a duration setting (250ms, 2s, 1m30s), checked
// against the "duration" definition.
func Duration(name, doc string) Field {
	return Field{Name: name, Doc: doc, Type: TypeDuration, Def: "duration"}
}

// Expression declares a string holding an expression.
func Expression(name, doc string) Field {
	return Field{Name: name, Doc: doc, Type: TypeExpression}
}

// Condition declares a string holding a boolean expression.
func Condition(name, doc string) Field { return Field{Name: name, Doc: doc, Type: TypeCondition} }

// Template declares a string holding a text/template.
func Template(name, doc string) Field { return Field{Name: name, Doc: doc, Type: TypeTemplate} }

// Object declares a mapping of the given settings, and no others.
func Object(name, doc string, fields ...Field) Field {
	return Field{Name: name, Doc: doc, Type: TypeObject, Fields: fields}
}

// Map declares a mapping from free keys to values of elem (nil: any).
func Map(name, doc string, elem *Field) Field {
	return Field{Name: name, Doc: doc, Type: TypeMap, Elem: elem}
}

// List declares a sequence of elem (nil: any).
func List(name, doc string, elem *Field) Field {
	return Field{Name: name, Doc: doc, Type: TypeList, Elem: elem}
}

// Any declares a setting of any value.
func Any(name, doc string) Field { return Field{Name: name, Doc: doc, Type: TypeAny} }

// OneOf declares a setting that takes one of several forms.
func OneOf(name, doc string, alts ...Field) Field {
	return Field{Name: name, Doc: doc, Type: TypeAny, Alts: alts}
}

// Ref declares a setting checked against a shared definition.
func Ref(name, doc, def string) Field { return Field{Name: name, Doc: doc, Type: TypeRef, Def: def} }

// Const declares a value that must be exactly v.
func Const(v any) Field { return Field{Type: TypeAny, Const: v, HasConst: true} }

// Elem is a nameless field, for map values and list items.
func Elem(f Field) *Field { return &f }

// Require marks the field required.
func (f Field) Require() Field { f.Required = true; return f }

// Min sets a number's minimum.
func (f Field) Min(x float64) Field { f.Minimum = &x; return f }

// Max sets a number's maximum.
func (f Field) Max(x float64) Field { f.Maximum = &x; return f }

// NonEmpty requires at least n characters, items or entries.
func (f Field) NonEmpty(n int) Field {
	switch f.Type {
	case TypeList:
		f.MinItems = n
	case TypeMap, TypeObject:
		f.MinProps = n
	default:
		f.MinLength = n
	}
	return f
}

// Match sets a string's pattern.
func (f Field) Match(pattern string) Field { f.Pattern = pattern; return f }

// OpenKeys lets an object hold keys beyond the fields it declares.
func (f Field) OpenKeys() Field { f.Open = true; return f }

// Distinct requires a list's items to differ.
func (f Field) Distinct() Field { f.Unique = true; return f }

// OneOfValues restricts the values to vals.
func (f Field) OneOfValues(vals ...any) Field { f.Enum = vals; return f }

// Is restricts the value to v.
func (f Field) Is(v any) Field { f.Const, f.HasConst = v, true; return f }

// KeysAre constrains a map's keys.
func (f Field) KeysAre(k Field) Field { f.Names = &k; return f }

// AlsoTypes lets the field hold values of these JSON types instead.
func (f Field) AlsoTypes(types ...string) Field { f.Types = types; return f }

// OnlyOneOf says that at most one of the object's settings names may be
// given.
func (f Field) OnlyOneOf(names ...string) Field { f.AtMostOne = names; return f }

// Lookup returns the declared field called name among fields.
func Lookup(fields []Field, name string) (Field, bool) {
	i := slices.IndexFunc(fields, func(f Field) bool { return f.Name == name })
	if i < 0 {
		return Field{}, false
	}
	return fields[i], true
}

// Schema returns the field's JSON Schema (draft 2020-12). Definitions are
// referred to as #/$defs/NAME.
func (f Field) Schema() map[string]any {
	s := map[string]any{}
	if f.Doc != "" {
		s["description"] = f.Doc
	}
	switch f.Type {
	case TypeString, TypeExpression, TypeCondition, TypeTemplate:
		s["type"] = "string"
	case TypeInteger:
		s["type"] = "integer"
	case TypeNumber:
		s["type"] = "number"
	case TypeBool:
		s["type"] = "boolean"
	case TypeDuration, TypeRef:
		s["$ref"] = "#/$defs/" + f.Def
	case TypeObject:
		s["type"] = "object"
		if !f.Open {
			s["additionalProperties"] = false
		}
		props, required := Properties(f.Fields)
		if len(props) > 0 {
			s["properties"] = props
		}
		if len(required) > 0 {
			s["required"] = required
		}
	case TypeMap:
		s["type"] = "object"
		if f.Elem != nil {
			if es := f.Elem.Schema(); len(es) > 0 {
				s["additionalProperties"] = es
			}
		}
		if f.Names != nil {
			s["propertyNames"] = f.Names.Schema()
		}
	case TypeList:
		s["type"] = "array"
		if f.Elem != nil {
			s["items"] = f.Elem.Schema()
		}
	}
	if len(f.Types) > 0 {
		// one schema per type, not a list of types: strict validators
		// (Ajv's strict mode) refuse a union type
		var types []string
		if t, ok := s["type"].(string); ok {
			types = append(types, t)
		}
		types = append(types, f.Types...)
		delete(s, "type")
		alts := make([]any, len(types))
		for i, t := range types {
			alts[i] = map[string]any{"type": t}
		}
		s["anyOf"] = alts
	}
	if len(f.AtMostOne) > 1 {
		var pairs []any
		for i, a := range f.AtMostOne {
			for _, b := range f.AtMostOne[i+1:] {
				pairs = append(pairs, map[string]any{"type": "object", "properties": map[string]any{a: true, b: true}, "required": []any{a, b}})
			}
		}
		s["not"] = map[string]any{"anyOf": pairs}
	}
	if len(f.Alts) > 0 {
		alts := make([]any, len(f.Alts))
		for i, a := range f.Alts {
			alts[i] = a.Schema()
		}
		s["anyOf"] = alts
	}
	if f.HasConst {
		s["const"] = f.Const
	}
	if len(f.Enum) > 0 {
		s["enum"] = f.Enum
	}
	if f.Minimum != nil {
		s["minimum"] = *f.Minimum
	}
	if f.Maximum != nil {
		s["maximum"] = *f.Maximum
	}
	if f.MinLength > 0 {
		s["minLength"] = f.MinLength
	}
	if f.MinItems > 0 {
		s["minItems"] = f.MinItems
	}
	if f.MinProps > 0 {
		s["minProperties"] = f.MinProps
	}
	if f.Pattern != "" {
		s["pattern"] = f.Pattern
	}
	if f.Unique {
		s["uniqueItems"] = true
	}
	if alts, ok := s["anyOf"].([]any); ok && len(f.Types) > 0 {
		// a union of types: each keyword goes with the type it applies
		// to, as strict validators (Ajv's strictTypes) want
		for kw, types := range typedKeywords {
			v, has := s[kw]
			if !has {
				continue
			}
			delete(s, kw)
			for _, a := range alts {
				if am := a.(map[string]any); slices.Contains(types, am["type"].(string)) {
					am[kw] = v
				}
			}
		}
	}
	return s
}

// typedKeywords are the keywords that apply to values of some types only.
var typedKeywords = map[string][]string{
	"minimum": {"integer", "number"}, "maximum": {"integer", "number"},
	"minLength": {"string"}, "pattern": {"string"},
	"minItems": {"array"}, "uniqueItems": {"array"}, "minProperties": {"object"},
}

// Properties returns the JSON Schema properties of fields and the names of
// the required ones, in declaration order.
func Properties(fields []Field) (map[string]any, []any) {
	props := map[string]any{}
	var required []any
	for _, f := range fields {
		props[f.Name] = f.Schema()
		if f.Required {
			required = append(required, f.Name)
		}
	}
	return props, required
}

// TypeName describes what the field holds, for the reference docs.
func (f Field) TypeName() string {
	var t string
	switch f.Type {
	case TypeString:
		t = "string"
	case TypeInteger:
		t = "integer"
	case TypeNumber:
		t = "number"
	case TypeBool:
		t = "boolean"
	case TypeDuration:
		t = "duration"
	case TypeExpression:
		t = "expression"
	case TypeCondition:
		t = "condition"
	case TypeTemplate:
		t = "template"
	case TypeObject:
		t = "object"
	case TypeMap:
		t = "map"
		if f.Elem != nil && f.Elem.Type != TypeAny {
			t = "map of " + f.Elem.TypeName()
		}
	case TypeList:
		t = "list"
		if f.Elem != nil && f.Elem.Type != TypeAny {
			t = "list of " + f.Elem.TypeName()
		}
	case TypeRef:
		t = f.Def
	default:
		t = "any"
		if f.HasConst {
			t = fmt.Sprintf("`%v`", f.Const)
		}
		if len(f.Alts) > 0 {
			names := make([]string, len(f.Alts))
			for i, a := range f.Alts {
				names[i] = a.TypeName()
			}
			t = strings.Join(names, " or ")
		}
	}
	return t
}

// Table renders fields as a Markdown table of settings: an object's
// settings are listed after it as parent.child.
func Table(fields []Field) string {
	var b strings.Builder
	b.WriteString("| setting | type | required | description |\n| --- | --- | --- | --- |\n")
	var rows func(prefix string, fs []Field)
	rows = func(prefix string, fs []Field) {
		for _, f := range fs {
			req := ""
			if f.Required {
				req = "yes"
			}
			fmt.Fprintf(&b, "| `%s%s` | %s | %s | %s |\n", prefix, f.Name, f.TypeName(), req, escapeCell(f.Doc))
			if f.Type == TypeObject {
				rows(prefix+f.Name+".", f.Fields)
			}
			for _, a := range f.Alts {
				if a.Type == TypeObject {
					rows(prefix+f.Name+".", a.Fields)
				}
			}
		}
	}
	rows("", fields)
	return b.String()
}

func escapeCell(s string) string { return strings.ReplaceAll(s, "|", "\\|") }
