package sqlstore

import (
	"context"
	"encoding/json"
	"maps"
	"slices"

	"github.com/trellisflow/trellis/runtime/store"
)

// Versions implements store.Versions on the flow_files, flow_versions
// and thread_versions tables of the SQL stores' migrations.
type Versions struct{ DB DB }

// PutFlowVersion implements store.Versions: the files first, each once,
// then the manifest, in one transaction.
func (v Versions) PutFlowVersion(ctx context.Context, fv *store.FlowVersion) error {
	if err := store.CheckFlowVersion(fv); err != nil {
		return err
	}
	manifest := map[string]string{}
	for name, data := range fv.Files {
		manifest[name] = store.FileHash(data)
	}
	m, err := json.Marshal(manifest)
	if err != nil {
		return err
	}
	// the files, then the manifest, each kept once whoever writes it first
	return v.DB.Tx(ctx, func(db DB) error {
		for _, name := range slices.Sorted(maps.Keys(manifest)) {
			if _, err := db.Exec(ctx, `INSERT INTO flow_files (hash, data) VALUES (?, ?) ON CONFLICT (hash) DO NOTHING`,
				manifest[name], fv.Files[name]); err != nil {
				return err
			}
		}
		_, err := db.Exec(ctx, `INSERT INTO flow_versions (flow, version, path, manifest, created_at) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (flow, version) DO NOTHING`, fv.Flow, fv.Version, fv.Path, string(m), nanos(fv.Created))
		return err
	})
}

// FlowVersion implements store.Versions.
func (v Versions) FlowVersion(ctx context.Context, flow, version string) (*store.FlowVersion, error) {
	var fv store.FlowVersion
	var manifest string
	var created int64
	if err := one(ctx, v.DB, func(r Rows) error { return r.Scan(&fv.Path, &manifest, &created) },
		`SELECT path, manifest, created_at FROM flow_versions WHERE flow = ? AND version = ?`, flow, version); err != nil {
		return nil, err
	}
	fv.Flow, fv.Version, fv.Created = flow, version, fromNanos(created)
	var m map[string]string
	if err := json.Unmarshal([]byte(manifest), &m); err != nil {
		return nil, err
	}
	fv.Files = make(map[string][]byte, len(m))
	for _, name := range slices.Sorted(maps.Keys(m)) {
		var data []byte
		if err := one(ctx, v.DB, func(r Rows) error { return r.Scan(&data) }, `SELECT data FROM flow_files WHERE hash = ?`, m[name]); err != nil {
			return nil, err
		}
		fv.Files[name] = data
	}
	return &fv, nil
}

// FlowVersions implements store.Versions.
func (v Versions) FlowVersions(ctx context.Context, flow string) ([]*store.FlowVersion, error) {
	rows, err := v.DB.Query(ctx, `SELECT version, path, created_at FROM flow_versions WHERE flow = ? ORDER BY created_at DESC, version LIMIT ?`,
		flow, store.MaxPage)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*store.FlowVersion
	for rows.Next() {
		fv := &store.FlowVersion{Flow: flow}
		var created int64
		if err := rows.Scan(&fv.Version, &fv.Path, &created); err != nil {
			return nil, err
		}
		fv.Created = fromNanos(created)
		out = append(out, fv)
	}
	return out, rows.Err()
}

// PinThread implements store.Versions: a thread with no version gets its
// row (a unique key refuses a second), one with a version moves only
// from the version expected.
func (v Versions) PinThread(ctx context.Context, p *store.ThreadPin, expect string) error {
	if expect == "" {
		_, err := v.DB.Exec(ctx, `INSERT INTO thread_versions (thread, tenant, flow, version, since) VALUES (?, ?, ?, ?, ?)`,
			p.Thread, p.Tenant, p.Flow, p.Version, nanos(p.Since))
		if err != nil && v.DB.Unique(err) {
			return store.ErrPinChanged
		}
		return err
	}
	n, err := v.DB.Exec(ctx, `UPDATE thread_versions SET flow = ?, version = ?, since = ? WHERE thread = ? AND tenant = ? AND version = ?`,
		p.Flow, p.Version, nanos(p.Since), p.Thread, p.Tenant, expect)
	if err == nil && n == 0 {
		err = store.ErrPinChanged
	}
	return err
}

const pinColumns = `thread, tenant, flow, version, since`

func scanPin(r Rows) (*store.ThreadPin, error) {
	var p store.ThreadPin
	var since int64
	if err := r.Scan(&p.Thread, &p.Tenant, &p.Flow, &p.Version, &since); err != nil {
		return nil, err
	}
	p.Since = fromNanos(since)
	return &p, nil
}

// ThreadPin implements store.Versions.
func (v Versions) ThreadPin(ctx context.Context, tenant, thread string) (*store.ThreadPin, error) {
	var p *store.ThreadPin
	err := one(ctx, v.DB, func(r Rows) (err error) { p, err = scanPin(r); return err },
		`SELECT `+pinColumns+` FROM thread_versions WHERE thread = ? AND tenant = ?`, thread, tenant)
	return p, err
}

// ThreadPins implements store.Versions.
func (v Versions) ThreadPins(ctx context.Context, q store.PinQuery) ([]*store.ThreadPin, error) {
	query := `SELECT ` + pinColumns + ` FROM thread_versions WHERE tenant = ? AND flow = ? AND thread > ?`
	args := []any{q.Tenant, q.Flow, q.After}
	if q.Version != "" {
		query += ` AND version = ?`
		args = append(args, q.Version)
	}
	rows, err := v.DB.Query(ctx, query+` ORDER BY thread LIMIT ?`, append(args, store.PageLimit(q.Limit))...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*store.ThreadPin
	for rows.Next() {
		p, err := scanPin(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// CountPins implements store.Versions.
func (v Versions) CountPins(ctx context.Context, tenant, flow string) (map[string]int, error) {
	rows, err := v.DB.Query(ctx, `SELECT version, count(*) FROM thread_versions WHERE tenant = ? AND flow = ? GROUP BY version`, tenant, flow)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var version string
		var n int64
		if err := rows.Scan(&version, &n); err != nil {
			return nil, err
		}
		out[version] = int(n)
	}
	return out, rows.Err()
}

var _ store.Versions = Versions{}
