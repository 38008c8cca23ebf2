package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"slices"

	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/internal/sqlstore"
	"github.com/trellisflow/trellis/runtime/value"
)

// fold loads the state at checkpoint seq from its rows.
func (s *Store) fold(ctx context.Context, thread string, seq uint64) (*store.Folder, error) {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	var meta string
	cp := store.Checkpoint{Seq: seq}
	if err := tx.StmtContext(ctx, s.st.checkpoint).QueryRowContext(ctx, thread, seq).Scan(&meta, &cp.Run, &cp.Step); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, store.ErrNotFound
		}
		return nil, err
	}
	if err := sqlstore.DecodeMeta([]byte(meta), &cp); err != nil {
		return nil, err
	}
	c, spans, err := foldTx{tx, s}.LastFold(ctx, thread, seq)
	if err != nil {
		return nil, err
	}
	var sp sqlstore.Spans
	var read []uint64 // the checkpoints up to the fold whose rows are read
	if spans != nil {
		if sp, err = sqlstore.DecodeSpans(spans); err != nil {
			return nil, err
		}
		var ok bool
		if read, ok = sp.Checkpoints(); !ok {
			sp = nil
		}
	}
	var l sqlstore.Loader
	defer l.Close()
	if sp == nil {
		rows, err := tx.StmtContext(ctx, s.st.youngState).QueryContext(ctx, thread, seq)
		if err != nil {
			return nil, err
		}
		frs, err := checkpointRows(rows)
		if err != nil {
			return nil, err
		}
		for _, r := range sqlstore.FromBase(frs) {
			l.Add(r)
		}
		return l.Fold(&cp)
	}
	rows, err := tx.StmtContext(ctx, s.st.foldedSegments).QueryContext(ctx, thread, rangesJSON(sp.Segments()))
	if err != nil {
		return nil, err
	}
	if err := scanFieldRows(rows, l.Add); err != nil {
		return nil, err
	}
	list, err := json.Marshal(read)
	if err != nil {
		return nil, err
	}
	if rows, err = tx.StmtContext(ctx, s.st.foldedState).QueryContext(ctx, thread, string(list), c, seq); err != nil {
		return nil, err
	}
	frs, err := checkpointRows(rows)
	if err != nil {
		return nil, err
	}
	want := map[string][]sqlstore.Range{}
	for _, r := range sp.Rows(c) {
		want[r.Field] = append(want[r.Field], r)
	}
	for _, r := range frs {
		if r.Seq > c || slices.ContainsFunc(want[r.Field], func(w sqlstore.Range) bool { return r.Seq >= w.Lo && r.Seq <= w.Hi }) {
			l.Add(r)
		}
	}
	return l.Fold(&cp)
}

// checkpointRows reads the writes of rows of (seq, writes), and closes
// them.
func checkpointRows(rows *sql.Rows) ([]sqlstore.FieldRow, error) {
	defer rows.Close()
	var out []sqlstore.FieldRow
	for rows.Next() {
		var seq uint64
		var writes string
		if err := rows.Scan(&seq, &writes); err != nil {
			return nil, err
		}
		var err error
		if out, err = sqlstore.DecodeWrites(seq, []byte(writes), nil, out); err != nil {
			return nil, err
		}
	}
	return out, rows.Err()
}

// rangesJSON lists ranges as the JSON the fold queries take apart with
// json_each: [[field, lo, hi], ...].
func rangesJSON(rs []sqlstore.Range) string {
	l := make([][3]any, len(rs))
	for i, r := range rs {
		l[i] = [3]any{r.Field, r.Lo, r.Hi}
	}
	b, _ := json.Marshal(l)
	return string(b)
}

// scanFieldRows reads rows of (field, seq, version, append, value),
// passing each to add, and closes them.
func scanFieldRows(rows *sql.Rows, add func(sqlstore.FieldRow)) error {
	defer rows.Close()
	for rows.Next() {
		var r sqlstore.FieldRow
		var stored string
		if err := rows.Scan(&r.Field, &r.Seq, &r.Version, &r.Append, &stored); err != nil {
			return err
		}
		if value.Packed(stored) {
			r.Packed = stored
		} else {
			r.Value = []byte(stored)
		}
		add(r)
	}
	return rows.Err()
}

// foldTx reads and writes folds in a transaction: for loading, and for
// sqlstore.RecordFold.
type foldTx struct {
	*sql.Tx
	s *Store
}

func (tx foldTx) LastFold(ctx context.Context, thread string, seq uint64) (uint64, []byte, error) {
	var c uint64
	var spans string
	err := tx.StmtContext(ctx, tx.s.st.lastFold).QueryRowContext(ctx, thread, seq).Scan(&c, &spans)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil, nil
	}
	return c, []byte(spans), err
}

func (tx foldTx) Keys(ctx context.Context, thread string, after, upto uint64) ([]sqlstore.KeyRow, error) {
	rows, err := tx.StmtContext(ctx, tx.s.st.foldKeys).QueryContext(ctx, thread, after, upto)
	if err != nil {
		return nil, err
	}
	frs, err := checkpointRows(rows)
	if err != nil {
		return nil, err
	}
	sqlstore.SortRows(frs)
	keys := make([]sqlstore.KeyRow, len(frs))
	for i, r := range frs {
		keys[i] = sqlstore.KeyRow{Field: r.Field, Seq: r.Seq, Append: r.Append}
	}
	return keys, nil
}

func (tx foldTx) Rows(ctx context.Context, thread string, seqs []uint64) ([]sqlstore.FieldRow, error) {
	list, err := json.Marshal(seqs)
	if err != nil {
		return nil, err
	}
	rows, err := tx.StmtContext(ctx, tx.s.st.foldRows).QueryContext(ctx, thread, string(list))
	if err != nil {
		return nil, err
	}
	return checkpointRows(rows)
}

func (tx foldTx) PutSegment(ctx context.Context, thread string, r sqlstore.Range, version uint64, items []byte) error {
	_, err := tx.StmtContext(ctx, tx.s.st.putSegment).ExecContext(ctx, thread, r.Field, r.Hi, r.Lo, version, string(items))
	return err
}

func (tx foldTx) PutFold(ctx context.Context, thread string, seq uint64, spans []byte) error {
	_, err := tx.StmtContext(ctx, tx.s.st.putFold).ExecContext(ctx, thread, seq, string(spans))
	return err
}
