package prompt

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
	root := Root(state, obj(map[string]*schema.Shape{}), obj(map[string]*schema.Shape{"recent": nil}), false)
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
