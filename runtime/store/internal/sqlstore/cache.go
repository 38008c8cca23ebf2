package sqlstore

import (
	"container/list"
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/trellisflow/trellis/runtime/store"
)

// Cache keeps the folded newest state of recently used threads, so a
// thread's next run loads it without decoding its whole history. Entries
// are keyed by thread and carry the checkpoint they are at: a load first
// reads the thread's head, then uses the entry when it is current, folds
// in only the missing checkpoints when it is slightly behind (another
// process wrote them), and loads from scratch otherwise.
type Cache struct {
	mu      sync.Mutex
	max     int
	entries map[string]*cached
	// lru orders the entries, the most recently used first
	lru list.List
}

type cached struct {
	thread string
	f      *store.Folder
	// born is the thread's creation time: a thread deleted and created
	// again under the same id by another process is a different thread.
	born int64
	el   *list.Element
}

// MaxCatchUp is how far behind an entry may be and still be caught up.
const MaxCatchUp = 256

// CacheThreads is how many threads a store's cache holds: a server's
// threads in conversation at once (each turn of one the cache no longer
// held loaded the thread's state from its checkpoints again).
const CacheThreads = 4096

// NewCache returns a cache holding up to max threads.
func NewCache(max int) *Cache { return &Cache{max: max, entries: map[string]*cached{}} }

// Seq returns the checkpoint the entry of thread is at, or 0 when there is
// none for the thread created at born.
func (c *Cache) Seq(thread string, born int64) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[thread]; ok && e.born == born {
		return e.f.Seq
	}
	return 0
}

// Holds reports whether there is an entry for thread.
func (c *Cache) Holds(thread string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.entries[thread]
	return ok
}

// Snapshot returns the thread's state when its entry is at seq, after
// folding in tail (the checkpoints after the entry, oldest first).
func (c *Cache) Snapshot(thread string, seq uint64, tail []*store.Checkpoint) (*store.Snapshot, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[thread]
	if !ok {
		return nil, false
	}
	for _, cp := range tail {
		if cp.Parent != e.f.Seq {
			c.drop(e)
			return nil, false
		}
		e.f.Apply(cp)
	}
	if e.f.Seq != seq {
		return nil, false
	}
	c.lru.MoveToFront(e.el)
	return e.f.Snapshot(thread), true
}

// Put caches a freshly loaded state of the thread created at born.
func (c *Cache) Put(thread string, born int64, f *store.Folder) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.put(thread, born, f)
}

// put enters the thread's state, in place of its entry if it has one,
// and drops the least recently used entry when the cache is full.
func (c *Cache) put(thread string, born int64, f *store.Folder) {
	if e, ok := c.entries[thread]; ok {
		c.drop(e)
	}
	if len(c.entries) >= c.max {
		if last := c.lru.Back(); last != nil {
			c.drop(last.Value.(*cached))
		}
	}
	e := &cached{thread: thread, f: f, born: born}
	e.el = c.lru.PushFront(e)
	c.entries[thread] = e
}

// drop takes e out of the cache.
func (c *Cache) drop(e *cached) {
	c.lru.Remove(e.el)
	delete(c.entries, e.thread)
}

// Committed folds a checkpoint this process committed into its thread's
// entry; a new thread gets an entry, a stale one is dropped.
func (c *Cache) Committed(cp *store.Checkpoint) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[cp.Thread]
	switch {
	case cp.Parent == 0:
		f := store.NewFolder()
		f.Apply(cp)
		c.put(cp.Thread, Nanos(cp.Time), f)
	case ok && e.f.Seq == cp.Parent:
		e.f.Apply(cp)
	case ok:
		c.drop(e)
	}
}

// Forget drops a thread's entry.
func (c *Cache) Forget(thread string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[thread]; ok {
		c.drop(e)
	}
}

// ForgetFamily drops the entries of a thread and of its child flows'
// threads.
func (c *Cache) ForgetFamily(thread string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, e := range c.entries {
		if id == thread || strings.HasPrefix(id, thread+store.ChildSep) {
			c.drop(e)
		}
	}
}

// Load returns the state at checkpoint head of the thread created at
// born: from its entry when current, after folding in the checkpoints the
// entry lacks when it is at most MaxCatchUp behind (history lists the
// thread's checkpoints newer than after, up to head, newest first), or
// else from full, whose result is cached.
func (c *Cache) Load(ctx context.Context, thread string, head uint64, born int64,
	history func(ctx context.Context, after, head uint64) ([]*store.Checkpoint, error),
	full func(ctx context.Context) (*store.Folder, error)) (*store.Snapshot, error) {
	if cached := c.Seq(thread, born); cached > 0 && cached <= head && head-cached <= MaxCatchUp {
		var tail []*store.Checkpoint
		if cached < head {
			cps, err := history(ctx, cached, head)
			if err != nil {
				return nil, err
			}
			tail = slices.Clone(cps)
			slices.Reverse(tail)
		}
		if snap, ok := c.Snapshot(thread, head, tail); ok {
			return snap, nil
		}
	}
	f, err := full(ctx)
	if err != nil {
		return nil, err
	}
	c.Put(thread, born, f)
	return f.Snapshot(thread), nil
}

// Rows is what database/sql and pgx result sets have in common.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// ReadPending adds the (node, writes) rows of an unfinished run's pending
// writes to snap.
func ReadPending(snap *store.Snapshot, rows Rows) (*store.Snapshot, error) {
	for rows.Next() {
		var node, writes string
		if err := rows.Scan(&node, &writes); err != nil {
			return nil, err
		}
		if err := AddPending(snap, node, []byte(writes)); err != nil {
			return nil, err
		}
	}
	return snap, rows.Err()
}

// AddPending records one node's pending writes, read from a database row,
// in snap.
func AddPending(snap *store.Snapshot, node string, writes []byte) error {
	ws, err := DecodePending(writes)
	if err != nil {
		return err
	}
	if snap.Pending == nil {
		snap.Pending = map[string][]store.Write{}
	}
	snap.Pending[node] = ws
	return nil
}
