package all_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/store/memory"
)

// The differential check holds the validator to the engine: a random
// flow (state schema, reducers, expressions, templates, edges) that
// validates with no diagnostic at all must run, on random input, without
// a failure the validator could have known of: an update its field's
// schema refuses, an expression or template that fails on a value of the
// type it was checked against, a read of a field nothing wrote (a
// template rendering "<no value>"). What only the data decides (an
// integer overflow, a bound or step limit reached) is not such a failure.
// And the flow runs alike with its state read back between steps: after
// every step the state held in the process is the one a store hands back
// (see readsBackAlike).
// `make fuzz` runs it for a bounded count; the fuzzer shrinks what it
// finds, and testdata/fuzz/FuzzDifferential keeps it.
func FuzzDifferential(f *testing.F) {
	for i := range 24 {
		seed := make([]byte, 64)
		for j := range seed {
			seed[j] = byte((i*131 + j*29 + i*j*7) % 251)
		}
		f.Add(seed)
	}
	reg := all.Offline()
	// a tool's calls answer at once: what is checked is that the calls a
	// clean flow makes are the calls its tools take
	ctx := kind.WithToolMock(context.Background(), func(context.Context, *kind.Call) (any, bool, error) { return "ok", true, nil })
	f.Fuzz(func(t *testing.T, data []byte) {
		g := newGen(data)
		src := g.flow()
		graph, dl := flow.LoadFS(g.files(src), "gen.yaml", reg)
		if graph == nil || len(dl) > 0 {
			return // not clean: the validator spoke
		}
		if g.tool != nil {
			src += "# gen.prompt:\n" + g.prompt()
			if g.flowTool {
				src += "# child.yaml:\n" + g.child()
			}
		}
		eng := engine.New(memory.New())
		defer eng.Store.Close()
		var inputs []map[string]any
		for run := range 2 {
			inputs = append(inputs, g.input())
			res, err := eng.Run(ctx, graph, engine.Request{Thread: "t", Input: inputs[run], RecordPath: true})
			if err != nil {
				if excused(err) {
					return
				}
				t.Fatalf("run %d of a flow that validated clean failed: %v\n%s", run+1, err, src)
			}
			for name, v := range res.State {
				if s, ok := v.(string); ok && strings.Contains(s, "<no value>") {
					t.Fatalf("run %d of a flow that validated clean rendered a value no way wrote into %s: %q\n%s", run+1, name, s, src)
				}
			}
		}
		// and the state a process holds is the one another reads back
		readsBackAlikeIn(ctx, t, graph, nil, inputs, src)
	})
}

// excused reports whether a run failed for a reason only the data
// decides, which no validator can know.
func excused(err error) bool {
	var le *engine.LimitError
	if errors.As(err, &le) {
		return true
	}
	var ie *engine.InputError
	if errors.As(err, &ie) {
		return true // the generated input was refused: not the flow's failure
	}
	msg := err.Error()
	for _, data := range []string{"integer overflow", "outside the 64-bit integer range", "integer divide by zero"} {
		if strings.Contains(msg, data) {
			return true
		}
	}
	return false
}

// gen makes a flow from the fuzzer's bytes: each choice takes the next
// byte (0 once they run out), so that a smaller input is a smaller flow.
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
	name, typ string // typ: integer, number, string, boolean, ints, strings
	enum      []string
	bounded   bool // integer in [0, 10]
	maxLen    int  // string, 0: none
	def       bool // has a default
	input     bool
	reducer   string
}

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

var types = []string{"integer", "number", "string", "boolean", "ints", "strings"}

func (g *gen) flow() string {
	n := 3 + g.pick(4)
	for i := range n {
		f := &field{name: fmt.Sprintf("f%d", i), typ: types[g.pick(len(types))], def: g.chance(6)}
		switch f.typ {
		case "integer":
			f.bounded = g.chance(2)
			if g.chance(2) {
				f.reducer = []string{"add", "max", "min"}[g.pick(3)]
			}
			if f.bounded && f.reducer == "add" {
				f.reducer = "" // what an addition reaches is the data's to decide
			}
		case "string":
			if g.chance(3) {
				f.enum = []string{"red", "green", "blue"}[:2+g.pick(2)]
			} else if g.chance(2) {
				f.maxLen = 4 + g.pick(8)
			}
		case "ints", "strings":
			f.reducer = []string{"append", "union", ""}[g.pick(3)]
			f.def = f.def || f.reducer != ""
		}
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
			g.line("  - from: %s", from)
			g.line("    branch:")
			g.line("      - when: %q", g.expr("boolean", 2))
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

func (f *field) schema() string {
	var s string
	switch f.typ {
	case "integer":
		s = "type: integer"
		if f.bounded {
			s += ", minimum: 0, maximum: 10"
		}
	case "number":
		s = "type: number"
	case "string":
		s = "type: string"
		if f.enum != nil {
			s += ", enum: [" + strings.Join(f.enum, ", ") + "]"
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
	}
	if f.def {
		s += ", default: " + f.zero()
	}
	return "{" + s + "}"
}

// zero is a valid default of the field.
func (f *field) zero() string {
	switch f.typ {
	case "integer":
		return "0"
	case "number":
		return "1.5"
	case "string":
		if f.enum != nil {
			return f.enum[0]
		}
		return `""`
	case "boolean":
		return "false"
	}
	return "[]"
}

// node writes a node of a random kind.
func (g *gen) node(name string) {
	target := g.fields[g.pick(len(g.fields)-1)] // not the counter
	switch k := g.pick(6); {
	case k == 5:
		g.line("  %s: {kind: noop}", name)
	case k == 4 && target.typ == "string":
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
		if s := g.fieldOf("string"); s != nil && s.def && g.chance(3) {
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

// files are the generated flow's files.
func (g *gen) files(src string) fstest.MapFS {
	return fstest.MapFS{"gen.yaml": {Data: []byte(src)}, "gen.prompt": {Data: []byte(g.prompt())}, "child.yaml": {Data: []byte(g.child())}}
}

// prompt is the llm nodes' prompt: its fallback calls the tool.
func (g *gen) prompt() string {
	if g.tool == nil {
		return "---\nfallback: none\n---\nNothing.\n"
	}
	return fmt.Sprintf("---\nfallback_calls:\n  - tool: t0\n    arguments: {p0: %q}\nfallback: done\n---\nCall t0.\n", g.args[0])
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
// of another (the validator must then refuse the flow).
func (g *gen) write(f *field) string {
	switch {
	case f.bounded:
		a, b := g.pick(14)-2, g.pick(14)-2
		if g.chance(4) {
			return fmt.Sprint(a)
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

// itemExpr is what a map's node writes per item to an append field.
func (g *gen) itemExpr(f *field) string {
	if f.typ == "ints" {
		return []string{"index", "index * 2", "len(string(item))", "index / 2"}[g.pick(4)]
	}
	return []string{"string(item)", "'item ' + string(index)", "upper(string(item))"}[g.pick(3)]
}

// read is a read of a field of the type, or a literal when none has it.
func (g *gen) read(typ string) string {
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
	if !f.def && !f.input && g.chance(3) {
		return "(state." + f.name + " ?? " + f.zero() + ")"
	}
	return "state." + f.name
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
		}
	case "string":
		switch g.pick(6) {
		case 0:
			return g.expr("string", d-1) + " + '!'"
		case 1:
			return "upper(" + g.expr("string", d-1) + ")"
		case 2:
			return "string(" + g.expr("integer", d-1) + ")"
		case 3:
			return g.expr("boolean", d-1) + " ? " + g.expr("string", d-1) + " : 'no'"
		}
	case "boolean":
		switch g.pick(6) {
		case 0:
			return g.expr("integer", d-1) + " > " + g.expr("integer", d-1)
		case 1:
			return g.expr("number", d-1) + " <= " + g.expr("integer", d-1)
		case 2:
			return g.expr("string", d-1) + " == " + g.expr("string", d-1)
		case 3:
			return "!" + g.expr("boolean", d-1)
		case 4:
			return g.expr("boolean", d-1) + " && " + g.expr("boolean", d-1)
		}
	}
	return g.read(typ)
}

// template is a render's template for a string field.
func (g *gen) template(f *field) string {
	piece := func() string {
		switch g.pick(7) {
		case 0:
			if n := g.fieldOf("number", "integer"); n != nil && n.def {
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
		}
		return g.word(f)
	}
	if f.enum != nil || f.maxLen > 0 {
		return piece()
	}
	return piece() + " " + piece()
}

// word is literal text for a template writing f: one of its enum values
// (or not), a short word.
func (g *gen) word(f *field) string {
	if f.enum != nil {
		vals := append(slices.Clone(f.enum), "teal")
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
		switch f.typ {
		case "integer":
			if f.bounded {
				in[f.name] = g.pick(11)
			} else {
				in[f.name] = g.pick(100) - 50
			}
		case "number":
			in[f.name] = []any{0, 2, -1.5, 7.25}[g.pick(4)]
		case "string":
			switch {
			case f.enum != nil:
				in[f.name] = f.enum[g.pick(len(f.enum))]
			case f.maxLen > 0:
				in[f.name] = "ab"
			default:
				in[f.name] = []string{"", "red", "a b"}[g.pick(3)]
			}
		case "boolean":
			in[f.name] = g.chance(4)
		case "ints":
			in[f.name] = []any{g.pick(5), 3}
		case "strings":
			in[f.name] = []any{"p", "q"}
		}
	}
	return in
}

// The generator's flows reach the tools: among flows made from a fixed
// stream of bytes, some declare a tool, validate clean and make its calls
// when they run (the fuzzer's budget is not spent on flows the validator
// refuses, or that never call one).
func TestDifferentialCoversTools(t *testing.T) {
	reg := all.Offline()
	calls := 0
	ctx := kind.WithToolMock(context.Background(), func(context.Context, *kind.Call) (any, bool, error) {
		calls++
		return "ok", true, nil
	})
	rng := rand.New(rand.NewPCG(1, 2))
	withTool, clean, ran, flows := 0, 0, 0, 0
	for range 1500 {
		data := make([]byte, 96)
		for i := range data {
			data[i] = byte(rng.IntN(256))
		}
		g := newGen(data)
		src := g.flow()
		if g.tool == nil {
			continue
		}
		withTool++
		graph, dl := flow.LoadFS(g.files(src), "gen.yaml", reg)
		if graph == nil || len(dl) > 0 {
			continue
		}
		clean++
		before := calls
		eng := engine.New(memory.New())
		if _, err := eng.Run(ctx, graph, engine.Request{Thread: "t", Input: g.input()}); err == nil && calls > before {
			ran++
			if g.flowTool {
				flows++
			}
		}
		eng.Store.Close()
	}
	t.Logf("%d flows with a tool, %d clean, %d ran calling it (%d a flow tool)", withTool, clean, ran, flows)
	if ran < 10 || flows < 4 {
		t.Fatalf("only %d of %d generated flows with a tool ran calling it (%d clean, %d a flow tool)", ran, withTool, clean, flows)
	}
}
