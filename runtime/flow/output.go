package flow

import (
	"fmt"
	"slices"
	"strings"
	"text/template"
	"text/template/parse"

	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/schema"
	"github.com/trellisflow/trellis/runtime/tmpl"
)

// Output is a flow's declared result: a text template over the state a
// run ends with (.state), such as a report of what the run found. A tool
// shows it instead of the raw state: `trellis run` prints it, the API
// returns it with a finished run.
//
//	output: |
//	  Score {{.state.final_score}}: {{if .state.threshold_met}}ready{{else}}needs work{{end}}
type Output struct {
	Template *template.Template
	// Source is the template as written; Pos where it starts.
	Source string
	Pos    diag.Pos
	// Reads lists the state fields the template reads, in the order
	// they first appear.
	Reads []string
}

// Render renders the output over a run's final state.
func (o *Output) Render(state map[string]any) (string, error) {
	s, err := tmpl.Execute(o.Template, map[string]any{"state": state})
	if err != nil {
		return "", fmt.Errorf("output: %w", err)
	}
	return s, nil
}

// label names the output in a drawing, with the fields it reads (the
// first six; the graph's JSON lists them all).
func (o *Output) label() string {
	const shown = 6
	switch {
	case len(o.Reads) == 0:
		return "output"
	case len(o.Reads) > shown:
		return fmt.Sprintf("output: %s and %d more", strings.Join(o.Reads[:shown], ", "), len(o.Reads)-shown)
	}
	return "output: " + strings.Join(o.Reads, ", ")
}

// outputDoc is the output in a graph's JSON document.
type outputDoc struct {
	Reads []string `json:"reads"`
	Line  int      `json:"line"`
}

// output compiles the flow's output block: the template parses, and every
// field it reads is one the state has. A read through a field that may
// be null is a warning unless every path from START to END passes a node
// that writes the field (the run's end then finds it set).
func (c *compiler) output(v config.Value) {
	if !v.IsScalar() || c.stateShape == nil {
		return // not a string: the format check reported it
	}
	t, err := tmpl.Parse("output", v.Text())
	if err != nil {
		c.templateError(v, err, "output")
		return
	}
	ok := true
	root := schema.Object(map[string]*schema.Shape{"state": c.stateShape}, "state")
	for _, pr := range tmpl.Check(t, root) {
		pos := v.Span(pr.Offset, pr.Len)
		switch {
		case pr.Call:
			d := diag.Diagnostic{Severity: diag.Error, Code: diag.CodeTemplateCall, Pos: pos, Path: "output", Summary: pr.Message}
			if pr.MayBeNull || pr.Warning {
				d.Severity = diag.Warning
			} else {
				ok = false
			}
			c.dl.Add(d)
		case pr.MayBeNull:
			field, top := strings.CutPrefix(pr.Path, "state.")
			if top && !strings.Contains(field, ".") && c.writtenBeforeEnd(field) {
				continue
			}
			id := []rune(v.Text()[min(pr.Offset, len(v.Text())):])
			id = id[:min(pr.Len, len(id))]
			msg := fmt.Sprintf("%s may be null, and reading %q of null fails when the output is rendered; read it inside a with or an if on %s, or write it on every path to END", pr.Path, string(id), pr.Path)
			if pr.Prints {
				msg = pr.Message + ", or write it on every path to END"
			}
			c.dl.Add(diag.Diagnostic{Severity: diag.Warning, Code: diag.CodeTemplateNull, Pos: pos, Path: "output", Summary: msg})
		case pr.Open:
			c.dl.Add(diag.Diagnostic{Severity: diag.Warning, Code: diag.CodeTemplateField, Pos: pos, Path: "output", Summary: pr.Message, Suggestion: pr.Suggestion})
		default:
			ok = false
			c.dl.Errorf(diag.CodeTemplateField, pos, "output", "%s", pr.Message).Suggestion = pr.Suggestion
		}
	}
	if !ok {
		return
	}
	c.g.Output = &Output{Template: t, Source: v.Text(), Pos: v.Pos(), Reads: stateReads(t)}
}

// writtenBeforeEnd reports whether every path from START to END passes a
// node that writes field.
func (c *compiler) writtenBeforeEnd(field string) bool {
	for _, e := range c.g.Entry {
		if endsRun(e) {
			return false
		}
	}
	unguarded := false
	walkFrom(entryTargets(c.g), func(m *Node) bool {
		if m.Writes[field] {
			return false
		}
		for _, e := range m.Out {
			unguarded = unguarded || endsRun(e)
		}
		return !unguarded
	})
	return !unguarded
}

// endsRun reports whether taking e can lead straight to END.
func endsRun(e *Edge) bool {
	if e.ToEnd || e.HasDefault && e.Default == nil {
		return true
	}
	if _, ok := e.Choices[endName]; ok {
		return true
	}
	return slices.ContainsFunc(e.Cases, func(c *Case) bool { return c.ToEnd })
}

// stateReads lists the state fields a template reads: .state.NAME at the
// top, $.state.NAME anywhere.
func stateReads(t *template.Template) []string {
	var out []string
	add := func(idents []string) {
		if len(idents) >= 2 && idents[0] == "state" && !slices.Contains(out, idents[1]) {
			out = append(out, idents[1])
		}
	}
	var walk func(n parse.Node)
	walk = func(n parse.Node) {
		switch x := n.(type) {
		case *parse.ListNode:
			if x != nil {
				for _, m := range x.Nodes {
					walk(m)
				}
			}
		case *parse.ActionNode:
			walk(x.Pipe)
		case *parse.IfNode:
			walk(x.Pipe)
			walk(x.List)
			walk(x.ElseList)
		case *parse.RangeNode:
			walk(x.Pipe)
			walk(x.List)
			walk(x.ElseList)
		case *parse.WithNode:
			walk(x.Pipe)
			walk(x.List)
			walk(x.ElseList)
		case *parse.TemplateNode:
			walk(x.Pipe)
		case *parse.PipeNode:
			if x != nil {
				for _, cmd := range x.Cmds {
					walk(cmd)
				}
			}
		case *parse.CommandNode:
			for _, a := range x.Args {
				walk(a)
			}
		case *parse.ChainNode:
			walk(x.Node)
		case *parse.FieldNode:
			add(x.Ident)
		case *parse.VariableNode:
			if x.Ident[0] == "$" {
				add(x.Ident[1:])
			}
		}
	}
	if t.Tree != nil {
		walk(t.Tree.Root)
	}
	return out
}
