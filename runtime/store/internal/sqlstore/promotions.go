// The promoted version of each flow (store.Promotions).

package sqlstore

import (
	"context"

	"github.com/trellisflow/trellis/runtime/store"
)

// PromoteVersion implements store.Promotions on the flow_promotions
// table: the version must be kept (flow_versions), and a first load's
// promotion (onlyIfNone) never replaces one.
func (v Versions) PromoteVersion(ctx context.Context, p *store.Promotion, onlyIfNone bool) (bool, error) {
	var done bool
	err := v.DB.Tx(ctx, func(db DB) error {
		if err := one(ctx, db, func(Rows) error { return nil }, `SELECT 1 FROM flow_versions WHERE flow = ? AND version = ?`, p.Flow, p.Version); err != nil {
			return err
		}
		q := `INSERT INTO flow_promotions (flow, version, since, promoted_by) VALUES (?, ?, ?, ?)
			ON CONFLICT (flow) DO UPDATE SET version = excluded.version, since = excluded.since, promoted_by = excluded.promoted_by`
		if onlyIfNone {
			q = `INSERT INTO flow_promotions (flow, version, since, promoted_by) VALUES (?, ?, ?, ?) ON CONFLICT (flow) DO NOTHING`
		}
		n, err := db.Exec(ctx, q, p.Flow, p.Version, nanos(p.Since), p.By)
		done = n > 0
		return err
	})
	return done, err
}

func scanPromotion(r Rows) (*store.Promotion, error) {
	var p store.Promotion
	var since int64
	if err := r.Scan(&p.Flow, &p.Version, &since, &p.By); err != nil {
		return nil, err
	}
	p.Since = fromNanos(since)
	return &p, nil
}

// PromotedVersion implements store.Promotions.
func (v Versions) PromotedVersion(ctx context.Context, flow string) (*store.Promotion, error) {
	var p *store.Promotion
	err := one(ctx, v.DB, func(r Rows) (err error) { p, err = scanPromotion(r); return err },
		`SELECT flow, version, since, promoted_by FROM flow_promotions WHERE flow = ?`, flow)
	return p, err
}

// PromotedVersions implements store.Promotions.
func (v Versions) PromotedVersions(ctx context.Context) ([]*store.Promotion, error) {
	rows, err := v.DB.Query(ctx, `SELECT flow, version, since, promoted_by FROM flow_promotions ORDER BY flow`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*store.Promotion
	for rows.Next() {
		p, err := scanPromotion(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

var _ store.Promotions = Versions{}
