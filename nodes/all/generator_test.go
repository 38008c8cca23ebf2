package all_test

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing/fstest"
)

// gen makes a flow from the fuzzer's bytes: each choice takes the next
// byte (0 once they run out), so that a smaller input is a smaller flow.
// Its fields cover what the validator's types reason about: scalars and
// lists, values that may be null, objects with required members, closed
// or open, and a nested object, merged or replaced; an enum named
// through a $ref (to the schema's own $defs, or to a file); bounds and
// steps; and the expressions and templates over them read them safely
// or not (?? and ?., nil tests, let, functions given the wrong type).
type gen struct {
	data   []byte
	fields []*field
	b      strings.Builder
	// counter is the integer field loops count rounds with.
	counter *field
	// tool, when set, is an http tool the flow declares (with flowTool
	// a flow tool: a child flow whose input p0 is, read as input.p0), its
	// parameters typed as fields are, which its llm nodes call through
	// their prompt's fallback, with args its arguments' expressions
	tool     *field
	flowTool bool
	args     []string
}

// field is one generated state field.
type field struct {
	name, typ string // typ: integer, number, string, boolean, ints, strings, object, color
	enum      []string
	bounded   bool // integer in [0, 10]; number in [0, 1]
	step      bool // integer, a multiple of 2
	maxLen    int  // string, 0: none
	def       bool // has a default
	input     bool
	reducer   string
	// nullable: null is among its types (its default may be null)
	nullable bool
	// an object's: a required, additionalProperties: false
	required, closed bool
	// color's enum is a $ref: to the schema's $defs, or to a file
	fileRef bool
}

// refFile is the schema file color fields name when the ref is to a file
// (relative to the package: a generated flow is loaded as gen.yaml).
const refFile = "testdata/gen/defs.json"

func newGen(data []byte) *gen { return &gen{data: data} }

func (g *gen) next() int {
	if len(g.data) == 0 {
		return 0
	}
	b := g.data[0]
	g.data = g.data[1:]
	return int(b)
}

// pick chooses one of n.
func (g *gen) pick(n int) int { return g.next() % n }

// chance is true with probability k/8.
func (g *gen) chance(k int) bool { return g.next()%8 < k }

func (g *gen) line(format string, args ...any) { fmt.Fprintf(&g.b, format+"\n", args...) }

var types = []string{"integer", "number", "string", "boolean", "ints", "strings", "object", "color"}

// scalar reports whether the field holds one value (not a list or object).
func (f *field) scalar() bool {
	switch f.typ {
	case "integer", "number", "string", "boolean", "color":
		return true
	}
	return false
}

func (g *gen) flow() string {
	n := 3 + g.pick(4)
	for i := range n {
		f := &field{name: fmt.Sprintf("f%d", i), typ: types[g.pick(len(types))], def: g.chance(6)}
		switch f.typ {
		case "integer":
			f.bounded = g.chance(2)
			f.step = !f.bounded && g.chance(1)
			if g.chance(2) {
				f.reducer = []string{"add", "max", "min"}[g.pick(3)]
			}
			if f.bounded && f.reducer == "add" {
				f.reducer = "" // what an addition reaches is the data's to decide
			}
		case "number":
			f.bounded = g.chance(1)
		case "string":
			if g.chance(3) {
				f.enum = []string{"red", "green", "blue"}[:2+g.pick(2)]
			} else if g.chance(2) {
				f.maxLen = 4 + g.pick(8)
			}
		case "ints", "strings":
			f.reducer = []string{"append", "union", ""}[g.pick(3)]
			f.def = f.def || f.reducer != ""
		case "object":
			f.required, f.closed = g.chance(4), g.chance(4)
			f.reducer = []string{"", "merge", "deep_merge"}[g.pick(3)]
			f.def = f.def || f.reducer != ""
		case "color":
			f.fileRef = g.chance(4)
		}
		// a scalar or an object may be null (not one a reducer folds)
		f.nullable = (f.scalar() || f.typ == "object") && f.reducer == "" && !f.step && g.chance(2)
		f.input = g.chance(2)
		g.fields = append(g.fields, f)
	}
	g.counter = &field{name: "rounds", typ: "integer", def: true}
	g.fields = append(g.fields, g.counter)
	if g.chance(3) {
		g.tool = &field{name: "p0", typ: types[g.pick(4)]}
		switch g.tool.typ {
		case "integer":
			g.tool.bounded = g.chance(4)
		case "string":
			if g.chance(3) {
				g.tool.enum = []string{"red", "green"}
			} else if g.chance(3) {
				g.tool.maxLen = 4 + g.pick(4)
			}
		}
		g.flowTool = g.chance(2)
	}

	g.line("version: 1")
	g.line("name: gen")
	g.line("state:")
	g.line("  schema:")
	g.line("    type: object")
	if slices.ContainsFunc(g.fields, func(f *field) bool { return f.typ == "color" && !f.fileRef }) {
		g.line("    $defs:")
		g.line("      color: {type: string, enum: [red, green]}")
	}
	g.line("    properties:")
	for _, f := range g.fields {
		g.line("      %s: %s", f.name, f.schema())
	}
	var reducers []string
	for _, f := range g.fields {
		if f.reducer != "" {
			reducers = append(reducers, fmt.Sprintf("    %s: %s", f.name, f.reducer))
		}
	}
	if len(reducers) > 0 {
		g.line("  reducers:")
		g.b.WriteString(strings.Join(reducers, "\n") + "\n")
	}
	var inputs []string
	for _, f := range g.fields {
		if f.input {
			inputs = append(inputs, f.name)
		}
	}
	if len(inputs) > 0 {
		g.line("input: [%s]", strings.Join(inputs, ", "))
	}
	if g.tool != nil {
		g.line("tools:")
		g.line("  t0:")
		if g.flowTool {
			g.line("    kind: flow")
			g.line("    flow: child.yaml")
		} else {
			g.line("    kind: http")
			g.line("    description: A generated tool.")
			g.line("    parameters: {type: object, properties: {p0: %s}, required: [p0]}", g.tool.schema())
			g.line("    url: \"https://tools.example.com/t0?p={{urlquery (print .args.p0)}}\"")
			g.line("    allow: [tools.example.com]")
		}
		g.args = []string{g.write(g.tool)}
	}
	// nodes: a chain, maybe with a fan-out and join, a branch and a
	// bounded loop back to the start
	nodes := 2 + g.pick(4)
	g.line("nodes:")
	for i := range nodes {
		if i == 0 && g.tool != nil {
			g.llmNode("n0")
			continue
		}
		g.node(fmt.Sprintf("n%d", i))
	}
	fan := nodes >= 3 && g.chance(3)
	if fan {
		g.node("pa")
		g.node("pb")
	}
	g.line("  tick: {kind: assign, set: {rounds: \"state.rounds + 1\"}}")
	g.line("edges:")
	g.line("  - {from: START, to: n0}")
	for i := 0; i+1 < nodes; i++ {
		from, to := fmt.Sprintf("n%d", i), fmt.Sprintf("n%d", i+1)
		switch {
		case fan && i == 0:
			g.line("  - {from: %s, to: [pa, pb]}", from)
			g.line("  - {from: [pa, pb], to: %s}", to)
		case g.chance(2) && i+2 < nodes:
			when := g.expr("boolean", 2)
			if !strings.Contains(when, "state.") {
				// a constant condition leaves a case dead, and what it
				// leads to with it
				when = "state.rounds % 2 == 0 && " + when
			}
			g.line("  - from: %s", from)
			g.line("    branch:")
			g.line("      - when: %q", when)
			g.line("        to: %s", fmt.Sprintf("n%d", i+2))
			g.line("      - else: %s", to)
		default:
			g.line("  - {from: %s, to: %s}", from, to)
		}
	}
	g.line("  - {from: n%d, to: tick}", nodes-1)
	g.line("  - from: tick")
	g.line("    bound: 3")
	g.line("    branch:")
	g.line("      - {when: \"state.rounds %% 2 == 1 && state.rounds < 4\", to: n0}")
	g.line("      - else: END")
	return g.b.String()
}

// llmNode writes an llm node calling the tool through its prompt's
// fallback, writing how many calls it made.
func (g *gen) llmNode(name string) {
	target := g.fields[g.pick(len(g.fields)-1)]
	g.line("  %s:", name)
	g.line("    kind: llm")
	g.line("    prompt: gen.prompt")
	g.line("    tools: [t0]")
	g.line("    writes: {%s: %q}", target.name, []string{"output", "len(tool_calls)", "tool_calls[0].tool", "string(tool_calls[0].result)"}[g.pick(4)])
}

// child is the flow a flow tool runs: its input p0, read with nothing to
// fall back on (so a required parameter), its output the result.
func (g *gen) child() string {
	if g.tool == nil || !g.flowTool {
		return "version: 1\nname: child\n"
	}
	return fmt.Sprintf(`version: 1
name: child
description: A generated flow tool.
state:
  schema:
    type: object
    properties:
      p0: %s
      out: {type: string, default: ""}
input: [p0]
nodes:
  n: {kind: assign, set: {out: "string(input.p0)"}}
edges:
  - {from: START, to: n}
  - {from: n, to: END}
output: "{{.state.out}}"
`, g.tool.schema())
}

// refDefs is the schema file a color field's $ref may name (refFile).
var refDefs = func() []byte {
	b, err := os.ReadFile(refFile)
	if err != nil {
		panic(err)
	}
	return b
}()

// files are the generated flow's files: the flow, its prompt, the child
// flow a flow tool runs, and the schema file a $ref names.
func (g *gen) files(src string) fstest.MapFS {
	return fstest.MapFS{"gen.yaml": {Data: []byte(src)}, "gen.prompt": {Data: []byte(g.prompt())}, "child.yaml": {Data: []byte(g.child())},
		refFile: {Data: refDefs}}
}

// prompt is the llm nodes' prompt: its fallback calls the tool.
func (g *gen) prompt() string {
	if g.tool == nil {
		return "---\nfallback: none\n---\nNothing.\n"
	}
	return fmt.Sprintf("---\nfallback_calls:\n  - tool: t0\n    arguments: {p0: %q}\nfallback: done\n---\nCall t0.\n", g.args[0])
}

// objectSchema is an object field's schema: a, an integer; b, a text or
// null; c, an object of one integer x.
func (f *field) objectSchema() string {
	s := "type: object, properties: {a: {type: integer}, b: {type: [string, 'null']}, c: {type: object, properties: {x: {type: integer}}, required: [x]}}"
	if f.required {
		s += ", required: [a]"
	}
	if f.closed {
		s += ", additionalProperties: false"
	}
	return s
}

func (f *field) schema() string {
	var s string
	switch f.typ {
	case "integer":
		s = "type: integer"
		if f.bounded {
			s += ", minimum: 0, maximum: 10"
		}
		if f.step {
			s += ", multipleOf: 2"
		}
	case "number":
		s = "type: number"
		if f.bounded {
			s += ", minimum: 0, maximum: 1"
		}
	case "string":
		s = "type: string"
		if f.enum != nil {
			s += ", enum: [" + strings.Join(f.enum, ", ")
			if f.nullable {
				s += ", null"
			}
			s += "]"
		}
		if f.maxLen > 0 {
			s += fmt.Sprintf(", maxLength: %d", f.maxLen)
		}
	case "boolean":
		s = "type: boolean"
	case "ints":
		s = "type: array, items: {type: integer}"
	case "strings":
		s = "type: array, items: {type: string}"
	case "object":
		s = f.objectSchema()
	case "color":
		ref := "'#/$defs/color'"
		if f.fileRef {
			ref = "'" + refFile + "#/$defs/color'"
		}
		if f.nullable {
			s = "anyOf: [{$ref: " + ref + "}, {type: 'null'}]"
		} else {
			s = "$ref: " + ref
		}
	}
	if f.nullable && f.typ != "color" {
		s = strings.Replace(s, "type: "+f.typ, "type: ["+f.typ+", 'null']", 1)
	}
	if f.def {
		s += ", default: " + f.zero()
	}
	return "{" + s + "}"
}

// zero is a valid default of the field (null, for some that may be null).
func (f *field) zero() string {
	if f.nullable && f.name[len(f.name)-1]%2 == 0 {
		return "null"
	}
	switch f.typ {
	case "integer":
		return "0"
	case "number":
		if f.bounded {
			return "0.5"
		}
		return "1.5"
	case "string":
		if f.enum != nil {
			return f.enum[0]
		}
		return `""`
	case "color":
		return "red"
	case "boolean":
		return "false"
	case "object":
		return "{a: 1, b: null, c: {x: 0}}"
	}
	return "[]"
}

// node writes a node of a random kind.
func (g *gen) node(name string) {
	target := g.fields[g.pick(len(g.fields)-1)] // not the counter
	switch k := g.pick(6); {
	case k == 5:
		g.line("  %s: {kind: noop}", name)
	case k == 4 && (target.typ == "string" || target.typ == "color"):
		g.line("  %s:", name)
		g.line("    kind: render")
		g.line("    set:")
		g.line("      %s: %q", target.name, g.template(target))
	case k == 3 && (target.typ == "ints" || target.typ == "strings") && target.reducer == "append":
		list := g.fieldOf("ints", "strings")
		items := "[1, 2]"
		if list != nil && list.def {
			items = "state." + list.name
		}
		if s := g.fieldOf("string"); s != nil && s.def && !s.nullable && g.chance(3) {
			items = "split(state." + s.name + " + ' x', ' ')" // a list of strings
		}
		g.line("  %s:", name)
		g.line("    kind: map")
		g.line("    items: %q", items)
		g.line("    node: {kind: assign, set: {%s: %q}}", target.name, g.itemExpr(target))
	default:
		g.line("  %s:", name)
		g.line("    kind: assign")
		g.line("    set:")
		g.line("      %s: %q", target.name, g.write(target))
		if other := g.fields[g.pick(len(g.fields)-1)]; other != target && g.chance(4) {
			g.line("      %s: %q", other.name, g.write(other))
		}
	}
}

// fieldOf picks a field of one of the types, nil when there is none.
func (g *gen) fieldOf(types ...string) *field {
	var fs []*field
	for _, f := range g.fields {
		if slices.Contains(types, f.typ) {
			fs = append(fs, f)
		}
	}
	if len(fs) == 0 {
		return nil
	}
	return fs[g.pick(len(fs))]
}

// write is an expression for the field, mostly of its type, sometimes
// of another or null (the validator must then refuse the flow, or warn).
func (g *gen) write(f *field) string {
	if f.nullable && g.chance(1) {
		return "nil"
	}
	switch {
	case f.typ == "object":
		return g.objectWrite(f)
	case f.typ == "color":
		switch g.pick(4) {
		case 0:
			return "'blue'" // no value of its enum
		case 1:
			if s := g.fieldOf("string"); s != nil {
				return "state." + s.name // text it does not control
			}
		case 2:
			if c := g.fieldOf("color"); c != nil && c != f {
				return "state." + c.name + " ?? 'green'"
			}
		}
		return []string{"'red'", "'green'"}[g.pick(2)]
	case f.step:
		switch g.pick(3) {
		case 0:
			return fmt.Sprint(g.pick(7)) // odd or even
		case 1:
			return g.expr("integer", 1) + " * 2"
		}
		return g.expr("integer", 1)
	case f.bounded && f.typ == "number":
		switch g.pick(3) {
		case 0:
			return "min(1.0, max(0.0, " + g.expr("number", 1) + "))"
		case 1:
			return []string{"0.25", "1.5", "-0.5"}[g.pick(3)]
		}
		return g.expr("number", 1)
	case f.bounded:
		a, b := g.pick(14)-2, g.pick(14)-2
		switch g.pick(6) {
		case 0, 1:
			return fmt.Sprint(a)
		case 2:
			return "min(10, max(0, " + g.expr("integer", 1) + "))"
		case 3:
			return g.expr("integer", 1) // a computed number: may leave the bounds
		}
		return fmt.Sprintf("%s ? %d : %d", g.expr("boolean", 1), a, b)
	case f.enum != nil:
		vals := append(slices.Clone(f.enum), "purple")
		a, b := vals[g.pick(len(vals))], vals[g.pick(len(vals))]
		if g.chance(4) {
			return "'" + a + "'"
		}
		return fmt.Sprintf("%s ? '%s' : '%s'", g.expr("boolean", 1), a, b)
	case f.maxLen > 0:
		return "'" + strings.Repeat("x", g.pick(12)) + "'"
	case f.typ == "ints":
		if f.reducer != "" && g.chance(3) {
			return g.expr("integer", 2)
		}
		return "[" + g.expr("integer", 1) + ", " + g.expr("integer", 1) + "]"
	case f.typ == "strings":
		if f.reducer != "" && g.chance(3) {
			return g.expr("string", 2)
		}
		return "[" + g.expr("string", 1) + "]"
	}
	if g.chance(1) {
		return g.expr(types[g.pick(4)], 2)
	}
	return g.expr(f.typ, 2)
}

// objectWrite is an object for an object field: whole, or missing its
// required member, with a member its closed schema does not declare, a
// nested member of the wrong type, or a member that may be null.
func (g *gen) objectWrite(f *field) string {
	a := g.expr("integer", 1)
	switch g.pick(8) {
	case 0:
		return "{'b': " + g.expr("string", 1) + "}" // no a
	case 1:
		return "{'a': " + a + ", 'z': 1}" // z undeclared
	case 2:
		return "{'a': " + a + ", 'c': {'x': 'no'}}" // x not an integer
	case 3:
		if n := g.nullableOf("integer"); n != nil {
			return "{'a': state." + n.name + "}" // a may be null
		}
	case 4:
		if o := g.fieldOf("object"); o != nil && o != f {
			return "state." + o.name
		}
	case 5:
		return "{'c': {'x': " + a + "}}"
	}
	return "{'a': " + a + ", 'b': " + g.expr("string", 1) + ", 'c': {'x': 2}}"
}

// nullableOf picks a field of the type that may be null (nil: none).
func (g *gen) nullableOf(typ string) *field {
	var fs []*field
	for _, f := range g.fields {
		if f.typ == typ && f.nullable {
			fs = append(fs, f)
		}
	}
	if len(fs) == 0 {
		return nil
	}
	return fs[g.pick(len(fs))]
}

// itemExpr is what a map's node writes per item to an append field.
func (g *gen) itemExpr(f *field) string {
	if f.typ == "ints" {
		return []string{"index", "index * 2", "len(string(item))", "index / 2"}[g.pick(4)]
	}
	return []string{"string(item)", "'item ' + string(index)", "upper(string(item))"}[g.pick(3)]
}

// read is a read of a field of the type, or a literal when none has it;
// a field that may be null is read safely, or not.
func (g *gen) read(typ string) string {
	if typ == "integer" && g.chance(1) {
		if o := g.fieldOf("object"); o != nil {
			return g.objectRead(o)
		}
	}
	f := g.fieldOf(typ)
	if f == nil || g.chance(2) {
		switch typ {
		case "integer":
			return fmt.Sprint(g.pick(7))
		case "number":
			return []string{"0.5", "2.0", "3.25"}[g.pick(3)]
		case "string":
			return []string{"'a'", "'red'", "''"}[g.pick(3)]
		case "boolean":
			return []string{"true", "false"}[g.pick(2)]
		}
	}
	if f.nullable {
		switch g.pick(4) {
		case 0:
			return "state." + f.name // may be null: the validator warns where it matters
		case 1:
			return fmt.Sprintf("(state.%s != nil ? state.%s : %s)", f.name, f.name, f.nonNullZero())
		case 2:
			return fmt.Sprintf("(let v = state.%s; v ?? %s)", f.name, f.nonNullZero())
		}
		return "(state." + f.name + " ?? " + f.nonNullZero() + ")"
	}
	if !f.def && !f.input && g.chance(3) {
		return "(state." + f.name + " ?? " + f.nonNullZero() + ")"
	}
	return "state." + f.name
}

// nonNullZero is a value of the field's type that is not null.
func (f *field) nonNullZero() string {
	switch f.typ {
	case "integer":
		return "0"
	case "number":
		return "0.5"
	case "string":
		if f.enum != nil {
			return "'" + f.enum[0] + "'"
		}
		return "''"
	case "color":
		return "'red'"
	case "boolean":
		return "false"
	}
	return "nil"
}

// objectRead is an integer read of an object field's members: safe
// through ?. and ??, or through a let name tested against nil, or not.
func (g *gen) objectRead(o *field) string {
	switch g.pick(5) {
	case 0:
		return "state." + o.name + ".c.x"
	case 1:
		return "(state." + o.name + "?.a ?? 0)"
	case 2:
		return fmt.Sprintf("(let q = state.%s; q != nil && q.a != nil ? q.a : 1)", o.name)
	case 3:
		return "state." + o.name + ".a" // may be null: a missing member, or a null object
	}
	return "(state." + o.name + "?.c?.x ?? 0)"
}

// expr is an expression meant to give the type (integer, number,
// string, boolean), of depth at most d.
func (g *gen) expr(typ string, d int) string {
	if d <= 0 {
		return g.read(typ)
	}
	switch typ {
	case "integer":
		switch g.pick(8) {
		case 0:
			return g.expr("integer", d-1) + " + " + g.expr("integer", d-1)
		case 1:
			return g.expr("integer", d-1) + " * 2"
		case 2:
			return "int(" + g.expr("number", d-1) + ")"
		case 3:
			return "round(" + g.expr("number", d-1) + ")"
		case 4:
			return g.expr("integer", d-1) + " / 2" // a number: refused into an integer
		case 5:
			return "len(" + g.expr("string", d-1) + ")"
		case 6:
			return g.expr("boolean", d-1) + " ? " + g.expr("integer", d-1) + " : " + g.expr("integer", d-1)
		}
	case "number":
		switch g.pick(6) {
		case 0:
			return g.expr("number", d-1) + " * 1.5"
		case 1:
			return g.expr("integer", d-1) + " / 3"
		case 2:
			return "mean([" + g.expr("number", d-1) + ", " + g.expr("integer", d-1) + "])"
		case 3:
			return g.expr("integer", d-1) + " + 0.5"
		case 4:
			return "max(" + g.expr("integer", d-1) + ", 2.5)"
		}
	case "string":
		switch g.pick(7) {
		case 0:
			return g.expr("string", d-1) + " + '!'"
		case 1:
			return "upper(" + g.expr("string", d-1) + ")"
		case 2:
			return "string(" + g.expr("integer", d-1) + ")"
		case 3:
			return g.expr("boolean", d-1) + " ? " + g.expr("string", d-1) + " : 'no'"
		case 4:
			if o := g.fieldOf("object"); o != nil {
				return "(state." + o.name + "?.b ?? 'none')"
			}
		}
	case "boolean":
		switch g.pick(7) {
		case 0:
			return compare(g.expr("integer", d-1), " > ", g.expr("integer", d-1), "1")
		case 1:
			return compare(g.expr("number", d-1), " <= ", g.expr("integer", d-1), "1")
		case 2:
			return compare(g.expr("string", d-1), " == ", g.expr("string", d-1), "'x'")
		case 3:
			return "!(" + g.expr("boolean", d-1) + ")"
		case 4:
			return g.expr("boolean", d-1) + " && " + g.expr("boolean", d-1)
		case 5:
			if n := g.nullableOf([]string{"integer", "string", "object"}[g.pick(3)]); n != nil {
				return "state." + n.name + " != nil"
			}
		}
	}
	return g.read(typ)
}

// compare writes a comparison of two sides, the second other when both
// are the same text: a value compared with itself decides the condition
// whatever the data, which no designer writes and the validator does not
// fold (a warning about the side that never runs would have no input
// that fails).
func compare(left, op, right, other string) string {
	if left == right {
		right = other
	}
	return left + op + right
}

// template is a render's template for a string field: fields printed,
// tested and ranged over, and functions given what they take or not.
func (g *gen) template(f *field) string {
	piece := func() string {
		switch g.pick(12) {
		case 0:
			if n := g.fieldOf("number", "integer"); n != nil && n.def && !n.nullable {
				lit := []string{"0", "0.0", "2", "2.5"}[g.pick(4)]
				op := []string{"gt", "lt", "eq", "ge"}[g.pick(4)]
				return fmt.Sprintf("{{if %s .state.%s %s}}%s{{else}}%s{{end}}", op, n.name, lit, g.word(f), g.word(f))
			}
		case 1:
			if s := g.fieldOf("string"); s != nil {
				return "{{.state." + s.name + "}}"
			}
		case 2:
			if b := g.fieldOf("boolean"); b != nil {
				return fmt.Sprintf("{{if .state.%s}}%s{{else}}%s{{end}}", b.name, g.word(f), g.word(f))
			}
		case 3:
			if s := g.fieldOf("string"); s != nil {
				return fmt.Sprintf("{{with .state.%s}}{{.}}{{else}}%s{{end}}", s.name, g.word(f))
			}
		case 4:
			if n := g.fieldOf("integer", "number"); n != nil {
				return "{{.state." + n.name + "}}"
			}
		case 5:
			if s := g.fieldOf("string", "integer", "color"); s != nil {
				return "{{upper .state." + s.name + "}}" // an integer: refused
			}
		case 6:
			if l := g.fieldOf("strings", "string", "ints"); l != nil {
				return `{{join ", " .state.` + l.name + "}}" // a text: refused
			}
		case 7:
			if n := g.fieldOf("integer", "string", "number"); n != nil {
				return []string{`{{printf "%d" .state.`, `{{printf "%v-%v" .state.`, `{{printf "%s" .state.`}[g.pick(3)] + n.name + "}}"
			}
		case 8:
			if l := g.fieldOf("strings", "ints", "string"); l != nil {
				return "{{len .state." + l.name + "}}"
			}
		case 9:
			if o := g.fieldOf("object"); o != nil {
				return []string{"{{with .state." + o.name + "}}{{.a}}{{end}}", "{{.state." + o.name + ".c.x}}"}[g.pick(2)]
			}
		case 10:
			if l := g.fieldOf("strings", "ints"); l != nil {
				return "{{range first 2 .state." + l.name + "}}{{.}} {{end}}"
			}
		}
		return g.word(f)
	}
	if f.enum != nil || f.maxLen > 0 || f.typ == "color" {
		return piece()
	}
	return piece() + " " + piece()
}

// word is literal text for a template writing f: one of its enum values
// (or not), a short word.
func (g *gen) word(f *field) string {
	if f.enum != nil || f.typ == "color" {
		vals := append(slices.Clone(f.enum), "teal")
		if f.typ == "color" {
			vals = []string{"red", "green", "teal"}
		}
		return vals[g.pick(len(vals))]
	}
	return []string{"ok", "a longer line of text", "x"}[g.pick(3)]
}

// input is a random input for the flow's input fields, of their types.
func (g *gen) input() map[string]any {
	in := map[string]any{}
	for _, f := range g.fields {
		if !f.input || g.chance(3) {
			continue
		}
		in[f.name] = g.value(f)
	}
	return in
}

// value is a random value of the field's schema (null, sometimes, for
// one that may be null).
func (g *gen) value(f *field) any {
	if f.nullable && g.chance(2) {
		return nil
	}
	switch f.typ {
	case "integer":
		switch {
		case f.bounded:
			return g.pick(11)
		case f.step:
			return 2 * (g.pick(20) - 10)
		}
		return g.pick(100) - 50
	case "number":
		if f.bounded {
			return []any{0, 0.25, 1}[g.pick(3)]
		}
		return []any{0, 2, -1.5, 7.25}[g.pick(4)]
	case "string":
		switch {
		case f.enum != nil:
			return f.enum[g.pick(len(f.enum))]
		case f.maxLen > 0:
			return "ab"
		default:
			return []string{"", "red", "a b", "zzzzzzzzzzzzzzzz"}[g.pick(4)]
		}
	case "color":
		return []string{"red", "green"}[g.pick(2)]
	case "boolean":
		return g.chance(4)
	case "ints":
		return []any{g.pick(5), 3}
	case "strings":
		return []any{"p", "q"}
	case "object":
		o := map[string]any{"b": nil, "c": map[string]any{"x": g.pick(5)}}
		if f.required || g.chance(4) {
			o["a"] = g.pick(9) - 4
		}
		return o
	}
	return nil
}
