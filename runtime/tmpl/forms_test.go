package tmpl

import (
	"strconv"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/runtime/schema"
)

// What a template can render is listed as forms (literal text with holes
// for printed values), and judged against a string field's rules where
// they certainly break.
func TestFormsAgainstFieldRules(t *testing.T) {
	max := 8
	enum := &schema.Shape{Types: []string{"string"}, Enum: []any{"pass", "fail"}}
	short := &schema.Shape{Types: []string{"string"}, MaxLength: &max}
	code := &schema.Shape{Types: []string{"string"}, Pattern: "^[A-Z]{3}$", MinLength: 3}
	for _, c := range []struct {
		text  string
		shape *schema.Shape
		forms string
		want  string
	}{
		{"{{if .a}}pass{{else}}fail{{end}}", enum, "pass|fail", ""},
		{"{{if .a}}pass{{else}}failed{{end}}", enum, "pass|failed", "is one of"},
		{"{{with .a}}pass{{end}}", enum, "pass|", "is one of"},
		{"Mood: {{.a}}", enum, "Mood: …", "is one of"},
		{"{{.a}}", enum, "…", ""},
		{"pa{{.a}}", enum, "pa…", ""},
		{"{{- \"pass\" -}}", enum, "pass", ""},
		{"{{$x := .a}}fail", enum, "fail", ""},
		{"{{range .a}}x{{end}}", enum, "…", ""},
		{"label-{{.a}}-long", short, "label-…-long", "at most 8"},
		{"lab{{.a}}", short, "lab…", ""},
		{"AB", code, "AB", "at least 3"},
		{"abc", code, "abc", "matches the pattern"},
		{"ABC", code, "ABC", ""},
		{"ab{{.a}}", code, "ab…", ""},
	} {
		tp, err := Parse("t", c.text)
		if err != nil {
			t.Fatal(err)
		}
		forms, ok := Forms(tp)
		if !ok {
			t.Fatalf("%s: no forms", c.text)
		}
		var shown []string
		why := ""
		for _, f := range forms {
			shown = append(shown, f.String())
			if w, _ := f.Breaks(c.shape); w != "" && why == "" {
				why = w
			}
		}
		if got := strings.Join(shown, "|"); got != c.forms {
			t.Errorf("%s: forms %q, want %q", c.text, got, c.forms)
		}
		if c.want == "" && why != "" || c.want != "" && !strings.Contains(why, c.want) {
			t.Errorf("%s: breaks %q, want %q", c.text, why, c.want)
		}
	}
	many := strings.Repeat("{{if .a}}x{{else}}y{{end}}", 7)
	tp, _ := Parse("t", many)
	if _, ok := Forms(tp); ok {
		t.Errorf("128 forms listed")
	}
}

// A printed field's kind says what its hole can print: an integer's
// digits, a boolean's true or false, an enum's values.
func TestFormsOfPrintedKinds(t *testing.T) {
	str := func(vals ...any) *schema.Shape { return &schema.Shape{Types: []string{"string"}, Enum: vals} }
	fields := map[string]*schema.Shape{
		"n": {Types: []string{"integer"}}, "ok": {Types: []string{"boolean"}},
		"shade": str("red", "green", "blue"), "any": nil,
	}
	resolve := func(idents []string) *schema.Shape {
		if len(idents) == 2 && idents[0] == "state" {
			return fields[idents[1]]
		}
		return nil
	}
	field := str("red", "green", "7", "true")
	for text, want := range map[string]string{
		"{{.state.shade}}":              `"blue"`,
		"{{$.state.n}}":                 "",
		"x{{.state.n}}":                 `"x<an integer>"`,
		"{{.state.ok}}":                 `"false"`,
		"{{.state.any}}":                "",
		"{{with .state.n}}{{.}}{{end}}": `""`,
	} {
		tp, err := Parse("t", text)
		if err != nil {
			t.Fatal(err)
		}
		forms, ok := FormsOf(tp, resolve)
		if !ok {
			t.Fatalf("%s: no forms", text)
		}
		got := ""
		for _, f := range forms {
			if why, shown := f.Breaks(field); why != "" {
				got = strconv.Quote(shown)
				break
			}
		}
		if got != want {
			t.Errorf("%s: breaks with %s, want %s", text, got, want)
		}
	}
}
