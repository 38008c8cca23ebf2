package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

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
	// each batch deletes its checkpoints, with their writes
	return store.DeleteBelow(ctx, opts, floor, cut, total, func(lo, hi uint64) (n int, err error) {
		err = s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			res, err := tx.ExecContext(ctx, `DELETE FROM checkpoints WHERE thread = ? AND seq >= ? AND seq < ?`, thread, int64(lo), int64(hi))
			if err != nil {
				return err
			}
			rows, _ := res.RowsAffected()
			n = int(rows)
			return nil
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
	base, err := sqlstore.EncodeWrites(store.BaseWrites(f.Snapshot(thread)))
	if err != nil {
		return 0, err
	}
	return cut, s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `UPDATE checkpoints SET parent = 0, run = '', step = 0, source = ?, meta = '{}', writes = ? WHERE thread = ? AND seq = ?`,
			string(store.SourceBase), string(base), thread, cut); err != nil {
			return err
		}
		// folds refer to the rows the base replaces: the next fold starts
		// afresh
		for _, table := range []string{"folds", "segments"} {
			if _, err := tx.ExecContext(ctx, `DELETE FROM `+table+` WHERE thread = ?`, thread); err != nil {
				return err
			}
		}
		return nil
	})
}

// PruneIdle implements store.IdlePruner: the threads in one write
// transaction, each as Delete deletes it, under its lease taken as
// Acquire takes it (a thread another holder's lease holds is left), and
// only if it was not written since cutoff.
func (s *Store) PruneIdle(ctx context.Context, threads []string, owner string, cutoff time.Time) ([]string, error) {
	var gone, forget []string
	err := s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		gone, forget = gone[:0], forget[:0]
		db := catalogDB{db: tx, s: s}
		for _, thread := range threads {
			now := time.Now()
			res, err := tx.StmtContext(ctx, s.st.acquire).ExecContext(ctx, thread, owner, now.Add(time.Minute).UnixNano(), now.UnixNano())
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n == 0 {
				continue // another holder's
			}
			var updated int64
			err = tx.QueryRowContext(ctx, `SELECT updated_at FROM threads WHERE id = ?`, thread).Scan(&updated)
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return err
			}
			if err == nil && updated < sqlstore.Nanos(cutoff) {
				children, err := childThreads(ctx, tx, thread)
				if err != nil {
					return err
				}
				err = sqlstore.DeleteThread(ctx, db, thread, children)
				switch {
				case err == nil:
					gone = append(gone, thread)
					forget = append(forget, children...)
					continue
				case !errors.Is(err, store.ErrBusy) && !errors.Is(err, store.ErrNotFound):
					return err
				}
			}
			if _, err := tx.StmtContext(ctx, s.st.release).ExecContext(ctx, thread, owner); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, id := range append(forget, gone...) {
		s.cache.Forget(id)
	}
	return gone, nil
}

var _ store.IdlePruner = (*Store)(nil)
