// Package memory is the in-process checkpoint store, for tests and
// short-lived runs. It keeps every checkpoint; a thread's state is folded
// from its chain when it is read. Its address is "memory": each Open
// makes a new, empty store.
package memory

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/trellisflow/trellis/runtime/store"
)

// Store is an in-memory store.Store.
type Store struct {
	mu      sync.Mutex
	threads map[string]*thread
	leases  map[string]lease
	// last is the thread of the latest commit: a run commits every step
	// to one thread, and this spares hashing its name each time.
	lastID string
	last   *thread
	// records hands out the records of checkpoints (see keep).
	records []record
	// catalog holds the served records (see catalog.go), made on first use.
	catOnce sync.Once
	catalog *catalog
	// voice holds the voice sessions and their signing key (see voice.go).
	voice voiceCatalog
	// docs holds what flows remember across threads (see memstore.go).
	docs docs
	// flowVersions holds the versions of flows and of threads (see
	// versions.go).
	flowVersions flowVersions
}

type lease struct {
	owner   string
	expires time.Time
}

type thread struct {
	chain   []*record
	pending map[string][]store.Write // of the superstep after the newest checkpoint
	folder  *store.Folder
	applied int // checkpoints folded so far
	created time.Time
	updated time.Time
}

// New returns an empty store.
func New() *Store { return &Store{threads: map[string]*thread{}, leases: map[string]lease{}} }

func init() {
	store.Register("memory", func(_ context.Context, addr string) (store.Store, error) {
		if addr != "memory" {
			return nil, fmt.Errorf("memory store: the address is just %q, not %q", "memory", addr)
		}
		return New(), nil
	})
}

func (s *Store) thread(id string) (*thread, error) {
	t, ok := s.threads[id]
	if !ok {
		return nil, store.ErrNotFound
	}
	return t, nil
}

// Head implements store.Store.
func (s *Store) Head(_ context.Context, id string) (*store.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, err := s.thread(id)
	if err != nil {
		return nil, err
	}
	if t.folder == nil {
		t.folder = store.NewFolder()
	}
	var cp store.Checkpoint
	for ; t.applied < len(t.chain); t.applied++ {
		t.chain[t.applied].fill(&cp, id)
		t.folder.Apply(&cp)
	}
	snap := t.folder.Snapshot(id)
	if len(snap.Next) > 0 && len(t.pending) > 0 {
		snap.Pending = map[string][]store.Write{}
		for k, v := range t.pending {
			snap.Pending[k] = v
		}
	}
	return snap, nil
}

// PutPending implements store.Store.
func (s *Store) PutPending(_ context.Context, id string, parent uint64, node string, writes []store.Write, owner string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, err := s.thread(id)
	if err != nil {
		return err
	}
	if l, ok := s.leases[id]; owner != "" && (!ok || l.owner != owner) {
		return store.ErrLeased
	}
	if t.chain[len(t.chain)-1].Seq != parent {
		return store.ErrConflict
	}
	if t.pending == nil {
		t.pending = map[string][]store.Write{}
	}
	t.pending[node] = writes
	return nil
}

// Acquire implements store.Store.
func (s *Store) Acquire(_ context.Context, id, owner string, ttl time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acquire(id, owner, ttl)
}

// acquire is Acquire, with s.mu held.
func (s *Store) acquire(id, owner string, ttl time.Duration) error {
	now := time.Now()
	if l, ok := s.leases[id]; ok && l.owner != owner && now.Before(l.expires) {
		return &store.LeasedError{Owner: l.owner, Until: l.expires}
	}
	s.leases[id] = lease{owner: owner, expires: now.Add(ttl)}
	return nil
}

// Release implements store.Store.
func (s *Store) Release(_ context.Context, id, owner string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l, ok := s.leases[id]; ok && l.owner == owner {
		delete(s.leases, id)
	}
	return nil
}

// StateAt implements store.Store.
func (s *Store) StateAt(_ context.Context, id string, seq uint64) (*store.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, err := s.thread(id)
	if err != nil {
		return nil, err
	}
	i, found := slices.BinarySearchFunc(t.chain, seq, func(rec *record, seq uint64) int {
		return int(rec.Seq) - int(seq)
	})
	if !found {
		return nil, store.ErrNotFound
	}
	return replay(id, t.chain[:i+1]), nil
}

// Commit implements store.Store.
func (s *Store) Commit(ctx context.Context, cp *store.Checkpoint) error {
	if len(cp.Before) > 0 {
		return s.commitChain(ctx, cp)
	}
	// the chain keeps the checkpoint, not its events or documents
	ea, puts := cp.Events, cp.Memory
	for _, p := range puts {
		if err := store.CheckMemoryKey(p.Item.Namespace, p.Item.Key); err != nil {
			return err
		}
		if err := store.CheckMemoryValue(p.Item.Value); err != nil {
			return err
		}
	}
	cp.Events, cp.Memory = nil, nil
	if err := s.commit(cp); err != nil {
		cp.Events, cp.Memory = ea, puts
		return err
	}
	for _, p := range puts {
		if err := s.PutMemory(ctx, p.Tenant, p.Item); err != nil {
			return err
		}
	}
	if ea == nil {
		return nil
	}
	if len(ea.Events) > 0 {
		err := s.AppendEvents(ctx, ea.Run, ea.Holder, ea.Events)
		ea.Refused = errors.Is(err, store.ErrRunChanged) || errors.Is(err, store.ErrExists)
		if err != nil && !ea.Refused {
			return err
		}
	}
	if end := ea.End; end != nil {
		end.Applied = false
		if ea.Refused {
			return nil
		}
		err := s.UpdateRun(ctx, end.Record, end.Expect, end.Events)
		if err != nil && !errors.Is(err, store.ErrRunChanged) && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		end.Applied = err == nil
	}
	return nil
}

// commitChain commits cp.Before and cp, all or none: checked first,
// then appended under the lock at once; the documents and events follow
// in the chain's order, as Commit writes them after a checkpoint.
func (s *Store) commitChain(ctx context.Context, cp *store.Checkpoint) error {
	before := cp.Before
	link := func(i int) *store.Checkpoint {
		if i < len(before) {
			return before[i]
		}
		return cp
	}
	n := len(before) + 1
	carries := false // documents or events go with the chain
	for i := range n {
		c := link(i)
		if i > 0 && (c.Thread != before[0].Thread || c.Parent != link(i-1).Seq) {
			return store.ErrConflict
		}
		for _, p := range c.Memory {
			if err := store.CheckMemoryKey(p.Item.Namespace, p.Item.Key); err != nil {
				return err
			}
			if err := store.CheckMemoryValue(p.Item.Value); err != nil {
				return err
			}
		}
		carries = carries || len(c.Memory) > 0 || c.Events != nil
	}
	if carries {
		// the run holding the thread's lease is its only writer: the
		// first's checks hold for the whole chain
		if err := s.checkHead(before[0]); err != nil {
			return err
		}
		cp.Before = nil
		for _, c := range before {
			if err := s.Commit(ctx, c); err != nil {
				cp.Before = before
				return err
			}
		}
		return s.Commit(ctx, cp)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cp.Before = nil
	for i := range n {
		if err := s.commitLocked(link(i)); err != nil {
			// only the first can fail: the links were checked above
			cp.Before = before
			return err
		}
	}
	return nil
}

// checkHead reports whether cp can be committed as the thread's head
// stands now (see commitLocked).
func (s *Store) checkHead(cp *store.Checkpoint) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.threads[cp.Thread]
	return follows(t, ok, cp)
}

// follows reports whether cp can follow the thread t (ok: it exists).
func follows(t *thread, ok bool, cp *store.Checkpoint) error {
	switch {
	case !ok && cp.Parent != 0:
		return store.ErrNotFound
	case ok && cp.Parent == 0:
		return store.ErrExists
	case ok && t.chain[len(t.chain)-1].Seq != cp.Parent:
		return store.ErrConflict
	}
	return nil
}

func (s *Store) commit(cp *store.Checkpoint) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.commitLocked(cp)
}

// commitLocked is commit, with s.mu held.
func (s *Store) commitLocked(cp *store.Checkpoint) error {
	t, ok := s.last, s.last != nil && s.lastID == cp.Thread
	if !ok {
		t, ok = s.threads[cp.Thread]
	}
	if err := follows(t, ok, cp); err != nil {
		return err
	}
	if !ok {
		t = &thread{chain: make([]*record, 0, 16), created: cp.Time}
		s.threads[cp.Thread] = t
	}
	s.lastID, s.last = cp.Thread, t
	s.keep(t, cp)
	t.updated = cp.Time
	t.pending = nil
	if cp.Release == "" {
		return nil // most checkpoints release nothing: no lookup
	}
	if l, ok := s.leases[cp.Thread]; ok && l.owner == cp.Release {
		delete(s.leases, cp.Thread)
	}
	return nil
}

// History implements store.Store.
func (s *Store) History(_ context.Context, id string, opts store.HistoryOptions) ([]*store.Checkpoint, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, err := s.thread(id)
	if err != nil {
		return nil, err
	}
	// each call hands back checkpoints of its own, built from the records
	var out []*store.Checkpoint
	var cp store.Checkpoint
	for i := len(t.chain) - 1; i >= 0; i-- {
		if t.chain[i].fill(&cp, id); opts.Keep(&cp) {
			c := cp
			out = append(out, &c)
			if opts.Limit > 0 && len(out) == opts.Limit {
				break
			}
		}
	}
	return out, nil
}

// Threads implements store.Store.
func (s *Store) Threads(_ context.Context, opts store.ThreadOptions) ([]store.ThreadInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []store.ThreadInfo
	for id, t := range s.threads {
		ti := store.ThreadInfo{ID: id, Head: t.chain[len(t.chain)-1].Seq, Created: t.created, Updated: t.updated}
		if opts.Listed(ti) {
			out = append(out, ti)
		}
	}
	slices.SortFunc(out, func(a, b store.ThreadInfo) int {
		if c := b.Updated.Compare(a.Updated); c != 0 {
			return c
		}
		if a.ID < b.ID {
			return -1
		}
		return 1
	})
	if opts.Limit > 0 && len(out) > opts.Limit {
		out = out[:opts.Limit]
	}
	return out, nil
}

// Delete implements store.Store.
func (s *Store) Delete(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.active(id)) > 0 {
		return store.ErrBusy
	}
	_, found := s.threads[id]
	for tid := range s.threads {
		if tid == id || strings.HasPrefix(tid, id+store.ChildSep) {
			delete(s.threads, tid)
			delete(s.leases, tid)
		}
	}
	delete(s.leases, id)
	if s.lastID == id || strings.HasPrefix(s.lastID, id+store.ChildSep) {
		s.lastID, s.last = "", nil
	}
	if c.deleteRecords(id) {
		found = true
	}
	s.voice.forget(id)
	s.flowVersions.forget(id)
	if !found {
		return store.ErrNotFound
	}
	return nil
}

// Prune implements store.Store.
func (s *Store) Prune(_ context.Context, id string, opts store.PruneOptions) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, err := s.thread(id)
	if err != nil {
		return 0, err
	}
	keep := max(opts.Keep, 1)
	if len(t.chain) <= keep+1 {
		return 0, nil
	}
	cut := len(t.chain) - keep // chain[:cut] folds into the base
	baseState := replay(id, t.chain[:cut])
	last := t.chain[cut-1]
	base := &record{Seq: last.Seq, Time: last.Time, Writes: store.BaseWrites(baseState), more: &recordMore{source: store.SourceBase}}
	t.chain = append([]*record{base}, t.chain[cut:]...)
	t.folder, t.applied = nil, 0
	if opts.Progress != nil {
		opts.Progress(cut-1, cut-1)
	}
	return cut - 1, nil
}

// Close implements store.Store.
func (s *Store) Close() error { return nil }

var _ store.Store = (*Store)(nil)
