// Deleting and pruning: a thread whole, idle threads in batches, and a
// thread's old checkpoints below a base.

package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/internal/sqlstore"
)

// Delete implements store.Store: one call of trellis_delete_thread
// (migrations 018 and 022), one round trip.
func (s *Store) Delete(ctx context.Context, thread string) error {
	var status int
	err := s.pool.QueryRow(ctx, `SELECT trellis_delete_thread($1)`, thread).Scan(&status)
	s.cache.ForgetFamily(thread)
	switch {
	case err != nil:
		return err
	case status == 1:
		return store.ErrNotFound
	case status == 2:
		return store.ErrBusy
	}
	return nil
}

// PruneIdle implements store.IdlePruner: one call of trellis_prune_idle
// (migrations 018 and 022), one round trip. for all of threads.
func (s *Store) PruneIdle(ctx context.Context, threads []string, owner string, cutoff time.Time) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT trellis_prune_idle($1, $2, $3)`, threads, owner, sqlstore.Nanos(cutoff))
	if err != nil {
		return nil, err
	}
	deleted, err := pgx.CollectRows(rows, pgx.RowTo[string])
	for _, id := range threads {
		s.cache.ForgetFamily(id)
	}
	return deleted, err
}

// Prune implements store.Store.
func (s *Store) Prune(ctx context.Context, thread string, opts store.PruneOptions) (int, error) {
	cut, err := s.writeBase(ctx, thread, max(opts.Keep, 1))
	if err != nil || cut == 0 {
		return 0, err
	}
	var floor int64
	var total int
	if err := s.pool.QueryRow(ctx, `SELECT coalesce(min(seq), 0), count(*) FROM checkpoints WHERE thread = $1 AND seq < $2`, thread, cut).Scan(&floor, &total); err != nil {
		return 0, err
	}
	return store.DeleteBelow(ctx, opts, uint64(floor), uint64(cut), total, func(lo, hi uint64) (n int, err error) {
		err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, `DELETE FROM checkpoints WHERE thread = $1 AND seq >= $2 AND seq < $3`, thread, int64(lo), int64(hi))
			n = int(tag.RowsAffected())
			return err
		})
		return n, err
	})
}

// writeBase turns the checkpoint keep places below the head into a base
// holding the full state there, and returns its seq; when the thread has
// no such checkpoint, or it is a base already, it returns the newest
// base's seq (0: none), below which a stopped prune may have left rows.
func (s *Store) writeBase(ctx context.Context, thread string, keep int) (int64, error) {
	var cut int64
	var source string
	err := s.pool.QueryRow(ctx, `SELECT seq, source FROM checkpoints WHERE thread = $1 ORDER BY seq DESC LIMIT 1 OFFSET $2`, thread, keep).Scan(&cut, &source)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && source == string(store.SourceBase) {
		err = s.pool.QueryRow(ctx, `SELECT seq FROM checkpoints WHERE thread = $1 AND source = $2 ORDER BY seq DESC LIMIT 1`, thread, string(store.SourceBase)).Scan(&cut)
		if errors.Is(err, pgx.ErrNoRows) {
			return 0, nil
		}
		return cut, err
	}
	if err != nil {
		return 0, err
	}
	l, err := s.fold(ctx, thread, uint64(cut))
	if err != nil {
		return 0, err
	}
	base, err := sqlstore.EncodeWrites(store.BaseWrites(l.f.Snapshot(thread)))
	if err != nil {
		return 0, err
	}
	return cut, pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE checkpoints SET parent = 0, run = '', step = 0, source = $1, meta = $2, writes = $3 WHERE thread = $4 AND seq = $5`,
			string(store.SourceBase), []byte("{}"), base, thread, cut); err != nil {
			return err
		}
		// folds refer to the rows the base replaces: the next fold starts
		// afresh
		for _, table := range []string{"folds", "segments"} {
			if _, err := tx.Exec(ctx, `DELETE FROM `+table+` WHERE thread = $1`, thread); err != nil {
				return err
			}
		}
		return nil
	})
}
