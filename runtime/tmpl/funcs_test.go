package tmpl

import (
	"strings"
	"testing"

	"github.com/trellisflow/trellis/runtime/schema"
)

// A function given an argument of a type it does not take is reported
// as expr's functions are, and printf's verbs against its values; a
// value that may be null is a warning, a list function given null takes
// it as no items.
func TestFunctionArguments(t *testing.T) {
	of := schema.Of
	state := obj(map[string]*schema.Shape{
		"n": of("integer"), "f": of("number"), "s": of("string"), "ns": of("string", "null"),
		"l": {Types: []string{"array"}, Items: of("string")}, "nl": {Types: []string{"array", "null"}, Items: of("string")},
		"b": of("boolean"), "e": {Enum: []any{"a", "b"}},
	})
	root := Root(state, obj(map[string]*schema.Shape{}), nil)
	for text, want := range map[string]string{
		"{{upper .state.s}} {{lower .state.e}} {{trim (printf \"%d\" .state.n)}}": "",
		"{{upper .state.n}}":                                      "error: upper takes a text, but .state.n is an integer",
		"{{.state.n | upper}}":                                    "error: upper takes a text, but .state.n is an integer",
		"{{upper .state.ns}}":                                     "null: upper takes a text, but .state.ns may be null",
		"{{len .state.n}}":                                        "error: len takes a text, a list or an object, but .state.n is an integer",
		"{{len .state.l}} {{len .state.s}}":                       "",
		"{{first .state.f .state.l}}":                             "warning: first takes a whole number, but .state.f is a number",
		"{{first 2 .state.l}} {{last 1 .state.nl}}":               "",
		"{{first 2.5 .state.l}}":                                  "error: first takes a whole number, but 2.5 is a number",
		"{{join \", \" .state.s}}":                                "error: join takes a list, but .state.s is a text: it renders nothing",
		"{{join \", \" .state.nl}}":                               "",
		"{{printf \"%d-%d\" .state.n}}":                           "error: printf's format has 2 verbs, but it is given 1 value: it renders %!d(MISSING)",
		"{{printf \"%d\" .state.n .state.n}}":                     "error: printf's format has 1 verb, but it is given 2 values",
		"{{printf \"%s\" .state.n}}":                              "error: printf's %s prints a text, but .state.n is an integer",
		"{{printf \"%f\" .state.n}}":                              "error: printf's %f prints a number, but .state.n is an integer",
		"{{printf \"%d\" .state.f}}":                              "warning: printf's %d prints an integer, but .state.f is a number",
		"{{printf \"%t %v %5.2f%%\" .state.b .state.l .state.f}}": "",
		"{{printf \"%[2]d %[1]s\" .state.s .state.n}}":            "",
		"{{printf \"%d\" .state.ns}}":                             "null: printf's %d is given .state.ns, which may be null",
		"{{index .state.l 0 | upper}}":                            "",
		"{{index .state.n 0}}":                                    "error: index takes a list or an object, but .state.n is an integer",
	} {
		tm, err := Parse("t", text)
		if err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		var got []string
		for _, p := range Check(tm, root) {
			kind := "error"
			switch {
			case p.MayBeNull:
				kind = "null"
			case p.Warning:
				kind = "warning"
			}
			if !p.Call {
				kind = "not a call"
			}
			got = append(got, kind+": "+p.Message)
		}
		switch {
		case want == "" && len(got) > 0:
			t.Errorf("%s: %q", text, got)
		case want != "" && (len(got) != 1 || !strings.HasPrefix(got[0], want)):
			t.Errorf("%s: %q, want %q", text, got, want)
		}
	}
}
