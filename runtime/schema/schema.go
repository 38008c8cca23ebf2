// Package schema wraps JSON Schema (draft 2020-12, through
// santhosh-tekuri/jsonschema) for state and structured outputs. Besides the
// compiled validator it derives a Shape: the part of a schema Trellis reasons
// about statically (field names, types, item types), which drives the
// expression type environment, "did you mean" on field names, value coercion
// and a fast exact check for schemas made only of type constraints.
package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v5"
	"github.com/trellisflow/trellis/runtime/config"

	"github.com/trellisflow/trellis/runtime/value"
	"gopkg.in/yaml.v3"
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
	// Default is the schema's default, when HasDefault.
	Default    any
	HasDefault bool
	// simple means every keyword of this schema (recursively) is one the
	// fast check decides exactly.
	simple bool
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
// shape is unknown), ordered as given or, without an order, by name.
func Object(props map[string]*Shape, order ...string) *Shape {
	if order == nil {
		order = slices.Sorted(maps.Keys(props))
	}
	return &Shape{Types: []string{"object"}, Props: props, Order: order, Closed: true}
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
	simple := true
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
			s.Props = make(map[string]*Shape, len(props))
			for name, p := range props {
				c := shapeOf(p, resolve, depth+1)
				s.Props[name] = c
				simple = simple && c.simple
			}
		case "additionalProperties":
			b, isBool := v.(bool)
			s.Closed = isBool && !b
			simple = simple && isBool
		case "required":
			for _, x := range asSlice(v) {
				if str, ok := x.(string); ok {
					s.Required = append(s.Required, str)
				}
			}
		case "items":
			s.Items = shapeOf(v, resolve, depth+1)
			simple = simple && s.Items.simple
		case "default":
			s.Default, s.HasDefault = v, true
		case "enum":
			s.Enum = slices.Clone(asSlice(v))
			simple = false
		case "const":
			s.Enum = []any{v}
			simple = false
		case "pattern":
			simple = false
			s.Pattern, _ = v.(string)
		case "minLength", "maxLength":
			simple = false
			if f, ok := number(v); ok && f >= 0 && f == math.Trunc(f) && f < 1<<31 {
				if n := int(f); k == "minLength" {
					s.MinLength = n
				} else {
					s.MaxLength = &n
				}
			}
		case "minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum":
			simple = false
			f, ok := number(v)
			if !ok {
				break
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
			ref, _ := v.(string)
			var target any
			if resolve != nil {
				target = resolve(ref)
			}
			if target != nil {
				r := shapeOf(target, resolve, depth+1)
				if len(m) == 1 || (len(m) == 2 && s.HasDefault) {
					d, hd := s.Default, s.HasDefault
					*s = *r
					if hd {
						s.Default, s.HasDefault = d, hd
					}
					return s
				}
			}
			simple = false
		case "anyOf", "oneOf":
			simple = false
			if r := orNull(v, resolve, depth); r != nil {
				s.Types, s.Props, s.Closed, s.Required, s.Items, s.Enum = r.Types, r.Props, r.Closed, r.Required, r.Items, r.Enum
				s.Minimum, s.Maximum, s.ExclusiveMinimum, s.ExclusiveMaximum = r.Minimum, r.Maximum, r.ExclusiveMinimum, r.ExclusiveMaximum
				s.Pattern, s.MinLength, s.MaxLength = r.Pattern, r.MinLength, r.MaxLength
			}
		case "$defs", "definitions":
			// definitions do not constrain the value itself
		default:
			if !annotations[k] {
				simple = false
			}
		}
	}
	if s.Props != nil {
		s.Order = make([]string, 0, len(s.Props))
		for name := range s.Props {
			s.Order = append(s.Order, name)
		}
		slices.Sort(s.Order)
	}
	s.simple = simple
	return s
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

// Compiler compiles raw schemas. Relative $refs resolve against the file a
// schema came from; YAML and JSON schema files are both accepted. What it
// compiles is kept, by content, for the process: the same schema (a
// reply schema several prompts name, the state of a flow also run as a
// subflow) is compiled, and checked against the draft's metaschema, once.
type Compiler struct {
	c    *jsonschema.Compiler
	read Reader
	// deps are the files the compilation read for $refs, with their text;
	// trust is set when they were seen valid with the schema compiled.
	deps  []dep
	trust bool
}

// dep is a file a compiled schema refers to, as it was read.
type dep struct {
	path string
	text []byte
}

// Reader reads the file a file:// URL names, given the URL's path: the
// disk, or a file system a flow was loaded from.
type Reader func(path string) ([]byte, error)

// NewCompiler returns a compiler defaulting to draft 2020-12 that reads
// referenced files with read (nil: from the disk).
func NewCompiler(read Reader) *Compiler {
	if read == nil {
		read = diskReader
	}
	sc := &Compiler{read: read}
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	c.ExtractAnnotations = false
	c.LoadURL = func(s string) (io.ReadCloser, error) {
		u, err := url.Parse(s)
		if err != nil || u.Scheme != "file" {
			return nil, fmt.Errorf("schema %s: only local files can be referenced", s)
		}
		b, err := read(u.Path)
		if err != nil {
			return nil, err
		}
		sc.deps = append(sc.deps, dep{u.Path, b})
		raw, err := Parse(u.Path, b)
		if err != nil {
			return nil, err
		}
		if m, ok := raw.(map[string]any); ok && sc.trust && m["$schema"] == draft2020 {
			delete(m, "$schema") // seen valid with the schema that refers to it
		}
		if b, err = json.Marshal(raw); err != nil {
			return nil, err
		}
		return io.NopCloser(bytes.NewReader(b)), nil
	}
	sc.c = c
	return sc
}

// compiled is a schema compiled once for the process.
type compiled struct {
	once   sync.Once
	schema *jsonschema.Schema
	err    error
	deps   []dep
}

// maxCompiled bounds the schemas kept (a server reloading edited flows
// compiles new ones); past it the cache starts afresh.
const maxCompiled = 512

var (
	compiledMu sync.Mutex
	compiledBy = map[string]*compiled{}
)

// Compile adds raw under url and compiles it, or returns the schema
// compiled before from the same url and text, when the files it refers
// to still read the same.
func (c *Compiler) Compile(url string, raw any) (*jsonschema.Schema, error) {
	b, err := json.Marshal(raw)
	if err != nil {
		return nil, err
	}
	key := url + "\x00" + string(b)
	for {
		compiledMu.Lock()
		e, ok := compiledBy[key]
		if !ok {
			if len(compiledBy) >= maxCompiled {
				compiledBy = map[string]*compiled{}
			}
			e = &compiled{}
			compiledBy[key] = e
		}
		compiledMu.Unlock()
		e.once.Do(func() {
			if c.seenValid(key) {
				if s, deps, err := c.compileTrusted(url, b); err == nil {
					e.schema, e.deps = s, deps
					return
				}
				// a note that does not hold: check it in full
				c = NewCompiler(c.read)
			}
			if err := c.c.AddResource(url, bytes.NewReader(b)); err != nil {
				e.err = err
				return
			}
			e.schema, e.err = c.c.Compile(url)
			e.deps = c.deps
			if e.err == nil {
				rememberValid(key, c.deps)
			}
		})
		if c.current(e.deps) {
			return e.schema, e.err
		}
		// a file it refers to changed: compile it again, afresh
		compiledMu.Lock()
		if compiledBy[key] == e {
			delete(compiledBy, key)
		}
		compiledMu.Unlock()
		c = NewCompiler(c.read)
	}
}

// compileTrusted compiles a schema seen valid without its metaschema
// check; a schema that fails so (a note that does not hold) is an error,
// even a panic of the library's.
func (c *Compiler) compileTrusted(url string, b []byte) (s *jsonschema.Schema, deps []dep, err error) {
	defer func() {
		if p := recover(); p != nil {
			s, err = nil, fmt.Errorf("schema %s: %v", url, p)
		}
	}()
	c.c.Draft, c.trust = trusted, true
	if err := c.c.AddResource(url, bytes.NewReader(withoutDraft(b))); err != nil {
		return nil, nil, err
	}
	if s, err = c.c.Compile(url); err != nil {
		return nil, nil, err
	}
	trustedCompiles.Add(1)
	return s, c.deps, nil
}

// current reports whether the files deps were read from read the same.
func (c *Compiler) current(deps []dep) bool {
	for _, d := range deps {
		b, err := c.read(d.path)
		if err != nil || !bytes.Equal(b, d.text) {
			return false
		}
	}
	return true
}

func diskReader(path string) ([]byte, error) { return os.ReadFile(filepath.FromSlash(path)) }

// FileURL names a schema resource for a path on disk.
func FileURL(path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		abs = path
	}
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(abs)}).String()
}

// ReadFile reads a JSON or YAML file from the disk into state values.
func ReadFile(path string) (any, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, b)
}

// Parse reads JSON or YAML text into state values; name is for errors.
func Parse(name string, b []byte) (any, error) {
	var n yaml.Node
	if err := yaml.Unmarshal(b, &n); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return value.FromYAML(&n)
}

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
	if v.Shape != nil && v.Shape.simple {
		if ok, sure := fastCheck(v.Shape, x); ok && sure {
			return nil
		}
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
// with the JSON pointer of the offending value.
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
		at := c.Pointer
		if at == "" {
			at = "/"
		}
		parts[i] = at + ": " + c.Message
	}
	return strings.Join(parts, "; ")
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

// fastCheck decides validity for simple shapes. sure is false when x holds
// a Go type the check does not know, and the compiled schema must decide.
func fastCheck(s *Shape, x any) (ok, sure bool) {
	if len(s.Types) > 0 {
		matched := false
		for _, t := range s.Types {
			m, known := typeMatches(t, x)
			if !known {
				return false, false
			}
			if m {
				matched = true
				break
			}
		}
		if !matched {
			return false, true
		}
	}
	switch v := x.(type) {
	case []any:
		if s.Items != nil {
			for _, e := range v {
				if ok, sure := fastCheck(s.Items, e); !ok || !sure {
					return ok, sure
				}
			}
		}
	case map[string]any:
		for _, r := range s.Required {
			if _, ok := v[r]; !ok {
				return false, true
			}
		}
		if s.Props != nil || s.Closed {
			for k, e := range v {
				p, ok := s.Props[k]
				if !ok {
					if s.Closed {
						return false, true
					}
					continue
				}
				if ok, sure := fastCheck(p, e); !ok || !sure {
					return ok, sure
				}
			}
		}
	}
	return true, true
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
