package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/value"
)

// Memory is the kind.Memory of tenant's documents in m. A server gives
// each run its tenant's (kind.WithMemory); a run given none has its
// store's under the tenant "", the one every caller outside a server
// shares.
func Memory(m store.Memory, tenant string) kind.Memory {
	return tenantMemory{m: m, tenant: tenant}
}

// withMemory gives a run the memory of the engine's store, unless its
// context carries one (a server's tenant's, or the parent run's for a
// child flow).
func (e *Engine) withMemory(ctx context.Context) context.Context {
	if _, ok := kind.MemoryOf(ctx); ok {
		return ctx
	}
	if m, ok := store.MemoryOf(e.Store); ok {
		return kind.WithMemory(ctx, Memory(m, ""))
	}
	return ctx
}

type tenantMemory struct {
	m      store.Memory
	tenant string
}

func fromStore(it *store.MemoryItem) (*kind.MemoryItem, error) {
	v, err := value.Decode(it.Value)
	if err != nil {
		return nil, fmt.Errorf("memory %v %q: %w", it.Namespace, it.Key, err)
	}
	return &kind.MemoryItem{Namespace: it.Namespace, Key: it.Key, Value: v, Updated: it.Updated, Expires: it.Expires, Score: it.Score}, nil
}

// refused marks what retrying cannot fix: a namespace, key or document
// the store refuses.
func refused(err error) error {
	if errors.Is(err, store.ErrMemoryKey) || errors.Is(err, store.ErrMemoryValue) {
		return kind.Permanent(err)
	}
	return err
}

func (t tenantMemory) Get(ctx context.Context, ns []string, key string) (*kind.MemoryItem, error) {
	it, err := t.m.GetMemory(ctx, t.tenant, ns, key, time.Now())
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, refused(err)
	}
	return fromStore(it)
}

func (t tenantMemory) Put(ctx context.Context, ns []string, key string, v any, ttl time.Duration) (*kind.MemoryItem, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, kind.Permanent(fmt.Errorf("value: %w", err))
	}
	now := time.Now().UTC()
	it := &store.MemoryItem{Namespace: ns, Key: key, Value: b, Updated: now}
	if ttl > 0 {
		it.Expires = now.Add(ttl)
	}
	if err := t.m.PutMemory(ctx, t.tenant, it); err != nil {
		return nil, refused(err)
	}
	return fromStore(it)
}

func (t tenantMemory) Delete(ctx context.Context, ns []string, key string) (bool, error) {
	err := t.m.DeleteMemory(ctx, t.tenant, ns, key)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	return err == nil, refused(err)
}

func (t tenantMemory) Search(ctx context.Context, ns []string, query string, limit int) ([]*kind.MemoryItem, error) {
	items, err := t.m.SearchMemory(ctx, t.tenant, store.MemoryQuery{Prefix: ns, Text: query, Limit: limit, Now: time.Now()})
	if err != nil {
		return nil, refused(err)
	}
	out := make([]*kind.MemoryItem, 0, len(items))
	for _, it := range items {
		k, err := fromStore(it)
		if err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, nil
}
