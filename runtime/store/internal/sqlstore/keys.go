// API keys, stored by the hash of their secret.

package sqlstore

import (
	"context"
	"time"

	"github.com/trellisflow/trellis/runtime/store"
)

// CreateKey implements store.Catalog.
func (c Catalog) CreateKey(ctx context.Context, k *store.KeyRecord) error {
	return c.insert(ctx, `INSERT INTO api_keys (id, hash, tenant, admin, name, created_at, revoked_at) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		k.ID, k.Hash, k.Tenant, k.Admin, k.Name, nanos(k.Created), nanos(k.Revoked))
}

const keyColumns = `id, hash, tenant, admin, name, created_at, revoked_at`

func scanKey(rows Rows) (*store.KeyRecord, error) {
	var k store.KeyRecord
	var created, revoked int64
	if err := rows.Scan(&k.ID, &k.Hash, &k.Tenant, &k.Admin, &k.Name, &created, &revoked); err != nil {
		return nil, err
	}
	k.Created, k.Revoked = fromNanos(created), fromNanos(revoked)
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
