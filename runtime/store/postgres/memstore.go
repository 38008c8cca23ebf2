package postgres

import (
	"context"
	"time"

	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/internal/sqlstore"
)

// memory is the store's store.Memory: the shared SQL memory, searched
// through a tsvector column.
func (s *Store) memory() sqlstore.Memory {
	return sqlstore.Memory{DB: s.Catalog.DB, Dialect: sqlstore.Postgres}
}

// PutMemory implements store.Memory.
func (s *Store) PutMemory(ctx context.Context, tenant string, it *store.MemoryItem) error {
	return s.memory().PutMemory(ctx, tenant, it)
}

// GetMemory implements store.Memory.
func (s *Store) GetMemory(ctx context.Context, tenant string, ns []string, key string, now time.Time) (*store.MemoryItem, error) {
	return s.memory().GetMemory(ctx, tenant, ns, key, now)
}

// DeleteMemory implements store.Memory.
func (s *Store) DeleteMemory(ctx context.Context, tenant string, ns []string, key string) error {
	return s.memory().DeleteMemory(ctx, tenant, ns, key)
}

// SearchMemory implements store.Memory.
func (s *Store) SearchMemory(ctx context.Context, tenant string, q store.MemoryQuery) ([]*store.MemoryItem, error) {
	return s.memory().SearchMemory(ctx, tenant, q)
}

// MemoryNamespaces implements store.Memory.
func (s *Store) MemoryNamespaces(ctx context.Context, tenant string, q store.MemoryQuery) ([][]string, error) {
	return s.memory().MemoryNamespaces(ctx, tenant, q)
}

var _ store.Memory = (*Store)(nil)
