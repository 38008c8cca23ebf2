// A run's events: appended by the server that holds the run, read in
// order from a sequence number, and packed once their stream's time to be
// resumed has passed.

package sqlstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/trellisflow/trellis/runtime/store"
)

// AppendEvents implements store.Catalog: one statement for the whole
// batch, which inserts it only while the holder runs the run (the check
// holds the run's record against an adoption until the insert is done).
func (c Catalog) AppendEvents(ctx context.Context, run, holder string, evs []store.EventRecord) error {
	if len(evs) == 0 {
		return nil
	}
	if holder == "" {
		return appendEvents(ctx, c.DB, run, evs)
	}
	return appendHeld(ctx, c.DB, run, holder, evs)
}

// AppendWithCheckpoint records a checkpoint's events (store.EventAppend)
// on db, in the checkpoint's transaction: a refusal is set on ea, and
// fails nothing else.
func AppendWithCheckpoint(ctx context.Context, db DB, ea *store.EventAppend) error {
	if ea.End != nil {
		ea.End.Applied = false
	}
	if len(ea.Events) > 0 {
		err := appendHeld(ctx, db, ea.Run, ea.Holder, ea.Events)
		if errors.Is(err, store.ErrRunChanged) || errors.Is(err, store.ErrExists) {
			ea.Refused = true
			return nil
		}
		if err != nil {
			return err
		}
	}
	if ea.End == nil {
		return nil
	}
	n, err := updateRun(ctx, db, ea.End.Record, ea.End.Expect)
	if err != nil || n == 0 {
		return err
	}
	if err := appendEvents(ctx, db, ea.Run, ea.End.Events); err != nil {
		return err
	}
	ea.End.Applied = true
	return nil
}

// appendHeld inserts a run's events in one statement while holder runs
// the run.
func appendHeld(ctx context.Context, db DB, run, holder string, evs []store.EventRecord) error {
	var q strings.Builder
	q.WriteString(`INSERT INTO api_events (run, seq, data) SELECT * FROM (VALUES `)
	args := make([]any, 0, 3*len(evs)+2)
	for i, ev := range evs {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString("(?, CAST(? AS BIGINT), ?)")
		args = append(args, run, ev.Seq, string(ev.Data))
	}
	q.WriteString(`) AS v WHERE EXISTS (SELECT 1 FROM api_runs WHERE id = ? AND server = ? AND status = 'running'` + db.Shared() + `)`)
	n, err := db.Exec(ctx, q.String(), append(args, run, holder)...)
	if err != nil && db.Unique(err) {
		return store.ErrExists
	}
	if err == nil && n == 0 {
		return store.ErrRunChanged
	}
	return err
}

// appendEvents inserts a run's events in one statement, unless the run's
// packed events hold their numbers already.
func appendEvents(ctx context.Context, db DB, run string, evs []store.EventRecord) error {
	if len(evs) == 0 {
		return nil
	}
	var q strings.Builder
	q.WriteString(`INSERT INTO api_events (run, seq, data) SELECT * FROM (VALUES `)
	args := make([]any, 0, 3*len(evs)+2)
	first := evs[0].Seq
	for i, ev := range evs {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString("(?, CAST(? AS BIGINT), ?)")
		args = append(args, run, ev.Seq, string(ev.Data))
		first = min(first, ev.Seq)
	}
	q.WriteString(`) AS v WHERE NOT EXISTS (SELECT 1 FROM api_event_packs WHERE run = ? AND last >= ?)`)
	n, err := db.Exec(ctx, q.String(), append(args, run, first)...)
	if err != nil && db.Unique(err) || err == nil && n == 0 {
		return store.ErrExists
	}
	return err
}

// eventsQuery reads a run's event rows (run, after, limit) and its pack,
// if it has one with events after after (run, after): rows with data and
// no pack, then the pack as a row with the number of its last event, no
// data and the pack.
const eventsQuery = `SELECT seq, data, NULL FROM
		(SELECT seq, data FROM api_events WHERE run = ? AND seq > ? ORDER BY seq LIMIT ?) AS e
	UNION ALL
	SELECT last, NULL, data FROM api_event_packs WHERE run = ? AND last > ?`

// readEvents reads a run's event rows and its pack from a query of the
// shape of eventsQuery, and merges them in order, at most limit.
func (c Catalog) readEvents(ctx context.Context, run string, after int64, limit int, query string, args ...any) ([]store.EventRecord, error) {
	rows, err := c.DB.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.EventRecord
	var packed []byte
	for rows.Next() {
		var e store.EventRecord
		var data *string
		var pack []byte
		if err := rows.Scan(&e.Seq, &data, &pack); err != nil {
			return nil, err
		}
		if data == nil {
			packed = append([]byte(nil), pack...)
			continue
		}
		e.Data = []byte(*data)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	out, err = mergeEvents(packed, after, out, limit)
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", run, err)
	}
	return out, nil
}

// RunsEvents implements store.Catalog: one query for the rows and the
// packs of every run.
func (c Catalog) RunsEvents(ctx context.Context, runs []string) (map[string][]store.EventRecord, error) {
	out := map[string][]store.EventRecord{}
	if len(runs) == 0 {
		return out, nil
	}
	in := "(?" + strings.Repeat(", ?", len(runs)-1) + ")"
	args := make([]any, 0, 2*len(runs))
	for range 2 {
		for _, r := range runs {
			args = append(args, r)
		}
	}
	rows, err := c.DB.Query(ctx, `SELECT run, seq, data, NULL FROM api_events WHERE run IN `+in+`
		UNION ALL SELECT run, last, NULL, data FROM api_event_packs WHERE run IN `+in, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	packed := map[string][]byte{}
	for rows.Next() {
		var run string
		var e store.EventRecord
		var data *string
		var pack []byte
		if err := rows.Scan(&run, &e.Seq, &data, &pack); err != nil {
			return nil, err
		}
		if data == nil {
			packed[run] = append([]byte(nil), pack...)
			continue
		}
		e.Data = []byte(*data)
		out[run] = append(out[run], e)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for run := range out {
		slices.SortFunc(out[run], func(a, b store.EventRecord) int { return cmp.Compare(a.Seq, b.Seq) })
	}
	for run, p := range packed {
		evs, err := mergeEvents(p, 0, out[run], math.MaxInt)
		if err != nil {
			return nil, fmt.Errorf("run %s: %w", run, err)
		}
		out[run] = evs
	}
	return out, nil
}

// LastEvent implements store.Catalog.
func (c Catalog) LastEvent(ctx context.Context, run string) (*store.EventRecord, error) {
	evs, err := c.readEvents(ctx, run, 0, math.MaxInt, `SELECT seq, data, NULL FROM
			(SELECT seq, data FROM api_events WHERE run = ? ORDER BY seq DESC LIMIT 1) AS e
		UNION ALL
		SELECT last, NULL, data FROM api_event_packs WHERE run = ?`, run, run)
	if err != nil {
		return nil, err
	}
	if len(evs) == 0 {
		return nil, store.ErrNotFound
	}
	return &evs[len(evs)-1], nil
}

// Events implements store.Catalog.
func (c Catalog) Events(ctx context.Context, run string, after int64, limit int) ([]store.EventRecord, error) {
	limit = store.PageLimit(limit)
	return c.readEvents(ctx, run, after, limit, eventsQuery, run, after, limit, run, after)
}

// RunsToPack implements store.Catalog.
func (c Catalog) RunsToPack(ctx context.Context, before time.Time, limit int) ([]string, error) {
	rows, err := c.DB.Query(ctx, `SELECT id FROM api_runs WHERE NOT events_packed AND finished_at > 0 AND finished_at < ?
		AND status IN ('succeeded', 'failed', 'cancelled') ORDER BY finished_at LIMIT ?`, nanos(before), limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	return out, rows.Err()
}

// PackBacklog implements store.Backlog, through the index of the runs to
// pack.
func (c Catalog) PackBacklog(ctx context.Context, before time.Time) (int, error) {
	var n int
	err := one(ctx, c.DB, func(r Rows) error { return r.Scan(&n) }, `SELECT count(*) FROM api_runs WHERE NOT events_packed AND finished_at > 0
		AND finished_at < ? AND status IN ('succeeded', 'failed', 'cancelled')`, nanos(before))
	return n, err
}

// IdleBacklog implements store.Backlog, through the index of the
// threads' last writes.
func (c Catalog) IdleBacklog(ctx context.Context, cutoff time.Time) (int, error) {
	var n int
	err := one(ctx, c.DB, func(r Rows) error { return r.Scan(&n) }, `SELECT count(*) FROM threads WHERE updated_at < ? AND id NOT LIKE ?`,
		nanos(cutoff), "%"+store.ChildSep+"%")
	return n, err
}

var _ store.Backlog = Catalog{}

// PackEvents implements store.Catalog. The packs are compressed before
// the transaction, which only swaps the rows.
func (c Catalog) PackEvents(ctx context.Context, packs []store.EventPack) (int, error) {
	data := make([][]byte, len(packs))
	for i, p := range packs {
		if len(p.Events) == 0 {
			continue
		}
		var err error
		if data[i], err = EncodePack(p.Events); err != nil {
			return 0, fmt.Errorf("pack the events of run %s: %w", p.Run, err)
		}
	}
	packed := 0
	err := c.DB.Tx(ctx, func(db DB) error {
		packed = 0
		for i, p := range packs {
			n, err := db.Exec(ctx, `UPDATE api_runs SET events_packed = ? WHERE id = ? AND NOT events_packed
				AND status IN ('succeeded', 'failed', 'cancelled')`, true, p.Run)
			if err != nil {
				return err
			}
			if n == 0 {
				continue
			}
			if data[i] != nil {
				if _, err := db.Exec(ctx, `INSERT INTO api_event_packs (run, last, count, data) VALUES (?, ?, ?, ?)`,
					p.Run, p.Events[len(p.Events)-1].Seq, len(p.Events), data[i]); err != nil {
					return err
				}
			}
			if _, err := db.Exec(ctx, `DELETE FROM api_events WHERE run = ? AND seq <= ?`, p.Run, p.Through); err != nil {
				return err
			}
			packed++
		}
		return nil
	})
	return packed, err
}
