package memory

import (
	"cmp"
	"context"
	"maps"
	"math"
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
	// packs holds the packed events of the runs PackEvents packed (a
	// run with none kept has an empty one).
	packs   map[string][]store.EventRecord
	keys    map[string]*store.KeyRecord
	servers map[string]time.Time
	cache   map[string]cacheEntry
	// deliveries and schedules are the webhook deliveries (with their
	// attempts) and the schedules (see hooks.go).
	deliveries map[string]*delivery
	schedules  map[string]*store.Schedule
	// requests are the idempotency keys' requests, by tenant and key
	// (see requests.go).
	requests map[[2]string]*store.RequestRecord
}

type cacheEntry struct {
	value            []byte
	created, expires time.Time
}

func (s *Store) cat() *catalog {
	s.catOnce.Do(func() {
		s.catalog = &catalog{threads: map[string]*store.ThreadRecord{}, runs: map[string]*store.RunRecord{},
			events: map[string][]store.EventRecord{}, packs: map[string][]store.EventRecord{}, keys: map[string]*store.KeyRecord{}, servers: map[string]time.Time{},
			cache: map[string]cacheEntry{}, deliveries: map[string]*delivery{}, schedules: map[string]*store.Schedule{},
			requests: map[[2]string]*store.RequestRecord{}}
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
		if q.MatchThread(t) && !t.Deleting {
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

// MarkThreadDeleting implements store.Catalog.
func (s *Store) MarkThreadDeleting(_ context.Context, tenant, id string, deleting bool) error {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.threads[id]
	if !ok || t.Tenant != tenant {
		return store.ErrNotFound
	}
	if deleting && len(c.active(id)) > 0 {
		return store.ErrBusy
	}
	t.Deleting = deleting
	return nil
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
	if len(c.active(id)) > 0 {
		return store.ErrBusy
	}
	c.deleteRecords(id)
	s.voice.forget(id)
	s.flowVersions.forget(id)
	return nil
}

// deleteRecords deletes a thread's record and its runs with their
// events and webhook deliveries, and the schedules that start runs on
// it, and reports whether it had a record. The caller holds c.mu.
func (c *catalog) deleteRecords(thread string) bool {
	_, had := c.threads[thread]
	delete(c.threads, thread)
	for rid, r := range c.runs {
		if r.Thread == thread {
			delete(c.runs, rid)
			delete(c.events, rid)
			delete(c.packs, rid)
		}
	}
	for id, d := range c.deliveries {
		if d.Thread == thread {
			delete(c.deliveries, id)
		}
	}
	for id, sc := range c.schedules {
		if sc.Thread == thread {
			delete(c.schedules, id)
		}
	}
	for k, r := range c.requests {
		if r.Thread == thread {
			delete(c.requests, k)
		}
	}
	return had
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
func (s *Store) UpdateRun(_ context.Context, r *store.RunRecord, expect store.RunState, evs []store.EventRecord) error {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	old, ok := c.runs[r.ID]
	if !ok {
		return store.ErrNotFound
	}
	if old.State() != expect {
		return store.ErrRunChanged
	}
	if err := c.appendEvents(r.ID, evs); err != nil {
		return err
	}
	old.Status, old.Error, old.Checkpoint, old.Started, old.Finished = r.Status, r.Error, r.Checkpoint, r.Started, r.Finished
	old.Resume, old.Server, old.Stop, old.FlowVersion, old.WriteID = r.Resume, r.Server, r.Stop, r.FlowVersion, r.WriteID
	return nil
}

// active lists a thread's queued and running runs. The caller holds c.mu.
func (c *catalog) active(thread string) []*store.RunRecord {
	var out []*store.RunRecord
	for _, r := range c.runs {
		if r.Thread == thread && (r.Status == store.RunQueued || r.Status == store.RunRunning) {
			out = append(out, r)
		}
	}
	return out
}

// EnqueueRun implements store.Catalog.
func (s *Store) EnqueueRun(_ context.Context, r *store.RunRecord, policy store.BusyPolicy) (bool, error) {
	if r.Lease != nil {
		// the leases' lock first, as Delete takes them
		s.mu.Lock()
		defer s.mu.Unlock()
	}
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.runs[r.ID]; ok {
		return false, store.ErrExists
	}
	if t, ok := c.threads[r.Thread]; !ok || t.Tenant != r.Tenant || t.Deleting {
		return false, store.ErrNotFound
	}
	active := c.active(r.Thread)
	if len(active) > 0 {
		switch policy {
		case store.BusyReject:
			return true, store.ErrBusy
		case store.BusyInterrupt:
			for _, a := range active {
				if a.Status == store.RunQueued {
					a.Status, a.Error, a.Finished = store.RunCancelled, "interrupted by run "+r.ID, r.Created
				} else if a.Stop == "" {
					a.Stop = store.StopInterrupt
				}
			}
		}
	}
	// a thread's runs are claimed in the order they were queued
	for _, o := range c.runs {
		if o.Thread == r.Thread && !o.Created.Before(r.Created) {
			r.Created = o.Created.Add(time.Nanosecond)
		}
	}
	cp := *r
	cp.Status, cp.Started = store.RunQueued, time.Time{}
	if len(active) > 0 || cp.Server == "" {
		cp.Server = ""
	} else {
		cp.Status, cp.Started = store.RunRunning, cp.Created
		if l := cp.Lease; l != nil {
			l.Taken = s.acquire(cp.Thread, l.Owner, l.TTL) == nil
		}
	}
	stored := cp
	stored.Lease = nil
	c.runs[r.ID] = &stored
	*r = cp
	return len(active) > 0, nil
}

// ClaimRun implements store.Catalog.
func (s *Store) ClaimRun(_ context.Context, server, id string, now time.Time) (*store.RunRecord, error) {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	var best *store.RunRecord
	running := map[string]bool{}
	first := map[string]*store.RunRecord{}
	for _, r := range c.runs {
		switch r.Status {
		case store.RunRunning:
			running[r.Thread] = true
		case store.RunQueued:
			if f := first[r.Thread]; f == nil || newer(f.Created, r.Created, f.ID, r.ID) < 0 {
				first[r.Thread] = r
			}
		}
	}
	for thread, r := range first {
		if id != "" && r.ID != id {
			continue
		}
		if !running[thread] && (best == nil || newer(best.Created, r.Created, best.ID, r.ID) < 0) {
			best = r
		}
	}
	if best == nil {
		return nil, store.ErrNotFound
	}
	best.Status, best.Server, best.Started = store.RunRunning, server, now
	cp := *best
	return &cp, nil
}

// RequestStop implements store.Catalog.
func (s *Store) RequestStop(_ context.Context, tenant, id string, why store.StopReason) (*store.RunRecord, error) {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.runs[id]
	if !ok || r.Tenant != tenant {
		return nil, store.ErrNotFound
	}
	switch r.Status {
	case store.RunQueued:
		r.Status, r.Error, r.Finished = store.RunCancelled, why.Message(), time.Now().UTC()
	case store.RunRunning:
		r.Stop = why
	}
	cp := *r
	return &cp, nil
}

// ServerRuns implements store.Catalog.
func (s *Store) ServerRuns(_ context.Context, server string) ([]*store.RunRecord, error) {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*store.RunRecord
	for _, r := range c.runs {
		if r.Server == server && r.Status == store.RunRunning {
			cp := *r
			out = append(out, &cp)
		}
	}
	return out, nil
}

// QueueDepth implements store.Catalog.
func (s *Store) QueueDepth(context.Context) (int, error) {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, r := range c.runs {
		if r.Status == store.RunQueued {
			n++
		}
	}
	return n, nil
}

// Beat implements store.Catalog: the memory store is one process, with
// one clock.
func (s *Store) Beat(_ context.Context, server string) error {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.servers[server] = time.Now()
	return nil
}

// AdoptRun implements store.Catalog.
func (s *Store) AdoptRun(_ context.Context, server string, deadAfter time.Duration) (*store.RunRecord, error) {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	staleBefore := time.Now().Add(-deadAfter)
	for _, r := range c.runs {
		if r.Status != store.RunRunning || r.Server == server {
			continue
		}
		if seen, ok := c.servers[r.Server]; ok && !seen.Before(staleBefore) {
			continue
		}
		r.Server = server
		cp := *r
		return &cp, nil
	}
	return nil, store.ErrNotFound
}

// DeleteRun implements store.Catalog.
func (s *Store) DeleteRun(_ context.Context, id string, expect store.RunState) error {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.runs[id]
	if !ok {
		return store.ErrNotFound
	}
	if r.State() != expect {
		return store.ErrRunChanged
	}
	delete(c.runs, id)
	delete(c.events, id)
	delete(c.packs, id)
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
func (s *Store) Runs(_ context.Context, q store.RunQuery) ([]*store.RunRecord, error) {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	var before *store.RunRecord
	if q.Before != "" {
		b, ok := c.runs[q.Before]
		if !ok || b.Tenant != q.Tenant || b.Thread != q.Thread {
			return nil, store.ErrNotFound
		}
		before = b
	}
	var out []*store.RunRecord
	for _, r := range c.runs {
		if r.Tenant == q.Tenant && r.Thread == q.Thread && (before == nil || newer(before.Created, r.Created, before.ID, r.ID) < 0) {
			cp := *r
			out = append(out, &cp)
		}
	}
	slices.SortFunc(out, func(a, b *store.RunRecord) int { return newer(a.Created, b.Created, a.ID, b.ID) })
	if limit := store.PageLimit(q.Limit); len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// AppendEvents implements store.Catalog.
func (s *Store) AppendEvents(_ context.Context, run, holder string, add []store.EventRecord) error {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	if holder != "" {
		if r, ok := c.runs[run]; !ok || r.Status != store.RunRunning || r.Server != holder {
			return store.ErrRunChanged
		}
	}
	return c.appendEvents(run, add)
}

// appendEvents records a run's events, all or none. The caller holds
// c.mu.
func (c *catalog) appendEvents(run string, add []store.EventRecord) error {
	evs := c.events[run]
	last := int64(0)
	if n := len(evs); n > 0 {
		last = evs[n-1].Seq
	} else if n := len(c.packs[run]); n > 0 {
		last = c.packs[run][n-1].Seq
	}
	for _, ev := range add {
		if ev.Seq <= last {
			return store.ErrExists
		}
		last = ev.Seq
	}
	for _, ev := range add {
		evs = append(evs, store.EventRecord{Seq: ev.Seq, Data: slices.Clone(ev.Data)})
	}
	c.events[run] = evs
	return nil
}

// Events implements store.Catalog.
func (s *Store) Events(_ context.Context, run string, after int64, limit int) ([]store.EventRecord, error) {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	evs := c.all(run)
	i, _ := slices.BinarySearchFunc(evs, after+1, func(e store.EventRecord, seq int64) int { return cmp.Compare(e.Seq, seq) })
	evs = evs[i:]
	if limit = store.PageLimit(limit); len(evs) > limit {
		evs = evs[:limit]
	}
	out := make([]store.EventRecord, len(evs))
	for i, e := range evs {
		out[i] = store.EventRecord{Seq: e.Seq, Data: slices.Clone(e.Data)}
	}
	return out, nil
}

// RunsEvents implements store.Catalog.
func (s *Store) RunsEvents(_ context.Context, runs []string) (map[string][]store.EventRecord, error) {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string][]store.EventRecord{}
	for _, run := range runs {
		for _, e := range c.all(run) {
			out[run] = append(out[run], store.EventRecord{Seq: e.Seq, Data: slices.Clone(e.Data)})
		}
	}
	return out, nil
}

// LastEvent implements store.Catalog.
func (s *Store) LastEvent(_ context.Context, run string) (*store.EventRecord, error) {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	evs := c.all(run)
	if len(evs) == 0 {
		return nil, store.ErrNotFound
	}
	last := evs[len(evs)-1]
	return &store.EventRecord{Seq: last.Seq, Data: slices.Clone(last.Data)}, nil
}

// all is a run's events, packed and not, in order. The caller holds
// c.mu.
func (c *catalog) all(run string) []store.EventRecord {
	if p := c.packs[run]; len(p) > 0 {
		return append(slices.Clip(p), c.events[run]...)
	}
	return c.events[run]
}

// RunsToPack implements store.Catalog.
func (s *Store) RunsToPack(_ context.Context, before time.Time, limit int) ([]string, error) {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	var due []*store.RunRecord
	for id, r := range c.runs {
		if _, packed := c.packs[id]; !packed && r.Status.Done() && !r.Finished.IsZero() && r.Finished.Before(before) {
			due = append(due, r)
		}
	}
	slices.SortFunc(due, func(a, b *store.RunRecord) int {
		return cmp.Or(a.Finished.Compare(b.Finished), strings.Compare(a.ID, b.ID))
	})
	out := make([]string, 0, min(len(due), limit))
	for _, r := range due[:min(len(due), limit)] {
		out = append(out, r.ID)
	}
	return out, nil
}

// PackBacklog implements store.Backlog.
func (s *Store) PackBacklog(ctx context.Context, before time.Time) (int, error) {
	ids, err := s.RunsToPack(ctx, before, math.MaxInt)
	return len(ids), err
}

// IdleBacklog implements store.Backlog.
func (s *Store) IdleBacklog(ctx context.Context, cutoff time.Time) (int, error) {
	ts, err := s.Threads(ctx, store.ThreadOptions{IdleSince: cutoff, Roots: true})
	return len(ts), err
}

var _ store.Backlog = (*Store)(nil)

// PackEvents implements store.Catalog: the memory store keeps the events
// kept as they are.
func (s *Store) PackEvents(_ context.Context, packs []store.EventPack) (int, error) {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, p := range packs {
		r, ok := c.runs[p.Run]
		if _, packed := c.packs[p.Run]; !ok || packed || !r.Status.Done() {
			continue
		}
		kept := make([]store.EventRecord, len(p.Events))
		for i, e := range p.Events {
			kept[i] = store.EventRecord{Seq: e.Seq, Data: slices.Clone(e.Data)}
		}
		c.packs[p.Run] = kept
		evs := c.events[p.Run]
		i, _ := slices.BinarySearchFunc(evs, p.Through+1, func(e store.EventRecord, seq int64) int { return cmp.Compare(e.Seq, seq) })
		if rest := evs[i:]; len(rest) > 0 {
			c.events[p.Run] = slices.Clone(rest)
		} else {
			delete(c.events, p.Run)
		}
		n++
	}
	return n, nil
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

// RenewKey implements store.Catalog.
func (s *Store) RenewKey(_ context.Context, id string, until time.Time) error {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	k, ok := c.keys[id]
	if !ok || !k.Revoked.IsZero() || k.Expires.IsZero() {
		return store.ErrNotFound
	}
	k.Expires = until
	return nil
}

// SweepKeys implements store.Catalog.
func (s *Store) SweepKeys(_ context.Context, deadAfter time.Duration) (int, error) {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	n := 0
	for _, k := range c.keys {
		if !k.Revoked.IsZero() || k.Owner == "" {
			continue
		}
		seen, ok := c.servers[k.Owner]
		if !k.Expires.IsZero() && k.Expires.Before(now) || !ok || seen.Before(now.Add(-deadAfter)) {
			k.Revoked = now
			n++
		}
	}
	return n, nil
}

var _ store.Catalog = (*Store)(nil)

// CacheGet implements store.Cache.
func (s *Store) CacheGet(_ context.Context, key string, now time.Time) ([]byte, bool, error) {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.cache[key]
	if !ok || !e.expires.IsZero() && !e.expires.After(now) {
		return nil, false, nil
	}
	return slices.Clone(e.value), true, nil
}

// CachePut implements store.Cache.
func (s *Store) CachePut(_ context.Context, key string, value []byte, now, expires time.Time) error {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cache[key] = cacheEntry{value: slices.Clone(value), created: now, expires: expires}
	if len(c.cache) <= store.CacheLimit {
		return nil
	}
	for k, e := range c.cache {
		if !e.expires.IsZero() && !e.expires.After(now) {
			delete(c.cache, k)
		}
	}
	for len(c.cache) > store.CacheLimit {
		oldest, first := "", true
		for k, e := range c.cache {
			if first || e.created.Before(c.cache[oldest].created) || e.created.Equal(c.cache[oldest].created) && k < oldest {
				oldest, first = k, false
			}
		}
		delete(c.cache, oldest)
	}
	return nil
}

var _ store.Cache = (*Store)(nil)
