package flow

import (
	"fmt"
	"slices"
	"strings"

	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/schema"
)

// A flow's tools block declares what its llm nodes may call: each entry
// a tool kind (http, flow, mcp, sandbox) with its settings, read through
// the kind's kind.ToolSpec as a node is read through its kind's Spec.
// Entries are compiled before the nodes, so that a node's tools setting
// can name them; an entry no node names is reported.

// toolName is a tools entry's name, and a tool's: what chat models take as
// a function's name.
var toolName = config.String("", "").Match(`^[A-Za-z_][A-Za-z0-9_-]{0,63}$`)

var functionName = diag.Pattern(`^[A-Za-z0-9_-]{1,64}$`)

// ToolEntry is one compiled entry of a flow's tools block.
type ToolEntry struct {
	Name string
	Kind string
	Pos  diag.Pos
	// Tools are the functions it declares (one, or an MCP server's).
	Tools []*kind.Tool
	// used is set once a node names it
	used bool
}

// toolsBlock compiles the flow's tools block.
func (c *compiler) toolsBlock(v config.Value) {
	if !v.IsMapping() {
		return // absent, or the format check reported it
	}
	tr, ok := c.reg.(kind.ToolRegistry)
	if !ok {
		c.dl.Errorf(diag.CodeToolSetting, v.Pos(), "tools", "this program registers no tool kinds: the flow's tools cannot be read")
		return
	}
	c.toolEntries = map[string]*ToolEntry{}
	for _, e := range v.Entries() {
		path := "tools." + e.Name
		te := &ToolEntry{Name: e.Name, Kind: e.Value.Get("kind").Text(), Pos: e.Key.Pos()}
		c.toolEntries[e.Name] = te
		c.g.ToolEntries = append(c.g.ToolEntries, te)
		if c.badTools[e.Name] {
			continue
		}
		spec, ok := tr.LookupTool(te.Kind)
		if !ok {
			continue // reported by the format check
		}
		b := &builder{c: c, name: e.Name, body: e.Value, path: path, spec: &kind.Spec{Name: spec.Name, Fields: spec.Fields}, tool: true}
		tools := spec.New(b)
		common := config.NewSettings(e.Value, kind.ToolCommonFields)
		desc, _ := common.String("description")
		for _, t := range tools {
			if t == nil {
				continue
			}
			t.Entry, t.Kind, t.Pos = e.Name, spec.Name, e.Key.Pos()
			if desc != "" && (t.Description == "" || len(tools) == 1) {
				// the entry's own words, over what its kind found (a
				// child flow's description); an MCP server's tools keep
				// their own
				t.Description = desc
			}
			switch {
			case !functionName().MatchString(t.Name):
				c.dl.Errorf(diag.CodeToolSetting, e.Key.Pos(), path, "tool %q: a model calls tools by names of 1 to 64 letters, digits, _ and -", t.Name)
				continue
			case t.Description == "":
				c.dl.Errorf(diag.CodeToolSetting, e.Key.Pos(), path, "tool %q needs a description: the model chooses tools by what they say they do", t.Name)
				continue
			case t.Params == nil || t.Parameters == nil || t.Impl == nil:
				continue // its kind reported why
			}
			te.Tools = append(te.Tools, t)
		}
		c.approval(common.Value("approve"), te)
	}
}

// approval compiles an entry's approve setting onto its tools.
func (c *compiler) approval(v config.Value, te *ToolEntry) {
	switch {
	case !v.Exists() || v.IsScalar() && v.Text() == "never":
		return
	case v.IsScalar() && v.Text() == "always":
		for _, t := range te.Tools {
			t.Approve = &kind.Approval{Always: true}
		}
		return
	case !v.IsMapping():
		return // the format check reported it
	}
	var args *schema.Shape
	if len(te.Tools) == 1 {
		args = te.Tools[0].Params.Shape
	}
	env := c.env.With("args", args).With("tool", &schema.Shape{Types: []string{"string"}})
	p := c.compileExpr(v.Get("when"), env, true)
	if p == nil {
		return
	}
	for _, t := range te.Tools {
		t.Approve = &kind.Approval{When: p}
	}
}

// unusedTools warns of the tools entries no node names.
func (c *compiler) unusedTools() {
	if c.toolMisses > 0 {
		return // a name misspelt: the entry it meant is not unused
	}
	for _, te := range c.g.ToolEntries {
		if !te.used && len(te.Tools) > 0 {
			c.dl.Add(diag.Diagnostic{Severity: diag.Warning, Code: diag.CodeToolName, Pos: te.Pos, Path: "tools." + te.Name,
				Summary: fmt.Sprintf("tool %q is declared, but no llm node names it in its tools: the model never sees it", te.Name)})
		}
	}
}

// Tools implements kind.Builder.
func (b *builder) Tools(v config.Value) []*kind.Tool {
	c := b.c
	if !v.IsSequence() {
		return nil // the format check reported it
	}
	var names []string
	for _, te := range c.g.ToolEntries {
		names = append(names, te.Name)
	}
	ok := true
	var out []*kind.Tool
	by := map[string]*kind.Tool{}
	for _, it := range v.Items() {
		te, found := c.toolEntries[it.Text()]
		if !found {
			c.toolMisses++
			d := c.dl.Errorf(diag.CodeToolName, it.Pos(), b.path+".tools", "%q is not a tool of this flow", it.Text())
			if len(names) == 0 {
				d.Summary += ": declare it under the flow's tools"
			} else {
				d.Suggestion = diag.Suggest(it.Text(), names)
			}
			ok = false
			continue
		}
		te.used = true
		if len(te.Tools) == 0 {
			ok = false // its problems are reported at the entry
			continue
		}
		for _, t := range te.Tools {
			if prev, dup := by[t.Name]; dup {
				c.dl.Errorf(diag.CodeToolName, it.Pos(), b.path+".tools", "two tools this node may call are named %q (from %s and %s): the model could not tell them apart", t.Name, prev.Entry, t.Entry)
				ok = false
				continue
			}
			by[t.Name] = t
			out = append(out, t)
		}
	}
	if !ok {
		return nil
	}
	return out
}

// toolWrite reports a tool's attempt to declare a state write: a tool
// returns a result to the model, and writes nothing.
func (b *builder) toolWrite(field string, at config.Value) {
	b.c.dl.Errorf(diag.CodeToolSetting, at.Pos(), b.path, "tool %q writes field %q: a tool returns its result to the model and writes no state (the llm node's writes may read tool_calls)", b.name, field)
}

// Tool returns a tool of the flow by the name a model calls it.
func (g *Graph) Tool(name string) (*kind.Tool, bool) {
	for _, te := range g.ToolEntries {
		for _, t := range te.Tools {
			if t.Name == name {
				return t, true
			}
		}
	}
	return nil, false
}

// toolKindDefs adds the tools entry's JSON Schema definitions: one per
// tool kind, discriminated by kind.
func toolKindDefs(reg kind.Registry, defs map[string]any) {
	specs := kind.ToolSpecsOf(reg)
	names := make([]any, len(specs))
	var branches []any
	for i, sp := range specs {
		names[i] = sp.Name
		block := config.Object("", sp.Summary, append(slices.Clone(kind.ToolCommonFields), sp.Fields...)...)
		def := block.Schema()
		props := def["properties"].(map[string]any)
		props["kind"] = map[string]any{"const": sp.Name, "description": sp.Summary}
		defs["tool."+sp.Name] = def
		branches = append(branches, map[string]any{
			"if":   map[string]any{"required": []any{"kind"}, "properties": map[string]any{"kind": map[string]any{"const": sp.Name}}},
			"then": map[string]any{"$ref": "#/$defs/tool." + sp.Name},
		})
	}
	tool := map[string]any{
		"type":        "object",
		"required":    []any{"kind"},
		"description": "A tool an llm node may call: a tool kind and its settings.",
		"properties":  map[string]any{"kind": map[string]any{"enum": names, "description": "The tool kind."}},
	}
	if len(branches) > 0 {
		tool["allOf"] = branches
	}
	defs["tool"] = tool
}

// toolsField is the tools block's declaration.
var toolsField = config.Map("tools", "Tools the flow's llm nodes may call (tools: [NAME]): name to a tool kind and its settings. The model sees each tool's name, description and parameters; its calls are checked against the parameters, approved as approve says, run, and their results fed back.",
	config.Elem(ref("tool"))).KeysAre(toolName)

// ToolReference renders the tool-kind reference in Markdown from the
// declarations.
func ToolReference(reg kind.Registry) string {
	specs := kind.ToolSpecsOf(reg)
	if len(specs) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n## Tools\n\nA flow's `tools` block declares what its `llm` nodes may call (`tools: [NAME]`). Every entry has a `kind` and may set:\n\n")
	b.WriteString(config.Table(kind.ToolCommonFields))
	for _, sp := range specs {
		fmt.Fprintf(&b, "\n### tool `%s`\n\n%s\n", sp.Name, sp.Summary)
		if len(sp.Fields) > 0 {
			b.WriteString("\n" + config.Table(sp.Fields))
		}
	}
	return b.String()
}
