// Package memory is the in-process checkpoint store, for tests and
// short-lived runs. It keeps every checkpoint and the newest full state of
// each thread.
package memory

import (
	"context"
	"maps"
	"slices"
	"sync"

	"github.com/trellisflow/trellis/runtime/store"
)

// Store is an in-memory store.Store.
type Store struct {
	mu      sync.Mutex
	threads map[string]*thread
}

// thread keeps the chain; its full state is materialised on demand, from
// the last materialised checkpoint on, so a commit is an append.
type thread struct {
	chain    []*store.Checkpoint
	head     map[string]any
	versions map[string]uint64
	applied  int // checkpoints folded into head
}

// New returns an empty store.
func New() *Store { return &Store{threads: map[string]*thread{}} }

// Head implements store.Store.
func (s *Store) Head(_ context.Context, id string) (*store.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.threads[id]
	if !ok {
		return nil, store.ErrNotFound
	}
	if t.head == nil {
		t.head, t.versions = map[string]any{}, map[string]uint64{}
	}
	for ; t.applied < len(t.chain); t.applied++ {
		store.Apply(t.head, t.versions, t.chain[t.applied])
	}
	last := t.chain[len(t.chain)-1]
	return &store.Snapshot{Thread: id, Seq: last.Seq, Values: maps.Clone(t.head), Versions: maps.Clone(t.versions), Next: last.Next}, nil
}

// Commit implements store.Store.
func (s *Store) Commit(_ context.Context, cp *store.Checkpoint) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.threads[cp.Thread]
	switch {
	case !ok && cp.Parent != 0:
		return store.ErrNotFound
	case ok && cp.Parent == 0:
		return store.ErrExists
	case ok && t.chain[len(t.chain)-1].Seq != cp.Parent:
		return store.ErrConflict
	}
	if !ok {
		t = &thread{chain: make([]*store.Checkpoint, 0, 16)}
		s.threads[cp.Thread] = t
	}
	t.chain = append(t.chain, cp)
	return nil
}

// History implements store.Store.
func (s *Store) History(_ context.Context, id string) ([]*store.Checkpoint, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.threads[id]
	if !ok {
		return nil, store.ErrNotFound
	}
	out := slices.Clone(t.chain)
	slices.Reverse(out)
	return out, nil
}

var _ store.Store = (*Store)(nil)
