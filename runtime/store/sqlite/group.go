package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/trellisflow/trellis/runtime/store"
)

// Group commit: SQLite runs one write transaction at a time, and most of
// a small transaction's cost is its own (BEGIN, the WAL frames of its
// pages, COMMIT), not its statements'. The writes of this process that
// wait while one is running are committed together in the next: each in
// a savepoint of its own, so that one write's failure rolls back only
// it, in the order they came. The first waiting writer to get the writer
// token runs the group for all of them (it leads), and each writer
// returns once the transaction holding its work has committed (or
// failed).
//
// A write in a group runs under its own context's values but not its
// cancellation: an interrupted statement would roll back the whole
// transaction, the other writers' work with it. A write whose context
// ends while it waits is taken out of the queue and returns the
// context's error; one already running finishes.

// groupMax bounds the writes committed in one transaction.
const groupMax = 64

// job is one write waiting for a transaction.
type job struct {
	ctx  context.Context
	fn   func(ctx context.Context, tx *sql.Tx) error
	err  error
	done chan struct{}
}

// tx runs fn in a write transaction, with the writes waiting beside it
// (see group commit above), and returns once that transaction has
// committed or failed. fn runs its statements under the context it is
// given: ctx without its cancellation. Statements first met in the
// transaction are prepared after it.
func (s *Store) tx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	j := &job{ctx: ctx, fn: fn, done: make(chan struct{})}
	s.waiting.Add(j)
	for {
		select {
		case <-j.done:
			return j.err
		case s.writer <- struct{}{}:
			s.lead()
			<-s.writer
		case <-ctx.Done():
			if s.waiting.Drop(j) {
				return ctx.Err()
			}
			<-j.done
			return j.err
		}
	}
}

// lead commits the waiting writes, a group at a time, until none waits.
// The caller holds the writer.
func (s *Store) lead() {
	for {
		jobs := s.waiting.Take(groupMax)
		if len(jobs) == 0 {
			return
		}
		s.commitGroup(jobs)
		s.prepared.prepareWanted(context.Background())
	}
}

// commitGroup runs jobs in one transaction, each in a savepoint when
// there are several, and ends each with its result.
func (s *Store) commitGroup(jobs []*job) {
	start := time.Now()
	took := make([]time.Duration, len(jobs))
	shared := len(jobs) > 1
	err := s.begin(context.Background(), func(tx *sql.Tx) error {
		for i, j := range jobs {
			t := time.Now()
			var aborted bool
			aborted, j.err = s.runJob(tx, j, shared)
			took[i] = time.Since(t)
			switch {
			case aborted && j.err != nil:
				return fmt.Errorf("sqlite: a write's failure ended the transaction it shared: %w", j.err)
			case aborted:
				return errors.New("sqlite: a write's savepoint could not be released")
			case !shared && j.err != nil:
				return j.err
			}
		}
		return nil
	})
	commit := time.Since(start)
	for _, d := range took {
		commit -= d
	}
	if err == nil {
		s.writes.Add(1)
	}
	for i, j := range jobs {
		if err != nil && j.err == nil {
			j.err = err
		}
		store.AddHold(j.ctx, took[i]+commit)
		close(j.done)
	}
	if err == nil {
		s.committed()
	}
}

// runJob runs j in tx, in a savepoint when shared is set, and reports
// whether the transaction can no longer go on, and its error.
func (s *Store) runJob(tx *sql.Tx, j *job, shared bool) (aborted bool, err error) {
	ctx := context.WithoutCancel(j.ctx)
	if !shared {
		return false, j.fn(ctx, tx)
	}
	if _, err := tx.ExecContext(ctx, `SAVEPOINT w`); err != nil {
		return true, err
	}
	if err = j.fn(ctx, tx); err != nil {
		if _, rerr := tx.ExecContext(ctx, `ROLLBACK TO w`); rerr != nil {
			return true, err
		}
	}
	if _, rerr := tx.ExecContext(ctx, `RELEASE w`); rerr != nil {
		return true, err
	}
	return false, err
}
