package engine

import (
	"time"

	"github.com/trellisflow/trellis/runtime/expression"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind"
)

// view is the kind.State a node's attempt runs on. Each outcome owns one,
// kept from run to run with the pooled run, so its expression machine and
// update buffer are reused; the engine points it at each attempt. An
// attempt the engine gives up on and does not join keeps its view for
// good (see scope.go): the outcome gets another.
//
// What the attempt reads of the run's moving parts (its step, the
// checkpoint it follows, saved updates, answers) it reads while its gate
// is open: the run changes them only once every attempt of the step has
// returned or been given up, its gate closed.
type view struct {
	n       *flow.Node
	attempt int
	// vars are the variables the attempt runs over. A node of the step
	// reads the state through frame, its snapshot of the run's slots, and
	// vars is nil until the node asks for it when the attempt runs on the
	// run's goroutine (see begin); a nested node has vars only.
	vars     map[string]any
	frame    *expression.Frame
	slotted  bool
	machine  expression.Machine
	buf      kind.Update
	degraded string
	usage    map[string]int64 // the node's Measure counts (observed runs)
	run      *run
	// host is the view of the attempt this one is nested in (a map's
	// item in its map's), nil for a node of the step
	host *view
	// gate passes what the attempt sends out of itself: events, text,
	// usage, writes
	gate gate
}

var _ kind.State = (*view)(nil)

// newView returns a view for the attempts of a node nested in host's
// attempt (nil: a node of the step).
func newView(host *view) *view {
	v := &view{host: host}
	if host != nil {
		v.gate.parent = &host.gate
	}
	return v
}

// begin points the view at an attempt of n: over vars for a nested node,
// over the run's current state for a node of the step (vars nil). An
// attempt on the run's goroutine asks for the variables when it needs
// them; one on a goroutine of its own is given them now, made current
// before the step started it.
//
// A view serves attempt after attempt of the same node: what has not
// changed is not written again, since every pointer written while the
// collector marks costs a write barrier.
func (r *run) begin(v *view, n *flow.Node, vars map[string]any, attempt int) {
	v.attempt = attempt
	if v.n != n {
		v.n = n
	}
	if v.run != r {
		v.run = r
	}
	if v.degraded != "" {
		v.degraded = ""
	}
	if v.slotted = vars == nil; v.slotted {
		if v.frame != r.frame {
			v.frame = r.frame
		}
		if !n.Inline || n.Timeout > 0 {
			vars = r.Vars()
		}
	}
	if v.vars != nil || vars != nil {
		v.vars = vars
	}
	if v.gate.closed {
		// the view's last attempt was given up, and has returned
		v.reopen()
	}
}

// reopen readies the gate for a new attempt. It is kept out of begin,
// which then inlines: the step's nodes begin an attempt at every step.
//
//go:noinline
func (v *view) reopen() { v.gate.open(v.gate.parent) }

// at is the step the attempt runs in and the checkpoint that step
// follows; read while the attempt's gate is open.
func (v *view) at() (step int, seq uint64) {
	return v.run.step, v.run.seq
}

// position is at, read through the gate: ok is false once the attempt
// was given up.
func (v *view) position() (step int, seq uint64, ok bool) {
	if !v.gate.enter() {
		return 0, 0, false
	}
	defer v.gate.exit()
	step, seq = v.at()
	return step, seq, true
}

// clear drops what the view refers to, for the pool.
func (v *view) clear() {
	v.vars, v.n, v.degraded, v.usage, v.run, v.frame = nil, nil, "", nil, nil, nil
}

func (v *view) Node() string { return v.n.Name }
func (v *view) Attempt() int { return v.attempt }

func (v *view) Get(field string) any {
	if v.slotted {
		if f, ok := v.run.g.Field(field); ok {
			return v.frame.State[f.Index]
		}
		return nil
	}
	return v.vars["state"].(map[string]any)[field]
}

func (v *view) Input(field string) any {
	if v.slotted {
		if f, ok := v.run.g.Field(field); ok {
			return v.frame.Input[f.Index]
		}
		return nil
	}
	in, _ := v.vars["input"].(map[string]any)
	return in[field]
}

func (v *view) Eval(p *expression.Program) (any, error) {
	if v.slotted {
		return v.machine.EvalFrame(p, v.frame, v)
	}
	return v.machine.Eval(p, v.vars)
}

// Vars implements kind.State (and expression.Source, for programs the
// fast path gives up on).
func (v *view) Vars() map[string]any {
	if v.vars == nil {
		v.vars = v.run.Vars()
	}
	return v.vars
}

func (v *view) Observed() bool        { return v.run.req.Observe != nil }
func (v *view) Degrade(reason string) { v.degraded = reason }

// Answer is the run's answer to the node: a node of the step by its
// name, a nested one (a map's item) by its own, NODE[KEY].
func (v *view) Answer() (any, bool) {
	if !v.gate.enter() {
		return nil, false
	}
	defer v.gate.exit()
	a, ok := v.run.answers[v.n.Name]
	return a, ok
}

// Measure adds to the attempt's usage, unless it was given up: what it
// measured until then is the node's, what it measures after is dropped.
func (v *view) Measure(name string, n int64) {
	if !v.Observed() {
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
	if v.Observed() {
		v.emit(Event{Type: NodeOutput, Node: v.n.Name, Kind: v.n.Kind, Attempt: v.attempt, Text: text})
	}
}

// Retrying implements kind.State: a node_retry for the attempt, whose
// output so far is void; what the node streams next is the next
// attempt's. Unless the attempt was given up.
func (v *view) Retrying(err error, wait time.Duration) {
	if !v.gate.enter() {
		v.run.drop()
		return
	}
	defer v.gate.exit()
	if v.Observed() {
		ev := Event{Type: NodeRetry, Node: v.n.Name, Kind: v.n.Kind, Attempt: v.attempt, Error: err.Error(), Duration: wait}
		ev.Step, _ = v.at()
		v.run.emit(ev)
	}
	v.attempt++
}

// emit sends one of the attempt's events through its gate, in the
// attempt's step.
func (v *view) emit(ev Event) {
	if !v.gate.enter() {
		v.run.drop()
		return
	}
	defer v.gate.exit()
	ev.Step, _ = v.at()
	v.run.emit(ev)
}

func (v *view) NewUpdate(n int) kind.Update {
	if cap(v.buf) < n {
		v.buf = make(kind.Update, 0, n)
	}
	return v.buf[:0]
}
