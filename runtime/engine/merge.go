package engine

import (
	"context"
	"fmt"
	"unicode/utf8"

	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/schema"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/value"
)

func writeOf(f *flow.Field, version uint64, value, update any) store.Write {
	if f.Reducer.Appends {
		return store.Write{Field: f.Name, Version: version, Items: flow.AsItems(asItem(f, update)), Append: true}
	}
	return store.Write{Field: f.Name, Version: version, Value: value}
}

// validateField checks a field's new value: only the appended items when
// the field's schema allows that, else the whole value.
func validateField(f *flow.Field, value, update any) error {
	if f.Items != nil && f.Reducer.Appends {
		for i, it := range flow.AsItems(asItem(f, update)) {
			if err := f.Items.Validate(it); err != nil {
				return fmt.Errorf("appended item %d: %w", i, err)
			}
		}
		return nil
	}
	if f.Validator == nil {
		return nil
	}
	return f.Validator.Validate(value)
}

// appendOwned appends an update to an append field. When the current list
// is the one this run last produced, the items go in place into its spare
// capacity; otherwise (the list came from the store, or the field was
// replaced) it is copied once into a list this run owns.
func (r *run) appendOwned(f *flow.Field, cur, upd any) (any, error) {
	cl, ok := cur.([]any)
	if !ok && cur != nil {
		return f.Reducer.Reduce(cur, upd)
	}
	full := r.lists[f.Index]
	if len(full) != len(cl) || len(cl) > 0 && &full[0] != &cl[0] || cap(full) == 0 {
		full = append(make([]any, 0, max(2*len(cl), 8)), cl...)
	}
	switch u := upd.(type) {
	case nil:
	case []any:
		full = append(full, u...)
	default:
		full = append(full, u)
	}
	if full == nil {
		full = []any{}
	}
	r.lists[f.Index] = full
	return full[:len(full):len(full)], nil
}

// barrier merges the step's updates through the reducers in node
// declaration order and validates every changed field. It returns the
// changed fields in write order, and leaves the per-step writer marks
// cleared for the next step, even when the merge fails.
func (r *run) barrier(ctx context.Context, outs []outcome) ([]*flow.Field, error) {
	r.changed, r.told = r.changed[:0], r.told[:0]
	err := r.merge(ctx, outs)
	changed := r.changed
	for _, f := range changed {
		r.writer[f.Index] = -1
	}
	if err != nil {
		return nil, err
	}
	return changed, nil
}

// merge is barrier's work. For each node, in declaration order: a failed
// node's on_error applies (or the run fails); each written field must be a
// field the node declares, written once, and by no other node this step
// unless its reducer folds concurrent writes; the value is normalised,
// reduced into the field (appends in place, see appendOwned) and
// validated. It lists the changed fields in r.changed.
func (r *run) merge(ctx context.Context, outs []outcome) error {
	observe := r.req.Observe != nil
	// on_error.set reads the step's snapshot: its variables are made
	// current before the first update is applied
	var vars map[string]any
	for i := range outs {
		if len(outs[i].node.OnError.Set) > 0 {
			vars = r.Vars()
			break
		}
	}
	owned := false
	for i := range outs {
		o := &outs[i]
		n := o.node
		r.visits[n.Index]++
		if o.err == nil && len(o.update) > 0 {
			// an update the fields refuse is the node's failure, which
			// its on_error may handle like any other
			rejected, err := r.stage(n, o.update)
			if err != nil {
				return err
			}
			if rejected != nil {
				o.err, o.update = rejected, nil
			}
		}
		if o.err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if !n.OnError.Handled {
				if observe {
					r.emit(Event{Type: NodeFailed, Step: r.step, Node: n.Name, Kind: n.Kind, Attempt: o.attempts, Duration: o.took, Error: o.err.Error(), Usage: o.view.usage})
				}
				return &NodeError{Node: n.Name, Kind: n.Kind, Pos: n.Pos, Err: o.err}
			}
			upd, err := r.fallback(n, vars, o.err)
			if err != nil {
				return &NodeError{Node: n.Name, Kind: n.Kind, Pos: n.Pos, Err: fmt.Errorf("on_error: %w (after: %v)", err, o.err)}
			}
			if len(upd) > 0 {
				rejected, err := r.stage(n, upd)
				if err != nil {
					return err
				}
				if rejected != nil {
					return &NodeError{Node: n.Name, Kind: n.Kind, Pos: n.Pos, Err: fmt.Errorf("on_error: %w (after: %v)", rejected, o.err)}
				}
			}
			if observe {
				r.emit(Event{Type: NodeFailed, Step: r.step, Node: n.Name, Kind: n.Kind, Attempt: o.attempts, Duration: o.took, Error: o.err.Error(), Handled: true, Update: upd.Map(), Usage: o.view.usage})
				if len(upd) > 0 {
					r.tell()
				}
			}
			o.update, o.route = upd, n.OnError.Route
		} else if observe {
			r.emit(Event{Type: NodeEnd, Step: r.step, Node: n.Name, Kind: n.Kind, Attempt: o.attempts, Duration: o.took, Update: o.update.Map(), Degraded: o.degraded, Usage: o.view.usage, Cached: o.cached})
			if len(o.update) > 0 {
				r.tell()
			}
		}
		if len(o.update) == 0 {
			continue
		}
		o.repeats = r.repeats
		if !owned {
			// nodes are done reading the step's snapshot; only a detached
			// attempt may still read it, and then the step writes a copy
			r.own()
			owned = true
		}
		for _, sv := range r.staged {
			f := sv.f
			if r.writer[f.Index] < 0 {
				r.changed = append(r.changed, f)
				if f.Reducer.Appends {
					old, _ := r.cur[f.Index].([]any)
					r.oldLen[f.Index] = len(old)
				}
			}
			r.set(f.Index, sv.merged)
			r.writer[f.Index] = n.Index
		}
	}
	return nil
}

// tell notes the staged fields whose reducer replaces as told by the
// node event just emitted: the value it gave is the one they commit with.
func (r *run) tell() {
	for _, sv := range r.staged {
		if r.records.merge[sv.f.Index] == mergeReplace {
			r.told = append(r.told, sv.f)
		}
	}
}

// staged is a field's value after a node's update, before it is applied.
type staged struct {
	f      *flow.Field
	merged any
}

// stage checks a node's update and computes the fields' new values in
// r.staged, applying nothing. A value a field refuses (its schema, its
// reducer) is returned as rejected, the node's failure; an update the
// flow's declarations forbid (an undeclared field, a field written twice
// whose reducer replaces, or by two nodes so) fails the run. A field the
// update writes several times folds each write in order.
func (r *run) stage(n *flow.Node, upd kind.Update) (rejected, err error) {
	r.staged, r.repeats = r.staged[:0], false
	// a field written before in the update is found among the staged
	// fields; a long update (a map's items) finds it through stagedAt
	indexed := len(upd) > 8
	for _, fv := range upd {
		f := declared(n, fv.Field)
		if f == nil {
			err = r.undeclared(n, fv.Field)
			break
		}
		at := -1
		if indexed {
			at = r.stagedAt[f.Index]
		} else {
			for i := range r.staged {
				if r.staged[i].f == f {
					at = i
					break
				}
			}
		}
		if !f.Reducer.Concurrent {
			if at >= 0 {
				err = nodeFailure(n, "wrote field %q twice in one update and its reducer is replace", f.Name)
				break
			}
			if w := r.writer[f.Index]; w >= 0 {
				err = nodeFailure(n, "field %q was also written by %q in this superstep and its reducer is replace", f.Name, r.g.Nodes[w].Name)
				break
			}
		}
		v, verr := normalizeFor(f, fv.Value)
		if verr != nil {
			rejected = fmt.Errorf("field %q: %w", f.Name, verr)
			break
		}
		v = asItem(f, v)
		cur := r.cur[f.Index]
		if at >= 0 {
			cur = r.staged[at].merged
		}
		var merged any
		var rerr error
		switch r.records.merge[f.Index] {
		case mergeReplace:
			merged = v
		case mergeAppend:
			merged, rerr = r.appendOwned(f, cur, v)
		default:
			if merged, rerr = f.Reducer.Reduce(cur, v); rerr == nil {
				merged, rerr = settle(merged)
			}
		}
		if rerr == nil {
			rerr = validateField(f, merged, v)
		}
		if rerr != nil {
			rejected = fmt.Errorf("update of field %q rejected: %w", f.Name, rerr)
			break
		}
		if at >= 0 {
			r.staged[at].merged, r.repeats = merged, true
			continue
		}
		if indexed {
			r.stagedAt[f.Index] = len(r.staged)
		}
		r.staged = append(r.staged, staged{f: f, merged: merged})
	}
	if indexed {
		for _, sv := range r.staged {
			r.stagedAt[sv.f.Index] = -1
		}
	}
	return rejected, err
}

// undeclared is the failure of a node that wrote name, which is not a
// field it declares.
func (r *run) undeclared(n *flow.Node, name string) error {
	f, ok := r.g.Field(name)
	if !ok {
		return nodeFailure(n, "wrote %q, which is not a state field", name)
	}
	return nodeFailure(n, "wrote field %q, which the node does not declare", f.Name)
}

func nodeFailure(n *flow.Node, format string, args ...any) error {
	return &NodeError{Node: n.Name, Kind: n.Kind, Pos: n.Pos, Err: fmt.Errorf(format, args...)}
}

// declared returns the node's declared field called name, or nil.
func declared(n *flow.Node, name string) *flow.Field {
	for i, w := range n.WriteList {
		if w == name {
			return n.WriteFields[i]
		}
	}
	return nil
}

// writtenFields lists the fields of upd in field order, sharing the node's
// own list when it wrote every field it declares (once each: repeats
// says it wrote one more than once).
func writtenFields(n *flow.Node, upd kind.Update, repeats bool) []string {
	if len(upd) == len(n.WriteList) && !repeats {
		return n.WriteList
	}
	return someFields(n, upd)
}

// someFields lists the fields of upd in field order.
func someFields(n *flow.Node, upd kind.Update) []string {
	if len(upd) == 0 {
		return nil
	}
	fs := make([]string, 0, len(upd))
	for _, f := range n.WriteList {
		if _, ok := upd.Get(f); ok {
			fs = append(fs, f)
		}
	}
	return fs
}

// normalizeFor brings a value written to field f to the form the state
// holds it in: the form a store hands back (see value.Normalize), so a run
// that goes on in this process and one that reads the thread back in
// another see the same value. A whole float of 2^53 or more where f's
// schema wants an integer is refused (it may be a rounding of the integer
// meant); elsewhere it is the integer the store hands back for it.
func normalizeFor(f *flow.Field, v any) (any, error) {
	switch x := v.(type) {
	case nil, bool, int:
		return v, nil
	case string:
		if utf8.ValidString(x) {
			return v, nil
		}
	}
	return normalizeAny(f, v)
}

func normalizeAny(f *flow.Field, v any) (any, error) {
	n, err := value.Normalize(v)
	if err != nil {
		return nil, err
	}
	n = schema.Coerce(f.Shape, n)
	if settled, wide := value.Settle(n); wide {
		if err := f.Shape.WideIntegers(n); err != nil {
			return nil, err
		}
		n = settled
	}
	return n, nil
}

// asItem is a null written to a field whose reducer adds items (append,
// union): one item, null, as any value that is not a list is, which the
// field's items must take (the validator reads such a write so too).
func asItem(f *flow.Field, v any) any {
	if v == nil && (f.Reducer.Appends || f.Reducer.Spec.Name == "union") {
		return []any{nil}
	}
	return v
}

// reduce merges v, normalised, into cur through f's reducer, in the form
// the state holds values.
func reduce(f *flow.Field, cur, v any) (any, error) {
	merged, err := f.Reducer.Reduce(cur, asItem(f, v))
	if err != nil || f.Reducer.Appends || f.Reducer.Spec.Name == "replace" {
		return merged, err
	}
	return settle(merged)
}

// settle brings a reducer's result to the form the state holds it in: a
// reducer over numbers (add, max, min, an expression) may make a whole
// float of its operands, which the store hands back as an int.
func settle(v any) (any, error) {
	n, err := value.Normalize(v)
	if err != nil {
		return nil, err
	}
	n, _ = value.Settle(n)
	return n, nil
}
