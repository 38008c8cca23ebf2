// Package prompt reads, checks and renders prompt files: YAML front matter
// (model settings, the schema of a structured reply, the fallback used when
// no model answers) and a text/template body. Load reads a file through a
// node's kind.Builder, so every problem in it is reported at its
// file:line:col and every field a template reads is checked against the
// flow's state, the input and the node's vars before anything runs.
//
// A template sees one value with these keys:
//
//	.state     the committed state of the step
//	.input     the run's input
//	.vars      the node's declared variables
//	.error     why the model did not answer (fallbacks only)
//	.no_model  true when that is because no model is configured, not a
//	           failure (fallbacks only): a fallback may then stand in for
//	           the model with rules, and report a failure as one
//	.tool_calls the calls a node with tools made, with their results
//	           (fallbacks only: those its fallback_calls made)
//
// A prompt for a node that calls tools may name, in fallback_calls, the
// calls its fallback makes (each a tool, its arguments as expressions over
// state, input and vars, and an optional when), so that a flow runs its
// tools with no model too; the fallback reply then reads their results.
package prompt

import (
	"fmt"
	"strings"
	"sync/atomic"
	"text/template"

	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/expression"
	"github.com/trellisflow/trellis/runtime/schema"
	"github.com/trellisflow/trellis/runtime/tmpl"
)

// Prompt is one compiled prompt file.
type Prompt struct {
	// Name is how flows refer to the prompt (its path under prompts/,
	// without the extension); Path is the file.
	Name, Path string
	// Model, Temperature and MaxTokens are the front matter's settings;
	// zero values mean "not set".
	Model       string
	Temperature *float32
	MaxTokens   int
	// System is the optional system message; User is the file's body.
	System, User *template.Template
	// Output is the schema of a structured reply, nil for plain text.
	Output *Output
	// Fallback is what the node produces when no model answers: a value
	// whose strings are templates (FallbackValue), or an expression over
	// state, input, vars, error and no_model (FallbackExpr).
	FallbackValue any
	FallbackExpr  *expression.Program
	HasFallback   bool
	// FallbackCalls are the tool calls the fallback makes before its
	// reply, in order.
	FallbackCalls []FallbackCall

	// sizes are the lengths the system and user messages were rendered
	// with last, and a little more: what the next rendering starts with
	sizes [2]atomic.Int64
}

// FallbackCall is one tool call a fallback makes.
type FallbackCall struct {
	// Tool names the tool; At holds the name, for messages.
	Tool string
	At   config.Value
	// Args are the arguments, one expression per argument (ArgNames in
	// order), or ArgsExpr: one expression giving them all.
	ArgNames []string
	Args     []*expression.Program
	ArgsAt   []config.Value
	ArgsExpr *expression.Program
	// When, when set, makes the call only when it holds.
	When *expression.Program
}

// ToolCallsShape is the shape of the calls a node with tools made, as
// expressions read tool_calls and templates .tool_calls: the call's id,
// the tool, its arguments, its result (or error) and how a person
// answered a call that waited for approval.
var ToolCallsShape = &schema.Shape{Types: []string{"array"}, Items: schema.Object(map[string]*schema.Shape{
	"id":        {Types: []string{"string"}},
	"tool":      {Types: []string{"string"}},
	"arguments": {Types: []string{"object"}},
	"result":    nil,
	"error":     {Types: []string{"string", "null"}},
	"approval":  {Types: []string{"string", "null"}},
}, "id", "tool", "arguments", "result", "error", "approval")}

// Output is the JSON Schema a structured reply must satisfy.
type Output struct {
	// Name is sent to the model as the schema's name.
	Name string
	// Schema is the raw schema, as sent to the model.
	Schema    map[string]any
	Validator *schema.Validator
}

// Data is what a template renders over.
type Data struct {
	State, Input, Vars map[string]any
	// Config is the run's configuration (nil when the flow has none).
	Config map[string]any
	Error  string
	// NoModel is set when the fallback stands in for a model that is not
	// configured rather than one that failed.
	NoModel bool
	// ToolCalls are the calls the fallback made (see ToolCallsShape).
	ToolCalls []any
}

func (d Data) value() map[string]any {
	calls := d.ToolCalls
	if calls == nil {
		calls = []any{}
	}
	m := map[string]any{"state": d.State, "input": d.Input, "vars": d.Vars, "error": d.Error, "no_model": d.NoModel, "tool_calls": calls}
	if d.Config != nil {
		m["config"] = d.Config
	}
	return m
}

// Messages are a rendered prompt.
type Messages struct {
	System, User string
}

// Render renders the system and user messages.
func (p *Prompt) Render(d Data) (Messages, error) {
	var m Messages
	v := d.value()
	if p.System != nil {
		s, err := execute(p.System, v, &p.sizes[0])
		if err != nil {
			return m, fmt.Errorf("prompt %s: system: %w", p.Name, err)
		}
		m.System = s
	}
	u, err := execute(p.User, v, &p.sizes[1])
	if err != nil {
		return m, fmt.Errorf("prompt %s: %w", p.Name, err)
	}
	m.User = u
	return m, nil
}

// execute renders t into a builder the size of its last rendering, size,
// so that a message is written in one allocation, not grown and copied.
func execute(t *template.Template, data any, size *atomic.Int64) (string, error) {
	var b strings.Builder
	b.Grow(int(size.Load()))
	if err := t.Execute(&b, data); err != nil {
		return "", err
	}
	size.Store(int64(min(b.Len()+b.Len()/8, 1<<20)))
	return b.String(), nil
}

// Fallback produces the prompt's fallback reply. eval evaluates the
// fallback expression (it binds the node's variables and the error).
func (p *Prompt) Fallback(d Data, eval func(*expression.Program) (any, error)) (any, error) {
	if p.FallbackExpr != nil {
		return eval(p.FallbackExpr)
	}
	return renderValue(p.FallbackValue, d.value())
}

func renderValue(v any, data map[string]any) (any, error) {
	switch x := v.(type) {
	case *template.Template:
		return tmpl.Execute(x, data)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			r, err := renderValue(e, data)
			if err != nil {
				return nil, err
			}
			out[k] = r
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			r, err := renderValue(e, data)
			if err != nil {
				return nil, err
			}
			out[i] = r
		}
		return out, nil
	}
	return v, nil
}
