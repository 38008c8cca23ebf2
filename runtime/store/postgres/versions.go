package postgres

import (
	"context"

	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/internal/sqlstore"
)

// versions is the store's store.Versions: the shared SQL tables of flow
// versions.
func (s *Store) versions() sqlstore.Versions { return sqlstore.Versions{DB: s.Catalog.DB} }

// PutFlowVersion implements store.Versions.
func (s *Store) PutFlowVersion(ctx context.Context, v *store.FlowVersion) error {
	return s.versions().PutFlowVersion(ctx, v)
}

// FlowVersion implements store.Versions.
func (s *Store) FlowVersion(ctx context.Context, flow, version string) (*store.FlowVersion, error) {
	return s.versions().FlowVersion(ctx, flow, version)
}

// FlowVersions implements store.Versions.
func (s *Store) FlowVersions(ctx context.Context, flow string) ([]*store.FlowVersion, error) {
	return s.versions().FlowVersions(ctx, flow)
}

// PinThread implements store.Versions.
func (s *Store) PinThread(ctx context.Context, p *store.ThreadPin, expect string) error {
	return s.versions().PinThread(ctx, p, expect)
}

// ThreadPin implements store.Versions.
func (s *Store) ThreadPin(ctx context.Context, tenant, thread string) (*store.ThreadPin, error) {
	return s.versions().ThreadPin(ctx, tenant, thread)
}

// ThreadPins implements store.Versions.
func (s *Store) ThreadPins(ctx context.Context, q store.PinQuery) ([]*store.ThreadPin, error) {
	return s.versions().ThreadPins(ctx, q)
}

// CountPins implements store.Versions.
func (s *Store) CountPins(ctx context.Context, tenant, flow string) (map[string]int, error) {
	return s.versions().CountPins(ctx, tenant, flow)
}

var _ store.Versions = (*Store)(nil)
