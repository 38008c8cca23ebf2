package engine

import (
	"github.com/trellisflow/trellis/runtime/expression"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/store"
)

// view is the kind.State a node's attempt runs on. Each outcome owns one,
// kept from run to run with the pooled run, so its expression machine and
// update buffer are reused; the engine points it at each attempt. An
// attempt the engine gives up on and does not join keeps its view for
// good (see scope.go): the outcome gets another.
//
// What the attempt may read while the run goes on is copied into the view
// when the attempt begins (its step, the checkpoint it follows, the saved
// updates of nested runs, its answer), so an attempt never reads the
// run's own moving parts.
type view struct {
	node     string
	kind     string
	attempt  int
	step     int
	seq      uint64
	vars     map[string]any
	machine  expression.Machine
	buf      kind.Update
	observed bool
	degraded string
	usage    map[string]int64 // the node's Measure counts (observed runs)
	answer   any              // the run's answer to this node (an asker)
	answered bool
	pending  map[string][]store.Write // the step's saved updates, for nested runs
	run      *run                     // for nested nodes and child flows
	// gate passes what the attempt sends out of itself: events, text,
	// usage, writes
	gate gate
}

var _ kind.State = (*view)(nil)

// begin points the view at an attempt of n over vars, nested in host's
// attempt (nil: a node of the step).
func (r *run) begin(v *view, n *flow.Node, vars map[string]any, attempt int, host *view) {
	v.vars, v.node, v.kind, v.attempt, v.degraded = vars, n.Name, n.Kind, attempt, ""
	v.observed, v.run = r.req.Observe != nil, r
	if host != nil {
		v.step, v.seq, v.pending, v.answer, v.answered = host.step, host.seq, host.pending, nil, false
		v.gate.open(&host.gate)
		return
	}
	v.step, v.seq, v.pending = r.step, r.seq, r.pending
	v.answer, v.answered = nil, false
	if len(r.answers) > 0 {
		v.answer, v.answered = r.answers[n.Name]
	}
	if v.gate.closed || v.gate.parent != nil {
		v.gate.open(nil)
	}
}

// clear drops what the view refers to, for the pool.
func (v *view) clear() {
	v.vars, v.node, v.kind, v.degraded, v.usage = nil, "", "", "", nil
	v.answer, v.pending, v.run = nil, nil, nil
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
func (v *view) Observed() bool                          { return v.observed }
func (v *view) Degrade(reason string)                   { v.degraded = reason }
func (v *view) Answer() (any, bool)                     { return v.answer, v.answered }

// Measure adds to the attempt's usage, unless it was given up: what it
// measured until then is the node's, what it measures after is dropped.
func (v *view) Measure(name string, n int64) {
	if !v.observed {
		return
	}
	g := &v.gate
	if !g.parent.enter() {
		v.run.drop()
		return
	}
	defer g.parent.exit()
	g.mu.Lock() // the usage map is written by whichever of the attempt's goroutines measures
	defer g.mu.Unlock()
	if g.closed {
		v.run.drop()
		return
	}
	if v.usage == nil {
		v.usage = map[string]int64{}
	}
	v.usage[name] += n
}

// Stream sends text as the attempt's node_output, unless it was given up.
func (v *view) Stream(text string) {
	if v.observed {
		v.emit(Event{Type: NodeOutput, Step: v.step, Node: v.node, Kind: v.kind, Attempt: v.attempt, Text: text})
	}
}

// emit sends one of the attempt's events through its gate.
func (v *view) emit(ev Event) {
	if !v.gate.enter() {
		v.run.drop()
		return
	}
	defer v.gate.exit()
	v.run.emit(ev)
}

func (v *view) NewUpdate(n int) kind.Update {
	if cap(v.buf) < n {
		v.buf = make(kind.Update, 0, n)
	}
	return v.buf[:0]
}
