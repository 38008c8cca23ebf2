package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"

	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/internal/sqlstore"
)

// Prune implements store.Store.
func (s *Store) Prune(ctx context.Context, thread string, opts store.PruneOptions) (int, error) {
	cut, err := s.writeBase(ctx, thread, max(opts.Keep, 1))
	if err != nil || cut == 0 {
		return 0, err
	}
	var floor uint64
	var total int
	if err := s.db.QueryRowContext(ctx, `SELECT coalesce(min(seq), 0), count(*) FROM checkpoints WHERE thread = ? AND seq < ?`, thread, cut).Scan(&floor, &total); err != nil {
		return 0, err
	}
	// Each batch deletes the writes of its checkpoints, then the
	// checkpoints, on a connection of its own with foreign keys off:
	// without statistics SQLite looks up a deleted checkpoint's writes
	// by the thread alone, scanning all of them for every checkpoint.
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `PRAGMA foreign_keys = OFF`); err != nil {
		return 0, err
	}
	defer func() {
		if _, err := conn.ExecContext(context.Background(), `PRAGMA foreign_keys = ON`); err != nil {
			_ = conn.Raw(func(any) error { return driver.ErrBadConn }) // not back to the pool
		}
	}()
	return store.DeleteBelow(ctx, opts, floor, cut, total, func(lo, hi uint64) (n int, err error) {
		err = s.write(ctx, func() error {
			tx, err := conn.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			if _, err := tx.ExecContext(ctx, `DELETE FROM writes WHERE thread = ? AND seq >= ? AND seq < ?`, thread, int64(lo), int64(hi)); err != nil {
				return err
			}
			res, err := tx.ExecContext(ctx, `DELETE FROM checkpoints WHERE thread = ? AND seq >= ? AND seq < ?`, thread, int64(lo), int64(hi))
			if err != nil {
				return err
			}
			rows, _ := res.RowsAffected()
			n = int(rows)
			return tx.Commit()
		})
		return n, err
	})
}

// writeBase turns the checkpoint keep places below the head into a base
// holding the full state there, and returns its seq; when the thread has
// no such checkpoint, or it is a base already, it returns the newest
// base's seq (0: none), below which a stopped prune may have left rows.
func (s *Store) writeBase(ctx context.Context, thread string, keep int) (uint64, error) {
	var cut uint64
	var source string
	err := s.db.QueryRowContext(ctx, `SELECT seq, source FROM checkpoints WHERE thread = ? ORDER BY seq DESC LIMIT 1 OFFSET ?`, thread, keep).Scan(&cut, &source)
	if errors.Is(err, sql.ErrNoRows) || err == nil && source == string(store.SourceBase) {
		err = s.db.QueryRowContext(ctx, `SELECT seq FROM checkpoints WHERE thread = ? AND source = ? ORDER BY seq DESC LIMIT 1`, thread, string(store.SourceBase)).Scan(&cut)
		if errors.Is(err, sql.ErrNoRows) {
			return 0, nil
		}
		return cut, err
	}
	if err != nil {
		return 0, err
	}
	f, err := s.fold(ctx, thread, cut)
	if err != nil {
		return 0, err
	}
	base := store.BaseWrites(f.Snapshot(thread))
	return cut, s.tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `UPDATE checkpoints SET parent = 0, run = '', step = 0, source = ?, meta = '{}' WHERE thread = ? AND seq = ?`,
			string(store.SourceBase), thread, cut); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM writes WHERE thread = ? AND seq = ?`, thread, cut); err != nil {
			return err
		}
		// folds refer to the rows the base replaces: the next fold starts
		// afresh
		for _, table := range []string{"folds", "segments"} {
			if _, err := tx.ExecContext(ctx, `DELETE FROM `+table+` WHERE thread = ?`, thread); err != nil {
				return err
			}
		}
		for _, w := range base {
			b, err := sqlstore.Encode(w)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO writes (thread, seq, field, version, append, value) VALUES (?, ?, ?, ?, 0, ?)`,
				thread, cut, w.Field, w.Version, string(b)); err != nil {
				return err
			}
		}
		return nil
	})
}
