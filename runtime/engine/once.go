package engine

import (
	"context"
	"fmt"

	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/value"
)

// A node's step may hold several pieces of work that must each happen
// once, such as an llm node's model turns and tool calls: State.Once
// keeps each piece's result the moment it is known, as a pending write of
// the step under the node's name and the piece's key (NODE#KEY; no node
// name holds #), beside the pending writes of the nodes that completed.
// A step run again (resumed after a crash, or after the node paused the
// run to ask something) finds them there, and the node goes on from the
// first piece it had not finished. They go when the step commits, as
// every pending write does.
//
// A node that pauses the run midway (kind.Interrupt) keeps its question
// the same way, under NODE#ask: the thread's unfinished run lists it
// (Engine.Asks) until the step commits.

// onceSep separates a node's name from a piece's key in a pending write's
// name.
const onceSep = "#"

// askKey is the key of a node's pending question.
const askKey = "ask"

func onceName(node, key string) string { return node + onceSep + key }

// Once implements kind.State. What it keeps passes the attempt's gate: an
// attempt given up on keeps nothing from then on.
func (v *view) Once(ctx context.Context, key string, fn func(context.Context) (any, error)) (any, error) {
	r := v.run
	if r == nil {
		return fn(ctx)
	}
	name := onceName(v.n.Name, key)
	if !v.gate.enter() {
		_, err := v.gate.given(ctx)
		return nil, err
	}
	step, seq := v.at()
	ws, saved := r.pending[name]
	r.nestedMu.Lock()
	done, ok := r.nestedDone[name]
	r.nestedMu.Unlock()
	v.gate.exit()
	switch {
	case saved && len(ws) == 1:
		return ws[0].Value, nil
	case ok && done.seq == seq && len(done.update) == 1:
		// done in an earlier attempt of the node, this step
		return done.update[0].Value, nil
	}
	val, err := fn(ctx)
	if err != nil {
		return nil, err
	}
	// one value everywhere: what is kept is what the node goes on with
	if val, err = value.Normalize(val); err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	if !v.gate.enter() {
		r.drop()
		_, err := v.gate.given(ctx)
		return nil, err
	}
	defer v.gate.exit()
	if err := r.keep(ctx, seq, name, []store.Write{{Value: val}}); err != nil {
		return nil, fmt.Errorf("step %d: keep %s of node %q: %w", step, key, v.n.Name, err)
	}
	return val, nil
}

// ToolEvent implements kind.State.
func (v *view) ToolEvent(te kind.ToolEvent) {
	if !v.Observed() {
		return
	}
	typ := ToolStart
	if te.Done {
		typ = ToolEnd
	}
	v.emit(Event{Type: typ, Node: v.n.Name, Kind: v.n.Kind, Attempt: v.attempt, Tool: &te})
}

// isInterrupter reports whether n may pause a run midway.
func isInterrupter(n *flow.Node) bool {
	_, ok := n.Impl.(kind.Interrupter)
	return ok
}
