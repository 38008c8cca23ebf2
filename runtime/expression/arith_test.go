package expression_test

import (
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/runtime/expression"
	"github.com/trellisflow/trellis/runtime/schema"
)

// Integer arithmetic is exact or fails: +, - and * over ints whose result
// leaves the 64-bit range, and negating the smallest int, are errors, on
// typed fields and on values whose type is known only at run time (an
// untyped object's fields, lambda arguments); what is not an int keeps
// the machine's own meaning.
func TestIntegerArithmeticIsExact(t *testing.T) {
	integer := &schema.Shape{Types: []string{"integer"}}
	nullable := &schema.Shape{Types: []string{"integer", "null"}}
	env := expression.NewEnv().
		WithFields("state", &schema.Shape{Types: []string{"object"}, Closed: true,
			Props: map[string]*schema.Shape{"n": integer, "m": nullable}, Order: []string{"n", "m"}}).
		WithFields("input", &schema.Shape{Types: []string{"object"}})
	vars := func(n, m any, in map[string]any) map[string]any {
		v := map[string]any{}
		expression.Bind(v, "state", map[string]any{"n": n, "m": m})
		expression.Bind(v, "input", in)
		return v
	}
	overflow := []struct {
		src  string
		vars map[string]any
	}{
		{"state.n + 1", vars(math.MaxInt, 0, nil)},
		{"1 + state.n", vars(math.MaxInt, 0, nil)},
		{"state.n - 1", vars(math.MinInt, 0, nil)},
		{"0 - state.n - 2", vars(math.MaxInt, 0, nil)},
		{"state.n * 2", vars(math.MaxInt/2+1, 0, nil)},
		{"state.n * -1", vars(math.MinInt, 0, nil)},
		{"-1 * state.n", vars(math.MinInt, 0, nil)},
		{"state.n * state.n", vars(1<<32, 0, nil)},
		{"-state.n", vars(math.MinInt, 0, nil)},
		{"state.m + 1", vars(0, math.MaxInt, nil)},
		{"input.x + 1", vars(0, 0, map[string]any{"x": math.MaxInt})},
		{"input.x * input.y", vars(0, 0, map[string]any{"x": 1 << 40, "y": 1 << 40})},
		{"reduce([1, 2], #acc + state.n, 9223372036854775806)", vars(1, 0, nil)},
		{"9223372036854775807 + 1", vars(0, 0, nil)},
		{"sum([state.n, 1])", vars(math.MaxInt, 0, nil)},
		{"sum([1, 2], # * state.n)", vars(math.MaxInt/2, 0, nil)},
		{"abs(state.n)", vars(math.MinInt, 0, nil)},
		{"abs(input.x)", vars(0, 0, map[string]any{"x": math.MinInt})},
		{"int(1e19)", vars(0, 0, nil)},
		{"int(input.x)", vars(0, 0, map[string]any{"x": -1e300})},
		{"int(input.x * 1.0)", vars(0, 0, map[string]any{"x": math.Inf(1)})},
		{"int(state.n * 1.0 + 1e19)", vars(0, 0, nil)},
	}
	for _, c := range overflow {
		p, probs := expression.Compile(c.src, env, false)
		if p == nil {
			t.Fatalf("%s: %+v", c.src, probs)
		}
		v, err := p.Eval(c.vars)
		if err == nil || !strings.Contains(err.Error(), "integer overflow") {
			t.Errorf("%s: %#v %v, want an overflow", c.src, v, err)
		}
	}
	exact := []struct {
		src  string
		vars map[string]any
		want any
	}{
		{"state.n + 1", vars(math.MaxInt-1, 0, nil), math.MaxInt},
		{"state.n - 1", vars(math.MinInt+1, 0, nil), math.MinInt},
		{"state.n * -1", vars(math.MaxInt, 0, nil), -math.MaxInt},
		{"state.n * 3", vars(1<<53+1, 0, nil), 3<<53 + 3},
		{"state.n + 1", vars(1<<53+1, 0, nil), 1<<53 + 2},
		{"-state.n", vars(math.MaxInt, 0, nil), -math.MaxInt},
		{"1 + 2 * 3 - -4", nil, 11},
		{"input.a + input.b", vars(0, 0, map[string]any{"a": "x", "b": "y"}), "xy"},
		{"input.a * 2", vars(0, 0, map[string]any{"a": 1.5}), 3.0},
		{"-input.a", vars(0, 0, map[string]any{"a": 1.5}), -1.5},
		{"state.n + 0.5", vars(1, 0, nil), 1.5},
		{"'a' + 'b'", nil, "ab"},
		{"sum([1, 2, state.n])", vars(1<<53+1, 0, nil), 1<<53 + 4},
		{"sum([1, 2], # * 2)", nil, 6},
		{"sum([0.5, 1])", nil, 1.5},
		{"sum([])", nil, 0},
		{"abs(state.n)", vars(math.MinInt+1, 0, nil), math.MaxInt},
		{"abs(input.x)", vars(0, 0, map[string]any{"x": -1.5}), 1.5},
		{"int(input.x)", vars(0, 0, map[string]any{"x": -9.2e18}), -9200000000000000000},
		{"int(input.x)", vars(0, 0, map[string]any{"x": "42"}), 42},
		{"int(2.9)", nil, 2},
	}
	for _, c := range exact {
		p, probs := expression.Compile(c.src, env, false)
		if p == nil {
			t.Fatalf("%s: %+v", c.src, probs)
		}
		v, err := p.Eval(c.vars)
		if err != nil || !reflect.DeepEqual(v, c.want) {
			t.Errorf("%s = %#v %v, want %#v", c.src, v, err, c.want)
		}
	}
	// an int expression keeps its type for the checker
	p, _ := expression.Compile("state.n + 1", env, false)
	if rt := p.ResultType(); rt == nil || rt.Kind() != reflect.Int {
		t.Errorf("state.n + 1 has type %v", rt)
	}
	for _, src := range []string{"(state.n + 1) + 'x'", "abs(state.n) + 'x'", "int(input.x) + 'x'"} {
		if _, probs := expression.Compile(src, env, false); len(probs) == 0 {
			t.Errorf("%s compiles", src)
		}
	}
}

// Number kinds are known through expressions: / and fractional literals
// give numbers, never integers; int, round, floor and ceil give whole
// numbers, and so do +, -, *, % and choices over them. Whether a value is
// a number is known even where the checker types it any (mean).
func TestNumberKinds(t *testing.T) {
	env := expression.NewEnv().WithFields("state", &schema.Shape{Types: []string{"object"}, Closed: true,
		Props: map[string]*schema.Shape{"n": {Types: []string{"integer"}}, "x": {Types: []string{"number"}},
			"m": {Types: []string{"integer", "null"}}, "s": {Types: []string{"string"}}, "a": nil},
		Order: []string{"a", "m", "n", "s", "x"}})
	for src, want := range map[string]string{ // "whole", "number" or ""
		"state.n + 1":                        "whole",
		"state.n + 0.5":                      "number",
		"state.n / 2":                        "number",
		"1.5":                                "number",
		"2.0":                                "whole",
		"2.0 * state.n":                      "whole",
		"state.x":                            "number",
		"round(state.x)":                     "whole",
		"floor(state.x / 3) + ceil(state.x)": "whole",
		"int(state.n / 2)":                   "whole",
		"state.n % 3":                        "whole",
		"state.n > 1 ? state.n : 0.5":        "number",
		"state.n > 1 ? state.n : -2":         "whole",
		"state.m ?? 0":                       "whole",
		"mean([1, 2])":                       "number",
		"max(state.n, 3)":                    "whole",
		"abs(state.x)":                       "number",
		"state.n ** 2":                       "number",
		"state.s + 'x'":                      "",
		"state.a + 1":                        "",
		"len(state.s)":                       "whole",
	} {
		p, probs := expression.Compile(src, env, false)
		if p == nil {
			t.Fatalf("%s: %+v", src, probs)
		}
		got := ""
		switch {
		case p.Whole():
			got = "whole"
		case p.Number():
			got = "number"
		}
		if got != want {
			t.Errorf("%s: %q, want %q", src, got, want)
		}
	}
}

// An operation whose operands the schema bounds (an int field with a
// minimum, a maximum and a default, int literals) so that no value of
// theirs overflows keeps the machine's own arithmetic, and is exact over
// the whole range; one that might overflow, or reads a field that may be
// unset or is not bounded on both sides, stays checked.
func TestBoundedArithmeticIsNative(t *testing.T) {
	max := 1e6
	min := -1e6
	bounded := &schema.Shape{Types: []string{"integer"}, Minimum: &min, Maximum: &max, HasDefault: true}
	noDefault := &schema.Shape{Types: []string{"integer"}, Minimum: &min, Maximum: &max}
	oneSided := &schema.Shape{Types: []string{"integer"}, Maximum: &max, HasDefault: true}
	env := expression.NewEnv().WithFields("state", &schema.Shape{Types: []string{"object"}, Closed: true,
		Props: map[string]*schema.Shape{"c": bounded, "d": bounded, "u": noDefault, "o": oneSided}, Order: []string{"c", "d", "u", "o"}})
	for src, checked := range map[string]bool{
		"state.c + 1": false, "state.c - state.d": false, "state.c * state.d": false, "-state.c * 3 + 7": false,
		"state.c * state.d * state.c": false, "state.c * state.d * state.c * state.d": true,
		"state.c * 9223372036855": true, "state.c * 9223372036854": false, "state.u + 1": true, "state.o + 1": true, "state.c + state.o": true,
	} {
		p, probs := expression.Compile(src, env, false)
		if p == nil {
			t.Fatalf("%s: %v", src, probs)
		}
		if expression.Checked(p) != checked {
			t.Errorf("%s: checked %v, want %v", src, expression.Checked(p), checked)
		}
	}
	p, _ := expression.Compile("state.c * state.d * state.c - 5", env, false)
	for _, c := range []int{-1e6, -7, 0, 3, 1e6} {
		for _, d := range []int{-1e6, -1, 0, 2, 1e6} {
			vars := map[string]any{}
			expression.Bind(vars, "state", map[string]any{"c": c, "d": d})
			v, err := p.Eval(vars)
			if err != nil || v != c*d*c-5 {
				t.Fatalf("c %d d %d: %v %v, want %d", c, d, v, err, c*d*c-5)
			}
		}
	}
}

// A condition that is a choice typed any as a whole has each branch
// checked: one that yields no boolean is E002 at that branch.
func TestConditionBranches(t *testing.T) {
	env := expression.NewEnv().WithFields("state", &schema.Shape{Types: []string{"object"}, Closed: true,
		Props: map[string]*schema.Shape{"ok": {Types: []string{"boolean"}}, "s": {Types: []string{"string"}}}, Order: []string{"ok", "s"}})
	for src, want := range map[string]string{
		"state.ok ? 'a' : state.s == 'a'":  "this branch yields a string",
		"state.ok ? 1 : false":             "this branch yields an integer",
		"state.ok ? state.s == 'x' : true": "",
		"state.ok ? nil : true":            "",
	} {
		p, probs := expression.Compile(src, env, true)
		switch {
		case want == "" && p == nil:
			t.Errorf("%s: %+v", src, probs)
		case want != "" && (p != nil || len(probs) != 1 || probs[0].Code != "E002" || !strings.Contains(probs[0].Message, want)):
			t.Errorf("%s: %v %+v, want %q", src, p, probs, want)
		}
	}
}

// Integer arithmetic checked for overflow still compiles to direct calls
// of Go functions (no reflection, nothing allocated), also where a field
// is read as a variable of its own, as the engine binds state.
func TestExactArithmeticAllocatesNothing(t *testing.T) {
	env := expression.NewEnv().WithFields("state", &schema.Shape{Types: []string{"object"}, Closed: true,
		Props: map[string]*schema.Shape{"n": {Types: []string{"integer"}}}, Order: []string{"n"}})
	for _, src := range []string{"state.n + 1", "(state.n + 1) * 2", "-(state.n - 7)", "10 - state.n", "state.n * state.n - 3"} {
		p, probs := expression.Compile(src, env, false)
		if p == nil {
			t.Fatalf("%s: %+v", src, probs)
		}
		vars := map[string]any{}
		expression.Bind(vars, "state", map[string]any{"n": 7})
		var m expression.Machine
		if _, err := m.Eval(p, vars); err != nil {
			t.Fatal(err)
		}
		if allocs := testing.AllocsPerRun(20, func() { _, _ = m.Eval(p, vars) }); allocs > 0 {
			t.Errorf("%s: %v allocations a run", src, allocs)
		}
	}
}

// Arithmetic over a state whose schema says nothing (no state block)
// compiles, checked.
func TestArithmeticOverAnUntypedState(t *testing.T) {
	env := expression.NewEnv().With("state", nil).With("input", nil)
	for _, src := range []string{"state.n + 1", "-state.n * 2", "state.a.b - 3"} {
		p, probs := expression.Compile(src, env, false)
		if p == nil {
			t.Fatalf("%s: %v", src, probs)
		}
		if !expression.Checked(p) {
			t.Errorf("%s is not checked", src)
		}
	}
}

// The operations the compiler puts in for the written ones (exact
// arithmetic, comparison and membership by value, the conversions, the
// groups' keys) are called directly, never by reflection, whether the
// types of their operands are known or not.
func TestPatchedOperationsAreCalledDirectly(t *testing.T) {
	text, integer := &schema.Shape{Types: []string{"string"}}, &schema.Shape{Types: []string{"integer"}}
	texts := &schema.Shape{Types: []string{"array"}, Items: text}
	env := expression.NewEnv().
		WithFields("state", &schema.Shape{Types: []string{"object"}, Closed: true,
			Props: map[string]*schema.Shape{
				"s": text, "n": integer, "m": {Types: []string{"integer", "null"}}, "list": texts,
				"box":   {Types: []string{"object"}, Closed: true, Props: map[string]*schema.Shape{"signals": texts}, Order: []string{"signals"}, Required: []string{"signals"}},
				"items": {Types: []string{"array"}, Items: &schema.Shape{Types: []string{"object"}}},
				"o":     {Types: []string{"object"}},
			}, Order: []string{"s", "n", "m", "list", "box", "items", "o"}}).
		WithFields("input", &schema.Shape{Types: []string{"object"}})
	for _, src := range []string{
		"filter(state.box.signals, # not in ['idle', 'confident'])",
		"state.s in state.list", "state.s not in state.box.signals", "input.x in state.o.list",
		"state.o == state.o.other", "state.o != input.o", "state.m == input.m", "any(state.items, .k == state.s)",
		"state.n + (state.m ?? 0)", "(state.m ?? 1) * 2", "-(state.m ?? 0)", "input.a - input.b", "abs(state.m ?? 0)", "-input.a", "int(state.o.f)",
		"sum(state.items, .n)", "groupBy(state.items, .k)",
		"let r = state.o; r == nil || len(r.list ?? []) == 0 ? 0 : r.n + 1",
	} {
		// (and as an argument of a function of the flows' own, as concat,
		// where the checker left the operation's callee untyped)
		for _, src := range []string{src, "concat([" + src + "], [])", "{a: true, b: concat([" + src + "], [])}"} {
			p, probs := expression.Compile(src, env, false)
			if probs != nil {
				t.Fatalf("%s: %v", src, probs)
			}
			if calls := expression.ReflectiveCalls(p); len(calls) > 0 {
				t.Errorf("%s: called by reflection: %v", src, calls)
			}
		}
	}
}
