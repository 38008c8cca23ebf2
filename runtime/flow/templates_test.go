package flow

import (
	"testing"

	"github.com/trellisflow/trellis/runtime/tmpl"
)

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
		_, err := tmpl.Parse("t", src)
		if err == nil {
			t.Fatalf("%q parsed", src)
		}
		msg := err.Error()
		if m := templateLine().FindStringSubmatch(msg); m != nil {
			msg = m[3]
		}
		if got := templateColumn(src, msg); got != want {
			t.Errorf("%q (%s): column %d, want %d", src, msg, got, want)
		}
	}
}
