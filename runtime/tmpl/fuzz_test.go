package tmpl

import (
	"testing"

	"github.com/trellisflow/trellis/runtime/schema"
)

// FuzzCheck feeds arbitrary templates to the template checker: whatever
// parses must be checked without a panic, and every problem must point
// inside the text.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{
		"{{.state.a.b}}", "{{with .state.p}}{{.h}}{{end}}", "{{if .state.p}}{{.state.p.h}}{{else}}{{.state.p.h}}{{end}}",
		"{{range $i, $x := .state.l}}{{$x.h}}{{end}}", "{{$p := .state.p}}{{if $p}}{{$p.h}}{{end}}", "{{(.state.p).h}}",
		"{{define \"x\"}}{{.y}}{{end}}{{template \"x\" .state}}", "{{json .state.p | printf \"%s\"}}",
	} {
		f.Add(s)
	}
	str := &schema.Shape{Types: []string{"string"}}
	p := schema.Object(map[string]*schema.Shape{"h": str})
	p.Types = []string{"object", "null"}
	state := schema.Object(map[string]*schema.Shape{"p": p, "a": schema.Object(map[string]*schema.Shape{"b": str}),
		"l": {Types: []string{"array"}, Items: p}})
	root := Root(state, schema.Object(nil), map[string]*schema.Shape{"vars": schema.Object(nil), "error": {Types: []string{"string"}}})
	f.Fuzz(func(t *testing.T, text string) {
		tmpl, err := Parse("f", text)
		if err != nil {
			return
		}
		for _, pr := range Check(tmpl, root) {
			if pr.Offset < 0 || pr.Offset > len(text) || pr.Len < 0 {
				t.Fatalf("%q: problem outside the text: %+v", text, pr)
			}
		}
	})
}
