// A thread's state at a checkpoint is read as a fold: the latest fold record
// below it, and the checkpoints whose writes come after it.

package postgres

import (
	"bytes"
	"cmp"
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/internal/sqlstore"
	"github.com/trellisflow/trellis/runtime/value"
)

// StateAt implements store.Store.
func (s *Store) StateAt(ctx context.Context, thread string, seq uint64) (*store.Snapshot, error) {
	if seq == 0 { // fold reads 0 as the head
		return nil, store.ErrNotFound
	}
	l, err := s.fold(ctx, thread, seq)
	if err != nil {
		return nil, err
	}
	return l.f.Snapshot(thread), nil
}

// loaded is a state read from the database.
type loaded struct {
	f       *store.Folder
	born    int64
	pending map[string][]store.Write // of the head, when it was loaded as such
}

// snapshot is the loaded state with its pending writes.
func (l *loaded) snapshot(thread string) *store.Snapshot {
	snap := l.f.Snapshot(thread)
	snap.Pending = l.pending
	return snap
}

// fold loads the state at checkpoint seq, or at the thread's head when
// seq is 0 (with the head's pending writes), in one repeatable read
// transaction sent in two round trips: the checkpoint and its fold, then
// the rows the fold names with the commit.
func (s *Store) fold(ctx context.Context, thread string, seq uint64) (*loaded, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	// a connection an error leaves inside the transaction is closed on
	// release, never reused
	defer conn.Release()
	var head pgx.Batch
	head.Queue(`BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY`)
	head.Queue(`SELECT c.seq, t.created_at, c.meta, c.run, c.step, f.seq, f.spans FROM threads t
		JOIN checkpoints c ON c.thread = t.id AND c.seq = CASE WHEN $2::bigint = 0 THEN t.head ELSE $2::bigint END
		LEFT JOIN LATERAL (SELECT seq, spans FROM folds WHERE thread = $1 AND seq <= c.seq ORDER BY seq DESC LIMIT 1) f ON true
		WHERE t.id = $1`, thread, int64(seq))
	br := conn.SendBatch(ctx, &head)
	var meta []byte
	var at int64
	var c *int64
	var spans *string
	var cp store.Checkpoint
	l := &loaded{}
	_, err = br.Exec()
	if err == nil {
		err = br.QueryRow().Scan(&at, &l.born, &meta, &cp.Run, &cp.Step, &c, &spans)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			_, err = conn.Exec(ctx, `ROLLBACK`)
			return nil, cmp.Or(err, store.ErrNotFound)
		}
		return nil, err
	}
	cp.Seq = uint64(at)
	if err := sqlstore.DecodeMeta(meta, &cp); err != nil {
		return nil, err
	}
	var body pgx.Batch
	var sp sqlstore.Spans
	var read []uint64 // the checkpoints up to the fold whose rows are read
	if spans != nil {
		if sp, err = sqlstore.DecodeSpans([]byte(*spans)); err != nil {
			return nil, err
		}
		var ok bool
		if read, ok = sp.Checkpoints(); !ok {
			sp = nil
		}
	}
	var pick func(r sqlstore.FieldRow) bool
	if sp == nil {
		// a thread younger than its first fold: every row it has
		body.Queue(`SELECT seq, writes FROM checkpoints WHERE thread = $1 AND seq <= $2`, thread, at)
	} else {
		fold := uint64(*c)
		want := map[string][]sqlstore.Range{}
		for _, r := range sp.Rows(fold) {
			want[r.Field] = append(want[r.Field], r)
		}
		pick = func(r sqlstore.FieldRow) bool {
			if r.Seq > fold {
				return true
			}
			for _, w := range want[r.Field] {
				if r.Seq >= w.Lo && r.Seq <= w.Hi {
					return true
				}
			}
			return false
		}
		gf, glo, ghi := rangeArrays(sp.Segments())
		// segments are binary, so a query of their own, and come first:
		// they decode while the rows are read
		body.Queue(`
			SELECT g.field, g.last, g.version, true, g.items
			FROM unnest($2::text[], $3::bigint[], $4::bigint[]) AS p(field, lo, hi)
			JOIN segments g ON g.thread = $1 AND g.field = p.field AND g.last BETWEEN p.lo AND p.hi AND g.first >= p.lo`,
			thread, gf, glo, ghi)
		body.Queue(`SELECT seq, writes FROM checkpoints WHERE thread = $1 AND seq = ANY($2)
			UNION ALL
			SELECT seq, writes FROM checkpoints WHERE thread = $1 AND seq > $3 AND seq <= $4`,
			thread, toInt64s(read), *c, at)
	}
	pending := seq == 0 && len(cp.Next) > 0
	if pending {
		body.Queue(`SELECT node, writes::text FROM pending WHERE thread = $1 AND parent = $2`, thread, at)
	}
	body.Queue(`COMMIT`)
	br = conn.SendBatch(ctx, &body)
	var rows sqlstore.Loader
	defer rows.Close()
	if sp != nil {
		err = addRows(br, &rows)
	}
	if err == nil {
		var fr []sqlstore.FieldRow
		if fr, err = checkpointRows(br, nil); err == nil {
			if sp == nil {
				fr = sqlstore.FromBase(fr)
			}
			for _, r := range fr {
				if pick == nil || pick(r) {
					rows.Add(r)
				}
			}
		}
	}
	if err == nil && pending {
		var pr pgx.Rows
		if pr, err = br.Query(); err == nil {
			read := &store.Snapshot{}
			_, err = sqlstore.ReadPending(read, pr)
			pr.Close()
			l.pending = read.Pending
		}
	}
	if err == nil {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	l.f, err = rows.Fold(&cp)
	return l, err
}

// checkpointRows reads the writes of the checkpoints of a batch's next
// query (seq, writes), adding those of the fields keep accepts (all
// when keep is nil) to rows.
func checkpointRows(br pgx.BatchResults, keep func(string) bool) ([]sqlstore.FieldRow, error) {
	q, err := br.Query()
	if err != nil {
		return nil, err
	}
	defer q.Close()
	var out []sqlstore.FieldRow
	for q.Next() {
		var seq int64
		var b []byte
		if err := q.Scan(&seq, &b); err != nil {
			return nil, err
		}
		if out, err = sqlstore.DecodeWrites(uint64(seq), b, keep, out); err != nil {
			return nil, err
		}
	}
	return out, q.Err()
}

func toInt64s(us []uint64) []int64 {
	out := make([]int64, len(us))
	for i, u := range us {
		out[i] = int64(u)
	}
	return out
}

// rangeArrays splits ranges into the arrays the fold queries unnest.
func rangeArrays(rs []sqlstore.Range) (fields []string, lo, hi []int64) {
	for _, r := range rs {
		fields, lo, hi = append(fields, r.Field), append(lo, int64(r.Lo)), append(hi, int64(r.Hi))
	}
	return fields, lo, hi
}

// commitFold commits a checkpoint that also records a fold (see
// sqlstore.FoldPlan), in one transaction and at most three round trips:
// the commit with what the fold is planned from (the newest fold before
// it and the writes of the checkpoints since), then the rows due to
// become segments when there are any, then the fold, its segments and
// the commit of the transaction.
func (s *Store) commitFold(ctx context.Context, cp *store.Checkpoint, args []any) (moved int, err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	// a connection an error leaves inside the transaction is closed on
	// release, never reused
	defer conn.Release()
	thread, c := cp.Thread, int64(cp.Seq)
	var plan pgx.Batch
	plan.Queue(`BEGIN`)
	q, args := commitStatement(cp, args)
	plan.Queue(q, args...)
	plan.Queue(`SELECT (SELECT spans FROM folds WHERE thread = $1 AND seq < $2 ORDER BY seq DESC LIMIT 1)`, thread, c)
	plan.Queue(`SELECT seq, writes FROM checkpoints WHERE thread = $1 AND seq <= $2
		AND seq > coalesce((SELECT max(seq) FROM folds WHERE thread = $1 AND seq < $2), 0)`, thread, c)
	br := conn.SendBatch(ctx, &plan)
	var spans *string
	var since []sqlstore.FieldRow
	if _, err = br.Exec(); err == nil {
		moved, err = scanCommit(br.QueryRow(), cp)
	}
	if err == nil {
		err = br.QueryRow().Scan(&spans)
	}
	if err == nil {
		since, err = checkpointRows(br, nil)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, err
	}
	if moved != 1 {
		_, err = conn.Exec(ctx, `ROLLBACK`)
		return moved, err
	}
	var stored []byte
	if spans != nil {
		stored = []byte(*spans)
	}
	sqlstore.SortRows(since)
	keys := make([]sqlstore.KeyRow, len(since))
	for i, r := range since {
		keys[i] = sqlstore.KeyRow{Field: r.Field, Seq: r.Seq, Append: r.Append}
	}
	p, err := sqlstore.PlanFold(cp.Seq, stored, keys)
	if err != nil {
		return 0, err
	}
	var due []sqlstore.FieldRow
	if len(p.Due) > 0 {
		if due, err = s.dueRows(ctx, conn, thread, p); err != nil {
			return 0, err
		}
	}
	folded, segs, err := p.Finish(due)
	if err != nil {
		return 0, err
	}
	var put pgx.Batch
	if len(segs) > 0 {
		fields, last, first, versions, items := make([]string, len(segs)), make([]int64, len(segs)), make([]int64, len(segs)), make([]int64, len(segs)), make([][]byte, len(segs))
		for i, g := range segs {
			fields[i], last[i], first[i], versions[i], items[i] = g.Field, int64(g.Hi), int64(g.Lo), int64(g.Version), g.Items
		}
		put.Queue(`INSERT INTO segments (thread, field, last, first, version, items)
			SELECT $1, * FROM unnest($2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bytea[])`, thread, fields, last, first, versions, items)
	}
	put.Queue(`INSERT INTO folds (thread, seq, spans) VALUES ($1, $2, $3)`, thread, c, string(folded))
	put.Queue(`COMMIT`)
	return moved, conn.SendBatch(ctx, &put).Close()
}

// dueRows reads the rows a fold joins into segments.
func (s *Store) dueRows(ctx context.Context, conn *pgxpool.Conn, thread string, p *sqlstore.FoldPlan) ([]sqlstore.FieldRow, error) {
	var b pgx.Batch
	b.Queue(`SELECT seq, writes FROM checkpoints WHERE thread = $1 AND seq = ANY($2)`, thread, toInt64s(p.DueCheckpoints()))
	br := conn.SendBatch(ctx, &b)
	rows, err := checkpointRows(br, nil)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	return p.DueRows(rows), nil
}

// addRows reads the field rows of a batch's next query into l.
func addRows(br pgx.BatchResults, l *sqlstore.Loader) error {
	rows, err := br.Query()
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		r, err := scanFieldRow(rows)
		if err != nil {
			return err
		}
		l.Add(r)
	}
	return rows.Err()
}

func scanFieldRow(row pgx.CollectableRow) (sqlstore.FieldRow, error) {
	var r sqlstore.FieldRow
	var seq, version int64
	err := row.Scan(&r.Field, &seq, &version, &r.Append, rowValue{&r})
	r.Seq, r.Version = uint64(seq), uint64(version)
	return r, err
}

// rowValue scans a stored value, JSON text or a packed segment, into its
// row with one copy.
type rowValue struct{ r *sqlstore.FieldRow }

func (v rowValue) ScanBytes(b []byte) error {
	if value.Packed(b) {
		v.r.Packed = string(b)
	} else {
		v.r.Value = bytes.Clone(b)
	}
	return nil
}
