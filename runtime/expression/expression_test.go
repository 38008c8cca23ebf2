package expression_test

import (
	"strings"
	"testing"

	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/expression"
	"github.com/trellisflow/trellis/runtime/schema"
)

// Reading a field of a value that may be null fails in expr at run time,
// so it is a warning unless written x?.y or behind a nil test.
func TestNullableReads(t *testing.T) {
	str := &schema.Shape{Types: []string{"string"}}
	q := &schema.Shape{Types: []string{"object", "null"}, Props: map[string]*schema.Shape{"text": str}, Order: []string{"text"}, Closed: true}
	env := expression.NewEnv().WithFields("state", &schema.Shape{Types: []string{"object"}, Closed: true,
		Props: map[string]*schema.Shape{"q": q, "s": str}, Order: []string{"q", "s"}})
	cases := map[string]bool{ // expression -> warns
		"state.q.text":                                        true,
		"state.q?.text":                                       false,
		"state.q != nil && state.q.text != ''":                false,
		"nil != state.q && state.q.text != ''":                false,
		"state.q != nil ? state.q.text : ''":                  false,
		"state.q == nil ? '' : state.q.text":                  false,
		"state.q == nil ? state.q.text : ''":                  true,
		"state.q != nil || state.q.text != ''":                true,
		"state.s != '' && state.q.text != ''":                 true,
		"len(state.q != nil ? state.q.text : '') > 1":         false,
		"state.q.text ?? ''":                                  true,
		"state.s + state.q.text":                              true,
		"state.q != nil && state.s != '' ? state.q.text : ''": false,
	}
	for src, warns := range cases {
		p, probs := expression.Compile(src, env, false)
		if p == nil {
			t.Fatalf("%s: %+v", src, probs)
		}
		got := len(probs) > 0
		if got != warns {
			t.Errorf("%s: warnings %+v, want warning %v", src, probs, warns)
			continue
		}
		if warns {
			pr := probs[0]
			if !pr.Warning || pr.Code != diag.CodeExprMayBeNil || pr.Path != "state.q" || !strings.Contains(pr.Message, "state.q?.text") {
				t.Errorf("%s: %+v", src, pr)
			}
			if got := []rune(src)[pr.Col-1 : pr.EndCol-1]; string(got) != "text" {
				t.Errorf("%s: columns %d-%d point at %q", src, pr.Col, pr.EndCol, string(got))
			}
		}
	}
}

func TestLiteralPrograms(t *testing.T) {
	env := expression.NewEnv().WithFields("state", &schema.Shape{Types: []string{"object"}, Props: map[string]*schema.Shape{"n": {Types: []string{"integer"}}}})
	for src, want := range map[string]any{"'n0'": "n0", "1 + 2": 3, "2.5 * 2": 5.0, "!false": true, "nil": nil, "-7": -7} {
		p, probs := expression.Compile(src, env, false)
		if len(probs) > 0 {
			t.Fatal(probs)
		}
		if lit, ok := expression.Literal(p); !ok || lit != want {
			t.Errorf("%s: literal %#v %v, want %#v", src, lit, ok, want)
		}
		if v, err := p.Eval(nil); err != nil || v != want {
			t.Errorf("%s: %#v %v", src, v, err)
		}
	}
	for _, src := range []string{"state.n + 1", "[1, 2]", "now()"} {
		p, probs := expression.Compile(src, env, false)
		if len(probs) > 0 {
			t.Fatal(probs)
		}
		if _, ok := expression.Literal(p); ok {
			t.Errorf("%s: taken for a literal", src)
		}
	}
}
