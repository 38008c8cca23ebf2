package expression_test

import (
	"fmt"
	"testing"

	"github.com/trellisflow/trellis/runtime/expression"
	"github.com/trellisflow/trellis/runtime/schema"
)

var fuzzEnv = expression.NewEnv().With("state", &schema.Shape{
	Types:  []string{"object"},
	Closed: true,
	Order:  []string{"list", "n", "name", "obj"},
	Props: map[string]*schema.Shape{
		"n":    {Types: []string{"integer"}},
		"name": {Types: []string{"string"}},
		"list": {Types: []string{"array"}, Items: &schema.Shape{Types: []string{"string"}}},
		"obj":  {},
	},
}).With("input", nil)

// FuzzCompile compiles arbitrary expressions: compilation must not panic,
// problems must point inside the text, and a compiled expression must
// evaluate (to a value or an error) without panicking.
func FuzzCompile(f *testing.F) {
	for _, s := range []string{"state.n + 1", "state.nme", "len(state.list) > 2 && state.name == 'x'",
		"normalize(state.name)", "word_overlap(state.name, 'a b')", "mentions(state.name, 'c++')", "len(split_words(state.name))", "filter(state.list, # != '')",
		"state.obj.x.y ?? 3", "input.anything", "[1, 2][5]", "1 / 0", "state.n ? 1 : 2", "{a: 1}.a",
		"'n0'", "1 + 2", "2.5 * 2", "true && !false", "nil", "'a' + 'b'", "[1, 2]", "-7"} {
		f.Add(s, true)
		f.Add(s, false)
	}
	vars := map[string]any{
		"state": map[string]any{"n": 3, "name": "Ada", "list": []any{"a", ""}, "obj": map[string]any{"x": nil}},
		"input": map[string]any{},
	}
	f.Fuzz(func(t *testing.T, src string, cond bool) {
		p, probs := expression.Compile(src, fuzzEnv, cond)
		for _, pr := range probs {
			if pr.Line < 1 || pr.Col < 1 || pr.Message == "" || pr.Code == "" {
				t.Fatalf("bad problem %+v for %q", pr, src)
			}
		}
		if p == nil {
			if len(probs) == 0 {
				t.Fatalf("no program and no problem for %q", src)
			}
			return
		}
		if cond {
			_, _ = p.EvalBool(vars)
		} else {
			_, _ = p.Eval(vars)
		}
		// a literal program answers what the machine would
		if lit, ok := expression.Literal(p); ok {
			v, err := expression.RunVM(p, vars)
			if err != nil || fmt.Sprintf("%#v", v) != fmt.Sprintf("%#v", lit) {
				t.Fatalf("%q: literal %#v, machine %#v %v", src, lit, v, err)
			}
		}
	})
}
