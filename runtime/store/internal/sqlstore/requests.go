// The idempotency keys of creating requests (store.Requests).

package sqlstore

import (
	"context"
	"time"

	"github.com/trellisflow/trellis/runtime/store"
)

// Requests implements store.Requests on the idempotency_keys table of
// the SQL stores' migrations; a trigger deletes a thread's keys with its
// record (api_threads).
type Requests struct{ DB DB }

const requestColumns = `tenant, key, fingerprint, ref, thread, owner, locked_until, status, body, created_at`

func scanRequest(r Rows) (*store.RequestRecord, error) {
	var q store.RequestRecord
	var locked, status, created int64
	if err := r.Scan(&q.Tenant, &q.Key, &q.Fingerprint, &q.Ref, &q.Thread, &q.Owner, &locked, &status, &q.Body, &created); err != nil {
		return nil, err
	}
	q.Locked, q.Status, q.Created = fromNanos(locked), int(status), fromNanos(created)
	if len(q.Body) == 0 {
		q.Body = nil
	}
	return &q, nil
}

// ReserveRequest implements store.Requests: an expired record of the key
// is deleted, then the new one inserted unless the key has one, in one
// transaction.
func (q Requests) ReserveRequest(ctx context.Context, r *store.RequestRecord, notBefore time.Time) (*store.RequestRecord, bool, error) {
	var kept *store.RequestRecord
	fresh := false
	body := r.Body
	if body == nil {
		body = []byte{}
	}
	err := q.DB.Tx(ctx, func(db DB) error {
		if _, err := db.Exec(ctx, `DELETE FROM idempotency_keys WHERE tenant = ? AND key = ? AND created_at < ?`, r.Tenant, r.Key, nanos(notBefore)); err != nil {
			return err
		}
		n, err := db.Exec(ctx, `INSERT INTO idempotency_keys (`+requestColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (tenant, key) DO NOTHING`,
			r.Tenant, r.Key, r.Fingerprint, r.Ref, r.Thread, r.Owner, nanos(r.Locked), int64(r.Status), body, nanos(r.Created))
		if err != nil {
			return err
		}
		fresh = n == 1
		return one(ctx, db, func(rows Rows) (err error) { kept, err = scanRequest(rows); return err },
			`SELECT `+requestColumns+` FROM idempotency_keys WHERE tenant = ? AND key = ?`, r.Tenant, r.Key)
	})
	return kept, fresh, err
}

// TakeRequest implements store.Requests.
func (q Requests) TakeRequest(ctx context.Context, tenant, key, from, owner string, until time.Time) error {
	n, err := q.DB.Exec(ctx, `UPDATE idempotency_keys SET owner = ?, locked_until = ? WHERE tenant = ? AND key = ? AND owner = ? AND status = 0`,
		owner, nanos(until), tenant, key, from)
	if err != nil || n > 0 {
		return err
	}
	if err := one(ctx, q.DB, func(Rows) error { return nil }, `SELECT 1 FROM idempotency_keys WHERE tenant = ? AND key = ?`, tenant, key); err != nil {
		return err
	}
	return store.ErrClaimLost
}

// AnswerRequest implements store.Requests.
func (q Requests) AnswerRequest(ctx context.Context, tenant, key, thread string, status int, body []byte) error {
	if body == nil {
		body = []byte{}
	}
	n, err := q.DB.Exec(ctx, `UPDATE idempotency_keys SET status = ?, body = ?, thread = CASE WHEN ? = '' THEN thread ELSE ? END
		WHERE tenant = ? AND key = ? AND status = 0`, int64(status), body, thread, thread, tenant, key)
	if err != nil || n > 0 {
		return err
	}
	return one(ctx, q.DB, func(Rows) error { return nil }, `SELECT 1 FROM idempotency_keys WHERE tenant = ? AND key = ?`, tenant, key)
}

// ReleaseRequest implements store.Requests.
func (q Requests) ReleaseRequest(ctx context.Context, tenant, key, owner string) error {
	_, err := q.DB.Exec(ctx, `DELETE FROM idempotency_keys WHERE tenant = ? AND key = ? AND owner = ? AND status = 0`, tenant, key, owner)
	return err
}

// PruneRequests implements store.Requests.
func (q Requests) PruneRequests(ctx context.Context, before time.Time, limit int) (int, error) {
	n, err := q.DB.Exec(ctx, `DELETE FROM idempotency_keys WHERE (tenant, key) IN
		(SELECT tenant, key FROM idempotency_keys WHERE created_at < ? ORDER BY created_at LIMIT ?)`, nanos(before), int64(limit))
	return int(n), err
}

var _ store.Requests = Requests{}
