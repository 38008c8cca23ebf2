package prompt

import (
	"strings"
	"testing"

	"github.com/trellisflow/trellis/runtime/schema"
)

// A fallback is checked against the output schema at load even when some
// of its strings are templates: what a template cannot change (its value
// is a string, the object's keys) is decided then; what its rendered text
// must meet (a pattern, an enum) is left to the run.
func TestCheckFallbackWithTemplates(t *testing.T) {
	raw := map[string]any{
		"type": "object", "additionalProperties": false, "required": []any{"verdict", "score", "notes"},
		"properties": map[string]any{
			"verdict": map[string]any{"type": "string", "enum": []any{"pass", "fail"}},
			"score":   map[string]any{"type": "number"},
			"notes":   map[string]any{"type": "array", "items": map[string]any{"type": "string", "pattern": "^[A-Z]"}},
		},
	}
	compiled, err := schema.NewCompiler(nil).Compile("mem://out.json", raw)
	if err != nil {
		t.Fatal(err)
	}
	v := schema.NewValidator(compiled, schema.ShapeOf(raw, nil))
	tmpl := func(src string) any { return src } // a fallback as written
	cases := []struct {
		name  string
		value map[string]any
		want  string // "" for none
	}{
		{"templated enum and pattern", map[string]any{"verdict": tmpl("{{.vars.v}}"), "score": 5.0, "notes": []any{tmpl("{{.error}}")}}, ""},
		{"template where a number belongs", map[string]any{"verdict": "pass", "score": tmpl("{{.vars.s}}"), "notes": []any{}}, "/score"},
		{"missing key beside a template", map[string]any{"verdict": tmpl("{{.vars.v}}"), "notes": []any{}}, "score"},
		{"unknown key beside a template", map[string]any{"verdict": tmpl("{{.vars.v}}"), "score": 1.0, "notes": []any{}, "extra": 1.0}, "extra"},
		{"plain value breaking the enum", map[string]any{"verdict": "maybe", "score": 1.0, "notes": []any{tmpl("{{.error}}")}}, "/verdict"},
	}
	for _, tc := range cases {
		err := checkFallback(v, tc.value)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: got %v, want an error about %s", tc.name, err, tc.want)
		}
	}
}
