package kind

import (
	"context"
	"errors"
	"time"

	"github.com/trellisflow/trellis/runtime/expression"
)

// State is the read-only view a node runs on: the committed state of the
// superstep's snapshot, the run's input, and what the engine tells the
// node about its attempt. The engine implements it; View gives one for
// calling a node outside a run.
type State interface {
	// Node is the name of the running node, Attempt its 1-based attempt.
	Node() string
	Attempt() int
	// Get returns the value of a state field (nil when unset).
	Get(field string) any
	// Input returns a run input value (nil when not given).
	Input(field string) any
	// Eval evaluates a compiled expression over the state and input.
	Eval(p *expression.Program) (any, error)
	// Vars is the variable map expressions are evaluated over: state and
	// input. It is shared by every node of a superstep and must not be
	// modified; a node that adds variables of its own copies it.
	Vars() map[string]any
	// NewUpdate returns an empty update with room for n fields, in a
	// buffer the engine may reuse from step to step: return it from Run
	// and keep no reference to it afterwards.
	NewUpdate(n int) Update
	// Observed reports whether anyone receives the run's events, so a node
	// can skip work (such as streaming) that only events need.
	Observed() bool
	// Stream reports a piece of output as it is produced (a model's
	// tokens); it reaches the run's events as a node_output event.
	Stream(text string)
	// Retrying says the node's work failed after it streamed output, and
	// is done again after wait (a model's reply cut short, asked for
	// again): the output streamed so far is void. The run's events tell
	// it as a node_retry, and what the node streams next is its next
	// attempt's.
	Retrying(err error, wait time.Duration)
	// Degrade marks this attempt's result as a stand-in (a fallback), with
	// the reason; the node's end event carries it.
	Degrade(reason string)
	// Measure adds n to a count of the node's work, such as a model's
	// "calls", "input_tokens" and "output_tokens"; the node's end event
	// carries the counts of all its attempts (nothing is kept when the run
	// is not observed).
	Measure(name string, n int64)
	// Answer is the answer the run holds for this node (see Asker); a
	// nested node's is its own (NODE[key]).
	Answer() (any, bool)
	// Record keeps what the node was told from outside the run for a
	// request (a model's reply), key naming the request (a hash of what it
	// sent): it is recorded with the step's checkpoint, so that a replay
	// of the thread, or a flow test made from it, can tell it again.
	Record(key, text string)
	// Recorded is what a run that replays a thread's history was told for
	// the node's request key when the thread ran: a node that has one uses
	// it instead of asking again (and records it as its own).
	Recorded(key string) (string, bool)
	// RunNested runs a nested node (Builder.Nested) over this node's
	// variables and vars, with the nested node's retry, timeout, cache and
	// fallback, and returns its update. key tells this node's runs of it
	// apart within a step (an item's index): the runs are named NODE[key]
	// in events, and the update of a run that completed is kept (as a
	// pending write) so that a step resumed after a crash returns it
	// without running it again. A nested node that asks (an Asker) and
	// holds no answer, or whose run paused (a child flow), returns a
	// *Paused naming its question (ID and path NODE[key]): the host
	// returns it, joined with the others' by Pause, and runs again when
	// the run is resumed, finding the runs that completed done. It is
	// safe to call concurrently.
	RunNested(ctx context.Context, n *Nested, key string, vars map[string]any) (Update, error)
	// RunFlow runs a child flow to its end on a thread of its own, under
	// the namespace NODE:SEQ (NODE[key]:SEQ with a key) of this run's
	// thread, where SEQ is the checkpoint this step follows; a new child
	// thread starts from values (over the child's defaults), and its run
	// is given input (what the child reads as input.NAME). The run is
	// named by the namespace, so a step resumed after a crash resumes the
	// child where it stopped, or takes its result. The child's events
	// reach this run's observer tagged with the namespace. It returns the
	// child's final state; or, when the child paused (it waits for a
	// person, at any depth), a *Paused with its questions, whose ids are
	// under the namespace and whose paths under the node (NODE/...,
	// NODE[key]/...), which the node returns: the run resumed with their
	// answers runs it again, and the child goes on where it stopped.
	RunFlow(ctx context.Context, f *Subflow, key string, values, input, config map[string]any) (map[string]any, error)
	// Once returns what fn returned the first time this node reached key
	// in its step (keys tell apart the pieces of work a node does: a
	// model's turn, a tool call). The value, normalised to JSON, is kept
	// (as a pending write of the step) the moment fn returns, so a step
	// that runs the node again (resumed after a crash or a pause, or a
	// retried attempt) gets it back without calling fn: a finished piece
	// of work is never done twice. An error is not kept. Outside a run it
	// calls fn. It is safe to call concurrently, with different keys.
	Once(ctx context.Context, key string, fn func(context.Context) (any, error)) (any, error)
	// ToolEvent reports a tool call's start or end (Done) as the run's
	// tool_start or tool_end event.
	ToolEvent(e ToolEvent)
}

// View returns a State over fixed expression variables (which must hold
// at least "state" and "input"), for tools that call a node outside a run:
// previewing a prompt, testing a kind. Nobody observes it.
func View(node string, vars map[string]any) State { return &view{node: node, vars: vars} }

type view struct {
	node    string
	vars    map[string]any
	machine expression.Machine
}

func (v *view) Node() string { return v.node }
func (v *view) Attempt() int { return 1 }
func (v *view) Get(field string) any {
	st, _ := v.vars["state"].(map[string]any)
	return st[field]
}
func (v *view) Input(field string) any {
	in, _ := v.vars["input"].(map[string]any)
	return in[field]
}
func (v *view) Eval(p *expression.Program) (any, error) { return v.machine.Eval(p, v.vars) }
func (v *view) Vars() map[string]any                    { return v.vars }
func (v *view) NewUpdate(n int) Update                  { return make(Update, 0, n) }
func (v *view) Observed() bool                          { return false }
func (v *view) Stream(string)                           {}
func (v *view) Retrying(error, time.Duration)           {}
func (v *view) Degrade(string)                          {}
func (v *view) Measure(string, int64)                   {}
func (v *view) Answer() (any, bool)                     { return nil, false }
func (v *view) Record(string, string)                   {}
func (v *view) Recorded(string) (string, bool)          { return "", false }

// ErrOutsideRun is what RunNested and RunFlow return outside a run.
var ErrOutsideRun = errors.New("not inside a run")

func (v *view) RunNested(context.Context, *Nested, string, map[string]any) (Update, error) {
	return nil, ErrOutsideRun
}

func (v *view) RunFlow(context.Context, *Subflow, string, map[string]any, map[string]any, map[string]any) (map[string]any, error) {
	return nil, ErrOutsideRun
}

func (v *view) Once(ctx context.Context, _ string, fn func(context.Context) (any, error)) (any, error) {
	return fn(ctx)
}

func (v *view) ToolEvent(ToolEvent) {}
