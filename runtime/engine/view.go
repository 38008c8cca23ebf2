package engine

import (
	"github.com/trellisflow/trellis/runtime/expression"
	"github.com/trellisflow/trellis/runtime/kind"
)

// view is the kind.State a node's attempt runs on. Each outcome owns one,
// kept from run to run with the pooled run, so its expression machine and
// update buffer are reused; the engine points it at each attempt.
type view struct {
	node     string
	attempt  int
	vars     map[string]any
	machine  expression.Machine
	buf      kind.Update
	stream   func(text string)
	degraded string
	usage    map[string]int64 // the node's Measure counts (observed runs)
	answers  map[string]any   // the run's answers to askers, by node
	run      *run             // for nested nodes and child flows
}

var _ kind.State = (*view)(nil)

// reset points the view at an attempt's variables.
func (v *view) reset(vars map[string]any, node string, attempt int) {
	v.vars, v.node, v.attempt, v.degraded = vars, node, attempt, ""
}

func (v *view) Node() string { return v.node }
func (v *view) Attempt() int { return v.attempt }

func (v *view) Get(field string) any { return v.vars["state"].(map[string]any)[field] }

func (v *view) Input(field string) any {
	in, _ := v.vars["input"].(map[string]any)
	return in[field]
}

func (v *view) Eval(p *expression.Program) (any, error) { return v.machine.Eval(p, v.vars) }
func (v *view) Vars() map[string]any                    { return v.vars }
func (v *view) Observed() bool                          { return v.stream != nil }
func (v *view) Degrade(reason string)                   { v.degraded = reason }

func (v *view) Answer() (any, bool) {
	a, ok := v.answers[v.node]
	return a, ok
}

func (v *view) Measure(name string, n int64) {
	if v.stream == nil {
		return
	}
	if v.usage == nil {
		v.usage = map[string]int64{}
	}
	v.usage[name] += n
}

func (v *view) Stream(text string) {
	if v.stream != nil {
		v.stream(text)
	}
}

func (v *view) NewUpdate(n int) kind.Update {
	if cap(v.buf) < n {
		v.buf = make(kind.Update, 0, n)
	}
	return v.buf[:0]
}
