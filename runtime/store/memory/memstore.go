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

// docs is the memory store's store.Memory: each tenant's documents by
// encoded namespace and key.
type docs struct {
	mu     sync.Mutex
	byTent map[string]map[docKey]*doc
}

type docKey struct{ ns, key string }

type doc struct {
	item  store.MemoryItem
	words map[string]int // the indexed words and how often each occurs
}

func (d *doc) live(now time.Time) bool { return d.item.Expires.IsZero() || d.item.Expires.After(now) }

func cloneItem(it *store.MemoryItem) *store.MemoryItem {
	cp := *it
	cp.Namespace = slices.Clone(it.Namespace)
	cp.Value = slices.Clone(it.Value)
	return &cp
}

// PutMemory implements store.Memory.
func (s *Store) PutMemory(_ context.Context, tenant string, it *store.MemoryItem) error {
	if err := store.CheckMemoryKey(it.Namespace, it.Key); err != nil {
		return err
	}
	if err := store.CheckMemoryValue(it.Value); err != nil {
		return err
	}
	d := &doc{item: *cloneItem(it), words: map[string]int{}}
	d.item.Score, d.item.Unindexed = 0, false
	for _, w := range strings.Fields(it.IndexedText()) {
		d.words[w]++
	}
	m := &s.docs
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.byTent == nil {
		m.byTent = map[string]map[docKey]*doc{}
	}
	for _, t := range m.byTent {
		for k, old := range t {
			if !old.live(it.Updated) {
				delete(t, k)
			}
		}
	}
	t := m.byTent[tenant]
	if t == nil {
		t = map[docKey]*doc{}
		m.byTent[tenant] = t
	}
	t[docKey{store.EncodeNamespace(it.Namespace), it.Key}] = d
	return nil
}

// GetMemory implements store.Memory.
func (s *Store) GetMemory(_ context.Context, tenant string, ns []string, key string, now time.Time) (*store.MemoryItem, error) {
	if err := store.CheckMemoryKey(ns, key); err != nil {
		return nil, err
	}
	m := &s.docs
	m.mu.Lock()
	defer m.mu.Unlock()
	d, ok := m.byTent[tenant][docKey{store.EncodeNamespace(ns), key}]
	if !ok || !d.live(now) {
		return nil, store.ErrNotFound
	}
	return cloneItem(&d.item), nil
}

// DeleteMemory implements store.Memory.
func (s *Store) DeleteMemory(_ context.Context, tenant string, ns []string, key string) error {
	if err := store.CheckMemoryKey(ns, key); err != nil {
		return err
	}
	m := &s.docs
	m.mu.Lock()
	defer m.mu.Unlock()
	k := docKey{store.EncodeNamespace(ns), key}
	if _, ok := m.byTent[tenant][k]; !ok {
		return store.ErrNotFound
	}
	delete(m.byTent[tenant], k)
	return nil
}

// under lists the tenant's live documents under q's prefix.
func (m *docs) under(tenant string, q store.MemoryQuery) []*doc {
	lo, hi := store.NamespaceRange(q.Prefix)
	var out []*doc
	for k, d := range m.byTent[tenant] {
		if d.live(q.Now) && (lo == "" || k.ns >= lo && k.ns < hi) {
			out = append(out, d)
		}
	}
	return out
}

// SearchMemory implements store.Memory. A document's score is how often
// the query's words occur in it.
func (s *Store) SearchMemory(_ context.Context, tenant string, q store.MemoryQuery) ([]*store.MemoryItem, error) {
	if err := store.CheckMemoryPrefix(q.Prefix); err != nil {
		return nil, err
	}
	words := store.MemoryWords(q.Text)
	m := &s.docs
	m.mu.Lock()
	var found []*store.MemoryItem
	for _, d := range m.under(tenant, q) {
		score := 0
		for _, w := range words {
			n := d.words[w]
			if n == 0 {
				score = -1
				break
			}
			score += n
		}
		if score < 0 {
			continue
		}
		it := cloneItem(&d.item)
		it.Score = float64(score)
		found = append(found, it)
	}
	m.mu.Unlock()
	if strings.TrimSpace(q.Text) != "" && len(words) == 0 {
		found = nil // a text of no words matches nothing
	}
	slices.SortFunc(found, func(a, b *store.MemoryItem) int {
		if len(words) > 0 {
			if c := cmp.Compare(b.Score, a.Score); c != 0 {
				return c
			}
		} else if c := b.Updated.Compare(a.Updated); c != 0 {
			return c
		}
		if c := cmp.Compare(store.EncodeNamespace(a.Namespace), store.EncodeNamespace(b.Namespace)); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
	return page(found, q), nil
}

// MemoryNamespaces implements store.Memory.
func (s *Store) MemoryNamespaces(_ context.Context, tenant string, q store.MemoryQuery) ([][]string, error) {
	if err := store.CheckMemoryPrefix(q.Prefix); err != nil {
		return nil, err
	}
	m := &s.docs
	m.mu.Lock()
	seen := map[string]bool{}
	for _, d := range m.under(tenant, q) {
		seen[store.EncodeNamespace(d.item.Namespace)] = true
	}
	m.mu.Unlock()
	encoded := slices.Sorted(maps.Keys(seen))
	out := make([][]string, 0, len(encoded))
	for _, ns := range page(encoded, q) {
		out = append(out, store.DecodeNamespace(ns))
	}
	return out, nil
}

func page[T any](all []T, q store.MemoryQuery) []T {
	off := max(q.Offset, 0)
	if off >= len(all) {
		return nil
	}
	all = all[off:]
	return all[:min(len(all), q.MemoryLimit())]
}

var _ store.Memory = (*Store)(nil)
