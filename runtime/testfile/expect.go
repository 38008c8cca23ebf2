// Checking a test's expectations against a run: its state, the nodes
// visited and their path, the flow's output, with conditions explained.

package testfile

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/expression"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/schema"
)

func check(ex *Expect, g *flow.Graph, state map[string]any, visits map[string]int, path [][]string, degraded map[string]bool, when string) (fails []string) {
	fail := func(pos diag.Pos, format string, args ...any) {
		fails = append(fails, fmt.Sprintf("%s: %s: %s", pos, when, fmt.Sprintf(format, args...)))
	}
	if ex.Path != nil && path == nil {
		fail(ex.pathPos, "path is checked per run: put it under runs[].expect")
	} else if ex.Path != nil {
		want, err := steps(ex.Path)
		if err != nil {
			fail(ex.pathPos, "path: %v", err)
		} else if !samePath(want, path) {
			fail(ex.pathPos, "path:\n      got  %s\n      want %s", showPath(path), showPath(want))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(ex.Visits)) {
		if _, ok := g.Node(name); !ok {
			fail(ex.Pos, "visits: flow %s has no node %q", g.Name, name)
			continue
		}
		if visits[name] != ex.Visits[name] {
			fail(ex.Pos, "visits of %s: got %d, want %d", name, visits[name], ex.Visits[name])
		}
	}
	if ex.Degraded != nil && degraded != nil {
		got := slices.Sorted(maps.Keys(degraded))
		want := slices.Sorted(slices.Values(*ex.Degraded))
		if !slices.Equal(got, want) {
			fail(ex.Pos, "degraded nodes: got %v, want %v", got, want)
		}
	}
	vars := g.Vars(state, nil)
	for i, cond := range ex.State {
		pos := ex.statePos[i]
		p, probs := expression.Compile(cond, g.Env(), true)
		if p == nil {
			fail(pos, "state %q: %s", cond, probs[0].Message)
			continue
		}
		ok, err := p.EvalBool(vars)
		if err != nil {
			fail(pos, "state %q: %v", cond, err)
		} else if !ok {
			fail(pos, "state: %s does not hold%s", cond, explain(cond, vars))
		}
	}
	return fails
}

// checkOutput checks the conditions over the flow's output, rendered over
// the state the run ended with.
func checkOutput(ex *Expect, g *flow.Graph, res *engine.Result, when string) (fails []string) {
	if len(ex.Output) == 0 {
		return nil
	}
	fail := func(pos diag.Pos, format string, args ...any) {
		fails = append(fails, fmt.Sprintf("%s: %s: %s", pos, when, fmt.Sprintf(format, args...)))
	}
	switch {
	case g.Output == nil:
		fail(ex.outputPos[0], "output: the flow declares no output")
		return fails
	case res.Interrupt != nil:
		fail(ex.outputPos[0], "output: the run paused; it has no output yet")
		return fails
	}
	text, err := g.Output.Render(res.State)
	if err != nil {
		fail(ex.outputPos[0], "%v", err)
		return fails
	}
	env := g.Env().With("output", &schema.Shape{Types: []string{"string"}})
	vars := g.Vars(res.State, nil)
	vars["output"] = text
	for i, cond := range ex.Output {
		pos := ex.outputPos[i]
		p, probs := expression.Compile(cond, env, true)
		if p == nil {
			fail(pos, "output %q: %s", cond, probs[0].Message)
			continue
		}
		if ok, err := p.EvalBool(vars); err != nil {
			fail(pos, "output %q: %v", cond, err)
		} else if !ok {
			fail(pos, "output: %s does not hold; the output is:\n%s", cond, indent(text))
		}
	}
	return fails
}

// indent sets text off under a failure.
func indent(text string) string {
	return "      | " + strings.ReplaceAll(strings.TrimRight(text, "\n"), "\n", "\n      | ")
}

// explain shows the values of the state fields a failed condition reads.
func explain(cond string, vars map[string]any) string {
	var b strings.Builder
	seen := map[string]bool{}
	for _, word := range strings.FieldsFunc(cond, func(r rune) bool {
		return !(r == '.' || r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	}) {
		parts := strings.SplitN(word, ".", 3)
		if len(parts) < 2 || parts[0] != "state" || seen[parts[1]] {
			continue
		}
		seen[parts[1]] = true
		v := vars["state."+parts[1]]
		s := fmt.Sprintf("%v", v)
		if b, err := jsonShort(v); err == nil {
			s = b
		}
		fmt.Fprintf(&b, "\n      state.%s = %s", parts[1], s)
	}
	return b.String()
}

func jsonShort(v any) (string, error) {
	b, err := json.Marshal(v)
	if len(b) > 300 {
		b = append(b[:300], "..."...)
	}
	return string(b), err
}

func steps(raw []any) ([][]string, error) {
	out := make([][]string, len(raw))
	for i, s := range raw {
		switch x := s.(type) {
		case string:
			out[i] = []string{x}
		case []any:
			for _, e := range x {
				name, ok := e.(string)
				if !ok {
					return nil, fmt.Errorf("step %d: node names only", i+1)
				}
				out[i] = append(out[i], name)
			}
		default:
			return nil, fmt.Errorf("step %d: a node name or a list of them", i+1)
		}
	}
	return out, nil
}

func samePath(want, got [][]string) bool {
	if len(want) != len(got) {
		return false
	}
	for i := range want {
		a, b := slices.Sorted(slices.Values(want[i])), slices.Sorted(slices.Values(got[i]))
		if !slices.Equal(a, b) {
			return false
		}
	}
	return true
}

func showPath(p [][]string) string {
	parts := make([]string, len(p))
	for i, s := range p {
		if len(s) == 1 {
			parts[i] = s[0]
		} else {
			parts[i] = "[" + strings.Join(s, ", ") + "]"
		}
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
