// Package eval judges how well a flow does on a dataset of cases: a
// dataset file (NAME.eval.yaml) names a flow and its cases; a case gives
// a thread's initial values and its turns (for a conversational flow, the
// messages a person sends, so that a whole interview is one case) and
// what to judge: assertions over the final state, the output and each
// turn's reply (expressions, contains, regular expressions, JSON Schema),
// the path the runs took and the tool calls they made with their
// arguments (exact, in order, in any order, never), numeric
// scores with thresholds, and rubric judges (a model's score, replayed
// from the dataset's cassette, or rules when no model is set). Rankings
// compare cases: the strong candidate outscores the weak one.
//
//	flow: interview.yaml
//	with_file: examples/candidate.yaml        # every case's initial values
//	cases:
//	  - name: a weak candidate
//	    turns: [idk, pizza, idk, idk, idk]     # the conversation's messages
//	    expect:
//	      state: ["state.phase == 'done'"]
//	      replies: [{not_regex: "(?i)system prompt"}]
//	      path: {in_order: [evaluation, closing]}
//	    scores: ["state.evaluation.technical <= 4"]
//	    xfail: the offline rules score technical depth by topics asked, not answers
//	rankings:
//	  - {by: overall, order: [a strong candidate, a weak candidate]}
//
// A dataset is checked like a flow, every problem at its line and column,
// and its expressions and node names against the flow it names. Run runs
// the cases on one or more versions of the flow (the flow at a git
// revision beside the working copy, to compare), each case repeated as
// asked, concurrently up to a bound, each run on a store of its own, and
// returns a Report: each case's pass rate, scores and failures with their
// reasons, and its transcript; the report writes itself as a terminal
// table, JSON, JUnit XML, GitHub annotations and Markdown.
//
// A case marked xfail is a known failure: it is reported, does not fail
// the eval, and fails it the day it passes, so that the mark is removed.
package eval

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/schema"
	"github.com/trellisflow/trellis/runtime/testfile"
	"github.com/trellisflow/trellis/runtime/value"
)

// Suffix names dataset files.
const Suffix = ".eval.yaml"

// Dataset is a parsed dataset file.
type Dataset struct {
	// Path is the dataset file; Flow the flow it evaluates, as written
	// (relative to the dataset).
	Path, Flow  string
	Description string
	// With, WithFile and Config are every case's initial values (those of
	// WithFile, relative to the dataset, under With's) and run
	// configuration; a case's own go over them.
	With     map[string]any
	WithFile string
	Config   map[string]any
	// JudgeModel is the model the rubric judges ask, unless a judge
	// names its own (empty: the configured default).
	JudgeModel string
	Cases      []*Case
	Rankings   []*Ranking
	// Source is the file's text.
	Source []byte
	// FlowPos is where the dataset names its flow.
	FlowPos diag.Pos
	// withAt and configAt are the values as written, for positions
	withAt, configAt config.Value
}

// Case is one case of a dataset.
type Case struct {
	Name, Description string
	With              map[string]any
	WithFile          string
	Config            map[string]any
	// Turns are the runs of the case after the opening one a
	// conversational flow speaks first in (none: one run with no input).
	Turns []*Turn
	// Tools scripts the tool calls of every run of the case, by tool
	// name, as flow tests script them.
	Tools  map[string][]testfile.ToolCall
	Expect *Expect
	Scores []*Score
	Judges []*Judge
	// PassRate is the share of a case's repeated runs that must pass
	// (default 1: every one).
	PassRate float64
	// XFail, when set, says why the case is known to fail today.
	XFail string
	Pos   diag.Pos

	withAt, configAt config.Value
	toolPos          map[string]diag.Pos
}

// Turn is one run of a case: a message for a conversational flow (its
// conversation's input field), other input fields, or the answers to the
// questions of a paused run; and what its reply and state must be.
type Turn struct {
	Message    string
	HasMessage bool
	Input      map[string]any
	Answers    map[string]any
	Expect     *Expect
	Pos        diag.Pos

	inputAt, answersAt config.Value
}

// Expect holds assertions: over the state (after the turn, or after the
// last turn for a case's), the flow's output, the turn's reply (the last
// reply, for a case's), every reply of the case, and the path.
type Expect struct {
	State, Output, Reply, Replies []*Check
	Path                          *Path
	Tools                         *ToolCalls
	Pos                           diag.Pos
}

// Check is one assertion: exactly one of Expr (a condition), Contains,
// NotContains, Regex, NotRegex or Schema, over the value Of selects (by
// default the whole state, or the text of the output or reply).
type Check struct {
	Name        string
	Of          string
	Expr        string
	Contains    []string
	NotContains []string
	Regex       string
	NotRegex    string
	Schema      any
	IgnoreCase  bool
	// XFail, when set, says why the check is known to fail today.
	XFail string
	Pos   diag.Pos

	// the values of the expressions and patterns, for positions in them
	ofAt, exprAt, regexAt, notRegexAt config.Value
	// schemaAt positions the schema; schemaBase is the file its
	// references resolve against
	schemaAt config.Value
}

// Path holds trajectory assertions over the nodes a run visited: Exact
// lists every step (a node, or a list of those a step ran at once), InOrder
// names nodes that must be visited in that order (others between them),
// AnyOrder nodes that must each be visited, Never nodes that must not be.
type Path struct {
	Exact    []Step
	InOrder  []string
	AnyOrder []string
	Never    []string
	XFail    string
	Pos      diag.Pos
	// where each named node is written, for a misspelt name
	at map[string][]diag.Pos
}

// Step is one step of an exact path: the nodes it ran.
type Step []string

// Score is a number judged against a threshold: Value, an expression over
// the final state, must be at least Min and at most Max.
type Score struct {
	Name     string
	Value    string
	Min, Max *float64
	// MinExclusive and MaxExclusive make a bound strict (value > min,
	// value < max).
	MinExclusive, MaxExclusive bool
	XFail                      string
	Pos                        diag.Pos
	valueAt                    config.Value
	// from is the written shorthand (EXPR <= N), for messages
	from string
}

// Judge is a rubric judge: a model scores what the case did against the
// rubric on Scale (lowest, highest), and the score must reach Threshold.
// With no model, and no recorded reply in the dataset's cassette,
// Fallback (an expression yielding a number on the scale) scores it by
// rules.
type Judge struct {
	Name, Rubric string
	Scale        [2]float64
	Threshold    float64
	Model        string
	// Include lists expressions over the final state whose values the
	// judge is shown beside the transcript and output.
	Include  []string
	Fallback string
	XFail    string
	Pos      diag.Pos

	includeAt  []config.Value
	fallbackAt config.Value
}

// Ranking says how cases rank by a score (a score's or a judge's name):
// Order lists them best first, each scoring more than the next.
type Ranking struct {
	By    string
	Order []string
	XFail string
	Pos   diag.Pos
	// orderAt positions each case name
	orderAt []diag.Pos
}

// format is the dataset format, checked like the flow format.
var format = sync.OnceValues(func() (*flow.Format, error) {
	root, defs := formatFields()
	return flow.NewFormat("dataset", root, defs)
})

// FormatSchema is the JSON Schema of the dataset format
// (schemas/eval.schema.json, for editors).
func FormatSchema() map[string]any {
	root, defs := formatFields()
	doc := root.Schema()
	d := map[string]any{}
	for name, f := range defs {
		d[name] = f.Schema()
	}
	doc["$defs"] = d
	doc["$schema"] = "https://json-schema.org/draft/2020-12/schema"
	doc["title"] = "Trellis eval dataset"
	return doc
}

func formatFields() (config.Field, map[string]config.Field) {
	str := config.String
	strs := func(name, doc string) config.Field {
		return config.OneOf(name, doc, str("", "").NonEmpty(1), config.List("", "", config.Elem(str("", "").NonEmpty(1))).NonEmpty(1))
	}
	names := func(name, doc string) config.Field {
		return config.List(name, doc, config.Elem(str("", "").NonEmpty(1))).NonEmpty(1)
	}
	check := config.OneOf("", "An assertion: a condition (an expression), or an object with one matcher.",
		config.Condition("", "").NonEmpty(1),
		config.Object("", "",
			str("name", "What the assertion checks, for reports.").NonEmpty(1),
			config.Expression("of", "The value checked: an expression over the state (and output, reply); default: the state, or the text of the output or reply.").NonEmpty(1),
			config.Condition("expr", "A condition that must hold.").NonEmpty(1),
			strs("contains", "Text (or every text of a list) the value must contain."),
			strs("not_contains", "Text (or any text of a list) the value must not contain."),
			str("regex", "A regular expression (Go's RE2 syntax) the value must match.").NonEmpty(1),
			str("not_regex", "A regular expression the value must not match.").NonEmpty(1),
			config.Any("schema", "A JSON Schema the value must satisfy: inline, or a file (FILE or FILE#/pointer) relative to the dataset."),
			config.Bool("ignore_case", "contains, not_contains and the regular expressions ignore case."),
			str("xfail", "Why this is known to fail today: a failure is reported as known, and passing fails the eval until the mark is removed.").NonEmpty(1),
		).OnlyOneOf("expr", "contains", "not_contains", "regex", "not_regex", "schema").NonEmpty(1),
	)
	checks := func(name, doc string) config.Field {
		return config.List(name, doc, config.Elem(config.Ref("", "", "check")))
	}
	step := config.OneOf("", "", str("", "").NonEmpty(1), config.List("", "", config.Elem(str("", "").NonEmpty(1))).NonEmpty(1))
	path := config.Object("", "The nodes visited (over the turn's run, or over every run of the case).",
		config.List("exact", "Every step, in order: a node, or a list of the nodes a step ran at once.", config.Elem(step)).NonEmpty(1),
		names("in_order", "Nodes visited in this order, with others between them allowed."),
		names("any_order", "Nodes each visited, in any order."),
		names("never", "Nodes not visited."),
		str("xfail", "Why this is known to fail today: a failure is reported as known, and passing fails the eval until the mark is removed.").NonEmpty(1),
	).NonEmpty(1)
	expect := config.Object("", "Assertions.",
		checks("state", "Over the state."),
		checks("output", "Over the flow's output (its declared output rendered over the state)."),
		checks("reply", "Over the reply (the conversation's output field after the run; for a case, the last reply)."),
		checks("replies", "Over every reply of the case, the opening one included; a failure names the turn."),
		config.Ref("path", "The nodes visited.", "path"),
		config.Ref("tools", "The tool calls made, with their arguments.", "tools"),
	)
	turn := config.OneOf("", "A turn: a message (a conversational flow's input), or an object.",
		str("", ""),
		config.Object("", "",
			str("message", "The message: the conversation's input field."),
			config.Map("input", "Other input fields of the run.", nil),
			config.Map("answers", "Resume a paused run with these answers, by asking node.", nil),
			config.Ref("expect", "What the turn's run must do.", "expect"),
		).OnlyOneOf("input", "answers"),
	)
	num := func(name, doc string) config.Field { return config.Number(name, doc) }
	score := config.OneOf("", "A score and its threshold: EXPR <= N (or <, >, >=), or an object.",
		config.Expression("", "").NonEmpty(1),
		config.Object("", "",
			str("name", "The score's name in reports and rankings (default: the expression).").NonEmpty(1),
			config.Expression("value", "A number: an expression over the final state and output.").NonEmpty(1).Require(),
			num("min", "The lowest passing value."),
			num("max", "The highest passing value."),
			str("xfail", "Why this is known to fail today: a failure is reported as known, and passing fails the eval until the mark is removed.").NonEmpty(1),
		),
	)
	judge := config.Object("", "A rubric judge: a model scores the case against the rubric; rules (fallback) when no model answers.",
		str("name", "The judge's name in reports and rankings.").NonEmpty(1).Require(),
		str("rubric", "What the judge checks, in words: the model is asked to score against it.").NonEmpty(1).Require(),
		config.List("scale", "The lowest and highest score (default [1, 5]).", config.Elem(config.Number("", ""))).NonEmpty(2),
		num("threshold", "The lowest passing score (default: the scale's middle)."),
		str("model", "The model that judges (default: the dataset's judge model, then the configured one).").NonEmpty(1),
		config.List("include", "Expressions over the final state whose values the judge is shown beside the transcript and output.", config.Elem(config.Expression("", "").NonEmpty(1))),
		config.Expression("fallback", "The rules that score when no model answers: an expression yielding a number on the scale, over state, output, replies and transcript.").NonEmpty(1),
		str("xfail", "Why this is known to fail today: a failure is reported as known, and passing fails the eval until the mark is removed.").NonEmpty(1),
	)
	cse := config.Object("", "A case: a thread's initial values, its turns and what to judge.",
		str("name", "What the case is, unique in the dataset.").NonEmpty(1).Require(),
		str("description", "More about the case."),
		str("with_file", "A YAML or JSON file of initial values, relative to the dataset (over the dataset's).").NonEmpty(1),
		config.Map("with", "Initial values (over with_file's and the dataset's).", nil),
		config.Map("config", "The run configuration (over the dataset's).", nil),
		config.List("turns", "The runs after the opening one: messages, or objects.", config.Elem(config.Ref("", "", "turn"))),
		toolScriptsField(),
		config.Ref("expect", "What must hold after the last turn.", "expect"),
		config.List("scores", "Numbers with thresholds.", config.Elem(config.Ref("", "", "score"))),
		config.List("judges", "Rubric judges.", config.Elem(config.Ref("", "", "judge"))),
		num("pass_rate", "The share of repeated runs (--repeat) that must pass (default 1).").Min(0).Max(1),
		str("xfail", "Why the whole case is known to fail: it is reported, does not fail the eval, and fails it once it passes (mark a single check, score or judge instead where one is at fault).").NonEmpty(1),
	)
	ranking := config.Object("", "Cases ranked by a score: each must score more than the next.",
		str("by", "A score's or judge's name that each listed case has.").NonEmpty(1).Require(),
		names("order", "The cases, best first.").NonEmpty(2).Require(),
		str("xfail", "Why the ranking is known not to hold today.").NonEmpty(1),
	)
	root := config.Object("", "A Trellis eval dataset: a flow and its cases.",
		str("flow", "The flow evaluated, relative to this file.").NonEmpty(1).Require(),
		str("description", "What the dataset is for."),
		str("with_file", "A YAML or JSON file of every case's initial values, relative to this file.").NonEmpty(1),
		config.Map("with", "Every case's initial values (over with_file's).", nil),
		config.Map("config", "Every case's run configuration.", nil),
		config.Object("judge", "Defaults for the rubric judges.",
			str("model", "The model the judges ask (default: the configured one).").NonEmpty(1),
		),
		config.Any("fixtures", "A free place for YAML anchors the cases share."),
		config.List("cases", "The cases.", config.Elem(config.Ref("", "", "case"))).NonEmpty(1).Require(),
		config.List("rankings", "How cases rank by a score.", config.Elem(config.Ref("", "", "ranking"))),
	)
	return root, map[string]config.Field{"check": check, "path": path, "expect": expect, "turn": turn, "score": score, "judge": judge, "case": cse, "ranking": ranking, "tools": toolsField()}
}

// Load reads a dataset file. One that does not parse or does not fit the
// format is a *diag.ListError with every problem at its line and column.
func Load(path string) (*Dataset, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return LoadSource(path, src)
}

// LoadSource reads a dataset's text as Load reads the file at path.
func LoadSource(path string, src []byte) (*Dataset, error) {
	return flow.Read(path, src, "dataset", format, func(doc *config.File, dl *diag.List) *Dataset {
		ds := decode(path, doc, dl)
		ds.Source = src
		checkRankings(ds, dl)
		return ds
	})
}

// Find lists the dataset files among paths: a file is taken as it is, a
// directory searched (hidden directories and testdata skipped) for files
// ending in .eval.yaml.
func Find(paths ...string) ([]string, error) {
	if len(paths) == 0 {
		paths = []string{"."}
	}
	return flow.FindFiles(paths, func(path string) bool { return strings.HasSuffix(path, Suffix) })
}

// FlowPath is the flow file the dataset evaluates.
func (ds *Dataset) FlowPath() string {
	if filepath.IsAbs(ds.Flow) {
		return ds.Flow
	}
	return filepath.Join(filepath.Dir(ds.Path), ds.Flow)
}

// Case returns the case called name.
func (ds *Dataset) Case(name string) (*Case, bool) {
	i := slices.IndexFunc(ds.Cases, func(c *Case) bool { return c.Name == name })
	if i < 0 {
		return nil, false
	}
	return ds.Cases[i], true
}

// decode reads a dataset that fits the format.
func decode(path string, doc *config.File, dl *diag.List) *Dataset {
	root := doc.Root()
	ds := &Dataset{Path: path, Flow: root.Get("flow").Text(), Description: root.Get("description").Text(),
		With: values(root.Get("with"), dl), WithFile: root.Get("with_file").Text(), Config: values(root.Get("config"), dl),
		JudgeModel: root.Get("judge").Get("model").Text(), FlowPos: root.Get("flow").Pos(), withAt: root.Get("with"), configAt: root.Get("config")}
	seen := map[string]diag.Pos{}
	for _, cn := range root.Get("cases").Items() {
		c := decodeCase(cn, dl)
		if first, dup := seen[c.Name]; dup {
			dl.Errorf(diag.CodeDuplicate, cn.Get("name").Pos(), cn.Get("name").Path(), "case %q is named twice (first at line %d): a case's name is its key in reports and comparisons", c.Name, first.Line)
		} else {
			seen[c.Name] = c.Pos
		}
		ds.Cases = append(ds.Cases, c)
	}
	for _, rn := range root.Get("rankings").Items() {
		r := &Ranking{By: rn.Get("by").Text(), XFail: rn.Get("xfail").Text(), Pos: rn.Pos()}
		for _, it := range rn.Get("order").Items() {
			r.Order = append(r.Order, it.Text())
			r.orderAt = append(r.orderAt, it.Pos())
		}
		ds.Rankings = append(ds.Rankings, r)
	}
	return ds
}

func decodeCase(cn config.Value, dl *diag.List) *Case {
	c := &Case{Name: cn.Get("name").Text(), Description: cn.Get("description").Text(), With: values(cn.Get("with"), dl),
		WithFile: cn.Get("with_file").Text(), Config: values(cn.Get("config"), dl), XFail: cn.Get("xfail").Text(), Pos: cn.Pos(), PassRate: 1,
		withAt: cn.Get("with"), configAt: cn.Get("config")}
	if pr := cn.Get("pass_rate"); pr.Exists() {
		if v, err := pr.JSON(); err == nil {
			c.PassRate = toFloat(v)
		}
	}
	for _, tn := range cn.Get("turns").Items() {
		t := &Turn{Pos: tn.Pos()}
		if tn.IsScalar() {
			t.Message, t.HasMessage = tn.Text(), true
		} else {
			if m := tn.Get("message"); m.Exists() {
				t.Message, t.HasMessage = m.Text(), true
			}
			t.Input, t.Answers = values(tn.Get("input"), dl), values(tn.Get("answers"), dl)
			t.inputAt, t.answersAt = tn.Get("input"), tn.Get("answers")
			t.Expect = decodeExpect(tn.Get("expect"), dl)
		}
		c.Turns = append(c.Turns, t)
	}
	c.Tools, c.toolPos = testfile.DecodeToolScripts(cn.Get("tools"), dl)
	c.Expect = decodeExpect(cn.Get("expect"), dl)
	for _, sn := range cn.Get("scores").Items() {
		c.Scores = append(c.Scores, decodeScore(sn, dl))
	}
	judges := map[string]bool{}
	for _, jn := range cn.Get("judges").Items() {
		j := &Judge{Name: jn.Get("name").Text(), Rubric: jn.Get("rubric").Text(), Scale: [2]float64{1, 5}, Model: jn.Get("model").Text(),
			Fallback: jn.Get("fallback").Text(), fallbackAt: jn.Get("fallback"), XFail: jn.Get("xfail").Text(), Pos: jn.Pos()}
		if sc := jn.Get("scale"); sc.Exists() {
			items := sc.Items()
			if len(items) != 2 {
				dl.Errorf(diag.CodeConstraint, sc.Pos(), sc.Path(), "a scale is two numbers, the lowest score and the highest, not %d", len(items))
			} else {
				for i, it := range items {
					v, _ := it.JSON()
					j.Scale[i] = toFloat(v)
				}
				if j.Scale[0] >= j.Scale[1] {
					dl.Errorf(diag.CodeConstraint, sc.Pos(), sc.Path(), "a scale goes from its lowest score to its highest: %g is not below %g", j.Scale[0], j.Scale[1])
				}
			}
		}
		j.Threshold = (j.Scale[0] + j.Scale[1]) / 2
		if th := jn.Get("threshold"); th.Exists() {
			v, _ := th.JSON()
			j.Threshold = toFloat(v)
			if j.Threshold < j.Scale[0] || j.Threshold > j.Scale[1] {
				dl.Errorf(diag.CodeConstraint, th.Pos(), th.Path(), "threshold %g is off the scale %g to %g", j.Threshold, j.Scale[0], j.Scale[1])
			}
		}
		for _, in := range jn.Get("include").Items() {
			j.Include = append(j.Include, in.Text())
			j.includeAt = append(j.includeAt, in)
		}
		if judges[j.Name] {
			dl.Errorf(diag.CodeDuplicate, jn.Get("name").Pos(), jn.Get("name").Path(), "judge %q is named twice in this case", j.Name)
		}
		judges[j.Name] = true
		c.Judges = append(c.Judges, j)
	}
	return c
}

func decodeScore(sn config.Value, dl *diag.List) *Score {
	s := &Score{Pos: sn.Pos()}
	if sn.IsScalar() {
		s.from = sn.Text()
		value, op, bound, ok := splitThreshold(s.from)
		if !ok {
			dl.Errorf(diag.CodeConstraint, sn.Pos(), sn.Path(), "a score is written EXPR <= NUMBER (or <, >=, >): %q compares no expression with a number", s.from).Detail =
				"or as an object: {name: technical, value: state.evaluation.technical, max: 4}"
			return s
		}
		s.Name, s.Value, s.valueAt = value, value, sn
		switch op {
		case "<=", "<":
			s.Max, s.MaxExclusive = &bound, op == "<"
		default:
			s.Min, s.MinExclusive = &bound, op == ">"
		}
		return s
	}
	s.Value, s.valueAt = sn.Get("value").Text(), sn.Get("value")
	s.Name, s.XFail = sn.Get("name").Text(), sn.Get("xfail").Text()
	if s.Name == "" {
		s.Name = s.Value
	}
	for _, b := range []struct {
		key string
		dst **float64
	}{{"min", &s.Min}, {"max", &s.Max}} {
		if v := sn.Get(b.key); v.Exists() {
			raw, _ := v.JSON()
			f := toFloat(raw)
			*b.dst = &f
		}
	}
	if s.Min == nil && s.Max == nil {
		dl.Errorf(diag.CodeMissingKey, sn.Pos(), sn.Path(), "score %q has no threshold: give it min, max or both", s.Name)
	}
	if s.Min != nil && s.Max != nil && *s.Min > *s.Max {
		dl.Errorf(diag.CodeConstraint, sn.Pos(), sn.Path(), "score %q: min %g is above max %g, so no value passes", s.Name, *s.Min, *s.Max)
	}
	return s
}

func decodeExpect(v config.Value, dl *diag.List) *Expect {
	if !v.Exists() {
		return nil
	}
	ex := &Expect{Pos: v.Pos()}
	for _, target := range []struct {
		key string
		dst *[]*Check
	}{{"state", &ex.State}, {"output", &ex.Output}, {"reply", &ex.Reply}, {"replies", &ex.Replies}} {
		for _, cn := range v.Get(target.key).Items() {
			*target.dst = append(*target.dst, decodeCheck(cn, dl))
		}
	}
	if p := v.Get("path"); p.Exists() {
		path := &Path{Pos: p.Pos(), XFail: p.Get("xfail").Text(), at: map[string][]diag.Pos{}}
		name := func(it config.Value) string {
			path.at[it.Text()] = append(path.at[it.Text()], it.Pos())
			return it.Text()
		}
		for _, st := range p.Get("exact").Items() {
			var step Step
			if st.IsSequence() {
				for _, it := range st.Items() {
					step = append(step, name(it))
				}
			} else {
				step = Step{name(st)}
			}
			path.Exact = append(path.Exact, step)
		}
		for _, l := range []struct {
			key string
			dst *[]string
		}{{"in_order", &path.InOrder}, {"any_order", &path.AnyOrder}, {"never", &path.Never}} {
			for _, it := range p.Get(l.key).Items() {
				*l.dst = append(*l.dst, name(it))
			}
		}
		ex.Path = path
	}
	if t := v.Get("tools"); t.Exists() {
		ex.Tools = decodeToolCalls(t, dl)
	}
	return ex
}

func decodeCheck(cn config.Value, dl *diag.List) *Check {
	c := &Check{Pos: cn.Pos()}
	if cn.IsScalar() {
		c.Expr, c.exprAt = cn.Text(), cn
		return c
	}
	c.Name, c.XFail = cn.Get("name").Text(), cn.Get("xfail").Text()
	c.Of, c.ofAt = cn.Get("of").Text(), cn.Get("of")
	c.Expr, c.exprAt = cn.Get("expr").Text(), cn.Get("expr")
	c.Regex, c.NotRegex = cn.Get("regex").Text(), cn.Get("not_regex").Text()
	c.regexAt, c.notRegexAt = cn.Get("regex"), cn.Get("not_regex")
	texts := func(v config.Value) []string {
		if !v.Exists() {
			return nil
		}
		if v.IsScalar() {
			return []string{v.Text()}
		}
		var out []string
		for _, it := range v.Items() {
			out = append(out, it.Text())
		}
		return out
	}
	c.Contains, c.NotContains = texts(cn.Get("contains")), texts(cn.Get("not_contains"))
	if s := cn.Get("schema"); s.Exists() {
		c.Schema, _ = s.JSON()
		c.schemaAt = s
	}
	ic, _ := cn.Get("ignore_case").JSON()
	c.IgnoreCase, _ = ic.(bool)
	if c.Expr == "" && c.Contains == nil && c.NotContains == nil && c.Regex == "" && c.NotRegex == "" && c.Schema == nil {
		dl.Errorf(diag.CodeMissingKey, cn.Pos(), cn.Path(), "a check needs what to check: one of expr, contains, not_contains, regex, not_regex or schema")
	}
	return c
}

// values decodes a mapping of values (nil when absent).
func values(v config.Value, dl *diag.List) map[string]any {
	if !v.Exists() {
		return nil
	}
	var raw any
	if err := v.Decode(&raw); err != nil { // (merge keys, <<, are resolved)
		dl.Errorf(diag.CodeType, v.Pos(), v.Path(), "%v", err)
		return nil
	}
	norm, err := value.Normalize(raw)
	if err != nil {
		dl.Errorf(diag.CodeType, v.Pos(), v.Path(), "%v", err)
		return nil
	}
	m, _ := norm.(map[string]any)
	if m == nil {
		m = map[string]any{}
	}
	return m
}

// initial is a case's initial values: the dataset's file's, the
// dataset's, the case's file's and the case's, each over the one before.
func (ds *Dataset) initial(c *Case) (map[string]any, error) {
	out := map[string]any{}
	for _, layer := range []struct {
		file   string
		values map[string]any
	}{{ds.WithFile, ds.With}, {c.WithFile, c.With}} {
		if layer.file != "" {
			p := layer.file
			if !filepath.IsAbs(p) {
				p = filepath.Join(filepath.Dir(ds.Path), p)
			}
			vals, err := schema.ReadFile(p)
			m, ok := vals.(map[string]any)
			if err != nil || !ok {
				if err == nil {
					err = fmt.Errorf("it holds %s, not a mapping of field to value", value.TypeOf(vals))
				}
				return nil, fmt.Errorf("with_file %s: %w", layer.file, err)
			}
			maps.Copy(out, m)
		}
		maps.Copy(out, layer.values)
	}
	return out, nil
}

// configOf is a case's run configuration: the dataset's under the case's.
func (ds *Dataset) configOf(c *Case) map[string]any {
	if ds.Config == nil && c.Config == nil {
		return nil
	}
	out := maps.Clone(ds.Config)
	if out == nil {
		out = map[string]any{}
	}
	maps.Copy(out, c.Config)
	return out
}

func toFloat(v any) float64 {
	switch x := v.(type) {
	case int:
		return float64(x)
	case int64:
		return float64(x)
	case float64:
		return x
	}
	return 0
}
