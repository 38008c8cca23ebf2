package flow

import (
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v5"

	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/schema"
)

// loadedSchema is a JSON Schema read for the state or for a node, with
// what its compilation found.
type loadedSchema struct {
	raw     any
	url     string
	file    *config.File // the schema's own file; nil when inline
	inline  config.Value // the inline schema; zero when in a file
	resolve func(string) any
	shape   *schema.Shape
	// compiled is nil when err is set; errPos and errMsg locate it.
	compiled *jsonschema.Schema
	err      error
	errPos   diag.Pos
	errMsg   string
}

// loadSchema reads the schema v gives: a mapping is the schema inline
// (named inlineName for $ref resolution), a string the path of a schema
// file relative to the file holding v. ok is false when the file cannot be
// read or v is neither.
func (c *compiler) loadSchema(v config.Value, inlineName string) (*loadedSchema, bool) {
	ls := &loadedSchema{}
	switch v.Kind() {
	case config.Scalar:
		p := c.files.Join(c.files.Dir(v.File().Path), v.Text())
		src, err := c.readFile(p)
		if err != nil {
			return nil, false
		}
		if ls.file = config.Parse(p, src, &diag.List{}); ls.file == nil {
			return nil, false
		}
		ls.raw, ls.url = ls.file.JSON(), c.files.URL(p)
	case config.Mapping:
		raw, err := v.JSON()
		if err != nil {
			return nil, false
		}
		ls.raw, ls.url, ls.inline = raw, c.files.URL(inlineName), v
	default:
		return nil, false
	}
	ls.compiled, ls.err = schema.NewCompiler(c.readURL).Compile(ls.url, ls.raw)
	if ls.err != nil {
		ptr, msg := schemaProblem(ls.err)
		ls.errMsg, ls.errPos = msg, v.Pos()
		switch {
		case ls.inline.Exists():
			if base, ok := v.Pointer(); ok {
				if at := v.File().At(base + ptr); at.Exists() {
					ls.errPos = at.Pos()
				}
			}
		case ls.file != nil:
			at, _ := ls.file.Nearest(ptr)
			ls.errPos = at.Pos()
		}
	}
	ls.resolve = schema.Resolver(ls.raw, ls.url, c.readURL)
	ls.shape = schema.ShapeOf(ls.raw, ls.resolve)
	return ls, true
}

// propertyPos locates a top-level property's definition: in an inline
// schema, the property's key; in a schema file, that key or the file.
func (ls *loadedSchema) propertyPos(field string) diag.Pos {
	if ls.file != nil {
		if k := ls.file.KeyAt("/properties/" + config.Escape(field)); k.Exists() {
			return k.Pos()
		}
		return diag.Pos{File: ls.file.Path}
	}
	if k := ls.inline.Get("properties").KeyOf(field); k.Exists() {
		return k.Pos()
	}
	return ls.inline.Pos()
}

var schemaFailure = diag.Pattern(`^'([^']*)' does not validate with \S+: (.*)$`)

// schemaProblem reduces a schema compilation error to the JSON pointer of
// the offending value inside the schema and a short reason.
func schemaProblem(err error) (ptr, msg string) {
	msg = err.Error()
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	if _, rest, ok := strings.Cut(msg, " compilation failed: "); ok {
		msg = rest
	}
	if m := schemaFailure().FindStringSubmatch(msg); m != nil {
		return m[1], fmt.Sprintf("%s: %s", m[1], m[2])
	}
	return "", msg
}

// Schema implements kind.Builder.
func (b *builder) Schema(v config.Value, name string) (*kind.JSONSchema, *kind.SchemaError) {
	ls, ok := b.c.loadSchema(v, v.File().Path+"."+name+".json")
	if !ok {
		return nil, &kind.SchemaError{Unreadable: true, Pos: v.Pos()}
	}
	if ls.err != nil {
		return nil, &kind.SchemaError{Pos: ls.errPos, Message: ls.errMsg}
	}
	m, ok := ls.raw.(map[string]any)
	if !ok {
		return nil, &kind.SchemaError{Pos: v.Pos(), Message: "the schema must be an object schema"}
	}
	bundled, _ := schema.Bundle(m, ls.resolve).(map[string]any)
	return &kind.JSONSchema{Raw: bundled, Validator: schema.NewValidator(ls.compiled, ls.shape)}, nil
}
