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
	if err := r.keep(ctx, seq, name, val); err != nil {
		return nil, fmt.Errorf("step %d: keep %s of node %q: %w", step, key, v.n.Name, err)
	}
	return val, nil
}

// keep records a piece of a step's work: in the store as a pending write
// (with sync durability, as node updates are), and for the attempts of
// this step.
func (r *run) keep(ctx context.Context, seq uint64, name string, val any) error {
	if r.req.Durability == "" || r.req.Durability == Sync {
		if err := r.e.Store.PutPending(ctx, r.req.Thread, seq, name, []store.Write{{Value: val}}); err != nil {
			return err
		}
	}
	r.nestedMu.Lock()
	if r.nestedDone == nil {
		r.nestedDone = map[string]nestedRun{}
	}
	r.nestedDone[name] = nestedRun{seq: seq, update: kind.Update{{Value: val}}}
	r.nestedMu.Unlock()
	return nil
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

// paused looks for the nodes of a step that paused the run midway. With
// some, the step does not commit: the questions are kept (NODE#ask), and
// the updates of the nodes that completed are kept as pending writes, so
// that the resumed step runs only the nodes that paused (and those that
// failed); the run ends paused before them.
func (r *run) paused(ctx context.Context, outs []outcome) (*Interrupt, error) {
	var in *Interrupt
	for i := range outs {
		payload, ok := kind.InterruptPayload(outs[i].err)
		if !ok {
			continue
		}
		if in == nil {
			in = &Interrupt{}
		}
		n := outs[i].node
		payload, err := value.Normalize(payload)
		if err != nil {
			return nil, &NodeError{Node: n.Name, Kind: n.Kind, Pos: n.Pos, Err: fmt.Errorf("ask: %w", err)}
		}
		if err := r.keep(ctx, r.seq, onceName(n.Name, askKey), payload); err != nil {
			return nil, fmt.Errorf("step %d: keep the question of node %q: %w", r.step, n.Name, err)
		}
		in.Before = append(in.Before, n.Name)
		in.Asks = append(in.Asks, Ask{ID: n.Name, Payload: payload})
	}
	if in == nil {
		return nil, nil
	}
	for i := range outs {
		o := &outs[i]
		if o.err != nil || o.attempts == 0 || o.node.Inline {
			// failed (it runs again), taken from a pending write already,
			// or inline (it runs again at no cost)
			continue
		}
		if _, saved := r.pending[o.node.Name]; saved {
			continue
		}
		if err := r.savePending(ctx, o, r.seq, r.step); err != nil {
			return nil, err
		}
	}
	if r.req.Observe != nil {
		for i := range outs {
			if _, ok := kind.InterruptPayload(outs[i].err); ok {
				n := outs[i].node
				r.emit(Event{Type: NodeEnd, Step: r.step, Node: n.Name, Kind: n.Kind, Attempt: outs[i].attempts, Duration: outs[i].took,
					Usage: outs[i].view.usage, Interrupt: &Interrupt{Before: []string{n.Name}}})
			}
		}
	}
	return in, nil
}

// pendingAsks lists the questions that nodes of a thread's unfinished run
// asked midway, from their pending writes.
func pendingAsks(g *flow.Graph, head *store.Snapshot) []Ask {
	var asks []Ask
	for _, name := range head.Next {
		n, ok := g.Node(name)
		if !ok || !isInterrupter(n) {
			continue
		}
		if _, done := head.Pending[name]; done {
			continue
		}
		if ws, ok := head.Pending[onceName(name, askKey)]; ok && len(ws) == 1 {
			asks = append(asks, Ask{ID: name, Payload: ws[0].Value})
		}
	}
	return asks
}

// CheckAnswers refuses the answers a resumed run of g is given that no
// node of g asks for, or that a node that pauses midway cannot take (an
// *InputError naming each, as the run would refuse them): what a caller
// that queues a resume checks before it does.
func CheckAnswers(g *flow.Graph, answers map[string]any) error {
	var probs inputProblems
	for _, id := range sortedKeys(answers) {
		n, ok := g.Node(id)
		if !ok || !isAsker(n) && !isInterrupter(n) {
			probs.add(&InputError{Field: "answers." + id, Reason: "not a node of this flow that asks a question"})
			continue
		}
		if it, ok := n.Impl.(kind.Interrupter); ok {
			if err := it.CheckAnswer(answers[id]); err != nil {
				probs.add(&InputError{Field: "answers." + id, Reason: err.Error()})
			}
		}
	}
	return probs.err()
}
