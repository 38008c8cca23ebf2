package flow

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/expression"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/schema"
	"github.com/trellisflow/trellis/runtime/value"
)

// Semantic diagnostic codes. Every code has a failing and a passing fixture
// under testdata/diag.
const (
	CodeUnknownTarget   = "G001" // an edge names a node that does not exist
	CodeDuplicateNode   = "G002" // two nodes share a name
	CodeUnreachable     = "G003" // no edge path from START reaches the node
	CodeNoPathToEnd     = "G004" // the node can never reach END
	CodeEntry           = "G005" // no edge leaves START
	CodeReserved        = "G006" // START as a target, END as a source
	CodeEdgeShape       = "G007" // an edge is not exactly one of to, branch, route
	CodeUnboundedCycle  = "G008" // a cycle with no bounded edge
	CodeJoinStarves     = "G009" // a join can wait forever
	CodeRouteChoice     = "G010" // a route choice or default that is not a node
	CodeStateSchema     = "D001" // the state schema cannot be read or compiled
	CodeStateShape      = "D002" // the state schema is not an object with properties
	CodeReducerField    = "D003" // a reducer for a field the state does not have
	CodeReducerType     = "D004" // a reducer that cannot apply to the field's type
	CodeReadOnly        = "D005" // a read-only field that is missing, or an input
	CodeBadDefault      = "D006" // a default that violates its field's schema
	CodeUndeclaredWrite = "W001" // a node writes a field the state does not have
	CodeWriteConflict   = "W002" // two nodes of one superstep replace one field
	CodeReadOnlyWrite   = "W003" // a node writes a read-only field
	CodeUnknownInput    = "I001" // an input field the state does not have
)

const (
	startName = "START"
	endName   = "END"
)

// Load reads, validates and compiles the flow at path. It returns the graph
// when there are no errors, and every diagnostic found in any case.
func Load(path string, reg kind.Registry) (*Graph, diag.List) {
	src, err := os.ReadFile(path)
	if err != nil {
		var dl diag.List
		dl.Errorf(CodeYAML, diag.Pos{File: path}, "", "cannot read flow: %v", err)
		return nil, dl
	}
	return LoadSource(path, src, reg)
}

// LoadSource is Load for a flow already in memory; path locates relative
// schema files and names the flow in diagnostics.
func LoadSource(path string, src []byte, reg kind.Registry) (*Graph, diag.List) {
	c := &compiler{reg: reg, dir: filepath.Dir(path), sources: diag.Sources{path: src},
		prompts: map[string]*promptFile{}, reported: map[string]bool{}}
	g := c.compile(path, src)
	dl := c.dl.Sort()
	if dl.HasErrors() {
		return nil, dl
	}
	return g, dl
}

// Sources returns the text of every file a Load read, for printing
// diagnostics with their source lines.
func Sources(paths ...string) diag.Sources {
	s := diag.Sources{}
	for _, p := range paths {
		if b, err := os.ReadFile(p); err == nil {
			s[p] = b
		}
	}
	return s
}

type compiler struct {
	reg     kind.Registry
	dir     string
	dl      diag.List
	sources diag.Sources
	doc     *document
	g       *Graph

	stateShape *schema.Shape
	inShape    *schema.Shape
	env        *expression.Env
	// prompts are the prompt files read, by path; reported holds the
	// prompt diagnostics already given (several nodes share a prompt).
	prompts  map[string]*promptFile
	reported map[string]bool
	// badNodes have format errors in their block; their kind is not built.
	badNodes map[string]bool
	// writes records where each node declares a write: node -> field -> pos.
	writes        map[string]map[string]diag.Pos
	edgeOf        map[*Edge]*yaml.Node
	pendingRoutes []pendingRoute
	// Nodes named by edges that did not compile: the graph checks assume
	// the best of them (reached, reaching END) rather than cascade.
	assumeReached, assumeEnds map[*Node]bool
	// reader is the node whose settings or outgoing edge are being
	// compiled (readerRan: an edge, read after its node ran); nullReads
	// are the reads through possibly-null values found meanwhile, judged
	// once the graph is known.
	reader    *Node
	readerRan bool
	nullReads []nullRead
}

func (c *compiler) compile(path string, src []byte) *Graph {
	d := parseDocument(path, src, &c.dl)
	if d == nil {
		return nil
	}
	c.doc = d
	if d.root.Kind != yaml.MappingNode {
		c.dl.Errorf(CodeType, d.pos(d.root), "", "a flow must be a mapping with version, name, state, nodes and edges")
		return nil
	}
	fv, err := formatFor(c.reg)
	if err != nil {
		c.dl.Errorf(CodeConstraint, d.pos(d.root), "", "flow format: %v", err)
		return nil
	}
	before := len(c.dl)
	fv.check(d, &c.dl)
	c.badNodes = map[string]bool{}
	for _, x := range c.dl[before:] {
		if rest, ok := strings.CutPrefix(x.Path, "nodes."); ok {
			c.badNodes[strings.SplitN(rest, ".", 2)[0]] = true
		}
	}
	if c.get("version") == nil || c.get("version").Value != "1" {
		// the format check reported it; nothing below can be trusted
		return nil
	}
	c.g = &Graph{Path: path, fields: map[string]*Field{}, nodes: map[string]*Node{}, MaxSteps: DefaultMaxSteps}
	c.g.Name = scalar(c.get("name"))
	c.g.Description = scalar(c.get("description"))
	c.writes = map[string]map[string]diag.Pos{}
	c.edgeOf = map[*Edge]*yaml.Node{}
	if lim := c.get("limits"); lim != nil {
		if ms := mapGet(lim, "max_steps"); ms != nil {
			_ = ms.Decode(&c.g.MaxSteps)
		}
	}
	c.state()
	c.conversation()
	c.nodes()
	for _, n := range c.g.Nodes {
		n.WriteMask = make([]bool, len(c.g.Fields))
		for i, f := range c.g.Fields {
			n.WriteMask[i] = n.Writes[f.Name]
		}
		n.WriteFields = make([]*Field, len(n.WriteList))
		for i, name := range n.WriteList {
			n.WriteFields[i], _ = c.g.Field(name)
		}
	}
	c.edges()
	c.analyse()
	c.nullWarnings()
	c.g.env = c.env
	return c.g
}

// nullRead is a read through a value that may be null (path, such as
// state.x), by a node or, with no node, by the flow itself.
type nullRead struct {
	node *Node
	ran  bool
	path string
	d    diag.Diagnostic
}

// noteNullRead keeps a possibly-null read for nullWarnings.
func (c *compiler) noteNullRead(path string, d diag.Diagnostic) {
	c.nullReads = append(c.nullReads, nullRead{node: c.reader, ran: c.readerRan, path: path, d: d})
}

// nullWarnings reports the possibly-null reads of state fields that some
// path from START reaches without passing a node that writes the field:
// a read after the field's writer on every path is taken to see it set.
func (c *compiler) nullWarnings() {
	seen := map[string]bool{}
	for _, r := range c.nullReads {
		field, ok := strings.CutPrefix(r.path, "state.")
		if ok && !strings.Contains(field, ".") && r.node != nil && c.writtenBefore(field, r.node, r.ran) {
			continue
		}
		key := r.d.Pos.String() + r.d.Summary
		if !seen[key] {
			seen[key] = true
			c.dl.Add(r.d)
		}
	}
}

// writtenBefore reports whether every path from START to n passes a node
// that writes field before n reads it (or, when ran, n itself writes it).
func (c *compiler) writtenBefore(field string, n *Node, ran bool) bool {
	if ran && n.Writes[field] {
		return true
	}
	unguarded := false
	walkFrom(entryTargets(c.g), func(m *Node) bool {
		unguarded = unguarded || m == n // reached with nothing writing the field on the way
		return !unguarded && !m.Writes[field]
	})
	return !unguarded
}

// get returns the value node of a top-level key.
func (c *compiler) get(key string) *yaml.Node { return mapGet(c.doc.root, key) }

func mapGet(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

func mapKey(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i]
		}
	}
	return nil
}

func scalar(n *yaml.Node) string {
	if n == nil || n.Kind != yaml.ScalarNode {
		return ""
	}
	return n.Value
}

func (c *compiler) pos(n *yaml.Node) diag.Pos { return c.doc.pos(n) }

// ---------------------------------------------------------------- state

func (c *compiler) state() {
	st := c.get("state")
	sn := mapGet(st, "schema")
	if sn == nil {
		c.env = expression.NewEnv().With("state", nil).With("input", nil)
		return
	}
	comp := schema.NewCompiler()
	raw, url, sdoc, ok := c.schemaSource(sn, c.dir, func() any { return c.doc.value.(map[string]any)["state"].(map[string]any)["schema"] },
		strings.TrimSuffix(c.doc.path, filepath.Ext(c.doc.path))+".state.json")
	if !ok {
		c.dl.Errorf(CodeStateSchema, c.pos(sn), "state.schema", "cannot read state schema %q", sn.Value)
		c.env = expression.NewEnv().With("state", nil).With("input", nil)
		return
	}
	compiled, err := comp.Compile(url, raw)
	if err != nil {
		ptr, msg := schemaProblem(err)
		at := c.pos(sn)
		if n, ok := c.doc.at["/state/schema"+ptr]; ok && sn.Kind == yaml.MappingNode {
			at = c.pos(n)
		} else if sdoc != nil {
			n, _ := sdoc.nearest(ptr)
			at = sdoc.pos(n)
		}
		c.dl.Errorf(CodeStateSchema, at, "state.schema", "invalid state schema: %s", msg)
	}
	resolve := refResolver(raw, url)
	shape := schema.ShapeOf(raw, resolve)
	c.stateShape = shape
	if err == nil && (!shape.Is("object") || len(shape.Props) == 0) {
		c.dl.Errorf(CodeStateShape, c.pos(sn), "state.schema", "state schema must be an object (type: object) with properties")
	}
	// The state is closed: its fields are the declared properties.
	shape.Closed = true
	if compiled != nil {
		c.g.root = schema.NewValidator(compiled, shape)
		c.g.FullValidation = rootHasConstraints(raw)
	}
	for i, name := range shape.Order {
		fs := shape.Props[name]
		f := &Field{Name: name, Index: i, Shape: fs, Reducer: &Reducer{Name: "replace"}, Var: "state." + name, InputVar: "input." + name}
		if compiled != nil {
			if sub := compiled.Properties[name]; sub != nil {
				f.Validator = schema.NewValidator(sub, fs)
				if fs.Is("array") && fs.Items != nil && arrayOnlyItems(raw, name, resolve) {
					items := sub.Items2020
					if items == nil && sub.Ref != nil {
						items = sub.Ref.Items2020
					}
					if items != nil {
						f.Items = schema.NewValidator(items, fs.Items)
					}
				}
			}
		}
		if fs.HasDefault {
			v, err := value.Normalize(fs.Default)
			if err == nil {
				f.Default, f.HasDefault = schema.Coerce(fs, v), true
				if f.Validator != nil {
					if err := f.Validator.Validate(f.Default); err != nil {
						c.dl.Errorf(CodeBadDefault, c.schemaPos(sn, sdoc, name), "state.schema", "default of field %q is invalid: %v", name, err)
					}
				}
			}
		}
		c.g.Fields = append(c.g.Fields, f)
		c.g.fields[name] = f
	}
	c.env = expression.NewEnv().WithFields("state", shape)
	if len(shape.Props) == 0 {
		// no fields to check names against: every name would be reported
		c.env = expression.NewEnv().With("state", nil).With("input", nil)
		c.stateShape = nil
		return
	}
	c.reducers(mapGet(st, "reducers"))
	c.readonly(mapGet(st, "readonly"))
	c.inputs()
	props, order := map[string]*schema.Shape{}, []string{}
	for _, f := range c.g.Inputs {
		props[f.Name] = f.Shape
		order = append(order, f.Name)
	}
	inShape := schema.Object(props, order...)
	c.env = c.env.WithFields("input", inShape)
	c.inShape = inShape
}

// schemaSource reads a schema given as a path (relative to dir) or inline
// (inline returns its value; inlineName names it). ok is false when the
// file cannot be read or the node is neither.
func (c *compiler) schemaSource(sn *yaml.Node, dir string, inline func() any, inlineName string) (raw any, url string, sdoc *document, ok bool) {
	switch sn.Kind {
	case yaml.ScalarNode:
		p := sn.Value
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if sdoc = readDocument(p, &diag.List{}); sdoc == nil {
			return nil, "", nil, false
		}
		c.sources[p] = sdoc.src
		return sdoc.value, schema.FileURL(p), sdoc, true
	case yaml.MappingNode:
		return inline(), schema.FileURL(inlineName), nil, true
	}
	return nil, "", nil, false
}

// schemaPos locates a field's definition: in an inline schema, the
// property's key; in a schema file, the file itself.
func (c *compiler) schemaPos(sn *yaml.Node, sdoc *document, field string) diag.Pos {
	if sdoc != nil {
		if k := sdoc.keys["/properties/"+escape(field)]; k != nil {
			return sdoc.pos(k)
		}
		return diag.Pos{File: sdoc.path}
	}
	if k := c.doc.keys["/state/schema/properties/"+escape(field)]; k != nil {
		return c.pos(k)
	}
	return c.pos(sn)
}

var schemaFailure = regexp.MustCompile(`^'([^']*)' does not validate with \S+: (.*)$`)

// schemaProblem reduces a schema compilation error to the JSON pointer of
// the offending value inside the schema and a short reason.
func schemaProblem(err error) (ptr, msg string) {
	msg = firstLineOf(err.Error())
	if _, rest, ok := strings.Cut(msg, " compilation failed: "); ok {
		msg = rest
	}
	if m := schemaFailure.FindStringSubmatch(msg); m != nil {
		return m[1], fmt.Sprintf("%s: %s", m[1], m[2])
	}
	return "", msg
}

func firstLineOf(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// rootHasConstraints reports whether the root schema constrains the state
// beyond type, properties, required and additionalProperties.
func rootHasConstraints(raw any) bool {
	m, _ := raw.(map[string]any)
	for k := range m {
		switch k {
		case "type", "properties", "required", "additionalProperties", "$defs", "definitions",
			"title", "description", "$schema", "$id", "$comment", "examples", "default":
		default:
			return true
		}
	}
	if ap, ok := m["additionalProperties"]; ok {
		if _, isBool := ap.(bool); !isBool {
			return true
		}
	}
	return false
}

// arrayOnlyItems reports whether a field's array schema has no keyword that
// looks at the whole list (minItems, uniqueItems, contains, ...), so that
// validating appended items alone is exact.
func arrayOnlyItems(raw any, field string, resolve func(string) any) bool {
	m, _ := raw.(map[string]any)
	props, _ := m["properties"].(map[string]any)
	fm, _ := props[field].(map[string]any)
	if ref, ok := fm["$ref"].(string); ok && len(fm) <= 2 {
		fm, _ = resolve(ref).(map[string]any)
	}
	for k := range fm {
		switch k {
		case "type", "items", "default", "title", "description", "examples", "$comment", "deprecated", "readOnly", "writeOnly":
		default:
			return false
		}
	}
	return fm != nil
}

// refResolver resolves local JSON pointers ("#/$defs/x") and relative files
// ("other.json#/$defs/x") for shapes. The refs inside a referenced file
// are rewritten to name that file (or the files it names) relative to the
// root schema's folder, so they resolve where their file meant them to.
func refResolver(root any, base string) func(string) any {
	var resolve func(ref string) any
	seen := map[string]any{}
	rootDir := filepath.Dir(filepath.FromSlash(strings.TrimPrefix(base, "file://")))
	resolve = func(ref string) any {
		file, frag, _ := strings.Cut(ref, "#")
		doc := root
		if file != "" {
			p := filepath.Join(rootDir, filepath.FromSlash(file))
			if v, ok := seen[p]; ok {
				doc = v
			} else {
				v, err := schema.ReadFile(p)
				if err != nil {
					return nil
				}
				v = rebaseRefs(v, rootDir, filepath.Dir(p), filepath.ToSlash(file))
				seen[p] = v
				doc = v
			}
		}
		cur := doc
		for _, part := range strings.Split(strings.TrimPrefix(frag, "/"), "/") {
			if part == "" {
				continue
			}
			m, ok := cur.(map[string]any)
			if !ok {
				return nil
			}
			cur = m[unescape(part)]
		}
		return cur
	}
	return resolve
}

// rebaseRefs copies a schema read from file (as named from rootDir; it
// lives in fileDir) with its refs made relative to rootDir: "#/x" becomes
// "file#/x", "other.json#/x" the path of other.json from rootDir.
func rebaseRefs(v any, rootDir, fileDir, file string) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			if ref, ok := e.(string); ok && k == "$ref" {
				target, frag, _ := strings.Cut(ref, "#")
				switch {
				case strings.Contains(target, "://"):
				case target == "":
					ref = file + "#" + frag
				default:
					if rel, err := filepath.Rel(rootDir, filepath.Join(fileDir, filepath.FromSlash(target))); err == nil {
						ref = filepath.ToSlash(rel) + "#" + frag
					}
				}
				out[k] = ref
				continue
			}
			out[k] = rebaseRefs(e, rootDir, fileDir, file)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = rebaseRefs(e, rootDir, fileDir, file)
		}
		return out
	}
	return v
}

var reducerTypes = map[string]string{
	"append": "array", "union": "array", "merge": "object",
	"add": "number", "max": "number", "min": "number",
}

func (c *compiler) reducers(rn *yaml.Node) {
	for _, kv := range kind.Pairs(rn) {
		k, v := kv[0], kv[1]
		f, ok := c.g.fields[k.Value]
		if !ok {
			c.dl.Errorf(CodeReducerField, c.pos(k), "state.reducers."+k.Value, "reducer for field %q, which the state schema does not declare", k.Value).
				Suggestion = diag.Suggest(k.Value, c.stateShape.Order)
			continue
		}
		r := &Reducer{Concurrent: true}
		switch v.Kind {
		case yaml.ScalarNode:
			r.Name = v.Value
		case yaml.MappingNode:
			if u := mapGet(v, "union"); u != nil {
				r.Name, r.Key = "union", scalar(mapGet(u, "key"))
			} else if e := mapGet(v, "expr"); e != nil {
				r.Name = "expr"
				env := expression.NewEnv().With("current", f.Shape).With("update", nil)
				r.expr = c.compileExpr(e, env, false, "state.reducers."+k.Value+".expr")
			}
		}
		switch r.Name {
		case "replace":
			r.Concurrent = false
		case "append":
			r.Appends = true
		case "":
			continue // the format check reported it
		}
		if want, ok := reducerTypes[r.Name]; ok && !f.Shape.Allows(want) {
			c.dl.Errorf(CodeReducerType, c.pos(v), "state.reducers."+k.Value, "reducer %s needs a field of type %s, but %q is %s", r.Name, want, k.Value, f.Shape.Describe())
		}
		if r.Name == "union" && r.Key != "" && f.Shape.Items != nil && f.Shape.Items.Is("object") {
			if _, ok := f.Shape.Items.Prop(r.Key); !ok {
				c.dl.Errorf(CodeReducerType, c.pos(v), "state.reducers."+k.Value, "union key %q is not a property of the items of %q", r.Key, k.Value).
					Suggestion = diag.Suggest(r.Key, f.Shape.Items.Order)
			}
		}
		f.Reducer = r
	}
}

func (c *compiler) readonly(rn *yaml.Node) {
	if rn == nil {
		return
	}
	for _, n := range rn.Content {
		f, ok := c.g.fields[n.Value]
		if !ok {
			c.dl.Errorf(CodeReadOnly, c.pos(n), "state.readonly", "read-only field %q is not in the state schema", n.Value).
				Suggestion = diag.Suggest(n.Value, c.stateShape.Order)
			continue
		}
		f.ReadOnly = true
	}
}

func (c *compiler) inputs() {
	in := c.get("input")
	if in == nil {
		return
	}
	for _, n := range in.Content {
		f, ok := c.g.fields[n.Value]
		if !ok {
			c.dl.Errorf(CodeUnknownInput, c.pos(n), "input", "input field %q is not in the state schema", n.Value).
				Suggestion = diag.Suggest(n.Value, c.stateShape.Order)
			continue
		}
		if f.ReadOnly {
			c.dl.Errorf(CodeReadOnly, c.pos(n), "input", "input field %q is read-only: it is set when the thread is created", n.Value)
			continue
		}
		if !f.Input {
			f.Input = true
			c.g.Inputs = append(c.g.Inputs, f)
		}
	}
}

// compileExpr compiles the expression in scalar n and reports problems at
// their exact position in the file.
func (c *compiler) compileExpr(n *yaml.Node, env *expression.Env, condition bool, path string) *expression.Program {
	return c.compileExprIn(c.doc, n, env, condition, path)
}

// compileExprIn is compileExpr for an expression held in document doc (a
// prompt file's front matter).
func (c *compiler) compileExprIn(doc *document, n *yaml.Node, env *expression.Env, condition bool, path string) *expression.Program {
	for n != nil && n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias // an alias of an expression is that expression
	}
	if n == nil || n.Kind != yaml.ScalarNode {
		return nil
	}
	p, probs := expression.Compile(n.Value, env, condition)
	for _, pr := range probs {
		d := diag.Diagnostic{Severity: diag.Error, Code: pr.Code, Pos: doc.exprPos(n, pr.Line, pr.Col, pr.EndCol), Path: path,
			Summary: exprMessage(pr), Suggestion: pr.Suggestion, Detail: "in expression: " + strings.TrimSpace(n.Value)}
		if pr.Warning {
			d.Severity = diag.Warning
			c.noteNullRead(pr.Path, d)
			continue
		}
		c.dl.Add(d)
	}
	return p
}

func exprMessage(p expression.Problem) string {
	if p.Code == expression.CodeSyntax {
		return "expression: " + p.Message
	}
	return p.Message
}

// conversation compiles the conversation block: the input and attachment
// fields must be inputs, the output a state field.
func (c *compiler) conversation() {
	cn := c.get("conversation")
	if cn == nil || cn.Kind != yaml.MappingNode || c.stateShape == nil {
		return
	}
	conv := &Conversation{Attachments: map[string]string{}}
	input := func(n *yaml.Node, path string) string {
		if n == nil {
			return ""
		}
		f, ok := c.g.fields[n.Value]
		if !ok || !f.Input {
			var names []string
			for _, in := range c.g.Inputs {
				names = append(names, in.Name)
			}
			c.dl.Errorf(CodeUnknownInput, c.pos(n), path, "%q is not an input of this flow", n.Value).Suggestion = diag.Suggest(n.Value, names)
			return ""
		}
		return n.Value
	}
	conv.Input = input(mapGet(cn, "input"), "conversation.input")
	if out := mapGet(cn, "output"); out != nil {
		if _, ok := c.g.fields[out.Value]; !ok {
			c.dl.Errorf(CodeUnknownInput, c.pos(out), "conversation.output", "output %q is not a state field", out.Value).
				Suggestion = diag.Suggest(out.Value, c.stateShape.Order)
		}
		conv.Output = out.Value
	}
	if u := mapGet(cn, "until"); u != nil {
		conv.Until = c.compileExpr(u, c.env, true, "conversation.until")
	}
	for _, kv := range kind.Pairs(mapGet(cn, "attachments")) {
		if f := input(kv[1], "conversation.attachments."+kv[0].Value); f != "" {
			conv.Attachments[kv[0].Value] = f
		}
	}
	c.g.Conversation = conv
}

// ---------------------------------------------------------------- nodes

// builder implements kind.Builder for one node.
type builder struct {
	c    *compiler
	name string
	body *yaml.Node
	path string
}

func (b *builder) Node() string { return b.name }

func (b *builder) Setting(key string) *yaml.Node { return mapGet(b.body, key) }

func (b *builder) Decode(key string, v any) bool {
	n := b.Setting(key)
	if n == nil {
		return false
	}
	if err := n.Decode(v); err != nil {
		b.Errorf(n, "%s: %v", key, strings.TrimPrefix(err.Error(), "yaml: unmarshal errors:\n  "))
		return false
	}
	return true
}

func (b *builder) Expr(n *yaml.Node, condition bool) *expression.Program {
	return b.c.compileExpr(n, b.c.env, condition, b.path)
}

func (b *builder) ExprWith(n *yaml.Node, condition bool, vars map[string]*schema.Shape) *expression.Program {
	env := b.c.env
	for _, name := range slices.Sorted(maps.Keys(vars)) {
		env = env.With(name, vars[name])
	}
	return b.c.compileExpr(n, env, condition, b.path)
}

func (b *builder) Writes(field string, at *yaml.Node) {
	w := b.c.writes[b.name]
	if w == nil {
		w = map[string]diag.Pos{}
		b.c.writes[b.name] = w
	}
	if _, dup := w[field]; !dup {
		w[field] = b.c.pos(at)
	}
	f, ok := b.c.g.fields[field]
	switch {
	case b.c.stateShape == nil:
		// the state schema is broken; reported once, where it is
	case !ok:
		b.c.dl.Errorf(CodeUndeclaredWrite, b.c.pos(at), b.path, "node %q writes field %q, which the state schema does not declare", b.name, field).
			Suggestion = diag.Suggest(field, b.c.stateShape.Order)
	case f.ReadOnly:
		b.c.dl.Errorf(CodeReadOnlyWrite, b.c.pos(at), b.path, "node %q writes read-only field %q", b.name, field)
	}
}

func (b *builder) Field(name string) *schema.Shape {
	if f, ok := b.c.g.fields[name]; ok {
		return f.Shape
	}
	return nil
}

func (b *builder) Errorf(at *yaml.Node, format string, args ...any) {
	if at == nil {
		at = b.body
	}
	b.c.dl.Errorf(CodeKindSetting, b.c.pos(at), b.path, format, args...)
}

func (c *compiler) nodes() {
	for _, kv := range kind.Pairs(c.get("nodes")) {
		k, body := kv[0], kv[1]
		name := k.Value
		path := "nodes." + name
		if name == startName || name == endName {
			c.dl.Errorf(CodeReserved, c.pos(k), path, "%s is reserved and cannot name a node", name)
			continue
		}
		n := &Node{Name: name, Index: len(c.g.Nodes), Pos: c.pos(k), Writes: map[string]bool{}}
		n.Kind = scalar(mapGet(body, "kind"))
		n.Description = scalar(mapGet(body, "description"))
		c.g.Nodes = append(c.g.Nodes, n)
		c.g.nodes[name] = n
		if c.badNodes[name] {
			continue
		}
		spec, ok := c.reg.Lookup(n.Kind)
		if !ok {
			continue // reported by the format check
		}
		b := &builder{c: c, name: name, body: body, path: path}
		c.reader, c.readerRan = n, false
		n.Impl = spec.New(b)
		c.common(n, b)
		c.reader = nil
		n.Inline = spec.Inline && n.Timeout == 0
		for f := range c.writes[name] {
			n.Writes[f] = true
		}
		n.WriteList = sortedKeys(n.Writes)
	}
}

// common compiles the settings every kind shares.
func (c *compiler) common(n *Node, b *builder) {
	n.Retry = Retry{Attempts: 1, Backoff: 100 * time.Millisecond, MaxBackoff: 10 * time.Second, Factor: 2}
	if r := b.Setting("retry"); r != nil {
		if a := mapGet(r, "attempts"); a != nil {
			_ = a.Decode(&n.Retry.Attempts)
		}
		n.Retry.Backoff = c.duration(mapGet(r, "backoff"), n.Retry.Backoff)
		n.Retry.MaxBackoff = c.duration(mapGet(r, "max_backoff"), n.Retry.MaxBackoff)
		if f := mapGet(r, "factor"); f != nil {
			_ = f.Decode(&n.Retry.Factor)
		}
	}
	n.Timeout = c.duration(b.Setting("timeout"), 0)
	oe := b.Setting("on_error")
	if oe == nil || oe.Kind != yaml.MappingNode {
		return
	}
	n.OnError.Handled = true
	if set := mapGet(oe, "set"); set != nil {
		n.OnError.Set = map[string]*expression.Program{}
		env := c.env.With("error", &schema.Shape{Types: []string{"string"}})
		for _, kv := range kind.Pairs(set) {
			b.Writes(kv[0].Value, kv[0])
			if p := c.compileExpr(kv[1], env, false, b.path+".on_error.set."+kv[0].Value); p != nil {
				n.OnError.Set[kv[0].Value] = p
			}
		}
		n.OnError.SetOrder = slices.Sorted(maps.Keys(n.OnError.Set))
	}
	if r := mapGet(oe, "route"); r != nil {
		// resolved with the edges, once every node is known
		c.pendingRoutes = append(c.pendingRoutes, pendingRoute{n, r})
	}
}

type pendingRoute struct {
	n  *Node
	at *yaml.Node
}

func (c *compiler) duration(n *yaml.Node, def time.Duration) time.Duration {
	if n == nil {
		return def
	}
	d, err := time.ParseDuration(strings.ReplaceAll(n.Value, "µs", "us"))
	if err != nil {
		return def // the format's pattern reported it
	}
	return d
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// nodeNames lists the node names, for suggestions.
func (c *compiler) nodeNames() []string {
	names := make([]string, len(c.g.Nodes))
	for i, n := range c.g.Nodes {
		names[i] = n.Name
	}
	return names
}

func (c *compiler) String() string { return fmt.Sprintf("compiler(%s)", c.doc.path) }
