package sqlite

import (
	"context"
	"time"

	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/internal/sqlstore"
)

// hooks is the store's store.Webhooks and store.Schedules: the shared
// SQL ones.
func (s *Store) hooks() sqlstore.Hooks { return sqlstore.Hooks{DB: s.Catalog.DB} }

// AddDelivery implements store.Webhooks.
func (s *Store) AddDelivery(ctx context.Context, d *store.Delivery) error {
	return s.hooks().AddDelivery(ctx, d)
}

// ClaimDelivery implements store.Webhooks.
func (s *Store) ClaimDelivery(ctx context.Context, server string, claim time.Duration) (*store.Delivery, error) {
	return s.hooks().ClaimDelivery(ctx, server, claim)
}

// RecordAttempt implements store.Webhooks.
func (s *Store) RecordAttempt(ctx context.Context, server string, d *store.Delivery, a store.DeliveryAttempt) error {
	return s.hooks().RecordAttempt(ctx, server, d, a)
}

// Deliveries implements store.Webhooks.
func (s *Store) Deliveries(ctx context.Context, tenant, run string) ([]*store.Delivery, error) {
	return s.hooks().Deliveries(ctx, tenant, run)
}

// DropOrphanDeliveries implements store.Webhooks.
func (s *Store) DropOrphanDeliveries(ctx context.Context, before time.Time) (int, error) {
	return s.hooks().DropOrphanDeliveries(ctx, before)
}

// CreateSchedule implements store.Schedules.
func (s *Store) CreateSchedule(ctx context.Context, sc *store.Schedule) error {
	return s.hooks().CreateSchedule(ctx, sc)
}

// Schedule implements store.Schedules.
func (s *Store) Schedule(ctx context.Context, tenant, id string) (*store.Schedule, error) {
	return s.hooks().Schedule(ctx, tenant, id)
}

// ListSchedules implements store.Schedules.
func (s *Store) ListSchedules(ctx context.Context, q store.ScheduleQuery) ([]*store.Schedule, error) {
	return s.hooks().ListSchedules(ctx, q)
}

// DueSchedules implements store.Schedules.
func (s *Store) DueSchedules(ctx context.Context, now time.Time, limit int) ([]*store.Schedule, error) {
	return s.hooks().DueSchedules(ctx, now, limit)
}

// AdvanceSchedule implements store.Schedules.
func (s *Store) AdvanceSchedule(ctx context.Context, id string, from time.Time, t store.ScheduleTick) error {
	return s.hooks().AdvanceSchedule(ctx, id, from, t)
}

// PauseSchedule implements store.Schedules.
func (s *Store) PauseSchedule(ctx context.Context, tenant, id string, paused bool, next time.Time) (*store.Schedule, error) {
	return s.hooks().PauseSchedule(ctx, tenant, id, paused, next)
}

// DeleteSchedule implements store.Schedules.
func (s *Store) DeleteSchedule(ctx context.Context, tenant, id string) error {
	return s.hooks().DeleteSchedule(ctx, tenant, id)
}

var (
	_ store.Webhooks  = (*Store)(nil)
	_ store.Schedules = (*Store)(nil)
)
