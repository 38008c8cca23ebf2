// Package store defines how threads and their checkpoints are persisted.
// A thread is one conversation; each committed superstep of a run adds one
// checkpoint to the thread's chain. A checkpoint records only what changed:
// the fields written (an append field records only the appended items), the
// nodes that wrote them, and where the run goes next.
package store

import (
	"context"
	"errors"
	"time"
)

// Errors every store returns for the same conditions.
var (
	// ErrNotFound: no such thread or checkpoint.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the checkpoint's parent is not the thread's head; some
	// other writer advanced the thread.
	ErrConflict = errors.New("thread was advanced by another writer")
	// ErrExists: a thread with that id already exists.
	ErrExists = errors.New("thread already exists")
)

// Checkpoint is one committed step of a thread.
type Checkpoint struct {
	Thread string
	// Seq numbers the thread's checkpoints from 1; Parent is the previous
	// one's Seq (0 for the first).
	Seq    uint64
	Parent uint64
	// Run identifies the run that wrote it, Step the superstep within it
	// (0 for the run's input).
	Run  string
	Step int
	// Source is "create", "input", "step" or "update".
	Source string
	Time   time.Time
	// Writes are the fields that changed.
	Writes []Write
	// Writers lists each node that ran in the step with the fields it
	// wrote, in declaration order.
	Writers []NodeWrites
	// Next lists the nodes triggered for the following superstep; empty
	// when the run finished.
	Next []string
}

// Write is one changed field.
type Write struct {
	Field string
	// Version counts the field's changes over the thread's life.
	Version uint64
	// Value is the new value; for Append, Items holds the appended items
	// instead.
	Value  any
	Items  []any
	Append bool
}

// NodeWrites names the fields one node wrote in a step.
type NodeWrites struct {
	Node   string
	Fields []string
}

// Snapshot is the full state of a thread at one checkpoint.
type Snapshot struct {
	Thread   string
	Seq      uint64
	Values   map[string]any
	Versions map[string]uint64
	Next     []string
}

// Store persists threads.
type Store interface {
	// Head returns the thread's newest state, or ErrNotFound.
	Head(ctx context.Context, thread string) (*Snapshot, error)
	// Commit appends cp to its thread. A first checkpoint (Parent 0)
	// creates the thread, or fails with ErrExists; its writes hold every
	// initial value. A Parent that is not the head fails with ErrConflict.
	// The store owns cp afterwards; the values it points to are never
	// modified.
	Commit(ctx context.Context, cp *Checkpoint) error
	// History lists the thread's checkpoints, newest first.
	History(ctx context.Context, thread string) ([]*Checkpoint, error)
}

// Apply folds a checkpoint's writes into values (modified in place) and
// versions.
//
// Appends extend the list with the built-in append, which may write into the
// list's spare capacity. That is safe because of one invariant every part of
// Trellis keeps: a list in state is never extended in place by anyone who
// did not allocate it (reducers always build a new list), so a slice handed
// out earlier never sees the new items, and its holder never writes into the
// spare capacity.
func Apply(values map[string]any, versions map[string]uint64, cp *Checkpoint) {
	for _, w := range cp.Writes {
		if w.Append {
			cur, _ := values[w.Field].([]any)
			values[w.Field] = append(cur, w.Items...)
		} else {
			values[w.Field] = w.Value
		}
		versions[w.Field] = w.Version
	}
}
