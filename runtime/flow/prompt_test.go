package flow

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/runtime/prompt"
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
	compiled, err := schema.NewCompiler().Compile("mem://out.json", raw)
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

// A ref inside a referenced file means that file (or a file next to it),
// not the schema that referenced it.
func TestRefsInsideReferencedFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("parts/resume.json", `{"$defs": {
		"Resume": {"type": "object", "properties": {"jobs": {"type": "array", "items": {"$ref": "#/$defs/Job"}}, "contact": {"$ref": "more/contact.json"}}},
		"Job": {"type": "object", "title": "A job", "properties": {"title": {"type": "string"}, "default": {"type": "boolean", "default": false}}}}}`)
	write("parts/more/contact.json", `{"type": "object", "properties": {"email": {"$ref": "#/$defs/Email"}}, "$defs": {"Email": {"type": "string"}}}`)
	root := map[string]any{"type": "object", "properties": map[string]any{"resume": map[string]any{"$ref": "parts/resume.json#/$defs/Resume"}},
		"$defs": map[string]any{"Job": map[string]any{"type": "integer"}}} // a Job of the root that must not be used
	resolve := refResolver(root, "file://"+filepath.ToSlash(filepath.Join(dir, "root.json")))
	s := schema.ShapeOf(root, resolve)
	job := s.Props["resume"].Props["jobs"].Items
	if !job.Is("object") || job.Props["title"] == nil {
		t.Fatalf("job shape %+v", job)
	}
	if email := s.Props["resume"].Props["contact"].Props["email"]; !email.Is("string") {
		t.Fatalf("email shape %+v", email)
	}
	b, _ := json.Marshal(bundle(root, resolve, 0))
	for _, want := range []string{`"title":{"type":"string"}`, `"default":{"type":"boolean"}`, `"email":{"type":"string"}`} {
		if !strings.Contains(string(b), want) {
			t.Fatalf("bundled schema lacks %s: %s", want, b)
		}
	}
	if strings.Contains(string(b), "A job") || strings.Contains(string(b), "$defs") {
		t.Fatalf("bundled schema keeps annotations or definitions: %s", b)
	}
}

// text/template reports only the line of a parse error; the column comes
// from what the message names.
func TestTemplateErrorColumn(t *testing.T) {
	for src, want := range map[string]int{
		"a {{foo .x}} b":          5,  // function "foo" not defined
		"x {{.a }} {{if}}":        11, // missing value for if
		"hello {{.a":              7,  // unclosed action
		"{{.a}} {{end}}":          8,  // unexpected {{end}}
		"{{range .x}} {{.y}":      18, // bad character '}'
		"é {{ .a | shout }}":      11, // function "shout" not defined; columns count runes
		"{{ $y }}":                4,  // undefined variable "$y"
		"{{.a}} {{- if}} {{end}}": 8,  // missing value for if
	} {
		_, err := prompt.Parse("t", src)
		if err == nil {
			t.Fatalf("%q parsed", src)
		}
		msg := err.Error()
		if m := templateLine.FindStringSubmatch(msg); m != nil {
			msg = m[3]
		}
		if got := templateColumn(src, msg); got != want {
			t.Errorf("%q (%s): column %d, want %d", src, msg, got, want)
		}
	}
}
