package sqlstore

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/trellisflow/trellis/runtime/store"
)

// DB is what Catalog needs of a database: statements written with ?
// placeholders (a store whose driver numbers them rewrites them), and
// transactions.
type DB interface {
	// Exec runs a statement and returns how many rows it changed.
	Exec(ctx context.Context, query string, args ...any) (int64, error)
	// Query runs a query; the caller closes its rows.
	Query(ctx context.Context, query string, args ...any) (CloseRows, error)
	// Tx runs fn in a transaction, committed when fn returns nil.
	Tx(ctx context.Context, fn func(DB) error) error
	// Unique reports whether err is a unique-constraint violation.
	Unique(err error) bool
	// LockThread serialises, until the end of the transaction, the
	// transactions that lock the same thread's runs (a no-op where
	// write transactions are serialised anyway).
	LockThread(ctx context.Context, thread string) error
	// Now is an SQL expression of the database's time, in Unix
	// nanoseconds: the one clock of every server sharing it.
	Now() string
	// Shared is the clause that keeps the rows a query of a transaction
	// reads from changing until the transaction ends ("" where write
	// transactions are serialised anyway).
	Shared() string
}

// CloseRows are a query's rows.
type CloseRows interface {
	Rows
	Close()
}

// Catalog implements store.Catalog on the tables of the SQL stores'
// migrations (api_threads, api_runs, api_events, api_keys). Times are
// stored as Unix nanoseconds, zero as 0.
type Catalog struct{ DB DB }

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// RecordTime is t as the catalog records a time: nanoseconds since the
// epoch, 0 for the zero time.
func RecordTime(t time.Time) int64 { return nanos(t) }

// RunValues are a run's input, answers and config as its record holds
// them: JSON, null for none.
func RunValues(r *store.RunRecord) (input, answers, config string) {
	input, answers, config = string(r.Input), string(r.Answers), string(r.Config)
	if input == "" {
		input = "null"
	}
	if answers == "" {
		answers = "null"
	}
	if config == "" {
		config = "null"
	}
	return input, answers, config
}

// Queued sets a run being queued as EnqueueRun records it: claimed by
// its server (running since it was queued) on a free thread, queued for
// anyone on a busy one or when it names no server.
func Queued(r *store.RunRecord, busy bool) {
	r.Status, r.Started = store.RunQueued, time.Time{}
	if busy || r.Server == "" {
		r.Server = ""
	} else {
		r.Status, r.Started = store.RunRunning, r.Created
	}
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

func (c Catalog) insert(ctx context.Context, query string, args ...any) error {
	_, err := c.DB.Exec(ctx, query, args...)
	if err != nil && c.DB.Unique(err) {
		return store.ErrExists
	}
	return err
}

// one scans the single row of a query, or returns ErrNotFound.
func one(ctx context.Context, db DB, scan func(Rows) error, query string, args ...any) error {
	rows, err := db.Query(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return store.ErrNotFound
	}
	return scan(rows)
}

// CreateRun implements store.Catalog.
func (c Catalog) CreateRun(ctx context.Context, r *store.RunRecord) error {
	return insertRun(ctx, c.DB, r)
}

func insertRun(ctx context.Context, db DB, r *store.RunRecord) error {
	input, answers, cfg := RunValues(r)
	_, err := db.Exec(ctx, `INSERT INTO api_runs (id, tenant, thread, flow, flow_version, status, input, error, checkpoint,
		created_at, started_at, finished_at, resume, interrupt, server, stop, answers, config, trace, write_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		r.ID, r.Tenant, r.Thread, r.Flow, r.FlowVersion, string(r.Status), input, r.Error, int64(r.Checkpoint),
		nanos(r.Created), nanos(r.Started), nanos(r.Finished), r.Resume, r.Interrupt, r.Server, string(r.Stop), answers, cfg, r.Trace, r.WriteID)
	if err != nil && db.Unique(err) {
		return store.ErrExists
	}
	return err
}

// UpdateRun implements store.Catalog.
func (c Catalog) UpdateRun(ctx context.Context, r *store.RunRecord, expect store.RunState, evs []store.EventRecord) error {
	err := c.DB.Tx(ctx, func(db DB) error {
		n, err := updateRun(ctx, db, r, expect)
		if err != nil {
			return err
		}
		if n == 0 {
			return errUnchanged
		}
		return appendEvents(ctx, db, r.ID, evs)
	})
	if errors.Is(err, errUnchanged) {
		err = c.changed(ctx, r.ID)
	}
	return err
}

// updateRun changes a run's record to r when it holds what expect says,
// and says how many rows it changed.
func updateRun(ctx context.Context, db DB, r *store.RunRecord, expect store.RunState) (int64, error) {
	return db.Exec(ctx, `UPDATE api_runs SET status = ?, error = ?, checkpoint = ?, started_at = ?, finished_at = ?,
			resume = ?, server = ?, stop = ?, flow_version = ?, write_id = ? WHERE id = ? AND status = ? AND server = ? AND stop = ?`,
		string(r.Status), r.Error, int64(r.Checkpoint), nanos(r.Started), nanos(r.Finished), r.Resume, r.Server, string(r.Stop), r.FlowVersion,
		r.WriteID, r.ID, string(expect.Status), expect.Server, string(expect.Stop))
}

// errUnchanged is a conditional change that found no row to change.
var errUnchanged = errors.New("no row changed")

// changed tells why a conditional change of a run changed no row: the
// run is gone, or its record is not as expected.
func (c Catalog) changed(ctx context.Context, id string) error {
	err := one(ctx, c.DB, func(Rows) error { return nil }, `SELECT 1 FROM api_runs WHERE id = ?`, id)
	if err == nil {
		return store.ErrRunChanged
	}
	return err
}

const runColumns = `id, tenant, thread, flow, flow_version, status, input, error, checkpoint, created_at, started_at, finished_at,
	resume, interrupt, server, stop, answers, config, trace, write_id`

func scanRun(rows Rows) (*store.RunRecord, error) {
	var r store.RunRecord
	var status, input, answers, cfg, stop string
	var checkpoint, created, started, finished int64
	if err := rows.Scan(&r.ID, &r.Tenant, &r.Thread, &r.Flow, &r.FlowVersion, &status, &input, &r.Error, &checkpoint,
		&created, &started, &finished, &r.Resume, &r.Interrupt, &r.Server, &stop, &answers, &cfg, &r.Trace, &r.WriteID); err != nil {
		return nil, err
	}
	r.Stop = store.StopReason(stop)
	if cfg != "null" {
		r.Config = json.RawMessage(cfg)
	}
	r.Status, r.Input, r.Checkpoint = store.RunStatus(status), json.RawMessage(input), uint64(checkpoint)
	if answers != "null" {
		r.Answers = json.RawMessage(answers)
	}
	r.Created, r.Started, r.Finished = fromNanos(created), fromNanos(started), fromNanos(finished)
	return &r, nil
}

// Run implements store.Catalog.
func (c Catalog) Run(ctx context.Context, tenant, id string) (*store.RunRecord, error) {
	var r *store.RunRecord
	err := one(ctx, c.DB, func(rows Rows) (err error) { r, err = scanRun(rows); return err },
		`SELECT `+runColumns+` FROM api_runs WHERE id = ? AND tenant = ?`, id, tenant)
	return r, err
}

// Runs implements store.Catalog.
func (c Catalog) Runs(ctx context.Context, q store.RunQuery) ([]*store.RunRecord, error) {
	where, args := `thread = ? AND tenant = ?`, []any{q.Thread, q.Tenant}
	if q.Before != "" {
		var at int64
		if err := one(ctx, c.DB, func(r Rows) error { return r.Scan(&at) },
			`SELECT created_at FROM api_runs WHERE id = ? AND thread = ? AND tenant = ?`, q.Before, q.Thread, q.Tenant); err != nil {
			return nil, err
		}
		where += ` AND (created_at < ? OR (created_at = ? AND id < ?))`
		args = append(args, at, at, q.Before)
	}
	return runsWhere(ctx, c.DB, where+` ORDER BY created_at DESC, id DESC LIMIT ?`, append(args, store.PageLimit(q.Limit))...)
}

// runsWhere returns the runs a query selects.
func runsWhere(ctx context.Context, db DB, where string, args ...any) ([]*store.RunRecord, error) {
	rows, err := db.Query(ctx, `SELECT `+runColumns+` FROM api_runs WHERE `+where, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*store.RunRecord
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// EnqueueRun implements store.Catalog.
func (c Catalog) EnqueueRun(ctx context.Context, r *store.RunRecord, policy store.BusyPolicy) (busy bool, err error) {
	err = c.DB.Tx(ctx, func(db DB) error {
		if err := db.LockThread(ctx, r.Thread); err != nil {
			return err
		}
		// whether the thread is there, whether it is busy, and its last
		// run's time, in one statement: a run is queued in as few round
		// trips as may be
		var exists bool
		var last *int64
		if err := one(ctx, db, func(rows Rows) error { return rows.Scan(&exists, &busy, &last) },
			`SELECT EXISTS (SELECT 1 FROM api_threads WHERE id = ? AND tenant = ? AND NOT deleting),
				EXISTS (SELECT 1 FROM api_runs WHERE thread = ? AND status IN ('queued', 'running')),
				(SELECT max(created_at) FROM api_runs WHERE thread = ?)`, r.Thread, r.Tenant, r.Thread, r.Thread); err != nil {
			return err
		}
		if !exists {
			return store.ErrNotFound
		}
		if busy {
			switch policy {
			case store.BusyReject:
				return store.ErrBusy
			case store.BusyInterrupt:
				why := "interrupted by run " + r.ID
				if _, err := db.Exec(ctx, `UPDATE api_runs SET status = 'cancelled', error = ?, finished_at = ?
					WHERE thread = ? AND status = 'queued'`, why, nanos(r.Created), r.Thread); err != nil {
					return err
				}
				if _, err := db.Exec(ctx, `UPDATE api_runs SET stop = ? WHERE thread = ? AND status = 'running' AND stop = ''`, string(store.StopInterrupt), r.Thread); err != nil {
					return err
				}
			}
		}
		// a thread's runs are claimed in the order they were queued: the
		// run's time is taken under the thread's lock, after the last
		// one's, whatever the clocks of the servers that queued them say
		if last != nil && nanos(r.Created) <= *last {
			r.Created = fromNanos(*last + 1)
		}
		q := *r
		Queued(&q, busy)
		if err := insertRun(ctx, db, &q); err != nil {
			return err
		}
		if q.Status == store.RunRunning && q.Lease != nil {
			n, err := acquireLease(ctx, db, q.Thread, q.Lease.Owner, q.Lease.TTL)
			if err != nil {
				return err
			}
			q.Lease.Taken = n > 0
		}
		*r = q
		return nil
	})
	if err != nil && r.Lease != nil {
		r.Lease.Taken = false
	}
	return busy, err
}

// acquireLease takes a thread's lease for owner as Store.Acquire does,
// on the store's clock; it reports 0 when another holder keeps it.
func acquireLease(ctx context.Context, db DB, thread, owner string, ttl time.Duration) (int64, error) {
	now := db.Now()
	return db.Exec(ctx, `INSERT INTO leases (thread, owner, expires_at) VALUES (?, ?, `+now+` + ?)
		ON CONFLICT (thread) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at
		WHERE leases.owner = excluded.owner OR leases.expires_at < `+now, thread, owner, ttl.Nanoseconds())
}

// ClaimRun implements store.Catalog: the oldest queued run of a thread
// with no running run. Two servers claiming at once may pick the same
// run; the update takes it only while it is still queued, and the loser
// looks again.
func (c Catalog) ClaimRun(ctx context.Context, server, only string, now time.Time) (*store.RunRecord, error) {
	for {
		rows, err := c.DB.Query(ctx, `SELECT r.id FROM api_runs r WHERE r.status = 'queued' AND (? = '' OR r.id = ?)
			AND NOT EXISTS (SELECT 1 FROM api_runs x WHERE x.thread = r.thread AND x.status = 'running')
			AND NOT EXISTS (SELECT 1 FROM api_runs y WHERE y.thread = r.thread AND y.status = 'queued'
				AND (y.created_at < r.created_at OR (y.created_at = r.created_at AND y.id < r.id)))
			ORDER BY r.created_at, r.id LIMIT 1`, only, only)
		if err != nil {
			return nil, err
		}
		var id string
		found := rows.Next()
		if found {
			err = rows.Scan(&id)
		} else {
			err = rows.Err()
		}
		rows.Close()
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, store.ErrNotFound
		}
		var claimed *store.RunRecord
		err = c.DB.Tx(ctx, func(db DB) error {
			var tenant, thread string
			if err := one(ctx, db, func(r Rows) error { return r.Scan(&tenant, &thread) },
				`SELECT tenant, thread FROM api_runs WHERE id = ?`, id); err != nil {
				return err
			}
			if err := db.LockThread(ctx, thread); err != nil {
				return err
			}
			n, err := db.Exec(ctx, `UPDATE api_runs SET status = 'running', server = ?, started_at = ? WHERE id = ? AND status = 'queued'
				AND NOT EXISTS (SELECT 1 FROM api_runs x WHERE x.thread = ? AND x.status = 'running')`, server, nanos(now), id, thread)
			if err != nil || n == 0 {
				return err
			}
			rs, err := runsWhere(ctx, db, `id = ?`, id)
			if err == nil && len(rs) == 1 {
				claimed = rs[0]
			}
			return err
		})
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
		if claimed != nil {
			return claimed, nil
		}
	}
}

// RequestStop implements store.Catalog.
func (c Catalog) RequestStop(ctx context.Context, tenant, id string, why store.StopReason) (*store.RunRecord, error) {
	var out *store.RunRecord
	err := c.DB.Tx(ctx, func(db DB) error {
		if _, err := db.Exec(ctx, `UPDATE api_runs SET status = 'cancelled', error = ?, finished_at = `+db.Now()+` WHERE id = ? AND tenant = ? AND status = 'queued'`,
			why.Message(), id, tenant); err != nil {
			return err
		}
		if _, err := db.Exec(ctx, `UPDATE api_runs SET stop = ? WHERE id = ? AND tenant = ? AND status = 'running'`, string(why), id, tenant); err != nil {
			return err
		}
		rs, err := runsWhere(ctx, db, `id = ? AND tenant = ?`, id, tenant)
		if err != nil {
			return err
		}
		if len(rs) == 0 {
			return store.ErrNotFound
		}
		out = rs[0]
		return nil
	})
	return out, err
}

// ServerRuns implements store.Catalog.
func (c Catalog) ServerRuns(ctx context.Context, server string) ([]*store.RunRecord, error) {
	return runsWhere(ctx, c.DB, `server = ? AND status = 'running'`, server)
}

// QueueDepth implements store.Catalog.
func (c Catalog) QueueDepth(ctx context.Context) (int, error) {
	var n int
	err := one(ctx, c.DB, func(r Rows) error { return r.Scan(&n) }, `SELECT count(*) FROM api_runs WHERE status = 'queued'`)
	return n, err
}

// Beat implements store.Catalog.
func (c Catalog) Beat(ctx context.Context, server string) error {
	now := c.DB.Now()
	n, err := c.DB.Exec(ctx, `UPDATE api_servers SET seen_at = `+now+` WHERE id = ?`, server)
	if err != nil || n > 0 {
		return err
	}
	err = c.insert(ctx, `INSERT INTO api_servers (id, seen_at) VALUES (?, `+now+`)`, server)
	if errors.Is(err, store.ErrExists) {
		_, err = c.DB.Exec(ctx, `UPDATE api_servers SET seen_at = `+now+` WHERE id = ?`, server)
	}
	return err
}

// AdoptRun implements store.Catalog.
func (c Catalog) AdoptRun(ctx context.Context, server string, deadAfter time.Duration) (*store.RunRecord, error) {
	for {
		rs, err := runsWhere(ctx, c.DB, `status = 'running' AND server <> ? AND NOT EXISTS
			(SELECT 1 FROM api_servers s WHERE s.id = api_runs.server AND s.seen_at >= `+c.DB.Now()+` - ?) ORDER BY started_at LIMIT 1`,
			server, deadAfter.Nanoseconds())
		if err != nil {
			return nil, err
		}
		if len(rs) == 0 {
			return nil, store.ErrNotFound
		}
		r := rs[0]
		n, err := c.DB.Exec(ctx, `UPDATE api_runs SET server = ? WHERE id = ? AND server = ? AND status = 'running'`, server, r.ID, r.Server)
		if err != nil {
			return nil, err
		}
		if n == 1 {
			r.Server = server
			return r, nil
		}
	}
}

// DeleteRun implements store.Catalog.
func (c Catalog) DeleteRun(ctx context.Context, id string, expect store.RunState) error {
	err := c.DB.Tx(ctx, func(db DB) error {
		n, err := db.Exec(ctx, `DELETE FROM api_runs WHERE id = ? AND status = ? AND server = ? AND stop = ?`,
			id, string(expect.Status), expect.Server, string(expect.Stop))
		if err != nil {
			return err
		}
		if n == 0 {
			return errUnchanged
		}
		if _, err := db.Exec(ctx, `DELETE FROM api_event_packs WHERE run = ?`, id); err != nil {
			return err
		}
		_, err = db.Exec(ctx, `DELETE FROM api_events WHERE run = ?`, id)
		return err
	})
	if errors.Is(err, errUnchanged) {
		err = c.changed(ctx, id)
	}
	return err
}

var _ store.Catalog = Catalog{}
