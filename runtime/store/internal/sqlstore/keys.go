// API keys, stored by the hash of their secret.

package sqlstore

import (
	"context"
	"time"

	"github.com/trellisflow/trellis/runtime/store"
)

// CreateKey implements store.Catalog.
func (c Catalog) CreateKey(ctx context.Context, k *store.KeyRecord) error {
	return c.insert(ctx, `INSERT INTO api_keys (id, hash, tenant, admin, name, created_at, revoked_at, scope, expires_at, owner) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		k.ID, k.Hash, k.Tenant, k.Admin, k.Name, nanos(k.Created), nanos(k.Revoked), k.Scope, nanos(k.Expires), k.Owner)
}

const keyColumns = `id, hash, tenant, admin, name, created_at, revoked_at, scope, expires_at, owner`

func scanKey(rows Rows) (*store.KeyRecord, error) {
	var k store.KeyRecord
	var created, revoked, expires int64
	if err := rows.Scan(&k.ID, &k.Hash, &k.Tenant, &k.Admin, &k.Name, &created, &revoked, &k.Scope, &expires, &k.Owner); err != nil {
		return nil, err
	}
	k.Created, k.Revoked, k.Expires = fromNanos(created), fromNanos(revoked), fromNanos(expires)
	return &k, nil
}

// KeyByHash implements store.Catalog.
func (c Catalog) KeyByHash(ctx context.Context, hash string) (*store.KeyRecord, error) {
	var k *store.KeyRecord
	err := one(ctx, c.DB, func(rows Rows) (err error) { k, err = scanKey(rows); return err },
		`SELECT `+keyColumns+` FROM api_keys WHERE hash = ?`, hash)
	return k, err
}

// Keys implements store.Catalog.
func (c Catalog) Keys(ctx context.Context, tenant string) ([]*store.KeyRecord, error) {
	rows, err := c.DB.Query(ctx, `SELECT `+keyColumns+` FROM api_keys WHERE ? = '' OR tenant = ? ORDER BY created_at DESC, id DESC`, tenant, tenant)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*store.KeyRecord
	for rows.Next() {
		k, err := scanKey(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// RevokeKey implements store.Catalog.
func (c Catalog) RevokeKey(ctx context.Context, id string, at time.Time) error {
	n, err := c.DB.Exec(ctx, `UPDATE api_keys SET revoked_at = CASE WHEN revoked_at = 0 THEN ? ELSE revoked_at END WHERE id = ?`, nanos(at), id)
	if err == nil && n == 0 {
		err = store.ErrNotFound
	}
	return err
}

// RenewKey implements store.Catalog.
func (c Catalog) RenewKey(ctx context.Context, id string, until time.Time) error {
	n, err := c.DB.Exec(ctx, `UPDATE api_keys SET expires_at = ? WHERE id = ? AND revoked_at = 0 AND expires_at <> 0`, nanos(until), id)
	if err == nil && n == 0 {
		err = store.ErrNotFound
	}
	return err
}

// SweepKeys implements store.Catalog.
func (c Catalog) SweepKeys(ctx context.Context, deadAfter time.Duration) (int, error) {
	now := c.DB.Now()
	n, err := c.DB.Exec(ctx, `UPDATE api_keys SET revoked_at = `+now+` WHERE revoked_at = 0 AND owner <> '' AND
		((expires_at <> 0 AND expires_at < `+now+`) OR NOT EXISTS
		(SELECT 1 FROM api_servers s WHERE s.id = api_keys.owner AND s.seen_at >= `+now+` - ?))`, deadAfter.Nanoseconds())
	return int(n), err
}
