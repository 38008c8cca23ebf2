package tmpl

import (
	"strings"
	"testing"

	"github.com/trellisflow/trellis/runtime/schema"
)

func obj(props map[string]*schema.Shape) *schema.Shape {
	s := &schema.Shape{Types: []string{"object"}, Props: props, Closed: true}
	for k := range props {
		s.Order = append(s.Order, k)
	}
	return s
}

func TestCheckFollowsDot(t *testing.T) {
	str := &schema.Shape{Types: []string{"string"}}
	question := obj(map[string]*schema.Shape{"text": str, "aspect": str})
	state := obj(map[string]*schema.Shape{
		"questions": {Types: []string{"array"}, Items: question},
		"resume":    obj(map[string]*schema.Shape{"name": str}),
		"notes":     {Types: []string{"object"}}, // open: anything below is unchecked
	})
	root := Root(state, obj(map[string]*schema.Shape{}), map[string]*schema.Shape{"vars": obj(map[string]*schema.Shape{"recent": nil})})
	cases := map[string]string{
		"{{.state.resume.name}}":                               "",
		"{{.state.resume.nme}}":                                `state.resume has no field "nme"; name`,
		"{{range .state.questions}}{{.text}}{{end}}":           "",
		"{{range .state.questions}}{{.txt}}{{end}}":            `has no field "txt"; text`,
		"{{range $q := .state.questions}}{{$q.aspct}}{{end}}":  `q has no field "aspct"; aspect`,
		"{{with .state.resume}}{{.name}} {{.age}}{{end}}":      `has no field "age"`,
		"{{$.state.turns}}":                                    `state has no field "turns"`,
		"{{.state.notes.anything.deep}}":                       "",
		"{{.vars.recent}} {{.vars.recnt}}":                     `vars has no field "recnt"; recent`,
		"{{.error}}":                                           `has no field "error"`,
		"{{json .state.resume}} {{default \"x\" .state.nope}}": `state has no field "nope"`,
		"{{if .state.resume}}{{else}}{{.state.x}}{{end}}":      `state has no field "x"`,
	}
	for text, want := range cases {
		tmpl, err := Parse("t", text)
		if err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		probs := Check(tmpl, root)
		if want == "" {
			if len(probs) > 0 {
				t.Errorf("%s: unexpected %+v", text, probs)
			}
			continue
		}
		if len(probs) != 1 {
			t.Errorf("%s: got %+v, want one problem", text, probs)
			continue
		}
		msg, sugg, _ := strings.Cut(want, "; ")
		if !strings.Contains(probs[0].Message, msg) || probs[0].Suggestion != sugg {
			t.Errorf("%s: got %q (suggest %q), want %q (suggest %q)", text, probs[0].Message, probs[0].Suggestion, msg, sugg)
		}
		name := strings.TrimSuffix(strings.SplitN(msg, `"`, 3)[1], `"`)
		if got := text[probs[0].Offset : probs[0].Offset+probs[0].Len]; got != name {
			t.Errorf("%s: offset points at %q, want %q", text, got, name)
		}
	}
}

// Reading through a value that may be null fails at render time, so it is
// reported unless a with or an if on that value guards it.
func TestCheckNullableNeedsAGuard(t *testing.T) {
	str := &schema.Shape{Types: []string{"string"}}
	port := obj(map[string]*schema.Shape{"headline": str})
	port.Types = []string{"object", "null"}
	item := obj(map[string]*schema.Shape{"text": str})
	item.Types = []string{"object", "null"}
	state := obj(map[string]*schema.Shape{
		"portfolio": port,
		"items":     {Types: []string{"array"}, Items: item},
		"name":      {Types: []string{"string", "null"}},
	})
	root := Root(state, obj(map[string]*schema.Shape{}), map[string]*schema.Shape{"vars": obj(map[string]*schema.Shape{})})
	cases := map[string]string{
		"{{.state.portfolio.headline}}":                                                            `state.portfolio may be null, and reading "headline"`,
		"{{with .state.portfolio}}{{.headline}}{{end}}":                                            "",
		"{{if .state.portfolio}}{{.state.portfolio.headline}}{{end}}":                              "",
		"{{if .state.portfolio}}{{else}}{{.state.portfolio.headline}}{{end}}":                      `state.portfolio may be null`,
		"{{if .state.name}}{{.state.portfolio.headline}}{{end}}":                                   `state.portfolio may be null`,
		"{{$p := .state.portfolio}}{{$p.headline}}":                                                `p may be null, and reading "headline"`,
		"{{$p := .state.portfolio}}{{if $p}}{{$p.headline}}{{end}}":                                "",
		"{{range .state.items}}{{.text}}{{end}}":                                                   `dot may be null, and reading "text"`,
		"{{range .state.items}}{{with .}}{{.text}}{{end}}{{end}}":                                  "",
		"{{.state.portfolio}} {{.state.name}} {{yaml .state.portfolio}}":                           "",
		"{{with .state.portfolio}}{{.headlin}}{{end}}":                                             `has no field "headlin"`,
		"{{if .state.portfolio}}{{.state.portfolio.headline}}{{end}}{{.state.portfolio.headline}}": `state.portfolio may be null`,
	}
	for text, want := range cases {
		tmpl, err := Parse("t", text)
		if err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		probs := Check(tmpl, root)
		if want == "" {
			if len(probs) > 0 {
				t.Errorf("%s: unexpected %+v", text, probs)
			}
			continue
		}
		if len(probs) != 1 || !strings.Contains(probs[0].Message, want) {
			t.Errorf("%s: got %+v, want one problem saying %q", text, probs, want)
			continue
		}
		if null := strings.Contains(want, "may be null"); probs[0].MayBeNull != null {
			t.Errorf("%s: MayBeNull %v", text, probs[0].MayBeNull)
		}
		if strings.Contains(want, "may be null") && strings.Count(want, `"`) == 2 {
			// the offset points at the field read through the null
			field := strings.SplitN(want, `"`, 3)[1]
			if got := text[probs[0].Offset : probs[0].Offset+probs[0].Len]; got != field {
				t.Errorf("%s: offset points at %q, want %q", text, got, field)
			}
		}
	}
}

func TestCheckChainOffsets(t *testing.T) {
	str := &schema.Shape{Types: []string{"string"}}
	state := obj(map[string]*schema.Shape{"p": obj(map[string]*schema.Shape{"h": str})})
	root := Root(state, obj(map[string]*schema.Shape{}), map[string]*schema.Shape{"vars": obj(map[string]*schema.Shape{})})
	for _, text := range []string{"{{(.state.p).hh}}", "{{ (.state.p).x.k }}", "x {{(.state.p).zz}}"} {
		tmpl, err := Parse("t", text)
		if err != nil {
			t.Fatal(err)
		}
		probs := Check(tmpl, root)
		if len(probs) != 1 {
			t.Fatalf("%s: %+v", text, probs)
		}
		name := strings.SplitN(probs[0].Message, `"`, 3)[1]
		if got := text[probs[0].Offset : probs[0].Offset+probs[0].Len]; got != name {
			t.Errorf("%s: offset points at %q, want %q", text, got, name)
		}
	}
}

// A field an open object does not declare is a warning (Open), through
// with and range too; an open object that declares nothing is unchecked.
func TestCheckOpenObjects(t *testing.T) {
	str := &schema.Shape{Types: []string{"string"}}
	open := func(props map[string]*schema.Shape) *schema.Shape {
		s := obj(props)
		s.Closed = false
		return s
	}
	item := open(map[string]*schema.Shape{"text": str})
	state := obj(map[string]*schema.Shape{
		"q":     item,
		"qs":    {Types: []string{"array"}, Items: item},
		"notes": {Types: []string{"object"}},
	})
	root := Root(state, obj(map[string]*schema.Shape{}), nil)
	cases := map[string]string{ // template -> "open:suggestion", or "" for nothing
		"{{.state.q.text}}":                           "",
		"{{.state.q.txt}}":                            "open:text",
		"{{with .state.q}}{{.txet}}{{end}}":           "open:text",
		"{{range .state.qs}}{{.tex}}{{end}}":          "open:text",
		"{{.state.notes.anything}}":                   "",
		"{{range $x := .state.qs}}{{$x.text}}{{end}}": "",
	}
	for src, want := range cases {
		tp, err := Parse("t", src)
		if err != nil {
			t.Fatal(err)
		}
		probs := Check(tp, root)
		got := ""
		if len(probs) == 1 && probs[0].Open {
			got = "open:" + probs[0].Suggestion
		} else if len(probs) > 0 {
			got = probs[0].Message
		}
		if got != want {
			t.Errorf("%s: %q, want %q (%+v)", src, got, want, probs)
		}
	}
}
