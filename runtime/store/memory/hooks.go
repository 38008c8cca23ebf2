package memory

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"time"

	"github.com/trellisflow/trellis/runtime/store"
)

// delivery is a webhook delivery with the claim on it.
type delivery struct {
	store.Delivery
	claimedBy    string
	claimedUntil time.Time
}

// AddDelivery implements store.Webhooks.
func (s *Store) AddDelivery(_ context.Context, d *store.Delivery) error {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.deliveries[d.ID]; ok {
		return store.ErrExists
	}
	cp := *d
	cp.Status, cp.Log, cp.Updated = store.DeliveryPending, nil, d.Created
	c.deliveries[d.ID] = &delivery{Delivery: cp}
	return nil
}

// ClaimDelivery implements store.Webhooks.
func (s *Store) ClaimDelivery(_ context.Context, server string, claim time.Duration) (*store.Delivery, error) {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	var due []*delivery
	for _, d := range c.deliveries {
		r, ok := c.runs[d.Run]
		if d.Status == store.DeliveryPending && !d.Next.After(now) && !d.claimedUntil.After(now) && ok && r.Status.Done() {
			due = append(due, d)
		}
	}
	if len(due) == 0 {
		return nil, store.ErrNotFound
	}
	d := slices.MinFunc(due, func(a, b *delivery) int {
		return cmp.Or(a.Next.Compare(b.Next), a.Created.Compare(b.Created), cmp.Compare(a.ID, b.ID))
	})
	d.claimedBy, d.claimedUntil = server, now.Add(claim)
	out := d.Delivery
	out.Log = nil
	return &out, nil
}

// RecordAttempt implements store.Webhooks.
func (s *Store) RecordAttempt(_ context.Context, server string, d *store.Delivery, a store.DeliveryAttempt) error {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	cur, ok := c.deliveries[d.ID]
	if !ok {
		return store.ErrNotFound
	}
	if cur.claimedBy != server || cur.Attempts != a.N-1 || cur.Status != store.DeliveryPending {
		return store.ErrClaimLost
	}
	cur.Status, cur.Attempts, cur.Next, cur.Updated = d.Status, a.N, d.Next, a.At
	cur.claimedBy, cur.claimedUntil = "", time.Time{}
	cur.Log = append(cur.Log, a)
	return nil
}

// Deliveries implements store.Webhooks.
func (s *Store) Deliveries(_ context.Context, tenant, run string) ([]*store.Delivery, error) {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*store.Delivery
	for _, d := range c.deliveries {
		if d.Run == run && d.Tenant == tenant {
			cp := d.Delivery
			cp.Log = slices.Clone(d.Log)
			out = append(out, &cp)
		}
	}
	slices.SortFunc(out, func(a, b *store.Delivery) int { return cmp.Or(a.Created.Compare(b.Created), cmp.Compare(a.ID, b.ID)) })
	return out, nil
}

// DropOrphanDeliveries implements store.Webhooks.
func (s *Store) DropOrphanDeliveries(_ context.Context, before time.Time) (int, error) {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for id, d := range c.deliveries {
		if _, ok := c.runs[d.Run]; !ok && d.Status == store.DeliveryPending && d.Created.Before(before) {
			delete(c.deliveries, id)
			n++
		}
	}
	return n, nil
}

func copySchedule(sc *store.Schedule) *store.Schedule {
	cp := *sc
	cp.Input, cp.Values = slices.Clone(sc.Input), slices.Clone(sc.Values)
	cp.Metadata = maps.Clone(sc.Metadata)
	cp.Ticks = slices.Clone(sc.Ticks)
	return &cp
}

// CreateSchedule implements store.Schedules.
func (s *Store) CreateSchedule(_ context.Context, sc *store.Schedule, limit int) error {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.schedules[sc.ID]; ok {
		return store.ErrExists
	}
	if limit > 0 {
		n := 0
		for _, other := range c.schedules {
			if other.Tenant == sc.Tenant {
				n++
			}
		}
		if n >= limit {
			return store.ErrScheduleLimit
		}
	}
	c.schedules[sc.ID] = copySchedule(sc)
	if c.schedules[sc.ID].Metadata == nil {
		c.schedules[sc.ID].Metadata = map[string]string{}
	}
	return nil
}

// Schedule implements store.Schedules.
func (s *Store) Schedule(_ context.Context, tenant, id string) (*store.Schedule, error) {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	sc, ok := c.schedules[id]
	if !ok || sc.Tenant != tenant {
		return nil, store.ErrNotFound
	}
	return copySchedule(sc), nil
}

// ListSchedules implements store.Schedules.
func (s *Store) ListSchedules(_ context.Context, q store.ScheduleQuery) ([]*store.Schedule, error) {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*store.Schedule
	for _, sc := range c.schedules {
		if sc.Tenant == q.Tenant && sc.ID > q.After && (q.Thread == "" || sc.Thread == q.Thread) {
			out = append(out, copySchedule(sc))
		}
	}
	slices.SortFunc(out, func(a, b *store.Schedule) int { return cmp.Compare(a.ID, b.ID) })
	return out[:min(len(out), store.PageLimit(q.Limit))], nil
}

// DueSchedules implements store.Schedules.
func (s *Store) DueSchedules(_ context.Context, now time.Time, limit int) ([]*store.Schedule, error) {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*store.Schedule
	for _, sc := range c.schedules {
		if !sc.Paused && !sc.Next.IsZero() && !sc.Next.After(now) {
			out = append(out, copySchedule(sc))
		}
	}
	slices.SortFunc(out, func(a, b *store.Schedule) int { return cmp.Or(a.Next.Compare(b.Next), cmp.Compare(a.ID, b.ID)) })
	return out[:min(len(out), store.PageLimit(limit))], nil
}

// AdvanceSchedule implements store.Schedules.
func (s *Store) AdvanceSchedule(_ context.Context, id string, from time.Time, t store.ScheduleTick) error {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	sc, ok := c.schedules[id]
	if !ok {
		return store.ErrNotFound
	}
	if !sc.Next.Equal(from) {
		return store.ErrClaimLost
	}
	sc.Next, sc.LastTick, sc.LastRun, sc.LastError = t.Next, t.LastTick, t.LastRun, t.LastError
	sc.Ticks = store.AddTicks(sc.Ticks, t.History)
	return nil
}

// PauseSchedule implements store.Schedules.
func (s *Store) PauseSchedule(_ context.Context, tenant, id string, paused bool, next time.Time) (*store.Schedule, error) {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	sc, ok := c.schedules[id]
	if !ok || sc.Tenant != tenant {
		return nil, store.ErrNotFound
	}
	sc.Paused = paused
	if !paused {
		sc.Next = next
	}
	return copySchedule(sc), nil
}

// DeleteSchedule implements store.Schedules.
func (s *Store) DeleteSchedule(_ context.Context, tenant, id string) error {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	sc, ok := c.schedules[id]
	if !ok || sc.Tenant != tenant {
		return store.ErrNotFound
	}
	delete(c.schedules, id)
	return nil
}

var (
	_ store.Webhooks  = (*Store)(nil)
	_ store.Schedules = (*Store)(nil)
)
