// Binding a dataset to a version of its flow: every expression compiled
// against the flow's state, every node and input named checked, each
// problem at its line and column with a suggestion.

package eval

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/expression"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/schema"
)

// bound is a dataset compiled against one version of its flow.
type bound struct {
	ds     *Dataset
	g      *flow.Graph
	env    *expression.Env
	checks map[*Check]*compiledCheck
	scores map[*Score]*expression.Program
	judges map[*Judge]*compiledJudge
}

type compiledCheck struct {
	of, expr        *expression.Program
	regex, notRegex *regexp.Regexp
	schema          *schema.Validator
}

type compiledJudge struct {
	include  []*expression.Program
	fallback *expression.Program
}

var (
	stringShape = &schema.Shape{Types: []string{"string"}}
	turnShape   = schema.Object(map[string]*schema.Shape{"turn": {Types: []string{"integer"}}, "role": stringShape, "text": stringShape}, "turn", "role", "text")
)

// Env is the expressions' environment over a flow: its state (and input,
// config), and output (the flow's output text), reply (the reply judged),
// replies (every reply of the case) and transcript (every message, each
// {turn, role, text}, role user or flow).
func Env(g *flow.Graph) *expression.Env {
	return g.Env().With("output", stringShape).With("reply", stringShape).
		With("replies", &schema.Shape{Types: []string{"array"}, Items: stringShape}).
		With("transcript", &schema.Shape{Types: []string{"array"}, Items: turnShape})
}

// Bind checks the dataset against g, a version of its flow, and compiles
// its expressions; the problems are at their lines and columns in the
// dataset.
func Bind(ds *Dataset, g *flow.Graph) (*bound, diag.List) {
	b := &bound{ds: ds, g: g, env: Env(g), checks: map[*Check]*compiledCheck{}, scores: map[*Score]*expression.Program{}, judges: map[*Judge]*compiledJudge{}}
	var dl diag.List
	b.values(ds.With, ds.Config, ds.withAt, ds.configAt, &dl)
	for _, c := range ds.Cases {
		b.values(c.With, c.Config, c.withAt, c.configAt, &dl)
		b.bindToolScripts(c, &dl)
		for i, t := range c.Turns {
			b.turn(c, i+1, t, &dl)
			b.expect(t.Expect, true, &dl)
		}
		b.expect(c.Expect, false, &dl)
		for _, s := range c.Scores {
			if s.Value == "" {
				continue // reported as it was read
			}
			off := 0
			if s.from != "" {
				_, _, _, off, _ = splitThresholdAt(s.from)
			}
			b.scores[s] = b.compile(s.valueAt, s.Value, off, false, &dl)
		}
		for _, j := range c.Judges {
			cj := &compiledJudge{}
			for i, in := range j.Include {
				cj.include = append(cj.include, b.compile(j.includeAt[i], in, 0, false, &dl))
			}
			if j.Fallback != "" {
				cj.fallback = b.compile(j.fallbackAt, j.Fallback, 0, false, &dl)
			}
			b.judges[j] = cj
		}
	}
	return b, dl.Sort()
}

// values checks initial values' and a configuration's names.
func (b *bound) values(with, cfg map[string]any, withAt, configAt config.Value, dl *diag.List) {
	var fields []string
	for _, f := range b.g.Fields {
		fields = append(fields, f.Name)
	}
	for _, k := range slices.Sorted(maps.Keys(with)) {
		if _, ok := b.g.Field(k); !ok {
			d := dl.Errorf(diag.CodeUnknownKey, withAt.KeyOf(k).Pos(), withAt.Path(), "with: flow %s has no state field %q", b.g.Name, k)
			d.Suggestion = diag.Suggest(k, fields)
		}
	}
	var names []string
	for _, c := range b.g.Config {
		names = append(names, c.Name)
	}
	for _, k := range slices.Sorted(maps.Keys(cfg)) {
		if _, ok := b.g.ConfigField(k); !ok {
			d := dl.Errorf(diag.CodeConfig, configAt.KeyOf(k).Pos(), configAt.Path(), "config: flow %s takes no configuration %q", b.g.Name, k)
			d.Suggestion = diag.Suggest(k, names)
		}
	}
}

// turn checks a turn's message, input and answers against the flow.
func (b *bound) turn(c *Case, n int, t *Turn, dl *diag.List) {
	g := b.g
	if t.HasMessage && g.Conversation == nil {
		dl.Errorf(diag.CodeUnknownInput, t.Pos, "turns", "turn %d is a message, but flow %s has no conversation block to take it: give the run's input instead ({input: {...}})", n, g.Name)
	}
	for _, k := range slices.Sorted(maps.Keys(t.Input)) {
		if f, ok := g.Field(k); !ok || !f.Input {
			d := dl.Errorf(diag.CodeUnknownInput, t.inputAt.KeyOf(k).Pos(), t.inputAt.Path(), "turn %d: %q is not an input of flow %s (it takes %s)", n, k, g.Name, strings.Join(g.InputNames(), ", "))
			d.Suggestion = diag.Suggest(k, g.InputNames())
		} else if g.Conversation != nil && k == g.Conversation.Input && t.HasMessage {
			dl.Errorf(diag.CodeConstraint, t.inputAt.KeyOf(k).Pos(), t.inputAt.Path(), "turn %d gives %s twice: as its message and in its input", n, k)
		}
	}
	var askers []string
	for _, nd := range g.Nodes {
		_, asks := nd.Impl.(kind.Asker)
		_, pauses := nd.Impl.(kind.Interrupter) // a tool call waiting for approval
		if asks || pauses {
			askers = append(askers, nd.Name)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(t.Answers)) {
		if !slices.Contains(askers, k) {
			d := dl.Errorf(diag.CodeUnknownTarget, t.answersAt.KeyOf(k).Pos(), t.answersAt.Path(), "turn %d answers %q, which is not a node of flow %s that asks", n, k, g.Name)
			d.Suggestion = diag.Suggest(k, askers)
		}
	}
	if t.Answers != nil && t.HasMessage {
		dl.Errorf(diag.CodeConstraint, t.Pos, "turns", "turn %d both answers a paused run and sends a message: a resume takes no input", n)
	}
	_ = c
}

// expect compiles an expectation's checks and checks its path's names.
func (b *bound) expect(ex *Expect, turn bool, dl *diag.List) {
	if ex == nil {
		return
	}
	for _, target := range []struct {
		name   string
		checks []*Check
	}{{"state", ex.State}, {"output", ex.Output}, {"reply", ex.Reply}, {"replies", ex.Replies}} {
		for _, c := range target.checks {
			b.check(target.name, c, dl)
		}
		if len(target.checks) == 0 {
			continue
		}
		switch {
		case target.name == "output" && b.g.Output == nil:
			dl.Errorf(diag.CodeConstraint, target.checks[0].Pos, "expect.output", "flow %s declares no output to check", b.g.Name)
		case (target.name == "reply" || target.name == "replies") && b.g.Conversation == nil:
			dl.Errorf(diag.CodeConstraint, target.checks[0].Pos, "expect."+target.name, "flow %s has no conversation, so no reply to check: check its state or output", b.g.Name)
		case target.name == "replies" && turn:
			dl.Errorf(diag.CodeConstraint, target.checks[0].Pos, "expect.replies", "replies checks every reply of the case: put it in the case's expect, or check this turn's reply")
		}
	}
	if ex.Tools != nil {
		b.bindToolCalls(ex.Tools, dl)
	}
	if p := ex.Path; p != nil {
		var names []string
		for _, n := range b.g.Nodes {
			names = append(names, n.Name)
		}
		for _, name := range slices.Sorted(maps.Keys(p.at)) {
			if _, ok := b.g.Node(name); ok {
				continue
			}
			for _, pos := range p.at[name] {
				d := dl.Errorf(diag.CodeUnknownTarget, pos, "expect.path", "path: flow %s has no node %q", b.g.Name, name)
				d.Suggestion = diag.Suggest(name, names)
			}
		}
	}
}

// check compiles one check.
func (b *bound) check(target string, c *Check, dl *diag.List) {
	cc := &compiledCheck{}
	if c.Of != "" {
		cc.of = b.compile(c.ofAt, c.Of, 0, false, dl)
	}
	if c.Expr != "" {
		cc.expr = b.compile(c.exprAt, c.Expr, 0, true, dl)
	}
	re := func(src string, at config.Value) *regexp.Regexp {
		if src == "" {
			return nil
		}
		if c.IgnoreCase {
			src = "(?i)" + src
		}
		r, err := regexp.Compile(src)
		if err != nil {
			dl.Errorf(diag.CodeConstraint, at.Pos(), at.Path(), "regular expression: %s", strings.TrimPrefix(err.Error(), "error parsing regexp: "))
		}
		return r
	}
	cc.regex, cc.notRegex = re(c.Regex, c.regexAt), re(c.NotRegex, c.notRegexAt)
	if c.Schema != nil {
		cc.schema = b.schema(c, dl)
	}
	b.checks[c] = cc
}

// schema compiles a check's JSON Schema: inline, or a file (FILE or
// FILE#/pointer) relative to the dataset.
func (b *bound) schema(c *Check, dl *diag.List) *schema.Validator {
	raw := c.Schema
	base := schema.FileURL(b.ds.Path)
	if ref, ok := raw.(string); ok {
		raw = map[string]any{"$ref": ref}
	}
	m, ok := raw.(map[string]any)
	if !ok {
		dl.Errorf(diag.CodeType, c.schemaAt.Pos(), c.schemaAt.Path(), "a schema is a mapping, or the name of a schema file")
		return nil
	}
	if _, has := m["$schema"]; !has {
		m = maps.Clone(m)
		m["$schema"] = "https://json-schema.org/draft/2020-12/schema"
	}
	comp := schema.NewCompiler(nil)
	// a resource of its own beside the dataset, so that relative
	// references resolve against the dataset's directory
	sc, err := comp.Compile(fmt.Sprintf("%s.check-%d-%d.json", base, c.Pos.Line, c.Pos.Col), m)
	if err != nil {
		dl.Errorf(diag.CodeResource, c.schemaAt.Pos(), c.schemaAt.Path(), "schema: %s", firstLine(err.Error()))
		return nil
	}
	return schema.NewValidator(sc, nil)
}

// compile compiles an expression written at v (starting off runes into
// its text), reporting its problems there.
func (b *bound) compile(v config.Value, src string, off int, condition bool, dl *diag.List) *expression.Program {
	p, probs := expression.Compile(src, b.env, condition)
	for _, pr := range probs {
		sev := diag.Error
		if pr.Warning {
			if pr.Code == diag.CodeExprMayBeNil || pr.Code == diag.CodeExprUnset {
				continue // a read of a field that may be null: the check then fails, saying so
			}
			sev = diag.Warning
		}
		msg := pr.Message
		if pr.Code == diag.CodeExprSyntax {
			msg = "expression: " + msg
		}
		col, end := pr.Col, pr.EndCol
		if pr.Line <= 1 {
			col += off
			if end > 0 {
				end += off
			}
		}
		pos := v.PosIn(max(pr.Line, 1), col, end)
		dl.Add(diag.Diagnostic{Severity: sev, Code: pr.Code, Pos: pos, Path: v.Path(), Summary: msg, Suggestion: pr.Suggestion,
			Detail: "in expression: " + strings.TrimSpace(src)})
	}
	return p
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// checkRankings checks that rankings name cases of the dataset and a
// score or judge each of them has.
func checkRankings(ds *Dataset, dl *diag.List) {
	var names []string
	for _, c := range ds.Cases {
		names = append(names, c.Name)
	}
	for _, r := range ds.Rankings {
		for i, name := range r.Order {
			c, ok := ds.Case(name)
			if !ok {
				d := dl.Errorf(diag.CodeUnknownTarget, r.orderAt[i], "rankings.order", "ranking by %s: the dataset has no case %q", r.By, name)
				d.Suggestion = diag.Suggest(name, names)
				continue
			}
			var scores []string
			for _, s := range c.Scores {
				scores = append(scores, s.Name)
			}
			for _, j := range c.Judges {
				scores = append(scores, j.Name)
			}
			if !slices.Contains(scores, r.By) {
				d := dl.Errorf(diag.CodeUnknownTarget, r.orderAt[i], "rankings.order", "ranking by %s: case %q has no score or judge named %s", r.By, name, r.By)
				d.Suggestion = diag.Suggest(r.By, scores)
				if len(scores) == 0 {
					d.Detail = "name a score ({name: " + r.By + ", value: ..., min: ...}) in the case"
				}
			}
		}
		for i, name := range r.Order {
			if j := slices.Index(r.Order[:i], name); j >= 0 {
				dl.Errorf(diag.CodeDuplicate, r.orderAt[i], "rankings.order", "ranking by %s names case %q twice", r.By, name)
			}
		}
	}
}
