// Package prompt holds compiled prompt files: the model settings of their
// front matter, their text/template bodies, the schema of a structured
// reply and the fallback used when no model answers. The flow compiler
// parses and checks prompt files (every variable a template reads must exist
// in the state, the input or the node's vars); this package renders them.
//
// A template sees one value with four keys:
//
//	.state   the committed state of the step
//	.input   the run's input
//	.vars    the node's declared variables
//	.error   why the model did not answer (fallbacks only)
package prompt

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"text/template"

	"gopkg.in/yaml.v3"

	"github.com/trellisflow/trellis/runtime/expression"
	"github.com/trellisflow/trellis/runtime/schema"
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
	// state, input, vars and error (FallbackExpr).
	FallbackValue any
	FallbackExpr  *expression.Program
	HasFallback   bool
}

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
	Error              string
}

func (d Data) value() map[string]any {
	return map[string]any{"state": d.State, "input": d.Input, "vars": d.Vars, "error": d.Error}
}

// Request is what a node would send to a model: for inspection.
type Request struct {
	Prompt      string         `json:"prompt"`
	Model       string         `json:"model"`
	Temperature *float32       `json:"temperature,omitempty"`
	MaxTokens   int            `json:"max_tokens,omitempty"`
	System      string         `json:"system,omitempty"`
	User        string         `json:"user"`
	Output      map[string]any `json:"output_schema,omitempty"`
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
		s, err := execute(p.System, v)
		if err != nil {
			return m, fmt.Errorf("prompt %s: system: %w", p.Name, err)
		}
		m.System = s
	}
	u, err := execute(p.User, v)
	if err != nil {
		return m, fmt.Errorf("prompt %s: %w", p.Name, err)
	}
	m.User = u
	return m, nil
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
		return execute(x, data)
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

func execute(t *template.Template, data any) (string, error) {
	var b bytes.Buffer
	if err := t.Execute(&b, data); err != nil {
		return "", err
	}
	return b.String(), nil
}

// Funcs are the functions templates may call, besides text/template's own.
var Funcs = template.FuncMap{
	// json renders a value as indented JSON.
	"json": func(v any) (string, error) {
		b, err := json.MarshalIndent(v, "", "  ")
		return string(b), err
	},
	// yaml renders a value as YAML, which models read easily.
	"yaml": func(v any) (string, error) {
		b, err := yaml.Marshal(v)
		return strings.TrimRight(string(b), "\n"), err
	},
	// default returns def when v is nil or empty.
	"default": func(def, v any) any {
		switch x := v.(type) {
		case nil:
			return def
		case string:
			if x == "" {
				return def
			}
		case []any:
			if len(x) == 0 {
				return def
			}
		}
		return v
	},
	"join": func(sep string, v any) string {
		items, _ := v.([]any)
		s := make([]string, len(items))
		for i, it := range items {
			s[i] = fmt.Sprint(it)
		}
		return strings.Join(s, sep)
	},
	// last returns the last n items of a list (all when it has fewer).
	"last": func(n int, v any) []any {
		items, _ := v.([]any)
		if len(items) > n {
			return items[len(items)-n:]
		}
		return items
	},
	"upper": strings.ToUpper,
	"lower": strings.ToLower,
	"trim":  strings.TrimSpace,
}

// Parse parses a template. name is used in error messages.
func Parse(name, text string) (*template.Template, error) {
	return template.New(name).Funcs(Funcs).Option("missingkey=zero").Parse(text)
}
