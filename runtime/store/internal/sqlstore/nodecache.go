package sqlstore

import (
	"context"
	"errors"
	"time"

	"github.com/trellisflow/trellis/runtime/store"
)

// CacheGet implements store.Cache.
func (c Catalog) CacheGet(ctx context.Context, key string, now time.Time) ([]byte, bool, error) {
	var value []byte
	err := one(ctx, c.DB, func(r Rows) error { return r.Scan(&value) },
		`SELECT value FROM node_cache WHERE key = ? AND (expires_at = 0 OR expires_at > ?)`, key, nanos(now))
	if errors.Is(err, store.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return value, true, nil
}

// CachePut implements store.Cache.
func (c Catalog) CachePut(ctx context.Context, key string, value []byte, now, expires time.Time) error {
	return c.DB.Tx(ctx, func(db DB) error {
		if _, err := db.Exec(ctx, `DELETE FROM node_cache WHERE key = ?`, key); err != nil {
			return err
		}
		if _, err := db.Exec(ctx, `INSERT INTO node_cache (key, value, created_at, expires_at) VALUES (?, ?, ?, ?)`,
			key, value, nanos(now), nanos(expires)); err != nil {
			return err
		}
		var n int
		if err := one(ctx, db, func(r Rows) error { return r.Scan(&n) }, `SELECT count(*) FROM node_cache`); err != nil {
			return err
		}
		if n <= store.CacheLimit {
			return nil
		}
		if _, err := db.Exec(ctx, `DELETE FROM node_cache WHERE expires_at <> 0 AND expires_at <= ?`, nanos(now)); err != nil {
			return err
		}
		if err := one(ctx, db, func(r Rows) error { return r.Scan(&n) }, `SELECT count(*) FROM node_cache`); err != nil {
			return err
		}
		if n <= store.CacheLimit {
			return nil
		}
		_, err := db.Exec(ctx, `DELETE FROM node_cache WHERE key IN
			(SELECT key FROM node_cache ORDER BY created_at, key LIMIT ?)`, n-store.CacheLimit)
		return err
	})
}
