package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"

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
	var rows *sql.Rows
	if spans == nil {
		rows, err = tx.StmtContext(ctx, s.st.youngState).QueryContext(ctx, thread, seq)
	} else {
		var sp sqlstore.Spans
		if sp, err = sqlstore.DecodeSpans(spans); err != nil {
			return nil, err
		}
		rows, err = tx.StmtContext(ctx, s.st.foldedState).QueryContext(ctx,
			thread, rangesJSON(sp.Rows(c)), c, seq, rangesJSON(sp.Segments()))
	}
	if err != nil {
		return nil, err
	}
	var l sqlstore.Loader
	defer l.Close()
	if err := scanFieldRows(rows, l.Add); err != nil {
		return nil, err
	}
	return l.Fold(&cp)
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

// fieldRows collects the rows scanFieldRows reads.
func fieldRows(rows *sql.Rows) ([]sqlstore.FieldRow, error) {
	var out []sqlstore.FieldRow
	err := scanFieldRows(rows, func(r sqlstore.FieldRow) { out = append(out, r) })
	return out, err
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
	defer rows.Close()
	var keys []sqlstore.KeyRow
	for rows.Next() {
		var k sqlstore.KeyRow
		if err := rows.Scan(&k.Field, &k.Seq, &k.Append); err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, rows.Err()
}

func (tx foldTx) Rows(ctx context.Context, thread string, r sqlstore.Range) ([]sqlstore.FieldRow, error) {
	rows, err := tx.StmtContext(ctx, tx.s.st.foldRows).QueryContext(ctx, thread, r.Field, r.Lo, r.Hi)
	if err != nil {
		return nil, err
	}
	return fieldRows(rows)
}

func (tx foldTx) PutSegment(ctx context.Context, thread string, r sqlstore.Range, version uint64, items []byte) error {
	_, err := tx.StmtContext(ctx, tx.s.st.putSegment).ExecContext(ctx, thread, r.Field, r.Hi, r.Lo, version, string(items))
	return err
}

func (tx foldTx) PutFold(ctx context.Context, thread string, seq uint64, spans []byte) error {
	_, err := tx.StmtContext(ctx, tx.s.st.putFold).ExecContext(ctx, thread, seq, string(spans))
	return err
}
