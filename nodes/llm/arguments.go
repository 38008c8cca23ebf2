package llm

import (
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/expression"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/schema"
)

// checkArgument reports what the expression p, an argument of a fallback
// call, may yield that the parameter's shape refuses, as a node's write to
// a field is checked: its type and declared shape (Fits), the type of each
// branch of a choice, the string and number literals it may yield against
// the parameter's enum, pattern, lengths and bounds, and (a warning) text
// it does not control into a parameter that takes only some texts.
func checkArgument(b kind.Builder, p *expression.Program, shape *schema.Shape, at config.Value, what string) {
	if p == nil || shape == nil {
		return
	}
	b.Fits(p, shape, at, what)
	if bs := p.Branches(); len(bs) > 1 {
		for _, br := range bs {
			switch {
			case br.Type == "" || br.Type == "null" && shape.Nullable():
			case br.Type == "number" && !shape.Takes("number") && shape.Allows("integer"):
				b.Report(diag.CodeToolSetting, at.PosIn(br.Line, br.Col, br.EndCol), at.Path(), "%s takes %s only, but this branch yields a number that may have a fraction", what, shape.Describe())
			case !shape.Allows(br.Type):
				b.Report(diag.CodeToolSetting, at.PosIn(br.Line, br.Col, br.EndCol), at.Path(), "%s takes %s, but this branch yields a %s", what, shape.Describe(), br.Type)
			}
		}
	}
	if _, constant := p.Constant(); !constant {
		for _, l := range p.Numbers() {
			if why := shape.OutOfRange(l.Value); why != "" {
				b.Report(diag.CodeToolSetting, at.PosIn(l.Line, l.Col, l.EndCol), at.Path(), "%s is %s, but this expression can yield %v", what, why, l.Value)
			}
		}
	}
	values, isEnum := shape.Strings()
	lits, all := p.Yields()
	for _, l := range lits {
		pos := at.PosIn(l.Line, l.Col, l.EndCol)
		switch why := shape.TextRule(l.Value); {
		case why == "":
		case isEnum && !slices.Contains(values, l.Value):
			b.Report(diag.CodeToolSetting, pos, at.Path(), "%s is one of %s, never %q", what, quoted(values), l.Value).Suggestion = diag.Suggest(l.Value, values)
		default:
			b.Report(diag.CodeToolSetting, pos, at.Path(), "%s %s, but this expression can yield %q", what, why, l.Value)
		}
	}
	least := math.MaxInt
	if p.Shape() != nil {
		least = 0
	}
	if t := p.ResultType(); t != nil && t.Kind().String() == "string" && !all && p.Shape().TextRules(0) == "" {
		if rule := shape.TextRules(least); rule != "" {
			b.Report(diag.CodeToolSetting, at.Pos(), at.Path(), "%s %s, but this expression yields text it does not control: the call fails when the text breaks that", what, rule).
				Severity = diag.Warning
		}
	}
}

func quoted(vs []string) string {
	q := make([]string, len(vs))
	for i, v := range vs {
		q[i] = strconv.Quote(v)
	}
	return strings.Join(q, ", ")
}
