package memory

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/trellisflow/trellis/runtime/store"
)

// catalog is the memory store's store.Catalog.
type catalog struct {
	mu      sync.Mutex
	threads map[string]*store.ThreadRecord
	runs    map[string]*store.RunRecord
	events  map[string][]store.EventRecord
	keys    map[string]*store.KeyRecord
}

func (s *Store) cat() *catalog {
	s.catOnce.Do(func() {
		s.catalog = &catalog{threads: map[string]*store.ThreadRecord{}, runs: map[string]*store.RunRecord{},
			events: map[string][]store.EventRecord{}, keys: map[string]*store.KeyRecord{}}
	})
	return s.catalog
}

// newer orders records newest first, then by id, as the SQL stores do.
func newer(ca, cb time.Time, ida, idb string) int {
	if c := cb.Compare(ca); c != 0 {
		return c
	}
	return strings.Compare(idb, ida)
}

// CreateThread implements store.Catalog.
func (s *Store) CreateThread(_ context.Context, t *store.ThreadRecord) error {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.threads[t.ID]; ok {
		return store.ErrExists
	}
	cp := *t
	cp.Metadata = maps.Clone(t.Metadata)
	c.threads[t.ID] = &cp
	return nil
}

// Thread implements store.Catalog.
func (s *Store) Thread(_ context.Context, tenant, id string) (*store.ThreadRecord, error) {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.threads[id]
	if !ok || t.Tenant != tenant {
		return nil, store.ErrNotFound
	}
	cp := *t
	cp.Metadata = maps.Clone(t.Metadata)
	return &cp, nil
}

// ListThreads implements store.Catalog.
func (s *Store) ListThreads(_ context.Context, q store.ThreadQuery) ([]*store.ThreadRecord, error) {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	var all []*store.ThreadRecord
	for _, t := range c.threads {
		if q.MatchThread(t) {
			all = append(all, t)
		}
	}
	slices.SortFunc(all, func(a, b *store.ThreadRecord) int { return newer(a.Created, b.Created, a.ID, b.ID) })
	if q.After != "" {
		after, ok := c.threads[q.After]
		if !ok || after.Tenant != q.Tenant {
			return nil, store.ErrNotFound
		}
		i := 0
		for i < len(all) && newer(after.Created, all[i].Created, after.ID, all[i].ID) >= 0 {
			i++
		}
		all = all[i:]
	}
	if q.Limit > 0 && len(all) > q.Limit {
		all = all[:q.Limit]
	}
	out := make([]*store.ThreadRecord, len(all))
	for i, t := range all {
		cp := *t
		cp.Metadata = maps.Clone(t.Metadata)
		out[i] = &cp
	}
	return out, nil
}

// DeleteThread implements store.Catalog.
func (s *Store) DeleteThread(_ context.Context, tenant, id string) error {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.threads[id]
	if !ok || t.Tenant != tenant {
		return store.ErrNotFound
	}
	delete(c.threads, id)
	for rid, r := range c.runs {
		if r.Thread == id {
			delete(c.runs, rid)
			delete(c.events, rid)
		}
	}
	return nil
}

// CreateRun implements store.Catalog.
func (s *Store) CreateRun(_ context.Context, r *store.RunRecord) error {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.runs[r.ID]; ok {
		return store.ErrExists
	}
	cp := *r
	c.runs[r.ID] = &cp
	return nil
}

// UpdateRun implements store.Catalog.
func (s *Store) UpdateRun(_ context.Context, r *store.RunRecord) error {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	old, ok := c.runs[r.ID]
	if !ok {
		return store.ErrNotFound
	}
	old.Status, old.Error, old.Checkpoint, old.Started, old.Finished = r.Status, r.Error, r.Checkpoint, r.Started, r.Finished
	return nil
}

// Run implements store.Catalog.
func (s *Store) Run(_ context.Context, tenant, id string) (*store.RunRecord, error) {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.runs[id]
	if !ok || r.Tenant != tenant {
		return nil, store.ErrNotFound
	}
	cp := *r
	return &cp, nil
}

// Runs implements store.Catalog.
func (s *Store) Runs(_ context.Context, tenant, thread string, limit int) ([]*store.RunRecord, error) {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*store.RunRecord
	for _, r := range c.runs {
		if r.Tenant == tenant && r.Thread == thread {
			cp := *r
			out = append(out, &cp)
		}
	}
	slices.SortFunc(out, func(a, b *store.RunRecord) int { return newer(a.Created, b.Created, a.ID, b.ID) })
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// AppendEvent implements store.Catalog.
func (s *Store) AppendEvent(_ context.Context, run string, seq int64, data []byte) error {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	evs := c.events[run]
	if n := len(evs); n > 0 && evs[n-1].Seq >= seq {
		return store.ErrExists
	}
	c.events[run] = append(evs, store.EventRecord{Seq: seq, Data: slices.Clone(data)})
	return nil
}

// Events implements store.Catalog.
func (s *Store) Events(_ context.Context, run string, after int64) ([]store.EventRecord, error) {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	evs := c.events[run]
	i, _ := slices.BinarySearchFunc(evs, after+1, func(e store.EventRecord, seq int64) int { return cmp.Compare(e.Seq, seq) })
	return slices.Clone(evs[i:]), nil
}

// CreateKey implements store.Catalog.
func (s *Store) CreateKey(_ context.Context, k *store.KeyRecord) error {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, o := range c.keys {
		if o.ID == k.ID || o.Hash == k.Hash {
			return store.ErrExists
		}
	}
	cp := *k
	c.keys[k.ID] = &cp
	return nil
}

// KeyByHash implements store.Catalog.
func (s *Store) KeyByHash(_ context.Context, hash string) (*store.KeyRecord, error) {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range c.keys {
		if k.Hash == hash {
			cp := *k
			return &cp, nil
		}
	}
	return nil, store.ErrNotFound
}

// Keys implements store.Catalog.
func (s *Store) Keys(_ context.Context, tenant string) ([]*store.KeyRecord, error) {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*store.KeyRecord
	for _, k := range c.keys {
		if tenant == "" || k.Tenant == tenant {
			cp := *k
			out = append(out, &cp)
		}
	}
	slices.SortFunc(out, func(a, b *store.KeyRecord) int { return newer(a.Created, b.Created, a.ID, b.ID) })
	return out, nil
}

// RevokeKey implements store.Catalog.
func (s *Store) RevokeKey(_ context.Context, id string, at time.Time) error {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	k, ok := c.keys[id]
	if !ok {
		return store.ErrNotFound
	}
	if k.Revoked.IsZero() {
		k.Revoked = at
	}
	return nil
}

var _ store.Catalog = (*Store)(nil)
