// Checking what a case did: assertions over its state, output and
// replies, its path, and its scores against their thresholds, each
// failure with its reason.

package eval

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/value"
)

// vars are the expressions' variables over what a case did.
func (b *bound) vars(o *outcome, in *engine.Interrupt) map[string]any {
	vars := b.g.Vars(o.state, nil)
	vars["output"] = ""
	if b.g.Output != nil && in == nil {
		if text, err := b.g.Output.Render(o.state); err == nil {
			vars["output"] = text
		}
	}
	vars["reply"] = o.reply
	vars["replies"] = slices.Clone(o.replies)
	vars["transcript"] = slices.Clone(o.transcript)
	return vars
}

// checkExpect checks an expectation (of a turn, or with turn 0 of the
// case) against the outcome; path is the run's (or every run's).
func (b *bound) checkExpect(ex *Expect, o *outcome, path [][]string, tools []ToolRecord, in *engine.Interrupt, turn int) []CheckResult {
	var out []CheckResult
	vars := b.vars(o, in)
	for _, c := range ex.State {
		out = append(out, b.evalCheck("state", c, vars, o.state, turn))
	}
	for _, c := range ex.Output {
		if in != nil {
			out = append(out, CheckResult{Name: checkName("output", c), Kind: "output", Turn: turn, Pos: posText(c.Pos), Line: c.Pos.Line, XFail: c.XFail,
				Reason: "the run paused at " + strings.Join(pausedAt(in), ", ") + ", so there is no output yet"})
			continue
		}
		out = append(out, b.evalCheck("output", c, vars, vars["output"], turn))
	}
	for _, c := range ex.Reply {
		out = append(out, b.evalCheck("reply", c, vars, o.reply, turn))
	}
	for _, c := range ex.Replies {
		// every reply: the first that fails it says which turn
		res := CheckResult{Name: checkName("replies", c), Kind: "replies", Passed: true, Pos: posText(c.Pos), Line: c.Pos.Line, XFail: c.XFail}
		for i, r := range o.replies {
			v := maps.Clone(vars)
			v["reply"] = r
			one := b.evalCheck("reply", c, v, r, o.replyTurns[i])
			if !one.Passed {
				res.Passed, res.Reason = false, fmt.Sprintf("the reply of turn %d: %s", o.replyTurns[i], one.Reason)
				break
			}
		}
		out = append(out, res)
	}
	if ex.Path != nil {
		out = append(out, checkPath(ex.Path, path, turn))
	}
	if ex.Tools != nil {
		out = append(out, checkToolCalls(ex.Tools, tools, turn))
	}
	return out
}

// evalCheck checks one assertion; subject is what it checks unless it
// selects a value with of.
func (b *bound) evalCheck(kind string, c *Check, vars map[string]any, subject any, turn int) CheckResult {
	res := CheckResult{Name: checkName(kind, c), Kind: kind, Turn: turn, Pos: posText(c.Pos), Line: c.Pos.Line, XFail: c.XFail}
	cc := b.checks[c]
	fail := func(format string, args ...any) CheckResult {
		res.Reason = fmt.Sprintf(format, args...)
		return res
	}
	if cc.expr != nil {
		ok, err := cc.expr.EvalBool(vars)
		switch {
		case err != nil:
			return fail("%v", err)
		case !ok:
			return fail("%s does not hold%s", c.Expr, explain(c.Expr, vars))
		}
		res.Passed = true
		return res
	}
	v := subject
	if cc.of != nil {
		var err error
		if v, err = cc.of.Eval(vars); err != nil {
			return fail("of %s: %v", c.Of, err)
		}
	}
	text := textOf(v)
	lower := func(s string) string {
		if c.IgnoreCase {
			return strings.ToLower(s)
		}
		return s
	}
	for _, want := range c.Contains {
		if !strings.Contains(lower(text), lower(want)) {
			return fail("%s does not contain %q: %s", subjectName(kind, c), want, excerpt(text))
		}
	}
	for _, bad := range c.NotContains {
		if i := strings.Index(lower(text), lower(bad)); i >= 0 {
			return fail("%s contains %q: %s", subjectName(kind, c), bad, excerptAt(text, i))
		}
	}
	if cc.regex != nil && !cc.regex.MatchString(text) {
		return fail("%s does not match /%s/: %s", subjectName(kind, c), c.Regex, excerpt(text))
	}
	if cc.notRegex != nil {
		if loc := cc.notRegex.FindStringIndex(text); loc != nil {
			return fail("%s matches /%s/ at %q: %s", subjectName(kind, c), c.NotRegex, text[loc[0]:loc[1]], excerptAt(text, loc[0]))
		}
	}
	if cc.schema != nil {
		norm, err := value.Normalize(v)
		if err == nil {
			err = cc.schema.Validate(norm)
		}
		if err != nil {
			return fail("%s does not fit the schema: %s", subjectName(kind, c), firstLine(err.Error()))
		}
	}
	res.Passed = true
	return res
}

// checkName names a check for reports.
func checkName(kind string, c *Check) string {
	if c.Name != "" {
		return c.Name
	}
	what := kind
	if c.Of != "" {
		what = c.Of
	}
	switch {
	case c.Expr != "":
		return kind + ": " + c.Expr
	case len(c.Contains) > 0:
		return what + " contains " + quoteAll(c.Contains)
	case len(c.NotContains) > 0:
		return what + " does not contain " + quoteAll(c.NotContains)
	case c.Regex != "":
		return what + " matches /" + c.Regex + "/"
	case c.NotRegex != "":
		return what + " does not match /" + c.NotRegex + "/"
	}
	return what + " fits its schema"
}

func subjectName(kind string, c *Check) string {
	switch {
	case c.Of != "":
		return c.Of
	case kind == "state":
		return "the state"
	case kind == "output":
		return "the output"
	}
	return "the reply"
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}

// textOf is a value as text: a string itself, anything else its JSON.
func textOf(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// show writes a value for a message: a text quoted, anything else as
// JSON, cut when long.
func show(v any) string {
	if s, ok := v.(string); ok {
		return excerpt(s)
	}
	r := []rune(textOf(v))
	if len(r) > 160 {
		return string(r[:160]) + "…"
	}
	return string(r)
}

// excerpt quotes a text, cut when long.
func excerpt(s string) string { return excerptAt(s, 0) }

// excerptAt quotes a text around byte offset at.
func excerptAt(s string, at int) string {
	const width = 160
	r := []rune(s)
	i := len([]rune(s[:min(max(at, 0), len(s))]))
	lo := max(0, i-width/4)
	hi := min(len(r), lo+width)
	out := string(r[lo:hi])
	if lo > 0 {
		out = "…" + out
	}
	if hi < len(r) {
		out += "…"
	}
	return strconv.Quote(out)
}

// explain shows the values of the state fields a failed condition reads,
// and of reply and output.
func explain(cond string, vars map[string]any) string {
	var b strings.Builder
	seen := map[string]bool{}
	for _, word := range strings.FieldsFunc(cond, func(r rune) bool {
		return !(r == '.' || r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	}) {
		parts := strings.SplitN(word, ".", 3)
		key := parts[0]
		switch {
		case parts[0] == "state" && len(parts) >= 2:
			key = "state." + parts[1]
		case parts[0] == "reply" || parts[0] == "output":
		default:
			continue
		}
		if seen[key] {
			continue
		}
		seen[key] = true
		fmt.Fprintf(&b, "; %s = %s", key, show(vars[key]))
	}
	return b.String()
}

// checkScore judges a score against its threshold.
func (b *bound) checkScore(s *Score, vars map[string]any) CheckResult {
	res := CheckResult{Name: s.Name, Kind: "score", Pos: posText(s.Pos), Line: s.Pos.Line, Want: s.want(), XFail: s.XFail}
	p := b.scores[s]
	v, err := p.Eval(vars)
	if err != nil {
		res.Reason = fmt.Sprintf("%s: %v", s.Value, err)
		return res
	}
	f, ok := number(v)
	if !ok {
		res.Reason = fmt.Sprintf("%s is %s, not a number", s.Value, show(v))
		return res
	}
	res.Score = &f
	res.Passed = s.passes(f)
	if !res.Passed {
		res.Reason = fmt.Sprintf("%s = %s, want %s", s.Value, fmtNum(f), res.Want)
		if s.Name == s.Value {
			res.Reason = fmt.Sprintf("%s, want %s", fmtNum(f), res.Want)
		}
	}
	return res
}

// passes reports whether f meets the score's threshold.
func (s *Score) passes(f float64) bool {
	if s.Min != nil && (f < *s.Min || s.MinExclusive && f == *s.Min) {
		return false
	}
	if s.Max != nil && (f > *s.Max || s.MaxExclusive && f == *s.Max) {
		return false
	}
	return true
}

// want says what passes.
func (s *Score) want() string {
	var parts []string
	if s.Min != nil {
		op := ">="
		if s.MinExclusive {
			op = ">"
		}
		parts = append(parts, op+" "+fmtNum(*s.Min))
	}
	if s.Max != nil {
		op := "<="
		if s.MaxExclusive {
			op = "<"
		}
		parts = append(parts, op+" "+fmtNum(*s.Max))
	}
	return strings.Join(parts, " and ")
}

// number reads a number value.
func number(v any) (float64, bool) {
	switch x := v.(type) {
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	case float64:
		return x, !math.IsNaN(x)
	}
	return 0, false
}

func fmtNum(f float64) string { return strconv.FormatFloat(f, 'g', 6, 64) }

// checkPath judges the nodes visited.
func checkPath(p *Path, path [][]string, turn int) CheckResult {
	res := CheckResult{Name: "path", Kind: "path", Turn: turn, Pos: posText(p.Pos), Line: p.Pos.Line, XFail: p.XFail}
	var why []string
	if p.Exact != nil && !samePath(p.Exact, path) {
		why = append(why, fmt.Sprintf("not exactly %s", showSteps(p.Exact)))
	}
	if p.InOrder != nil {
		if i := inOrder(p.InOrder, path); i < len(p.InOrder) {
			if i == 0 {
				why = append(why, fmt.Sprintf("%s is not visited", p.InOrder[0]))
			} else {
				why = append(why, fmt.Sprintf("%s is not visited after %s", p.InOrder[i], strings.Join(p.InOrder[:i], ", ")))
			}
		}
	}
	if p.AnyOrder != nil {
		count := map[string]int{}
		for _, step := range path {
			for _, n := range step {
				count[n]++
			}
		}
		want := map[string]int{}
		for _, n := range p.AnyOrder {
			want[n]++
		}
		var missing []string
		for _, n := range slices.Sorted(maps.Keys(want)) {
			if count[n] < want[n] {
				missing = append(missing, n)
			}
		}
		if len(missing) > 0 {
			why = append(why, fmt.Sprintf("%s not visited", strings.Join(missing, ", ")))
		}
	}
	var seen []string
	for _, n := range p.Never {
		if slices.ContainsFunc(path, func(step []string) bool { return slices.Contains(step, n) }) {
			seen = append(seen, n)
		}
	}
	if len(seen) > 0 {
		why = append(why, fmt.Sprintf("%s visited, which must not be", strings.Join(seen, ", ")))
	}
	var parts []string
	for _, l := range []struct {
		name  string
		nodes []string
	}{{"in order", p.InOrder}, {"any order", p.AnyOrder}, {"never", p.Never}} {
		if l.nodes != nil {
			parts = append(parts, l.name+" ["+strings.Join(l.nodes, ", ")+"]")
		}
	}
	if p.Exact != nil {
		parts = append([]string{"exact " + showSteps(p.Exact)}, parts...)
	}
	res.Name = "path " + strings.Join(parts, ", ")
	if len(why) == 0 {
		res.Passed = true
		return res
	}
	res.Reason = strings.Join(why, "; ") + "; the path was " + showSteps(toSteps(path))
	return res
}

// inOrder matches names to visits in order (each at a step no earlier
// than the one before, a step's nodes being unordered) and returns how
// many it matched.
func inOrder(names []string, path [][]string) int {
	step, used := 0, map[[2]int]bool{}
	matched := 0
	for _, name := range names {
		found := false
		for s := step; s < len(path) && !found; s++ {
			for i, n := range path[s] {
				if n == name && !used[[2]int{s, i}] {
					used[[2]int{s, i}] = true
					step, found = s, true
					break
				}
			}
		}
		if !found {
			return matched
		}
		matched++
	}
	return matched
}

func samePath(want []Step, got [][]string) bool {
	if len(want) != len(got) {
		return false
	}
	for i := range want {
		if !slices.Equal(slices.Sorted(slices.Values(want[i])), slices.Sorted(slices.Values(got[i]))) {
			return false
		}
	}
	return true
}

func toSteps(path [][]string) []Step {
	out := make([]Step, len(path))
	for i, s := range path {
		out[i] = s
	}
	return out
}

// showSteps writes a path as [a, [b, c], d], cut when long.
func showSteps(p []Step) string {
	parts := make([]string, len(p))
	for i, s := range p {
		if len(s) == 1 {
			parts[i] = s[0]
		} else {
			parts[i] = "[" + strings.Join(s, ", ") + "]"
		}
	}
	if len(parts) > 40 {
		parts = append(parts[:20:20], append([]string{fmt.Sprintf("… %d more …", len(parts)-30)}, parts[len(parts)-10:]...)...)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
