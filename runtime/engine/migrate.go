package engine

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/store"
)

// Move is a thread's move onto another version of its flow (see
// Engine.Migrate).
type Move struct {
	// Values computes, from the thread's state, the values that replace
	// fields of it whole, whatever the fields' reducers, as g (the
	// version moved to) declares them; a nil value clears a field.
	Values func(state map[string]any) (map[string]any, error)
	// Drop clears fields g does not have.
	Drop []string
	// Note is kept on the move's checkpoint (its Config), to say in the
	// thread's history what moved it: the versions, for one.
	Note map[string]any
	// Held, when set, runs once the thread is held, before anything is
	// read or written: when it fails the move is refused, and nothing is
	// written.
	Held func(ctx context.Context) error
	// Moved runs once the checkpoint is committed, while the thread is
	// still held, so that no run begins between the two: it records the
	// thread's new version. When it fails the move fails, though its
	// checkpoint stays.
	Moved func(ctx context.Context, head *store.Snapshot) error
	// DryRun makes every check of the move (the thread held, its next
	// nodes, each value computed, normalised and validated against its
	// field, the whole state against the schema) and writes nothing:
	// Migrate returns the state the move would make.
	DryRun bool
}

// Migrate moves a thread onto the version of its flow g: under the
// thread's lease, it checks that every node the thread's newest
// checkpoint waits to run is a node of g, writes m.Values as a checkpoint
// of its own (store.SourceMigrate) even when there are none, so that the
// thread's history records the move, and calls m.Moved.
func (e *Engine) Migrate(ctx context.Context, g *flow.Graph, thread string, m Move) (*store.Snapshot, error) {
	owner, err := e.claim(ctx, thread, false, nil)
	if err != nil {
		return nil, err
	}
	defer e.free(thread)
	defer e.Store.Release(context.WithoutCancel(ctx), thread, owner)
	if m.Held != nil {
		if err := m.Held(ctx); err != nil {
			return nil, err
		}
	}
	head, err := e.Store.Head(ctx, thread)
	if err != nil {
		return nil, err
	}
	if len(head.Pending) > 0 {
		// a superstep part done: its saved writes belong to the version
		// that ran them
		return nil, ErrUnfinished
	}
	for _, name := range head.Next {
		if _, ok := g.Node(name); !ok {
			return nil, &InputError{Field: name, Reason: fmt.Sprintf("checkpoint %d waits to run node %q, which the version moved to does not have", head.Seq, name)}
		}
	}
	next := maps.Clone(head.Values)
	if next == nil {
		next = map[string]any{}
	}
	versions := maps.Clone(head.Versions)
	if versions == nil {
		versions = map[string]uint64{}
	}
	cp := &store.Checkpoint{Thread: thread, Seq: head.Seq + 1, Parent: head.Seq, Run: runID(), Source: store.SourceMigrate, Time: time.Now(),
		Next: head.Next, Joins: head.Joins, Config: m.Note}
	var values map[string]any
	if m.Values != nil {
		if values, err = m.Values(head.Values); err != nil {
			return nil, err
		}
	}
	keys := slices.Sorted(maps.Keys(values))
	for _, k := range keys {
		f, ok := g.Field(k)
		if !ok {
			return nil, &InputError{Field: k, Reason: "not a state field", Suggestion: diag.Suggest(k, fieldNames(g))}
		}
		v, err := normalizeFor(f, values[k])
		if err != nil {
			return nil, &InputError{Field: k, Reason: err.Error()}
		}
		if v != nil && f.Validator != nil {
			if err := f.Validator.Validate(v); err != nil {
				return nil, &InputError{Field: k, Reason: err.Error()}
			}
		}
		next[k] = v
		versions[k]++
		cp.Writes = append(cp.Writes, store.Write{Field: k, Version: versions[k], Value: v})
	}
	for _, k := range m.Drop {
		if _, ok := g.Field(k); ok {
			return nil, &InputError{Field: k, Reason: "a field of the version moved to is set, not dropped"}
		}
		if _, had := next[k]; !had {
			continue
		}
		delete(next, k)
		versions[k]++
		cp.Writes = append(cp.Writes, store.Write{Field: k, Version: versions[k], Removed: true})
		keys = append(keys, k)
	}
	if g.FullValidation {
		if err := g.Root().Validate(next); err != nil {
			return nil, fmt.Errorf("migration rejected: %w", err)
		}
	}
	if len(keys) > 0 {
		cp.Writers = []store.NodeWrites{{Node: "migrate", Fields: keys}}
	}
	if m.DryRun {
		return &store.Snapshot{Thread: thread, Seq: head.Seq, Values: next, Versions: versions, Next: head.Next}, nil
	}
	if err := e.Store.Commit(ctx, cp); err != nil {
		return nil, err
	}
	snap := &store.Snapshot{Thread: thread, Seq: cp.Seq, Values: next, Versions: versions, Next: head.Next}
	if m.Moved != nil {
		if err := m.Moved(ctx, snap); err != nil {
			return nil, err
		}
	}
	return snap, nil
}
