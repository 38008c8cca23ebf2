// Package tmpl compiles the text templates of files a flow's nodes read
// (a prompt's messages, say): Go's text/template with a small function
// library, checked before any run against the shapes of the data it will
// see, so that a misspelt field is a load error with a position, not an
// empty string at run time.
package tmpl

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"text/template"

	"gopkg.in/yaml.v3"
)

// Execute renders t over data.
func Execute(t *template.Template, data any) (string, error) {
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
	// first returns the first n items of a list (all when it has fewer).
	"first": func(n int, v any) []any {
		items, _ := v.([]any)
		if len(items) > n {
			return items[:max(n, 0)]
		}
		return items
	},
	// last returns the last n items of a list (all when it has fewer).
	"last": func(n int, v any) []any {
		items, _ := v.([]any)
		if len(items) > n {
			return items[len(items)-max(n, 0):]
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
