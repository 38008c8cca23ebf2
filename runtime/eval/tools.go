// Tool calls: the calls a case's tools are scripted to answer, the calls
// each turn made (in its transcript), and the tools rule that judges
// them, by name and arguments, like the path judges nodes.

package eval

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/testfile"
	"github.com/trellisflow/trellis/runtime/value"
)

// ToolRecord is a tool call a run made, as its tool_end event reports
// it: the node that called it, the tool (by the name the model calls
// it), its arguments, and its result or error. A call a person rejected
// is recorded with its approval but was not made.
type ToolRecord struct {
	Node string `json:"node"`
	// Seq numbers the node's calls in the order the model made them.
	Seq       int    `json:"seq,omitempty"`
	Name      string `json:"name"`
	Arguments any    `json:"arguments,omitempty"`
	Approval  string `json:"approval,omitempty"`
	Result    any    `json:"result,omitempty"`
	Error     string `json:"error,omitempty"`
	// step is the run's step the call ended in
	step int
}

// made reports whether the call was made (not rejected by a person).
func (r ToolRecord) made() bool { return r.Approval != "rejected" }

// ToolCalls holds assertions over the tool calls made (over the turn's
// run, or over every run of the case): Exact lists every call in order,
// InOrder calls made in that order (others between them), AnyOrder calls
// each made, Never calls not made. A call matches a tool's name and, when
// the rule gives arguments, those arguments as a subset of the call's.
type ToolCalls struct {
	Exact, InOrder, AnyOrder, Never []ToolMatch
	XFail                           string
	Pos                             diag.Pos
}

// ToolMatch matches a tool call: the tool's name and, when HasArgs, a
// subset of its arguments (a nested object matches a subset too, a list
// item by item).
type ToolMatch struct {
	Name    string
	Args    map[string]any
	HasArgs bool
	Pos     diag.Pos
}

func (m ToolMatch) String() string {
	if !m.HasArgs {
		return m.Name
	}
	b, _ := json.Marshal(m.Args)
	return m.Name + string(b)
}

func (m ToolMatch) matches(r ToolRecord) bool {
	return r.Name == m.Name && (!m.HasArgs || subset(m.Args, r.Arguments))
}

// subset reports whether got holds want: every key of a wanted object
// with a value holding the wanted one, a list of as many items each
// holding the wanted item, numbers equal as numbers, anything else equal.
func subset(want, got any) bool {
	if got != nil {
		if n, err := value.Normalize(got); err == nil {
			got = n
		}
	}
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return false
		}
		for k, wv := range w {
			gv, ok := g[k]
			if !ok || !subset(wv, gv) {
				return false
			}
		}
		return true
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for i := range w {
			if !subset(w[i], g[i]) {
				return false
			}
		}
		return true
	}
	if wf, ok := number(want); ok {
		gf, ok := number(got)
		return ok && wf == gf
	}
	return want == got
}

// toolScriptsField, toolMatchField and toolsField are the format's.
func toolScriptsField() config.Field {
	return testfile.ToolScriptsField("tools", "Scripted tool calls by tool name, as flow tests script them: one entry per call (its result, its error, or run: true); a call beyond them runs the tool. Every run of the case, turn after turn, takes the next entry.")
}

func toolsField() config.Field {
	str := config.String
	match := config.OneOf("", "A tool call: the tool's name (the name the model calls it), or an object with its arguments.",
		str("", "").NonEmpty(1),
		config.Object("", "",
			str("name", "The tool's name.").NonEmpty(1).Require(),
			config.Map("args", "Arguments the call must have, matched as a subset: other arguments, and other keys of a nested object, are allowed.", nil),
		),
	)
	matches := func(name, doc string) config.Field {
		return config.List(name, doc, config.Elem(match)).NonEmpty(1)
	}
	return config.Object("", "The tool calls made (over the turn's run, or over every run of the case; a call a person rejected was not made).",
		config.List("exact", "Every call, in order (empty: no call at all).", config.Elem(match)),
		matches("in_order", "Calls made in this order, with others between them allowed."),
		matches("any_order", "Calls each made, in any order."),
		matches("never", "Calls not made: a name alone, no call of the tool; with args, no call with those arguments."),
		str("xfail", "Why this is known to fail today: a failure is reported as known, and passing fails the eval until the mark is removed.").NonEmpty(1),
	).NonEmpty(1)
}

// decodeToolCalls reads a tools rule.
func decodeToolCalls(v config.Value, dl *diag.List) *ToolCalls {
	tc := &ToolCalls{Pos: v.Pos(), XFail: v.Get("xfail").Text()}
	for _, l := range []struct {
		key string
		dst *[]ToolMatch
	}{{"exact", &tc.Exact}, {"in_order", &tc.InOrder}, {"any_order", &tc.AnyOrder}, {"never", &tc.Never}} {
		if l.key == "exact" && v.Get("exact").Exists() {
			tc.Exact = []ToolMatch{}
		}
		for _, it := range v.Get(l.key).Items() {
			m := ToolMatch{Pos: it.Pos()}
			if it.IsScalar() {
				m.Name = it.Text()
				m.Pos = it.Pos()
			} else {
				m.Name, m.Pos = it.Get("name").Text(), it.Get("name").Pos()
				if a := it.Get("args"); a.Exists() {
					m.Args, m.HasArgs = values(a, dl), true
				}
			}
			*l.dst = append(*l.dst, m)
		}
	}
	return tc
}

// bindToolCalls checks the tools a rule names against the flow's.
func (b *bound) bindToolCalls(tc *ToolCalls, dl *diag.List) {
	for _, l := range [][]ToolMatch{tc.Exact, tc.InOrder, tc.AnyOrder, tc.Never} {
		for _, m := range l {
			if _, ok := b.g.Tool(m.Name); !ok {
				d := testfile.UnknownTool(b.g, m.Name)
				dd := dl.Errorf(diag.CodeUnknownTarget, m.Pos, "expect.tools", "%s", d.Summary)
				dd.Suggestion = d.Suggestion
			}
		}
	}
}

// bindToolScripts checks the tools a case scripts against the flow's.
func (b *bound) bindToolScripts(c *Case, dl *diag.List) {
	for _, name := range testfile.UnknownTools(b.g, c.Tools) {
		d := testfile.UnknownTool(b.g, name)
		dd := dl.Errorf(diag.CodeUnknownTarget, c.toolPos[name], "tools", "%s", d.Summary)
		dd.Suggestion = d.Suggestion
	}
}

// toolRecorder collects a run's tool calls from its events: the flow's
// own (a child flow's calls are its own).
func toolRecorder(ev engine.Event, rec *[]ToolRecord) {
	if ev.Type != engine.ToolEnd || ev.NS != "" || ev.Tool == nil {
		return
	}
	*rec = append(*rec, ToolRecord{Node: ev.Node, Seq: ev.Tool.Seq, Name: ev.Tool.Name, Arguments: ev.Tool.Arguments, Approval: ev.Tool.Approval,
		Result: ev.Tool.Result, Error: ev.Tool.Error, step: ev.Step})
}

// sortCalls puts a run's calls in order: by step, a step's nodes by
// name, a node's calls in the order the model made them (calls made at
// once run at once and end in any order).
func sortCalls(calls []ToolRecord) {
	slices.SortStableFunc(calls, func(a, b ToolRecord) int {
		if a.step != b.step {
			return a.step - b.step
		}
		if c := strings.Compare(a.Node, b.Node); c != 0 {
			return c
		}
		return a.Seq - b.Seq
	})
}

// checkToolCalls judges the tool calls made.
func checkToolCalls(tc *ToolCalls, calls []ToolRecord, turn int) CheckResult {
	res := CheckResult{Kind: "tools", Turn: turn, Pos: posText(tc.Pos), Line: tc.Pos.Line, XFail: tc.XFail}
	var made []ToolRecord
	for _, r := range calls {
		if r.made() {
			made = append(made, r)
		}
	}
	var why []string
	if tc.Exact != nil {
		ok := len(tc.Exact) == len(made)
		for i := 0; ok && i < len(made); i++ {
			ok = tc.Exact[i].matches(made[i])
		}
		if !ok {
			why = append(why, "the calls are not exactly "+showMatches(tc.Exact))
		}
	}
	if tc.InOrder != nil {
		i, at := 0, 0
		for ; i < len(tc.InOrder); i++ {
			j := slices.IndexFunc(made[at:], tc.InOrder[i].matches)
			if j < 0 {
				break
			}
			at += j + 1
		}
		if i < len(tc.InOrder) {
			if i == 0 {
				why = append(why, fmt.Sprintf("no call %s", tc.InOrder[0]))
			} else {
				why = append(why, fmt.Sprintf("no call %s after %s", tc.InOrder[i], showMatches(tc.InOrder[:i])))
			}
		}
	}
	if tc.AnyOrder != nil {
		// each wanted call takes a call of its own
		used := make([]bool, len(made))
		var missing []string
		for _, m := range tc.AnyOrder {
			j := slices.IndexFunc(made, func(r ToolRecord) bool { return m.matches(r) })
			for j >= 0 && used[j] {
				k := slices.IndexFunc(made[j+1:], m.matches)
				if k < 0 {
					j = -1
				} else {
					j += k + 1
				}
			}
			if j < 0 {
				missing = append(missing, m.String())
				continue
			}
			used[j] = true
		}
		if len(missing) > 0 {
			why = append(why, "no call "+strings.Join(missing, ", "))
		}
	}
	var seen []string
	for _, m := range tc.Never {
		if slices.ContainsFunc(made, m.matches) {
			seen = append(seen, m.String())
		}
	}
	if len(seen) > 0 {
		why = append(why, fmt.Sprintf("%s called, which must not be", strings.Join(seen, ", ")))
	}
	var parts []string
	for _, l := range []struct {
		name string
		ms   []ToolMatch
	}{{"exact", tc.Exact}, {"in order", tc.InOrder}, {"any order", tc.AnyOrder}, {"never", tc.Never}} {
		if l.ms != nil {
			parts = append(parts, l.name+" "+showMatches(l.ms))
		}
	}
	res.Name = "tools " + strings.Join(parts, ", ")
	if len(why) == 0 {
		res.Passed = true
		return res
	}
	res.Reason = strings.Join(why, "; ") + "; the calls were " + showCalls(made)
	return res
}

func showMatches(ms []ToolMatch) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = m.String()
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// showCalls writes calls as [name{"arg":1}, …].
func showCalls(calls []ToolRecord) string {
	if len(calls) == 0 {
		return "none"
	}
	parts := make([]string, len(calls))
	for i, r := range calls {
		b, _ := json.Marshal(r.Arguments)
		if r.Arguments == nil {
			b = []byte("{}")
		}
		parts[i] = r.Name + string(b)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
