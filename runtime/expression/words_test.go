package expression_test

import (
	"strings"
	"testing"

	"github.com/trellisflow/trellis/runtime/expression"
	"github.com/trellisflow/trellis/runtime/schema"
)

// expr's parser and checker messages reach the designer in the flow's
// words: no token kinds, no Go types, with what was expected.
func TestMessagesInWords(t *testing.T) {
	st := schema.Object(map[string]*schema.Shape{"s": {Types: []string{"string"}}, "n": {Types: []string{"integer"}},
		"x": {Types: []string{"number"}}, "l": {Types: []string{"array"}, Items: &schema.Shape{Types: []string{"string"}}},
		"o": schema.Object(map[string]*schema.Shape{"a": {Types: []string{"string"}}}), "b": {Types: []string{"boolean"}}})
	env := expression.NewEnv().WithFields("state", st)
	for src, want := range map[string]string{
		"state.n = 1":        `"=" does not compare (there is no assignment): write == to compare`,
		"state.n +":          `the expression ends after "+": a value is expected after it`,
		"(state.n":           "the expression ends before a bracket it opens is closed",
		"state.n)":           `")" closes nothing: there is no opening bracket before it`,
		"'abc":               "a quoted text is never closed: add its closing quote",
		"1 2":                `unexpected number "2": an operator (such as + or ==) or a comma is missing before it`,
		"state.n && || true": `unexpected operator "||": a value is expected here`,
		"state.s + 1":        "+ does not apply to a string and an integer",
		"state.l + 1":        "+ does not apply to a list and an integer",
		"state.o + state.x":  "+ does not apply to an object and a number",
		"!state.s":           "! does not apply to a string",
		"len(state.n)":       "len does not take an integer",
		"upper(state.n)":     "upper takes a string, not an integer",
		"state.n()":          "an integer is not a function: it cannot be called",
		"state.s ?? 1 + ''":  "?? and + need parentheses to be mixed",
		"len()":              "this takes 1 argument(s), not 0",
		"state.x % 2":        "% does not apply to a number and an integer",
	} {
		_, probs := expression.Compile(src, env, false)
		if len(probs) == 0 || !strings.Contains(probs[0].Message, want) {
			t.Errorf("%s: %+v, want %q", src, probs, want)
		}
		for _, p := range probs {
			for _, raw := range []string{"interface {}", "token", "float64", "mismatched"} {
				if strings.Contains(p.Message, raw) {
					t.Errorf("%s: %q still says %q", src, p.Message, raw)
				}
			}
		}
	}
}
