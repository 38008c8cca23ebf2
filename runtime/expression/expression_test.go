package expression_test

import (
	"encoding/json"
	"fmt"
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
	q := &schema.Shape{Types: []string{"object", "null"}, Props: map[string]*schema.Shape{"text": str}, Order: []string{"text"}, Closed: true, Required: []string{"text"}}
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

func routeEnv() *expression.Env {
	str := &schema.Shape{Types: []string{"string"}}
	num := &schema.Shape{Types: []string{"integer"}}
	return expression.NewEnv().WithFields("state", &schema.Shape{Types: []string{"object"}, Closed: true,
		Props: map[string]*schema.Shape{"s": str, "n": num}, Order: []string{"s", "n"}})
}

func TestResultTypeAndYields(t *testing.T) {
	env := routeEnv()
	cases := []struct {
		src   string
		kind  string // "" when unknown
		lits  []string
		all   bool
		first [3]int // line, col, endCol of the first literal
	}{
		{"'a'", "string", []string{"a"}, true, [3]int{1, 1, 4}},
		{"state.n > 1 ? 'big' : 'small'", "string", []string{"big", "small"}, true, [3]int{1, 15, 20}},
		{"state.n > 1 ? 'big' : state.s", "string", []string{"big"}, false, [3]int{1, 15, 20}},
		{"state.s ?? 'x'", "string", []string{"x"}, false, [3]int{1, 12, 15}},
		{"state.n + 1", "int", nil, false, [3]int{}},
		// a branch that is what its condition compared with texts
		{"state.s in ['a', 'b'] ? state.s : 'a'", "string", []string{"a", "b", "a"}, true, [3]int{1, 13, 16}},
		{"state.s == 'x' ? state.s : 'y'", "string", []string{"x", "y"}, true, [3]int{1, 12, 15}},
		{"state.s != 'x' ? 'y' : state.s", "string", []string{"y", "x"}, true, [3]int{1, 18, 21}},
		{"!(state.s in ['a']) ? 'b' : state.s", "string", []string{"b", "a"}, true, [3]int{1, 23, 26}},
		{"state.n > 1 && state.s in ['a'] ? state.s : 'b'", "string", []string{"a", "b"}, true, [3]int{1, 28, 31}},
		{"state.s in ['a', 'b'] || state.n > 1 ? state.s : 'a'", "string", []string{"a"}, false, [3]int{1, 50, 53}},
		{"state.s == 'a' || state.s in ['b'] ? state.s : 'c'", "string", []string{"a", "b", "c"}, true, [3]int{1, 12, 15}},
		{"state.s != 'a' && state.s != 'b' ? 'c' : state.s", "string", []string{"c", "a", "b"}, true, [3]int{1, 36, 39}},
		{"state.s in ['a', 'b'] ? 'c' : state.s", "string", []string{"c"}, false, [3]int{1, 25, 28}},
		{"if state.s == 'x' { state.s } else { 'y' }", "string", []string{"x", "y"}, true, [3]int{1, 15, 18}},
	}
	for _, c := range cases {
		p, probs := expression.Compile(c.src, env, false)
		if p == nil {
			t.Fatalf("%s: %+v", c.src, probs)
		}
		kind := ""
		if rt := p.ResultType(); rt != nil {
			kind = rt.Kind().String()
		}
		if kind != c.kind {
			t.Errorf("%s: result %q, want %q", c.src, kind, c.kind)
		}
		lits, all := p.Yields()
		var vals []string
		for _, l := range lits {
			vals = append(vals, l.Value)
		}
		if strings.Join(vals, ",") != strings.Join(c.lits, ",") || all != c.all {
			t.Errorf("%s: yields %v (all %v), want %v (all %v)", c.src, vals, all, c.lits, c.all)
		}
		if len(lits) > 0 && [3]int{lits[0].Line, lits[0].Col, lits[0].EndCol} != c.first {
			t.Errorf("%s: first literal at %+v, want %v", c.src, lits[0], c.first)
		}
	}
}

func TestComplements(t *testing.T) {
	env := routeEnv()
	compile := func(srcs ...string) []*expression.Program {
		var out []*expression.Program
		for _, s := range srcs {
			p, probs := expression.Compile(s, env, true)
			if p == nil {
				t.Fatalf("%s: %+v", s, probs)
			}
			out = append(out, p)
		}
		return out
	}
	cases := []struct {
		conds []string
		want  bool
	}{
		{[]string{"true"}, true},
		{[]string{"state.n > 1", "state.n <= 1"}, true},
		{[]string{"state.s == 'a'", "state.s != 'a'"}, true},
		{[]string{"state.s == 'a'", "!(state.s == 'a')"}, true},
		{[]string{"state.n > 1", "not (state.n > 1)"}, true},
		{[]string{"state.n > 1", "state.n < 1"}, false},
		{[]string{"state.s == 'a'", "state.s == 'b'"}, false},
		{[]string{"state.n > 1", "state.n >= 1"}, false},
	}
	for _, c := range cases {
		if got := expression.Complements(compile(c.conds...)); got != c.want {
			t.Errorf("%v: %v, want %v", c.conds, got, c.want)
		}
	}
}

// A field an open object does not declare is a warning with a suggestion,
// and the expression compiles; a closed object's is an error; an open
// object that declares nothing is unchecked.
func TestOpenObjectMembers(t *testing.T) {
	str := &schema.Shape{Types: []string{"string"}}
	open := &schema.Shape{Types: []string{"object"}, Props: map[string]*schema.Shape{"text": str}, Order: []string{"text"}}
	closed := &schema.Shape{Types: []string{"object"}, Props: map[string]*schema.Shape{"text": str}, Order: []string{"text"}, Closed: true}
	env := expression.NewEnv().WithFields("state", &schema.Shape{Types: []string{"object"}, Closed: true,
		Props: map[string]*schema.Shape{"o": open, "c": closed, "any": {Types: []string{"object"}}}, Order: []string{"o", "c", "any"}})
	cases := []struct {
		src      string
		compiles bool
		warning  bool
		problems int
	}{
		{"state.o.text", true, false, 0},
		{"state.o.txt", true, true, 1},
		{"state.c.txt", false, false, 1},
		{"state.any.whatever", true, false, 0},
	}
	for _, c := range cases {
		p, probs := expression.Compile(c.src, env, false)
		if (p != nil) != c.compiles || len(probs) != c.problems {
			t.Fatalf("%s: compiled %v, %+v", c.src, p != nil, probs)
		}
		if c.problems > 0 && (probs[0].Warning != c.warning || probs[0].Suggestion != "text" || probs[0].Code != diag.CodeExprUnknown) {
			t.Errorf("%s: %+v", c.src, probs[0])
		}
	}
}

// A string enum knows its values: comparing it with another string is
// reported, with a suggestion.
func TestEnumComparisons(t *testing.T) {
	phase := &schema.Shape{Types: []string{"string"}, Enum: []any{"intro", "closing", "done"}}
	nullable := &schema.Shape{Types: []string{"string", "null"}, Enum: []any{"a", "b", nil}}
	env := expression.NewEnv().WithFields("state", &schema.Shape{Types: []string{"object"}, Closed: true,
		Props: map[string]*schema.Shape{"phase": phase, "opt": nullable, "s": {Types: []string{"string"}}}, Order: []string{"phase", "opt", "s"}})
	cases := map[string]string{ // expression -> the suggestion reported ("-" none, "" no problem)
		"state.phase == 'done'":              "",
		"state.phase == 'dne'":               "done",
		"'closng' != state.phase":            "closing",
		"state.phase in ['intro', 'clsing']": "closing",
		"state.phase not in ['xyz']":         "-",
		"state.opt == 'b'":                   "",
		"state.opt == 'c'":                   "a",
		"state.s == 'anything'":              "",
	}
	for src, want := range cases {
		p, probs := expression.Compile(src, env, true)
		got := ""
		if len(probs) > 0 {
			got = probs[0].Suggestion
			if got == "" {
				got = "-"
			}
			if probs[0].Code != diag.CodeExprEnum || p != nil {
				t.Errorf("%s: %+v", src, probs)
			}
		}
		if got != want {
			t.Errorf("%s: suggestion %q, want %q (%+v)", src, got, want, probs)
		}
	}
}

// A nullable scalar is typed as its type when not nil: mismatches are
// errors, while nil tests, ?? and the value itself compile.
func TestNullableScalarsAreTyped(t *testing.T) {
	n := func(ty string) *schema.Shape { return &schema.Shape{Types: []string{ty, "null"}} }
	env := expression.NewEnv().WithFields("state", &schema.Shape{Types: []string{"object"}, Closed: true,
		Props: map[string]*schema.Shape{"count": n("integer"), "name": n("string"), "ratio": n("number"), "ok": n("boolean")},
		Order: []string{"count", "name", "ratio", "ok"}})
	for src, bad := range map[string]bool{
		"state.count > 'three'":  true,
		"state.name + 1":         true,
		"state.ratio * 'x'":      true,
		"state.ok + 1":           true,
		"state.count > 3":        false,
		"(state.count ?? 0) + 1": false,
		"state.name == nil":      false,
		"state.name != nil && state.name startsWith 'a'": false,
		"(state.ratio ?? 0.5) * 2":                       false,
		"state.ok ?? false":                              false,
	} {
		_, probs := expression.Compile(src, env, false)
		if got := len(probs) > 0 && !probs[0].Warning; got != bad {
			t.Errorf("%s: error %v, want %v (%+v)", src, got, bad, probs)
		}
	}
	p, _ := expression.Compile("state.name", env, false)
	if rt := p.ResultType(); rt == nil || rt.Kind().String() != "string" {
		t.Errorf("the type of a nullable string: %v", rt)
	}
}

// Nullable values evaluate as the values they hold, or nil. (Values are
// state values, as value.Normalize and schema.Coerce give them: an
// integer field holds an int.)
func TestNullableScalarsEvaluate(t *testing.T) {
	env := expression.NewEnv().WithFields("state", &schema.Shape{Types: []string{"object"}, Closed: true,
		Props: map[string]*schema.Shape{"count": {Types: []string{"integer", "null"}}}, Order: []string{"count"}})
	p, probs := expression.Compile("(state.count ?? 10) + 1", env, false)
	if p == nil {
		t.Fatal(probs)
	}
	for _, c := range []struct{ count, want any }{{nil, 11}, {2, 3}, {-7, -6}} {
		vars := map[string]any{}
		expression.Bind(vars, "state", map[string]any{"count": c.count})
		got, err := p.Eval(vars)
		if err != nil || fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("count %v: %v %v, want %v", c.count, got, err, c.want)
		}
	}
}

// An unknown name is an error wherever it stands, also inside an
// operation the compiler rewrites into an exact one (integer arithmetic,
// negation, abs), whose operands the checker does not look into again.
func TestUnknownNamesInsideRewrittenOperations(t *testing.T) {
	env := routeEnv()
	for _, src := range []string{"len(red) + 0", "len(state.s ?? red) + state.n", "-len(red)", "abs(len(red))", "state.n * len(red) - 1"} {
		p, probs := expression.Compile(src, env, false)
		if p != nil || len(probs) != 1 || probs[0].Code != diag.CodeExprUnknown || !strings.HasPrefix(probs[0].Message, `unknown name "red"`) {
			t.Errorf("%s: compiled %v, problems %+v", src, p != nil, probs)
		}
	}
}

// A read on a side of a choice or of && and || that a constant decides
// never to run is no read: the condition is a literal, or folds to one.
func TestReadsSkipWhatNeverRuns(t *testing.T) {
	num := &schema.Shape{Types: []string{"number"}}
	env := expression.NewEnv().WithFields("state", &schema.Shape{Types: []string{"object"}, Closed: true,
		Props: map[string]*schema.Shape{"f": num}, Order: []string{"f"}})
	cases := map[string]bool{ // expression -> reads state.f
		"state.f + 1":                       true,
		"0 + 0 > 0 ? int(state.f) : 0":      false,
		"1 + 1 == 2 ? 0 : int(state.f)":     false,
		"1 + 1 == 2 ? int(state.f) : 0":     true,
		"false ? int(state.f) : 0":          false,
		"1 > 2 && state.f > 0":              false,
		"2 > 1 || state.f > 0":              false,
		"2 > 1 && state.f > 0":              true,
		"len('ab') == 3 ? int(state.f) : 1": false,
	}
	for src, want := range cases {
		p, probs := expression.Compile(src, env, false)
		if p == nil {
			t.Fatalf("%s: %v", src, probs)
		}
		if got := len(p.Reads()) > 0; got != want {
			t.Errorf("%s: reads %v, want a read %v", src, p.Reads(), want)
		}
	}
}

// string, toJSON and type give a value for null: a read given to them
// as it is needs no value, one an operation inside them takes does.
func TestReadsInsideWhatTakesNull(t *testing.T) {
	num := &schema.Shape{Types: []string{"number"}}
	env := expression.NewEnv().WithFields("state", &schema.Shape{Types: []string{"object"}, Closed: true,
		Props: map[string]*schema.Shape{"f": num}, Order: []string{"f"}})
	cases := map[string]bool{ // expression -> reads state.f
		"string(state.f)":      false,
		"toJSON(state.f)":      false,
		"type(state.f)":        false,
		"string(abs(state.f))": true,
		"toJSON(state.f + 1)":  true,
	}
	for src, want := range cases {
		p, probs := expression.Compile(src, env, false)
		if p == nil {
			t.Fatalf("%s: %v", src, probs)
		}
		if got := len(p.Reads()) > 0; got != want {
			t.Errorf("%s: reads %v, want a read %v", src, p.Reads(), want)
		}
	}
}

// A text or an integer compared with == or != may be null at run time
// though the checker knows its type: a field with no default not yet
// written, what find or first gives of nothing. The comparison answers
// (null equals no text), it does not fail.
func TestComparingWhatMayBeNull(t *testing.T) {
	env := expression.NewEnv().WithFields("state", &schema.Shape{Types: []string{"object"}, Closed: true,
		Props: map[string]*schema.Shape{
			"colour": {Types: []string{"string"}, Enum: []any{"red", "green"}},
			"n":      {Types: []string{"integer"}},
			"names":  {Types: []string{"array"}, Items: &schema.Shape{Types: []string{"string"}}, HasDefault: true},
		}, Order: []string{"colour", "n", "names"}})
	for src, want := range map[string]bool{
		"state.colour == 'red'":                   false,
		"state.colour != 'red'":                   true,
		"'red' == state.colour":                   false,
		"state.colour == (state.colour ?? 'red')": false,
		"state.n == 3":                            false,
		"state.n != 3":                            true,
		"find(state.names, # == 'zz') == 'a'":     false,
		"first(state.names) != 'a'":               true,
		"(state.colour ?? 'red') == 'red'":        true,
		"state.colour == nil && state.n == nil":   true,
		"state.colour == state.colour":            true,
	} {
		p, probs := expression.Compile(src, env, true)
		if p == nil {
			t.Fatalf("%s: %v", src, probs)
		}
		vars := map[string]any{}
		expression.Bind(vars, "state", map[string]any{"names": []any{}})
		got, err := p.EvalBool(vars)
		if err != nil || got != want {
			t.Errorf("%s: %v %v, want %v", src, got, err, want)
		}
	}
}

// A typed function given null at run time (the checker warned of it:
// E004/E006) fails with what it was given and needed, in the flow's
// words, not Go's interface conversion.
func TestNullWhereATypeIsNeededSaysSo(t *testing.T) {
	env := expression.NewEnv().WithFields("state", &schema.Shape{Types: []string{"object"}, Closed: true,
		Props: map[string]*schema.Shape{"colour": {Types: []string{"string"}}}, Order: []string{"colour"}})
	p, probs := expression.Compile("upper(state.colour)", env, false)
	if p == nil {
		t.Fatal(probs)
	}
	vars := map[string]any{}
	expression.Bind(vars, "state", map[string]any{})
	_, err := p.Eval(vars)
	if err == nil || !strings.HasPrefix(err.Error(), "null where a text is needed (1:") || strings.Contains(err.Error(), "interface") {
		t.Fatalf("upper of null: %v", err)
	}
}

// truncate counts with a whole number of any kind a value comes as (a
// caller's int64, JSON's 3.0), and refuses one that is not whole; a Go
// kind that is not the one a function takes is named as such.
func TestTruncateTakesAnyWholeNumber(t *testing.T) {
	env := expression.NewEnv().WithFields("state", &schema.Shape{Types: []string{"object"}, Closed: true,
		Props: map[string]*schema.Shape{"n": {Types: []string{"integer"}, HasDefault: true}, "s": {Types: []string{"string"}, HasDefault: true}},
		Order: []string{"n", "s"}})
	p, probs := expression.Compile("truncate(state.s, state.n)", env, false)
	if p == nil {
		t.Fatal(probs)
	}
	for _, n := range []any{3, int64(3), int32(3), 3.0, json.Number("3")} {
		vars := map[string]any{}
		expression.Bind(vars, "state", map[string]any{"n": n, "s": "hello world"})
		if v, err := p.Eval(vars); err != nil || v != "he…" {
			t.Errorf("truncate by %T 3: %q %v", n, v, err)
		}
	}
	vars := map[string]any{}
	expression.Bind(vars, "state", map[string]any{"n": 2.5, "s": "hello world"})
	if _, err := p.Eval(vars); err == nil || !strings.Contains(err.Error(), "not a whole number") {
		t.Errorf("truncate by 2.5: %v", err)
	}
}

// groupBy groups by value: numbers equal to == are one key, whatever Go
// kind each came as.
func TestGroupByValue(t *testing.T) {
	env := expression.NewEnv().WithFields("state", &schema.Shape{Types: []string{"object"}, Closed: true,
		Props: map[string]*schema.Shape{"items": {Types: []string{"array"}, HasDefault: true}}, Order: []string{"items"}})
	p, probs := expression.Compile("groupBy(state.items, .score)", env, false)
	if p == nil {
		t.Fatal(probs)
	}
	items := []any{map[string]any{"score": 0}, map[string]any{"score": 0.0}, map[string]any{"score": int64(0)},
		map[string]any{"score": json.Number("0")}, map[string]any{"score": 2.5}, map[string]any{"score": json.Number("2.5")}, map[string]any{"score": "0"}}
	vars := map[string]any{}
	expression.Bind(vars, "state", map[string]any{"items": items})
	v, err := p.Eval(vars)
	if err != nil {
		t.Fatal(err)
	}
	groups, ok := v.(map[any][]any)
	if !ok || len(groups) != 3 || len(groups[0]) != 4 || len(groups[2.5]) != 2 || len(groups["0"]) != 1 {
		t.Fatalf("groups %v", v)
	}
	// a literal key groups the same way
	q, probs := expression.Compile("len(groupBy([0, 0.0, 1], #))", env, false)
	if q == nil {
		t.Fatal(probs)
	}
	if n, err := q.Eval(vars); err != nil || n != 2 {
		t.Fatalf("groupBy([0, 0.0, 1]): %v keys, %v", n, err)
	}
}
