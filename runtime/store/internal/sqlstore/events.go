// A run's events: appended by the server that holds the run, read in
// order from a sequence number, and packed once their stream's time to be
// resumed has passed.

package sqlstore

import (
	"bytes"
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

// A run's events are kept in rows of api_events (migration 039): a row
// holds the events first_seq..seq, their data joined by newlines, or one
// event (first_seq NULL), its data as it is. A batch's consecutive
// events whose data hold no newline (an event as the engine encodes it)
// go in one row: a step's events are one row, not a row each.

// EventRow is a row of api_events: the events First..Last (First 0: the
// one event Last) and their data.
type EventRow struct {
	First, Last int64
	Data        string
}

// EventRows lays a batch of events out as rows (see EventRow): each run
// of consecutive numbers (from 1 on) whose data hold no newline in one
// row, any other event in a row of its own.
func EventRows(evs []store.EventRecord) []EventRow {
	rows := make([]EventRow, 0, 1)
	var b strings.Builder
	for i := 0; i < len(evs); {
		j := i + 1
		if evs[i].Seq > 0 && !bytes.Contains(evs[i].Data, newline) {
			for j < len(evs) && evs[j].Seq == evs[j-1].Seq+1 && !bytes.Contains(evs[j].Data, newline) {
				j++
			}
		}
		if j == i+1 {
			rows = append(rows, EventRow{Last: evs[i].Seq, Data: string(evs[i].Data)})
			i = j
			continue
		}
		b.Reset()
		for k, ev := range evs[i:j] {
			if k > 0 {
				b.WriteByte('\n')
			}
			b.Write(ev.Data)
		}
		rows = append(rows, EventRow{First: evs[i].Seq, Last: evs[j-1].Seq, Data: b.String()})
		i = j
	}
	return rows
}

var newline = []byte{'\n'}

// Ascending reports whether a batch's events are numbered in ascending
// order: a batch that is not refuses itself (ErrExists), as a number
// not after the run's last event does.
func Ascending(evs []store.EventRecord) bool {
	for i := 1; i < len(evs); i++ {
		if evs[i].Seq <= evs[i-1].Seq {
			return false
		}
	}
	return true
}

// appendRow appends to out the events of an api_events row (first nil:
// one event) numbered after after.
func appendRow(out []store.EventRecord, first *int64, last int64, data string, after int64) ([]store.EventRecord, error) {
	if first == nil {
		if last > after {
			out = append(out, store.EventRecord{Seq: last, Data: []byte(data)})
		}
		return out, nil
	}
	if n := strings.Count(data, "\n") + 1; int64(n) != last-*first+1 {
		return nil, fmt.Errorf("the row of events %d to %d holds %d", *first, last, n)
	}
	seq := *first
	for part := range strings.SplitSeq(data, "\n") {
		if seq > after {
			out = append(out, store.EventRecord{Seq: seq, Data: []byte(part)})
		}
		seq++
	}
	return out, nil
}

// insertRows is the statement inserting evs' rows for run: the rows as
// values, then cond (its arguments after the rows'). The rows are
// inserted only while no row of the run holds an event numbered from
// the batch's first on: a run's events are appended in order, once.
func insertRows(run string, evs []store.EventRecord, cond string, condArgs ...any) (string, []any) {
	rows := EventRows(evs)
	var q strings.Builder
	q.WriteString(`INSERT INTO api_events (run, first_seq, seq, data) SELECT * FROM (VALUES `)
	args := make([]any, 0, 4*len(rows)+2+len(condArgs))
	for i, r := range rows {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString("(?, CAST(? AS BIGINT), CAST(? AS BIGINT), ?)")
		var first any
		if r.First != 0 {
			first = r.First
		}
		args = append(args, run, first, r.Last, r.Data)
	}
	q.WriteString(`) AS v WHERE NOT EXISTS (SELECT 1 FROM api_events WHERE run = ? AND seq >= ?) AND `)
	q.WriteString(cond)
	args = append(args, run, evs[0].Seq)
	return q.String(), append(args, condArgs...)
}

// appendHeld inserts a run's events in one statement while holder runs
// the run.
func appendHeld(ctx context.Context, db DB, run, holder string, evs []store.EventRecord) error {
	if !Ascending(evs) {
		return Refused(ctx, db, run, holder)
	}
	q, args := insertRows(run, evs, running(db), run, holder)
	n, err := db.Exec(ctx, q, args...)
	if err != nil && db.Unique(err) {
		return store.ErrExists
	}
	if err == nil && n == 0 {
		return Refused(ctx, db, run, holder)
	}
	return err
}

// running is the condition that holder (the second argument) runs run
// (the first), holding the run's record against an adoption where db
// can.
func running(db DB) string {
	return `EXISTS (SELECT 1 FROM api_runs WHERE id = ? AND server = ? AND status = 'running'` + db.Shared() + `)`
}

// Refused says why a batch of events holder appended to run was not
// recorded: the run is no longer the holder's (ErrRunChanged), or their
// numbers are taken (ErrExists).
func Refused(ctx context.Context, db DB, run, holder string) error {
	var holds bool
	if err := one(ctx, db, func(r Rows) error { return r.Scan(&holds) }, `SELECT `+running(db), run, holder); err != nil {
		return err
	}
	if !holds {
		return store.ErrRunChanged
	}
	return store.ErrExists
}

// appendEvents inserts a run's events in one statement, unless the run's
// packed events hold their numbers already.
func appendEvents(ctx context.Context, db DB, run string, evs []store.EventRecord) error {
	if len(evs) == 0 {
		return nil
	}
	if !Ascending(evs) {
		return store.ErrExists
	}
	q, args := insertRows(run, evs, `NOT EXISTS (SELECT 1 FROM api_event_packs WHERE run = ? AND last >= ?)`, run, evs[0].Seq)
	n, err := db.Exec(ctx, q, args...)
	if err != nil && db.Unique(err) || err == nil && n == 0 {
		return store.ErrExists
	}
	return err
}

// eventsQuery reads a run's event rows (run, after, limit: each row holds
// one event at least) and its pack, if it has one with events after after
// (run, after): rows with their first event's number, their last's and
// data and no pack, then the pack as a row with the number of its last
// event, no data and the pack.
const eventsQuery = `SELECT first_seq, seq, data, NULL FROM
		(SELECT first_seq, seq, data FROM api_events WHERE run = ? AND seq > ? ORDER BY seq LIMIT ?) AS e
	UNION ALL
	SELECT NULL, last, NULL, data FROM api_event_packs WHERE run = ? AND last > ?`

// readEvents reads a run's event rows and its pack from a query of the
// shape of eventsQuery, and merges their events after after in order, at
// most limit.
func (c Catalog) readEvents(ctx context.Context, run string, after int64, limit int, query string, args ...any) ([]store.EventRecord, error) {
	rows, err := c.DB.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.EventRecord
	var packed []byte
	for rows.Next() {
		var first *int64
		var last int64
		var data *string
		var pack []byte
		if err := rows.Scan(&first, &last, &data, &pack); err != nil {
			return nil, err
		}
		if data == nil {
			packed = append([]byte(nil), pack...)
			continue
		}
		if len(out) >= limit {
			continue // a page's events are in hand: the rest only to find the pack
		}
		if out, err = appendRow(out, first, last, *data, after); err != nil {
			return nil, fmt.Errorf("run %s: %w", run, err)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(out) > limit {
		out = out[:limit]
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
	rows, err := c.DB.Query(ctx, `SELECT run, first_seq, seq, data, NULL FROM api_events WHERE run IN `+in+`
		UNION ALL SELECT run, NULL, last, NULL, data FROM api_event_packs WHERE run IN `+in, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	packed := map[string][]byte{}
	for rows.Next() {
		var run string
		var first *int64
		var last int64
		var data *string
		var pack []byte
		if err := rows.Scan(&run, &first, &last, &data, &pack); err != nil {
			return nil, err
		}
		if data == nil {
			packed[run] = append([]byte(nil), pack...)
			continue
		}
		if out[run], err = appendRow(out[run], first, last, *data, math.MinInt64); err != nil {
			return nil, fmt.Errorf("run %s: %w", run, err)
		}
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
	evs, err := c.readEvents(ctx, run, math.MinInt64, math.MaxInt, `SELECT first_seq, seq, data, NULL FROM
			(SELECT first_seq, seq, data FROM api_events WHERE run = ? ORDER BY seq DESC LIMIT 1) AS e
		UNION ALL
		SELECT NULL, last, NULL, data FROM api_event_packs WHERE run = ?`, run, run)
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

// trimRow leaves run's row of events that holds through and events after
// it (a pack through an event inside a row) with the events after
// through alone.
func trimRow(ctx context.Context, db DB, run string, through int64) error {
	var first, last int64
	var data string
	err := one(ctx, db, func(r Rows) error { return r.Scan(&first, &last, &data) },
		`SELECT first_seq, seq, data FROM api_events WHERE run = ? AND seq > ? AND first_seq <= ?`, run, through, through)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	rest, err := appendRow(nil, &first, last, data, through)
	if err != nil {
		return fmt.Errorf("run %s: %w", run, err)
	}
	row := EventRows(rest)[0]
	var from any
	if row.First != 0 {
		from = row.First
	}
	_, err = db.Exec(ctx, `UPDATE api_events SET first_seq = CAST(? AS BIGINT), data = ? WHERE run = ? AND seq = ?`, from, row.Data, run, last)
	return err
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
			if err := trimRow(ctx, db, p.Run, p.Through); err != nil {
				return err
			}
			packed++
		}
		return nil
	})
	return packed, err
}
