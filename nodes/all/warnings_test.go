package all_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/store/memory"
)

// The other half of the differential check: a random flow the validator
// warns about (and finds no error in) must fail on some input, so that a
// warning is never raised where no run can go wrong. The inputs tried
// are a thread's initial values (any the schema takes, input fields or
// not), chosen to break what warnings are about: null where a field may
// be null, a field with no default left out, texts longer than any rule
// and outside every enum, numbers at and past the bounds; then at
// random. A warning about a node none of those runs reached is not held
// to it (what kept the node from running is the data's). `make fuzz`
// runs it for a bounded count; the fuzzer keeps what
// it finds in testdata/fuzz/FuzzWarnings.
func FuzzWarnings(f *testing.F) {
	for i := range 24 {
		seed := make([]byte, 64)
		for j := range seed {
			seed[j] = byte((i*97 + j*31 + i*j*5) % 251)
		}
		f.Add(seed)
	}
	reg := all.Offline()
	f.Fuzz(func(t *testing.T, data []byte) {
		g := newGen(data)
		src := g.flow()
		if g.tool != nil {
			// what a model answers (how many tool calls, what text) is
			// no input's to provoke: offline, its fallback answers the
			// same every time
			return
		}
		graph, dl := flow.LoadFS(g.files(src), "gen.yaml", reg)
		if graph == nil || len(dl) == 0 {
			return // an error (refused), or clean (FuzzDifferential's)
		}
		h := fnv.New64a()
		h.Write(data)
		seed := h.Sum64()
		var tried []string
		ran := map[string]bool{}
		for try := range 32 {
			values := g.candidate(try, &seed)
			eng := engine.New(memory.New())
			res, err := eng.Run(context.Background(), graph, engine.Request{Thread: "t", Values: values, RecordPath: true})
			eng.Store.Close()
			if err != nil && !notTheFlows(err) {
				return // the input the warnings were about
			}
			if err == nil && printsNothing(res.State) {
				return // a value no way wrote, printed: "<no value>", "<nil>"
			}
			if res != nil {
				for _, step := range res.Path {
					for _, n := range step {
						ran[n] = true
					}
				}
			}
			if len(tried) < 4 {
				tried = append(tried, fmt.Sprintf("%v → %v", values, err))
			}
		}
		// a warning about a node no run reached says nothing either way:
		// what keeps the node from running is the data's (a branch
		// decided by a value a node before always writes), which the
		// validator does not follow; only a warning whose node ran, or
		// which is about no node, must be borne out
		if !slices.ContainsFunc(dl, func(d diag.Diagnostic) bool {
			rest, ok := strings.CutPrefix(d.Path, "nodes.")
			name, _, _ := strings.Cut(rest, ".")
			return !ok || ran[name]
		}) {
			return
		}
		var lines []string
		for _, d := range dl {
			lines = append(lines, d.String())
		}
		t.Fatalf("the validator warns, but no input tried fails:\n%s\n%s\ntried (first few):\n%s", strings.Join(lines, "\n"), src, strings.Join(tried, "\n"))
	})
}

// notTheFlows reports whether a run stopped for a reason that says
// nothing of the flow: a step or loop limit reached, values refused.
func notTheFlows(err error) bool {
	var le *engine.LimitError
	var ie *engine.InputError
	return errors.As(err, &le) || errors.As(err, &ie)
}

// candidate is the try-th initial values to try: the first few take
// every field to one edge of what warnings are about, the rest mix them
// at random (seed is the random state).
func (g *gen) candidate(try int, seed *uint64) map[string]any {
	vals := map[string]any{}
	for _, f := range g.fields {
		opts := f.edges()
		if len(opts) == 0 {
			continue
		}
		var v edgeValue
		switch {
		case try < len(edgeKinds):
			v = pickEdge(opts, edgeKinds[try])
		default:
			*seed = *seed*6364136223846793005 + 1442695040888963407
			v = opts[int((*seed>>33)%uint64(len(opts)))]
		}
		if !v.omit {
			vals[f.name] = v.v
		}
	}
	return vals
}

// edgeValue is one value to try for a field, or leaving it out.
type edgeValue struct {
	kind string // null, unset, low, high, long, plain
	v    any
	omit bool
}

var edgeKinds = []string{"null", "unset", "high", "low", "long"}

// pickEdge is the field's value of the kind, or its first plain one.
func pickEdge(opts []edgeValue, kind string) edgeValue {
	for _, o := range opts {
		if o.kind == kind {
			return o
		}
	}
	for _, o := range opts {
		if o.kind == "plain" {
			return o
		}
	}
	return opts[0]
}

// edges are the values of the field's schema worth trying.
func (f *field) edges() []edgeValue {
	var out []edgeValue
	if f.nullable {
		out = append(out, edgeValue{kind: "null"})
	}
	if !f.def {
		out = append(out, edgeValue{kind: "unset", omit: true})
	}
	add := func(kind string, vs ...any) {
		for _, v := range vs {
			out = append(out, edgeValue{kind: kind, v: v})
		}
	}
	switch f.typ {
	case "integer":
		switch {
		case f.bounded:
			add("low", 0)
			add("high", 10)
			add("plain", 5)
		case f.step:
			add("low", -8)
			add("high", 8)
			add("plain", 0, 4)
		default:
			add("low", -7)
			add("high", 7, 1000003)
			add("plain", 0, 1)
		}
	case "number":
		if f.bounded {
			add("low", 0)
			add("high", 1)
			add("plain", 0.5)
		} else {
			add("low", -1.5)
			add("high", 7.25, 1e9)
			add("plain", 0, 2)
		}
	case "string":
		switch {
		case f.enum != nil:
			for _, e := range f.enum {
				add("plain", e)
			}
		case f.maxLen > 0:
			add("low", "")
			add("high", strings.Repeat("x", f.maxLen))
			add("plain", "ab")
		default:
			add("low", "")
			add("long", "zzzzzzzzzzzzzzzzzzzz zzzz")
			add("high", "zzzzzzzzzzzzzzzzzzzz zzzz")
			add("plain", "red", "a b")
		}
	case "color":
		add("plain", "red", "green")
	case "boolean":
		add("plain", true, false)
	case "ints":
		add("low", []any{})
		add("high", []any{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
		add("plain", []any{1, 2})
	case "strings":
		add("low", []any{})
		add("high", []any{"zzzzzzzzzzzzzzzzzzzz", "a", "a"})
		add("plain", []any{"p", "q"})
	case "object":
		// without the members it does not require (c, and a when not
		// required), with all of them
		least := map[string]any{}
		if f.required {
			least["a"] = 0
		}
		add("low", least)
		if !f.required {
			add("plain", map[string]any{"c": map[string]any{"x": 0}})
		}
		add("high", map[string]any{"a": 1000003, "b": "zzzzzzzzzzzzzzzzzzzz", "c": map[string]any{"x": 7}})
		add("plain", map[string]any{"a": 1, "b": nil, "c": map[string]any{"x": 0}})
	}
	return out
}

// printsNothing reports whether a state holds text made of a value that
// was not there: a template's "<no value>", string(nil)'s "<nil>".
func printsNothing(state map[string]any) bool {
	for _, v := range state {
		if s, ok := v.(string); ok && (strings.Contains(s, "<no value>") || strings.Contains(s, "<nil>")) {
			return true
		}
	}
	return false
}
