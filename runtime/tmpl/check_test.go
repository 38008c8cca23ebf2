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
		"{{.state.portfolio.headline}}":                                                                      `state.portfolio may be null, and reading "headline"`,
		"{{with .state.portfolio}}{{.headline}}{{end}}":                                                      "",
		"{{if .state.portfolio}}{{.state.portfolio.headline}}{{end}}":                                        "",
		"{{if .state.portfolio}}{{else}}{{.state.portfolio.headline}}{{end}}":                                `state.portfolio may be null`,
		"{{if .state.name}}{{.state.portfolio.headline}}{{end}}":                                             `state.portfolio may be null`,
		"{{$p := .state.portfolio}}{{$p.headline}}":                                                          `p may be null, and reading "headline"`,
		"{{$p := .state.portfolio}}{{if $p}}{{$p.headline}}{{end}}":                                          "",
		"{{range .state.items}}{{.text}}{{end}}":                                                             `dot may be null, and reading "text"`,
		"{{range .state.items}}{{with .}}{{.text}}{{end}}{{end}}":                                            "",
		"{{.state.name | default \"x\"}} {{yaml .state.portfolio}} {{if .state.name}}{{.state.name}}{{end}}": "",
		"{{.state.name}}": `state.name may be null, and prints as <no value>`,
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

// Comparisons compare numbers by value at run time: a number field holds
// 5 or 5.5 (an int or a float64 once decoded), and either compares with
// a whole or a fractional literal; a missing value equals only nothing.
func TestComparisonsAreNumericSafe(t *testing.T) {
	for _, c := range []struct {
		text  string
		state map[string]any
		want  string
	}{
		{"{{if gt .state.amount 0.0}}pos{{end}}", map[string]any{"amount": 5}, "pos"},
		{"{{if gt .state.amount 0}}pos{{end}}", map[string]any{"amount": 5.5}, "pos"},
		{"{{if lt .state.amount 5.5}}lt{{else}}ge{{end}}", map[string]any{"amount": 5}, "lt"},
		{"{{if eq .state.amount 5.0}}eq{{end}}", map[string]any{"amount": 5}, "eq"},
		{"{{if eq .state.amount 5}}eq{{else}}ne{{end}}", map[string]any{"amount": 5.000001}, "ne"},
		{"{{if ne .state.amount 2}}ne{{end}}", map[string]any{"amount": 2.5}, "ne"},
		{"{{if le .state.n 9223372036854775807}}le{{end}}", map[string]any{"n": 9.3e18}, ""},
		{"{{if ge .state.n 1e300}}ge{{else}}lt{{end}}", map[string]any{"n": 3}, "lt"},
		{"{{if eq .state.s \"a\" \"b\"}}in{{end}}", map[string]any{"s": "b"}, "in"},
		{"{{if eq .state.missing \"a\"}}x{{else}}unset{{end}}", map[string]any{}, "unset"},
		{"{{if lt .state.s \"b\"}}lt{{end}}", map[string]any{"s": "a"}, "lt"},
	} {
		tp, err := Parse("t", c.text)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Execute(tp, map[string]any{"state": c.state})
		if err != nil || got != c.want {
			t.Errorf("%s over %v: %q, %v; want %q", c.text, c.state, got, err, c.want)
		}
	}
	tp, _ := Parse("t", `{{if lt .state.s 3}}x{{end}}`)
	if _, err := Execute(tp, map[string]any{"state": map[string]any{"s": "a"}}); err == nil || !strings.Contains(err.Error(), "cannot order a text and a number") {
		t.Errorf("a text ordered with a number: %v", err)
	}
}

// A comparison of values of kinds that never compare is found at load.
func TestCheckComparisons(t *testing.T) {
	num := &schema.Shape{Types: []string{"number"}}
	integer := &schema.Shape{Types: []string{"integer"}}
	str := &schema.Shape{Types: []string{"string"}}
	state := obj(map[string]*schema.Shape{"amount": num, "n": integer, "s": str,
		"ok": {Types: []string{"boolean"}}, "tags": {Types: []string{"array"}, Items: str}, "any": nil})
	root := Root(state, obj(map[string]*schema.Shape{}), nil)
	for text, want := range map[string]string{
		"{{if gt .state.amount 0.0}}x{{end}}":      "",
		"{{if gt .state.amount .state.n}}x{{end}}": "",
		"{{if eq .state.s \"a\"}}x{{end}}":         "",
		"{{if eq .state.any 3}}x{{end}}":           "",
		"{{if eq .state.ok true}}x{{end}}":         "",
		"{{if gt .state.s 3}}x{{end}}":             `gt compares state.s (a string) with 3 (a number), which never compare`,
		"{{if eq .state.n \"3\"}}x{{end}}":         `eq compares state.n (a number) with "3" (a string)`,
		"{{if lt .state.ok true}}x{{end}}":         `lt orders numbers or texts, but state.ok is a boolean`,
		"{{if gt .state.tags 1}}x{{end}}":          `gt orders numbers or texts, but state.tags is a list`,
	} {
		tp, err := Parse("t", text)
		if err != nil {
			t.Fatal(err)
		}
		probs := Check(tp, root)
		switch {
		case want == "" && len(probs) > 0:
			t.Errorf("%s: unexpected %+v", text, probs)
		case want != "" && (len(probs) != 1 || !probs[0].Compare || !strings.Contains(probs[0].Message, want)):
			t.Errorf("%s: got %+v, want %q", text, probs, want)
		case want != "":
			fn := strings.Fields(want)[0]
			if got := text[probs[0].Offset : probs[0].Offset+probs[0].Len]; got != fn {
				t.Errorf("%s: offset points at %q", text, got)
			}
		}
	}
}

// The reads of state fields a template makes unguarded are listed, for
// definite assignment: not the test of an if or a with, not under one on
// the field, not an argument of and, or or default.
func TestAnalyzeReads(t *testing.T) {
	str := &schema.Shape{Types: []string{"string"}}
	state := obj(map[string]*schema.Shape{"a": str, "b": str, "p": obj(map[string]*schema.Shape{"h": str})})
	root := Root(state, obj(map[string]*schema.Shape{}), nil)
	for text, want := range map[string]string{
		"{{.state.a}}":                                    "a",
		"x {{$.state.b}}":                                 "b",
		"{{.state.p.h}}":                                  "p",
		"{{if .state.a}}{{.state.a}}{{end}}":              "",
		"{{if .state.a}}{{.state.b}}{{end}}":              "b",
		"{{with .state.a}}{{.}}{{$.state.a}}{{end}}":      "",
		"{{if and .state.a .state.b}}{{.state.b}}{{end}}": "",
		"{{default \"none\" .state.a}}":                   "",
		"{{if .state.p}}{{.state.p.h}}{{end}}":            "",
		"{{range .state.p}}{{.}}{{end}}":                  "",
		"{{if .state.a}}{{else}}{{.state.a}}{{end}}":      "a",
		"{{upper .state.a}}":                              "a",
	} {
		tp, err := Parse("t", text)
		if err != nil {
			t.Fatal(err)
		}
		reads := Analyze(tp, root).Reads
		var got []string
		for _, r := range reads {
			got = append(got, r.Field)
			if text[r.Offset:r.Offset+r.Len] != r.Field {
				t.Errorf("%s: offset points at %q", text, text[r.Offset:r.Offset+r.Len])
			}
		}
		if strings.Join(got, ",") != want {
			t.Errorf("%s: reads %v, want %q", text, got, want)
		}
	}
}
