package sqlstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/trellisflow/trellis/runtime/store"
)

// Hooks implements store.Webhooks and store.Schedules on the
// webhook_deliveries, webhook_attempts and schedules tables of the SQL
// stores' migrations.
type Hooks struct{ DB DB }

const deliveryColumns = `id, tenant, thread, run, url, status, attempts, next_at, created_at, updated_at`

func scanDelivery(r Rows) (*store.Delivery, error) {
	var d store.Delivery
	var status string
	var attempts, next, created, updated int64
	if err := r.Scan(&d.ID, &d.Tenant, &d.Thread, &d.Run, &d.URL, &status, &attempts, &next, &created, &updated); err != nil {
		return nil, err
	}
	d.Status, d.Attempts = store.DeliveryStatus(status), int(attempts)
	d.Next, d.Created, d.Updated = fromNanos(next), fromNanos(created), fromNanos(updated)
	return &d, nil
}

// AddDelivery implements store.Webhooks.
func (h Hooks) AddDelivery(ctx context.Context, d *store.Delivery) error {
	_, err := h.DB.Exec(ctx, `INSERT INTO webhook_deliveries (id, tenant, thread, run, url, status, attempts, next_at, claimed_by, claimed_until,
		created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, '', 0, ?, ?)`,
		d.ID, d.Tenant, d.Thread, d.Run, d.URL, string(store.DeliveryPending), int64(d.Attempts), nanos(d.Next), nanos(d.Created), nanos(d.Created))
	if err != nil && h.DB.Unique(err) {
		return store.ErrExists
	}
	return err
}

// ClaimDelivery implements store.Webhooks: the delivery due longest is
// taken by an update that holds only while no other claim is live on
// it, so of two servers picking the same one, one takes it and the
// other looks again.
func (h Hooks) ClaimDelivery(ctx context.Context, server string, claim time.Duration) (*store.Delivery, error) {
	now := h.DB.Now()
	for {
		var id string
		var until int64
		err := one(ctx, h.DB, func(r Rows) error { return r.Scan(&id, &until) },
			`SELECT d.id, d.claimed_until FROM webhook_deliveries d WHERE d.status = 'pending' AND d.next_at <= `+now+`
			AND d.claimed_until <= `+now+` AND EXISTS (SELECT 1 FROM api_runs r WHERE r.id = d.run
				AND r.status IN ('succeeded', 'failed', 'cancelled'))
			ORDER BY d.next_at, d.created_at, d.id LIMIT 1`)
		if err != nil {
			return nil, err
		}
		n, err := h.DB.Exec(ctx, `UPDATE webhook_deliveries SET claimed_by = ?, claimed_until = `+now+` + ?
			WHERE id = ? AND status = 'pending' AND claimed_until = ?`, server, claim.Nanoseconds(), id, until)
		if err != nil {
			return nil, err
		}
		if n == 0 {
			continue
		}
		var d *store.Delivery
		err = one(ctx, h.DB, func(r Rows) (err error) { d, err = scanDelivery(r); return err },
			`SELECT `+deliveryColumns+` FROM webhook_deliveries WHERE id = ?`, id)
		return d, err
	}
}

// RecordAttempt implements store.Webhooks.
func (h Hooks) RecordAttempt(ctx context.Context, server string, d *store.Delivery, a store.DeliveryAttempt) error {
	return h.DB.Tx(ctx, func(db DB) error {
		n, err := db.Exec(ctx, `UPDATE webhook_deliveries SET status = ?, attempts = ?, next_at = ?, claimed_by = '', claimed_until = 0,
			updated_at = ? WHERE id = ? AND claimed_by = ? AND attempts = ? AND status = 'pending'`,
			string(d.Status), int64(a.N), nanos(d.Next), nanos(a.At), d.ID, server, int64(a.N-1))
		if err != nil {
			return err
		}
		if n == 0 {
			err := one(ctx, db, func(Rows) error { return nil }, `SELECT 1 FROM webhook_deliveries WHERE id = ?`, d.ID)
			if err == nil {
				return store.ErrClaimLost
			}
			return err
		}
		_, err = db.Exec(ctx, `INSERT INTO webhook_attempts (delivery, n, at, server, status, error, took) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			d.ID, int64(a.N), nanos(a.At), a.Server, int64(a.Status), a.Error, a.Took.Nanoseconds())
		return err
	})
}

// Deliveries implements store.Webhooks.
func (h Hooks) Deliveries(ctx context.Context, tenant, run string) ([]*store.Delivery, error) {
	rows, err := h.DB.Query(ctx, `SELECT `+deliveryColumns+` FROM webhook_deliveries WHERE run = ? AND tenant = ? ORDER BY created_at, id`, run, tenant)
	if err != nil {
		return nil, err
	}
	var out []*store.Delivery
	for rows.Next() {
		d, err := scanDelivery(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, d)
	}
	err = rows.Err()
	rows.Close()
	if err != nil {
		return nil, err
	}
	for _, d := range out {
		rows, err := h.DB.Query(ctx, `SELECT n, at, server, status, error, took FROM webhook_attempts WHERE delivery = ? ORDER BY n`, d.ID)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var a store.DeliveryAttempt
			var n, at, status, took int64
			if err := rows.Scan(&n, &at, &a.Server, &status, &a.Error, &took); err != nil {
				rows.Close()
				return nil, err
			}
			a.N, a.At, a.Status, a.Took = int(n), fromNanos(at), int(status), time.Duration(took)
			d.Log = append(d.Log, a)
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// DropOrphanDeliveries implements store.Webhooks.
func (h Hooks) DropOrphanDeliveries(ctx context.Context, before time.Time) (int, error) {
	var n int64
	err := h.DB.Tx(ctx, func(db DB) error {
		const orphan = `status = 'pending' AND created_at < ? AND NOT EXISTS (SELECT 1 FROM api_runs r WHERE r.id = webhook_deliveries.run)`
		if _, err := db.Exec(ctx, `DELETE FROM webhook_attempts WHERE delivery IN (SELECT id FROM webhook_deliveries WHERE `+orphan+`)`, nanos(before)); err != nil {
			return err
		}
		var err error
		n, err = db.Exec(ctx, `DELETE FROM webhook_deliveries WHERE `+orphan, nanos(before))
		return err
	})
	return int(n), err
}

const scheduleColumns = `id, tenant, flow, thread, cron, zone, input, metadata, missed, grace, webhook, paused, next_at, last_tick,
	last_run, last_error, created_at, thread_values, ticks`

func scanSchedule(r Rows) (*store.Schedule, error) {
	var s store.Schedule
	var input, metadata, missed, values, ticks string
	var grace, next, lastTick, created int64
	if err := r.Scan(&s.ID, &s.Tenant, &s.Flow, &s.Thread, &s.Cron, &s.Zone, &input, &metadata, &missed, &grace, &s.Webhook, &s.Paused,
		&next, &lastTick, &s.LastRun, &s.LastError, &created, &values, &ticks); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(ticks), &s.Ticks); err != nil {
		return nil, fmt.Errorf("schedule %s: its tick history: %w", s.ID, err)
	}
	if input != "null" {
		s.Input = json.RawMessage(input)
	}
	if values != "null" {
		s.Values = json.RawMessage(values)
	}
	if err := json.Unmarshal([]byte(metadata), &s.Metadata); err != nil {
		return nil, err
	}
	s.Missed, s.Grace = store.MissedPolicy(missed), time.Duration(grace)
	s.Next, s.LastTick, s.Created = fromNanos(next), fromNanos(lastTick), fromNanos(created)
	return &s, nil
}

func (h Hooks) schedulesWhere(ctx context.Context, where string, args ...any) ([]*store.Schedule, error) {
	rows, err := h.DB.Query(ctx, `SELECT `+scheduleColumns+` FROM schedules WHERE `+where, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*store.Schedule
	for rows.Next() {
		s, err := scanSchedule(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// CreateSchedule implements store.Schedules: the tenant's schedules are
// counted and the new one inserted in one transaction that holds the
// tenant's lock, so that creates at once are counted one after another.
func (h Hooks) CreateSchedule(ctx context.Context, s *store.Schedule, limit int) error {
	input, values := string(s.Input), string(s.Values)
	if input == "" {
		input = "null"
	}
	if values == "" {
		values = "null"
	}
	md := s.Metadata
	if md == nil {
		md = map[string]string{}
	}
	metadata, err := json.Marshal(md)
	if err != nil {
		return err
	}
	insert := func(db DB) error {
		_, err := db.Exec(ctx, `INSERT INTO schedules (`+scheduleColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			s.ID, s.Tenant, s.Flow, s.Thread, s.Cron, s.Zone, input, string(metadata), string(s.Missed), s.Grace.Nanoseconds(), s.Webhook, s.Paused,
			nanos(s.Next), nanos(s.LastTick), s.LastRun, s.LastError, nanos(s.Created), values, "[]")
		return err
	}
	if limit <= 0 {
		err = insert(h.DB)
	} else {
		err = h.DB.Tx(ctx, func(db DB) error {
			// a name no thread has: the tenant's schedules
			if err := db.LockThread(ctx, "schedules of "+s.Tenant); err != nil {
				return err
			}
			var n int64
			if err := one(ctx, db, func(r Rows) error { return r.Scan(&n) }, `SELECT COUNT(*) FROM schedules WHERE tenant = ?`, s.Tenant); err != nil {
				return err
			}
			if n >= int64(limit) {
				return store.ErrScheduleLimit
			}
			return insert(db)
		})
	}
	if err != nil && h.DB.Unique(err) {
		return store.ErrExists
	}
	return err
}

// Schedule implements store.Schedules.
func (h Hooks) Schedule(ctx context.Context, tenant, id string) (*store.Schedule, error) {
	out, err := h.schedulesWhere(ctx, `id = ? AND tenant = ?`, id, tenant)
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, store.ErrNotFound
	}
	return out[0], nil
}

// ListSchedules implements store.Schedules.
func (h Hooks) ListSchedules(ctx context.Context, q store.ScheduleQuery) ([]*store.Schedule, error) {
	where, args := `tenant = ? AND id > ?`, []any{q.Tenant, q.After}
	if q.Thread != "" {
		where += ` AND thread = ?`
		args = append(args, q.Thread)
	}
	return h.schedulesWhere(ctx, where+` ORDER BY id LIMIT ?`, append(args, store.PageLimit(q.Limit))...)
}

// DueSchedules implements store.Schedules.
func (h Hooks) DueSchedules(ctx context.Context, now time.Time, limit int) ([]*store.Schedule, error) {
	return h.schedulesWhere(ctx, `paused = ? AND next_at <> 0 AND next_at <= ? ORDER BY next_at, id LIMIT ?`, false, nanos(now), store.PageLimit(limit))
}

// AdvanceSchedule implements store.Schedules: a compare-and-set on the
// next tick, so that of the servers that fire one tick, one moves it
// (and adds to its tick history, read and written in one transaction
// whose update holds only if the next tick is still from).
func (h Hooks) AdvanceSchedule(ctx context.Context, id string, from time.Time, t store.ScheduleTick) error {
	return h.DB.Tx(ctx, func(db DB) error {
		var ticks string
		err := one(ctx, db, func(r Rows) error { return r.Scan(&ticks) }, `SELECT ticks FROM schedules WHERE id = ? AND next_at = ?`, id, nanos(from))
		if errors.Is(err, store.ErrNotFound) {
			if err := one(ctx, db, func(Rows) error { return nil }, `SELECT 1 FROM schedules WHERE id = ?`, id); err != nil {
				return err
			}
			return store.ErrClaimLost
		}
		if err != nil {
			return err
		}
		var history []store.TickRecord
		if err := json.Unmarshal([]byte(ticks), &history); err != nil {
			return fmt.Errorf("schedule %s: its tick history: %w", id, err)
		}
		next, err := json.Marshal(store.AddTicks(history, t.History))
		if err != nil {
			return err
		}
		n, err := db.Exec(ctx, `UPDATE schedules SET next_at = ?, last_tick = ?, last_run = ?, last_error = ?, ticks = ? WHERE id = ? AND next_at = ?`,
			nanos(t.Next), nanos(t.LastTick), t.LastRun, t.LastError, string(next), id, nanos(from))
		if err == nil && n == 0 {
			err = store.ErrClaimLost // moved by another since it was read
		}
		return err
	})
}

// PauseSchedule implements store.Schedules.
func (h Hooks) PauseSchedule(ctx context.Context, tenant, id string, paused bool, next time.Time) (*store.Schedule, error) {
	var out *store.Schedule
	err := h.DB.Tx(ctx, func(db DB) error {
		q := `UPDATE schedules SET paused = ? WHERE id = ? AND tenant = ?`
		args := []any{paused, id, tenant}
		if !paused {
			q = `UPDATE schedules SET paused = ?, next_at = ? WHERE id = ? AND tenant = ?`
			args = []any{paused, nanos(next), id, tenant}
		}
		n, err := db.Exec(ctx, q, args...)
		if err != nil {
			return err
		}
		if n == 0 {
			return store.ErrNotFound
		}
		out, err = Hooks{DB: db}.Schedule(ctx, tenant, id)
		return err
	})
	return out, err
}

// DeleteSchedule implements store.Schedules.
func (h Hooks) DeleteSchedule(ctx context.Context, tenant, id string) error {
	n, err := h.DB.Exec(ctx, `DELETE FROM schedules WHERE id = ? AND tenant = ?`, id, tenant)
	if err == nil && n == 0 {
		err = store.ErrNotFound
	}
	return err
}

var (
	_ store.Webhooks  = Hooks{}
	_ store.Schedules = Hooks{}
)
