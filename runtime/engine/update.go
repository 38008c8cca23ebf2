package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"time"

	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/schema"
	"github.com/trellisflow/trellis/runtime/store"
)

// Create makes a new thread with the schema defaults overlaid by values.
// Read-only fields can only be set here. The input fields the schema
// requires may be missing: the run that brings input brings them, and a
// run without them is refused (owedInputs).
func (e *Engine) Create(ctx context.Context, g *flow.Graph, thread string, values map[string]any) (*store.Snapshot, error) {
	state, err := e.create(ctx, g, thread, values)
	if err != nil {
		return nil, err
	}
	versions := map[string]uint64{}
	for k := range state {
		versions[k] = 1
	}
	return &store.Snapshot{Thread: thread, Seq: 1, Values: maps.Clone(state), Versions: versions}, nil
}

// create commits a thread's first checkpoint and returns its state, every
// field of which is at version 1.
func (e *Engine) create(ctx context.Context, g *flow.Graph, thread string, values map[string]any) (map[string]any, error) {
	state, cp, err := initial(g, thread, values, true, false)
	if err != nil {
		return nil, err
	}
	if err := e.Store.Commit(ctx, cp); err != nil {
		return nil, fmt.Errorf("create thread %q: %w", thread, err)
	}
	return state, nil
}

// initial builds a thread's first state and the checkpoint that records
// it, from the schema's defaults and values; with check, it validates it.
// A child flow's thread (child) has an id the runtime made.
func initial(g *flow.Graph, thread string, values map[string]any, check, child bool) (map[string]any, *store.Checkpoint, error) {
	if err := store.CheckThreadID(thread); err != nil && !child {
		return nil, nil, &InputError{Field: "thread", Reason: err.Error()}
	}
	state := make(map[string]any, len(g.Fields))
	cp := &store.Checkpoint{Thread: thread, Seq: 1, Source: store.SourceCreate, Time: time.Now()}
	for _, f := range g.Fields {
		if f.HasDefault {
			state[f.Name] = f.Default
		}
	}
	for _, k := range sortedKeys(values) {
		f, ok := g.Field(k)
		if !ok {
			return nil, nil, &InputError{Field: k, Reason: "not a state field", Suggestion: diag.Suggest(k, fieldNames(g))}
		}
		v, err := normalizeFor(f, values[k])
		if err != nil {
			return nil, nil, &InputError{Field: k, Reason: err.Error()}
		}
		state[k] = v
	}
	if check {
		if err := g.Root().Validate(state); err != nil && !owesOnlyInputs(g, state, err) {
			return nil, nil, fmt.Errorf("initial state of thread %q: %w", thread, err)
		}
	}
	cp.Writes = make([]store.Write, 0, len(state))
	for _, f := range g.Fields {
		if v, ok := state[f.Name]; ok {
			cp.Writes = append(cp.Writes, store.Write{Field: f.Name, Version: 1, Value: v})
		}
	}
	return state, cp, nil
}

// owedInputs are the input fields the state schema requires that state
// has no value for (flow.Graph.OwedInputs, which validate lists too).
func owedInputs(g *flow.Graph, state map[string]any) []string { return g.OwedInputs(state) }

// owesOnlyInputs reports whether the state schema refuses a new thread's
// state (err) only for want of input fields it requires.
func owesOnlyInputs(g *flow.Graph, state map[string]any, err error) bool {
	var se *schema.Error
	if !errors.As(err, &se) || len(owedInputs(g, state)) == 0 {
		return false
	}
	for _, c := range se.Causes {
		if c.Keyword != "required" || c.Pointer != "" {
			return false
		}
	}
	for _, name := range g.Root().Shape.Required {
		if f, ok := g.Field(name); !ok || !f.Input {
			if _, ok := state[name]; !ok {
				return false
			}
		}
	}
	return true
}

func fieldNames(g *flow.Graph) []string {
	names := make([]string, len(g.Fields))
	for i, f := range g.Fields {
		names[i] = f.Name
	}
	return names
}

// Update writes values to a thread as if node had written them: through
// the fields' reducers, checked against the node's declared writes and the
// schema, and committed as a checkpoint with source "update". It is how a
// person corrects a thread (time travel). It is UpdateAt the thread's
// newest checkpoint.
func (e *Engine) Update(ctx context.Context, g *flow.Graph, thread, node string, values map[string]any) (*store.Snapshot, error) {
	return e.UpdateAt(ctx, g, thread, 0, node, values)
}

// UpdateAt writes values as if node had written them over the state of
// checkpoint at (0: the thread's newest), as Update does. The update's
// checkpoint goes on from that one: at an older checkpoint it is a branch
// (its Base says from where), whose writes first put back every field that
// changed since; and it keeps that checkpoint's unfinished run, if any
// (its next nodes, join arrivals and step; at the newest checkpoint, the
// updates of the nodes that completed after it), so that resuming the
// thread runs the nodes that were to run there, over the edited state.
// At a finished checkpoint the update stands for a step that ran node:
// the nodes its edges trigger over the edited state are next (as
// LangGraph's update_state with as_node), so resuming runs them; edges
// that lead to END alone leave the thread finished. An unfinished run of
// the newer checkpoints a branch leaves is given up.
func (e *Engine) UpdateAt(ctx context.Context, g *flow.Graph, thread string, at uint64, node string, values map[string]any) (*store.Snapshot, error) {
	n, ok := g.Node(node)
	if !ok {
		var names []string
		for _, m := range g.Nodes {
			names = append(names, m.Name)
		}
		return nil, &InputError{Field: node, Reason: "not a node of this flow", Suggestion: diag.Suggest(node, names)}
	}
	owner, err := e.claim(ctx, thread, false, nil)
	if err != nil {
		return nil, err
	}
	defer e.free(thread)
	defer e.Store.Release(context.WithoutCancel(ctx), thread, owner)
	head, err := e.Store.Head(ctx, thread)
	if err != nil {
		return nil, err
	}
	base := head
	if at != 0 && at != head.Seq {
		if at > head.Seq {
			return nil, fmt.Errorf("checkpoint %d of thread %q: %w", at, thread, store.ErrNotFound)
		}
		if base, err = e.Store.StateAt(ctx, thread, at); err != nil {
			return nil, fmt.Errorf("checkpoint %d of thread %q: %w", at, thread, err)
		}
	}
	for _, name := range base.Next {
		if _, ok := g.Node(name); !ok {
			return nil, &InputError{Field: "at", Reason: fmt.Sprintf("checkpoint %d waits to run node %q, which the flow does not have", base.Seq, name)}
		}
	}
	next := maps.Clone(base.Values)
	if next == nil {
		next = map[string]any{}
	}
	versions := maps.Clone(head.Versions)
	if versions == nil {
		versions = map[string]uint64{}
	}
	cp := &store.Checkpoint{Thread: thread, Seq: head.Seq + 1, Parent: head.Seq, Run: runID(), Source: store.SourceUpdate, Time: time.Now()}
	if len(base.Next) > 0 {
		// the update goes on with the run base left unfinished
		cp.Run, cp.Step, cp.Next, cp.Joins = base.Run, base.Step, base.Next, base.Joins
	}
	if base != head {
		// a branch: what changed since base is put back first
		cp.Base = base.Seq
		for _, k := range slices.Sorted(maps.Keys(head.Values)) {
			v, had := base.Values[k]
			if had && reflect.DeepEqual(v, head.Values[k]) {
				continue
			}
			versions[k]++
			cp.Writes = append(cp.Writes, store.Write{Field: k, Version: versions[k], Value: v})
		}
		for _, k := range slices.Sorted(maps.Keys(base.Values)) {
			if _, had := head.Values[k]; !had {
				versions[k]++
				cp.Writes = append(cp.Writes, store.Write{Field: k, Version: versions[k], Value: base.Values[k]})
			}
		}
	}
	restored := len(cp.Writes)
	for _, k := range sortedKeys(values) {
		f, ok := g.Field(k)
		if !ok {
			return nil, &InputError{Field: k, Reason: "not a state field", Suggestion: diag.Suggest(k, fieldNames(g))}
		}
		if !n.Writes[k] {
			return nil, &InputError{Field: k, Reason: fmt.Sprintf("node %q does not write it", node)}
		}
		v, err := normalizeFor(f, values[k])
		if err != nil {
			return nil, &InputError{Field: k, Reason: err.Error()}
		}
		merged, err := reduce(f, next[k], v)
		if err == nil {
			err = validateField(f, merged, v)
		}
		if err != nil {
			return nil, &InputError{Field: k, Reason: err.Error()}
		}
		next[k] = merged
		versions[k]++
		if cp.Input == nil {
			cp.Input = map[string]any{}
		}
		cp.Input[k] = v
		w := writeOf(f, versions[k], merged, v)
		if i := slices.IndexFunc(cp.Writes[:restored], func(w store.Write) bool { return w.Field == k }); i >= 0 {
			// put back and written: one write, of the whole value
			cp.Writes[i] = store.Write{Field: k, Version: versions[k], Value: merged}
			continue
		}
		cp.Writes = append(cp.Writes, w)
	}
	if g.FullValidation {
		if err := g.Root().Validate(next); err != nil {
			return nil, fmt.Errorf("update rejected: %w", err)
		}
	}
	cp.Writers = []store.NodeWrites{{Node: node, Fields: sortedKeys(values)}}
	if len(base.Next) == 0 {
		// a finished checkpoint: the update stands for a step that ran
		// node, so what its edges trigger over the edited state is next
		if cp.Next, cp.Joins, err = e.successors(g, n, &store.Snapshot{Thread: thread, Seq: cp.Seq, Values: next, Versions: versions}); err != nil {
			return nil, &InputError{Field: node, Reason: "its edges over the updated state: " + err.Error()}
		}
	}
	if err := e.Store.Commit(ctx, cp); err != nil {
		return nil, err
	}
	snap := &store.Snapshot{Thread: thread, Seq: cp.Seq, Values: next, Versions: versions, Next: cp.Next, Joins: cp.Joins, Run: cp.Run, Step: cp.Step}
	if base == head && len(head.Pending) > 0 {
		// the nodes that completed after the head stay completed
		for _, name := range slices.Sorted(maps.Keys(head.Pending)) {
			if err := e.Store.PutPending(ctx, thread, cp.Seq, name, head.Pending[name], owner); err != nil {
				return nil, fmt.Errorf("update: keep the update of node %q: %w", name, err)
			}
		}
		snap.Pending = head.Pending
	}
	return snap, nil
}

// successors are the nodes the edges out of n trigger over the state of
// snap, as a run whose step ran n routes: a branch or a route decides
// over that state, and a join n is one source of records its arrival
// (joins), firing only once all its sources have arrived. None when n's
// edges lead to END alone (the thread stays finished).
func (e *Engine) successors(g *flow.Graph, n *flow.Node, snap *store.Snapshot) (next []string, joins []uint64, err error) {
	r := newRun(e, g, Request{Thread: snap.Thread}, snap)
	defer r.release()
	triggered, err := r.route([]outcome{{node: n}})
	if err != nil || len(triggered) == 0 {
		return nil, nil, err
	}
	for _, m := range triggered {
		next = append(next, m.Name)
	}
	if slices.ContainsFunc(r.joins, func(w uint64) bool { return w != 0 }) {
		joins = slices.Clone(r.joins)
	}
	return next, joins, nil
}

// Abandon gives up the thread's unfinished run (one a crash or a Stop left
// with nodes still to run): it commits a checkpoint with source "abandon"
// that changes no field and names no next node, so the thread takes new
// runs again and its history says what happened. Updates the unfinished
// step saved as pending writes are dropped. A thread with no unfinished
// run is returned as it is.
func (e *Engine) Abandon(ctx context.Context, thread string) (*store.Snapshot, error) {
	owner, err := e.claim(ctx, thread, false, nil)
	if err != nil {
		return nil, err
	}
	defer e.free(thread)
	defer e.Store.Release(context.WithoutCancel(ctx), thread, owner)
	head, err := e.Store.Head(ctx, thread)
	if err != nil || len(head.Next) == 0 {
		return head, err
	}
	cp := &store.Checkpoint{Thread: thread, Seq: head.Seq + 1, Parent: head.Seq, Run: head.Run, Step: head.Step,
		Source: store.SourceAbandon, Time: time.Now()}
	if err := e.Store.Commit(ctx, cp); err != nil {
		return nil, err
	}
	return &store.Snapshot{Thread: thread, Seq: cp.Seq, Values: head.Values, Versions: head.Versions, Run: head.Run, Step: head.Step}, nil
}

// CheckNew checks the initial values and the input of a run that makes a
// new thread of g as that run checks them (every problem at once, an
// *InputError), and makes nothing: how a caller that makes such threads
// later, a schedule each tick, refuses at once what would fail then.
func CheckNew(g *flow.Graph, values, input map[string]any) error {
	const thread = "check"
	state, creating, err := initial(g, thread, values, false, false)
	if err != nil {
		return err
	}
	r := newRun(nil, g, Request{Thread: thread, Values: values, Input: input}, &store.Snapshot{Thread: thread, Seq: 1, Values: state})
	defer r.release()
	r.creating = creating
	_, err = r.applyInput()
	return err
}

// CheckInput checks a run's input against g's input fields, each value on
// its own over the field's default, as a run checks it, and that it gives
// the inputs the flow reads with nothing to fall back on (every problem
// at once, an *InputError): what can be known of an input before the
// state of the thread it goes to.
func CheckInput(g *flow.Graph, input map[string]any) error {
	var probs inputProblems
	for _, k := range sortedKeys(input) {
		var current any
		if f, ok := g.Field(k); ok && f.HasDefault {
			current = f.Default
		}
		if _, _, _, _, ie := inputValue(g, k, input[k], current); ie != nil {
			probs.add(ie)
		}
	}
	probs.addRead(g, input)
	return probs.err()
}
