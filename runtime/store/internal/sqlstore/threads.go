// Served threads: their records, listing, and deleting all of a thread.

package sqlstore

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/trellisflow/trellis/runtime/store"
)

// CreateThread implements store.Catalog.
func (c Catalog) CreateThread(ctx context.Context, t *store.ThreadRecord) error {
	md, err := json.Marshal(orEmpty(t.Metadata))
	if err != nil {
		return err
	}
	return c.insert(ctx, `INSERT INTO api_threads (id, tenant, flow, metadata, created_at) VALUES (?, ?, ?, ?, ?)`,
		t.ID, t.Tenant, t.Flow, string(md), nanos(t.Created))
}

func orEmpty(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

const threadColumns = `id, tenant, flow, metadata, created_at, deleting`

func scanThread(r Rows) (*store.ThreadRecord, error) {
	var t store.ThreadRecord
	var md string
	var created int64
	if err := r.Scan(&t.ID, &t.Tenant, &t.Flow, &md, &created, &t.Deleting); err != nil {
		return nil, err
	}
	t.Created = fromNanos(created)
	if err := json.Unmarshal([]byte(md), &t.Metadata); err != nil {
		return nil, err
	}
	return &t, nil
}

// Thread implements store.Catalog.
func (c Catalog) Thread(ctx context.Context, tenant, id string) (*store.ThreadRecord, error) {
	var t *store.ThreadRecord
	err := one(ctx, c.DB, func(r Rows) (err error) { t, err = scanThread(r); return err },
		`SELECT `+threadColumns+` FROM api_threads WHERE id = ? AND tenant = ?`, id, tenant)
	return t, err
}

// ListThreads implements store.Catalog. Tenant, flow and the cursor are
// applied in SQL; metadata, which the stores keep as JSON text, is
// matched here, reading the candidates in batches until a page is full.
func (c Catalog) ListThreads(ctx context.Context, q store.ThreadQuery) ([]*store.ThreadRecord, error) {
	var cursor *store.ThreadRecord
	if q.After != "" {
		var err error
		if cursor, err = c.Thread(ctx, q.Tenant, q.After); err != nil {
			return nil, err
		}
	}
	batch := 200
	if q.Limit > 0 && len(q.Metadata) == 0 {
		batch = q.Limit
	}
	var out []*store.ThreadRecord
	for {
		query := `SELECT ` + threadColumns + ` FROM api_threads WHERE tenant = ? AND NOT deleting`
		args := []any{q.Tenant}
		if q.Flow != "" {
			query += ` AND flow = ?`
			args = append(args, q.Flow)
		}
		if cursor != nil {
			query += ` AND (created_at < ? OR (created_at = ? AND id < ?))`
			at := nanos(cursor.Created)
			args = append(args, at, at, cursor.ID)
		}
		query += ` ORDER BY created_at DESC, id DESC LIMIT ?`
		args = append(args, batch)
		rows, err := c.DB.Query(ctx, query, args...)
		if err != nil {
			return nil, err
		}
		n := 0
		for rows.Next() {
			n++
			t, err := scanThread(rows)
			if err != nil {
				rows.Close()
				return nil, err
			}
			cursor = t
			if q.MatchThread(t) {
				out = append(out, t)
				if q.Limit > 0 && len(out) == q.Limit {
					rows.Close()
					return out, nil
				}
			}
		}
		err = rows.Err()
		rows.Close()
		if err != nil || n < batch {
			return out, err
		}
	}
}

// idle fails with ErrBusy when the thread has a queued or running run;
// the caller holds the thread's lock.
func idle(ctx context.Context, db DB, thread string) error {
	err := one(ctx, db, func(Rows) error { return store.ErrBusy },
		`SELECT 1 FROM api_runs WHERE thread = ? AND status IN ('queued', 'running') LIMIT 1`, thread)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	return err
}

// MarkThreadDeleting implements store.Catalog.
func (c Catalog) MarkThreadDeleting(ctx context.Context, tenant, id string, deleting bool) error {
	return c.DB.Tx(ctx, func(db DB) error {
		if err := db.LockThread(ctx, id); err != nil {
			return err
		}
		if deleting {
			if err := idle(ctx, db, id); err != nil {
				return err
			}
		}
		n, err := db.Exec(ctx, `UPDATE api_threads SET deleting = ? WHERE id = ? AND tenant = ?`, deleting, id, tenant)
		if err == nil && n == 0 {
			err = store.ErrNotFound
		}
		return err
	})
}

// DeleteThread implements store.Catalog.
func (c Catalog) DeleteThread(ctx context.Context, tenant, id string) error {
	return c.DB.Tx(ctx, func(db DB) error {
		if err := db.LockThread(ctx, id); err != nil {
			return err
		}
		if err := idle(ctx, db, id); err != nil {
			return err
		}
		n, err := db.Exec(ctx, `DELETE FROM api_threads WHERE id = ? AND tenant = ?`, id, tenant)
		if err != nil {
			return err
		}
		if n == 0 {
			return store.ErrNotFound
		}
		_, err = deleteRecords(ctx, db, id)
		return err
	})
}

// deleteRecords deletes a thread's runs, their events (packed or not),
// their webhook deliveries with their attempts, its voice sessions, the
// schedules that start runs on it and its flow version, then its record,
// and reports whether it had one.
func deleteRecords(ctx context.Context, db DB, thread string) (bool, error) {
	for _, q := range []string{
		`DELETE FROM api_event_packs WHERE run IN (SELECT id FROM api_runs WHERE thread = ?)`,
		`DELETE FROM api_events WHERE run IN (SELECT id FROM api_runs WHERE thread = ?)`,
		`DELETE FROM api_runs WHERE thread = ?`,
		`DELETE FROM voice_sessions WHERE thread = ?`,
		`DELETE FROM webhook_attempts WHERE delivery IN (SELECT id FROM webhook_deliveries WHERE thread = ?)`,
		`DELETE FROM webhook_deliveries WHERE thread = ?`,
		`DELETE FROM schedules WHERE thread = ?`,
		`DELETE FROM thread_versions WHERE thread = ?`,
	} {
		if _, err := db.Exec(ctx, q, thread); err != nil {
			return false, err
		}
	}
	n, err := db.Exec(ctx, `DELETE FROM api_threads WHERE id = ?`, thread)
	return n > 0, err
}

// checkpointTables are the tables of a thread's checkpoints, by a column
// thread, in the order a deletion goes through them (before threads).
var checkpointTables = []string{"checkpoints", "folds", "segments", "pending", "leases"}

// DeleteThread deletes, in the transaction db, everything the store
// keeps of thread (store.Store.Delete): the checkpoints of it and of the
// threads of its child flows, children, and its records in the catalog;
// under the thread's lock, and not while it has a queued or running run
// (store.ErrBusy). It fails with store.ErrNotFound when there was
// nothing of it.
func DeleteThread(ctx context.Context, db DB, thread string, children []string) error {
	if err := db.LockThread(ctx, thread); err != nil {
		return err
	}
	if err := idle(ctx, db, thread); err != nil {
		return err
	}
	ids := append([]any{thread}, anys(children)...)
	in := "(?" + strings.Repeat(", ?", len(children)) + ")"
	for _, table := range checkpointTables {
		if _, err := db.Exec(ctx, `DELETE FROM `+table+` WHERE thread IN `+in, ids...); err != nil {
			return err
		}
	}
	n, err := db.Exec(ctx, `DELETE FROM threads WHERE id IN `+in, ids...)
	if err != nil {
		return err
	}
	had, err := deleteRecords(ctx, db, thread)
	if err != nil {
		return err
	}
	if n == 0 && !had {
		return store.ErrNotFound
	}
	return nil
}

func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
