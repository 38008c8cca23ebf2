package expression_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/trellisflow/trellis/runtime/expression"
	"github.com/trellisflow/trellis/runtime/schema"
)

// The fast path computes what the machine computes: every program below,
// over states of every kind (values of the declared types, of other
// types, nil, the ends of the int range), gives the same value or the
// same error through EvalFrame as through the machine alone.

var fastState = &schema.Shape{Types: []string{"object"}, Closed: true,
	Order: []string{"i", "j", "f", "s", "t", "b", "n", "o", "l", "a", "c"},
	Props: map[string]*schema.Shape{
		"i": {Types: []string{"integer"}},
		"j": {Types: []string{"integer"}},
		"f": {Types: []string{"number"}},
		"s": {Types: []string{"string"}},
		"t": {Types: []string{"string"}},
		"b": {Types: []string{"boolean"}},
		"n": {Types: []string{"integer", "null"}},
		"o": {Types: []string{"object"}, Props: map[string]*schema.Shape{
			"x": {Types: []string{"integer"}}, "y": {Types: []string{"string"}}}, Order: []string{"x", "y"}},
		"l": {Types: []string{"array"}},
		"a": {},
		"c": {Types: []string{"integer"}, Minimum: ptr(-1000.0), Maximum: ptr(1000.0), HasDefault: true},
	}}

func ptr[T any](v T) *T { return &v }

var fastInput = &schema.Shape{Types: []string{"object"}, Closed: true, Order: []string{"i", "s"},
	Props: map[string]*schema.Shape{"i": {Types: []string{"integer"}}, "s": {Types: []string{"string"}}}}

func fastEnv() *expression.Env {
	return expression.NewEnv().WithFields("state", fastState).WithFields("input", fastInput).Slotted(fastState.Order)
}

// fastPrograms all have a fast path.
var fastPrograms = []string{
	"state.i + 1", "1 + state.i", "state.i - 1", "state.i * 2", "state.i * state.j", "-state.i", "state.i - state.j",
	"state.i < 1000", "state.i <= state.j", "state.i > 3", "state.i >= -3", "state.i == 5", "state.i != state.j",
	"state.i / 2", "state.i / state.j", "state.i % 3", "state.i % state.j", "state.f + 1", "state.f * state.i",
	"state.f / state.f", "state.f < state.i", "state.f == state.i", "-state.f", "state.f - 0.5",
	"state.s + state.t", "state.s + ' ' + state.t", "state.s == 'x'", "state.s != state.t", "state.s < state.t",
	"state.b", "!state.b", "not state.b", "state.b && state.i > 0", "state.b || state.i > 0", "state.b and true",
	"state.b ? state.i : state.j", "state.b ? 'a' : state.s", "state.b ? state.i : state.s", "state.i > 0 ? 1.5 : state.f",
	"state.n + 1", "state.n ?? 0", "state.n == nil", "state.n != nil && state.n > 2", "state.a ?? 'd'",
	"state.o.x + 1", "state.o.y", "state.o.y == 'q'", "state.a == 1", "state.a + 1", "state.a < state.i",
	"state.a * state.a", "state.a + state.s", "state.a == nil", "state.a == state.s", "state.o.x ?? 7",
	"input.i + state.i", "input.s + state.s", "input.i < 10", "state.i + 1 < 1000", "state.i * 10 + 2",
	"state.i + state.j + state.i", "state.i == state.f", "state.a - 1", "state.a / state.a",
	"state.a % 2", "state.b == state.b", "state.s > 'm'", "state.f >= state.f", "state.f != state.f", "state.a > 'm'",
	"state.c + 1", "state.c * state.c - 3", "-state.c * 2", "state.c * state.i", "state.c + 1 < 1000",
}

var fastValues = []any{nil, 0, 1, -1, 2, 7, 1000, math.MaxInt, math.MinInt, math.MaxInt - 1, math.MinInt + 1, 1 << 32,
	0.5, -2.5, 3.0, math.NaN(), math.Inf(1), "", "x", "m", "abc", true, false,
	map[string]any{"x": 3, "y": "q"}, map[string]any{"x": math.MaxInt}, map[string]any{}, []any{1}, []any(nil), int64(3)}

func randomFrame(r *rand.Rand) *expression.Frame {
	f := &expression.Frame{State: make([]any, len(fastState.Order)), Input: make([]any, len(fastState.Order))}
	for i := range f.State {
		f.State[i] = fastValues[r.IntN(len(fastValues))]
	}
	for _, name := range fastInput.Order {
		for i, s := range fastState.Order {
			if s == name && r.IntN(3) > 0 {
				f.Input[i] = fastValues[r.IntN(len(fastValues))]
			}
		}
	}
	return f
}

// typedFrame holds values of the declared types.
func typedFrame(r *rand.Rand) *expression.Frame {
	ints := []int{0, 1, -1, 2, 7, 1000, 999, math.MaxInt, math.MinInt}
	strs := []string{"", "x", "m", "abc"}
	f := &expression.Frame{State: make([]any, len(fastState.Order)), Input: make([]any, len(fastState.Order))}
	f.State[0], f.State[1] = ints[r.IntN(len(ints))], ints[r.IntN(len(ints))]
	f.State[2] = []any{0.5, -2.5, 3.0, 1}[r.IntN(4)]
	f.State[3], f.State[4] = strs[r.IntN(len(strs))], strs[r.IntN(len(strs))]
	f.State[5] = r.IntN(2) == 0
	f.State[6] = []any{nil, 3, math.MaxInt}[r.IntN(3)]
	f.State[7] = map[string]any{"x": ints[r.IntN(len(ints))], "y": strs[r.IntN(len(strs))]}
	f.State[8] = []any{1, 2}
	f.State[9] = fastValues[r.IntN(len(fastValues))]
	f.State[10] = []int{-1000, -1, 0, 7, 1000}[r.IntN(5)]
	f.Input[0], f.Input[3] = ints[r.IntN(len(ints))], strs[r.IntN(len(strs))]
	return f
}

// frameVars is the variable map the engine binds for a frame.
type frameVars struct{ f *expression.Frame }

func (v frameVars) Vars() map[string]any {
	state, input := map[string]any{}, map[string]any{}
	for i, name := range fastState.Order {
		if v.f.State[i] != nil {
			state[name] = v.f.State[i]
		}
		if v.f.Input[i] != nil {
			input[name] = v.f.Input[i]
		}
	}
	vars := map[string]any{}
	expression.Bind(vars, "state", state)
	expression.Bind(vars, "input", input)
	return vars
}

func same(a, b any) bool { return fmt.Sprintf("%T %#v", a, a) == fmt.Sprintf("%T %#v", b, b) }

func checkFast(t *testing.T, p *expression.Program, f *expression.Frame) (fast bool) {
	t.Helper()
	src := frameVars{f}
	want, werr := p.Eval(src.Vars())
	var m expression.Machine
	got, gerr := m.EvalFrame(p, f, src)
	if fmt.Sprint(werr) != fmt.Sprint(gerr) || werr == nil && !same(got, want) {
		t.Fatalf("%s over %#v: EvalFrame %#v %v, machine %#v %v", p.Source(), f, got, gerr, want, werr)
	}
	v, ok := expression.FastEval(p, f)
	if ok && (werr != nil || !same(v, want)) {
		t.Fatalf("%s over %#v: fast path %#v, machine %#v %v", p.Source(), f, v, want, werr)
	}
	// as a condition
	wb, werr := p.EvalBool(src.Vars())
	gb, gerr := m.EvalBoolFrame(p, f, src)
	if fmt.Sprint(werr) != fmt.Sprint(gerr) || wb != gb {
		t.Fatalf("%s over %#v: EvalBoolFrame %v %v, machine %v %v", p.Source(), f, gb, gerr, wb, werr)
	}
	return ok
}

func TestFastPathAgreesWithTheMachine(t *testing.T) {
	env := fastEnv()
	r := rand.New(rand.NewPCG(1, 2))
	for _, src := range fastPrograms {
		p, probs := expression.Compile(src, env, false)
		if p == nil {
			t.Fatalf("%s: %v", src, probs)
		}
		if !p.Fast() {
			t.Errorf("%s has no fast path", src)
			continue
		}
		took := 0
		for range 300 {
			if checkFast(t, p, typedFrame(r)) {
				took++
			}
			checkFast(t, p, randomFrame(r))
		}
		if took == 0 {
			t.Errorf("%s: the fast path never answered over values of the declared types", src)
		}
		// as the condition of a branch, compiled to yield a boolean
		if c, _ := expression.Compile(src, env, true); c != nil {
			for range 100 {
				checkFast(t, c, typedFrame(r))
				checkFast(t, c, randomFrame(r))
			}
		}
	}
}

// Programs outside the fast path's reach have none, and run as before.
func TestProgramsWithoutFastPath(t *testing.T) {
	env := fastEnv().With("item", nil)
	for _, src := range []string{"len(state.s)", "state.l[0]", "item + 1", "state.o?.x", "state.i in [1, 2]",
		"upper(state.s)", "state", "state.i ** 2", "'n0'", "1 + 2"} {
		p, probs := expression.Compile(src, env, false)
		if p == nil {
			t.Fatalf("%s: %v", src, probs)
		}
		if p.Fast() {
			t.Errorf("%s has a fast path", src)
		}
	}
	// without slots nothing has one
	p, _ := expression.Compile("state.i + 1", expression.NewEnv().WithFields("state", fastState), false)
	if p.Fast() {
		t.Error("a program of an environment without slots has a fast path")
	}
}

// FuzzFastPath compiles arbitrary expressions against a slotted
// environment and holds the fast path to the machine over random states.
func FuzzFastPath(f *testing.F) {
	for _, s := range fastPrograms {
		f.Add(s, uint64(1))
	}
	env := fastEnv()
	f.Fuzz(func(t *testing.T, src string, seed uint64) {
		r := rand.New(rand.NewPCG(seed, 7))
		for _, cond := range []bool{false, true} {
			p, _ := expression.Compile(src, env, cond)
			if p == nil || !p.Fast() {
				continue
			}
			for range 20 {
				checkFast(t, p, typedFrame(r))
				checkFast(t, p, randomFrame(r))
			}
		}
	})
}
