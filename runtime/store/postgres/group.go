package postgres

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/internal/sqlstore"
)

// Group commit: the checkpoints and event appends this process writes
// while one group is under way are written together in the next
// transaction, sent as one batch (one round trip, one transaction, one
// flush of the log) where each would have had its own. Each is one
// statement that reports a conflict as a result, not an error, so a
// group fails only on an error of the database's: when the server
// reports it (a deadlock, a statement it refused), the transaction was
// rolled back and its statements are run one by one, each with its own
// result; when the connection fails, it may have committed, and every
// write hears the failure. Commits of one thread follow each other (a run waits for
// each), so a group never holds two of the same thread. The first
// waiting write to find no group under way sends the group for all (it
// leads); each returns once its own result is known.
//
// A write in a group runs without its context's cancellation (the
// others' work is in the same transaction); one whose context ends while
// it waits is taken out of the group and returns the context's error.

// groupMax bounds the writes in one transaction.
const groupMax = 64

// groupJob is one write waiting for a transaction: a statement returning
// one row, which scan reads (again, when the group failed and the
// statement runs alone).
type groupJob struct {
	ctx context.Context
	// stmts are the job's statements: one, or a chain's commits, which
	// are in one transaction wherever they run
	stmts []groupStmt
	err   error
	done  chan struct{}
}

// groupStmt is a statement returning one row, and what reads it.
type groupStmt struct {
	query string
	args  []any
	scan  func(pgx.Row) error
}

// committer queues the writes and holds the token of the group under
// way. It counts the transactions it began: the groups sent as one, and
// the writes run each in its own (a group of one, or each of a group
// that failed).
type committer struct {
	token  chan struct{}
	groups atomic.Int64
	alone  atomic.Int64
	sqlstore.Waiting[*groupJob]
}

func newCommitter() *committer { return &committer{token: make(chan struct{}, 1)} }

// commitGrouped commits cp with its statement (commitStatement) in a
// group, and returns scanCommit's result.
func (s *Store) commitGrouped(ctx context.Context, cp *store.Checkpoint, query string, args []any) (int, error) {
	var moved int
	err := s.grouped(ctx, query, args, func(row pgx.Row) (err error) {
		moved, err = scanCommit(row, cp)
		return err
	})
	if err != nil && cp.Events != nil {
		cp.Events.Refused = false
	}
	return moved, err
}

// grouped runs query, a statement returning one row, in a group, and
// returns scan's error or the group's.
func (s *Store) grouped(ctx context.Context, query string, args []any, scan func(pgx.Row) error) error {
	return s.groupedAll(ctx, []groupStmt{{query, args, scan}})
}

// groupedAll runs stmts, in order, in one transaction of a group, and
// returns the first error of their scans or the group's.
func (s *Store) groupedAll(ctx context.Context, stmts []groupStmt) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	j := &groupJob{ctx: ctx, stmts: stmts, done: make(chan struct{})}
	c := s.commits
	c.Add(j)
	for {
		select {
		case <-j.done:
			return j.err
		case c.token <- struct{}{}:
			for jobs := c.Take(groupMax); len(jobs) > 0; jobs = c.Take(groupMax) {
				s.commitGroup(jobs)
			}
			<-c.token
		case <-ctx.Done():
			if c.Drop(j) {
				return ctx.Err()
			}
			<-j.done
			return j.err
		}
	}
}

// commitGroup writes jobs in one transaction, or one by one if it
// fails, and ends each with its result.
func (s *Store) commitGroup(jobs []*groupJob) {
	defer func() {
		for _, j := range jobs {
			close(j.done)
		}
	}()
	if len(jobs) > 1 || len(jobs[0].stmts) > 1 {
		s.commits.groups.Add(1)
		err := s.sendGroup(jobs)
		if err == nil {
			return
		}
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || classify(err) == store.Unavailable && !rolledBack(pe) {
			// the connection failed, not a statement: the transaction may
			// have committed before its reply was lost, so running its
			// statements again would judge each against its own work.
			// Each writer hears the failure and tries again as it knows
			// how (store.Recommitted, store.Reappended).
			for _, j := range jobs {
				j.err = err
			}
			return
		}
	}
	for _, j := range jobs {
		s.commits.alone.Add(1)
		j.err = s.runAlone(j)
	}
}

// runAlone runs j's statements in a transaction of their own (a single
// one as itself).
func (s *Store) runAlone(j *groupJob) error {
	ctx := context.WithoutCancel(j.ctx)
	if len(j.stmts) == 1 {
		st := j.stmts[0]
		return st.scan(s.pool.QueryRow(ctx, st.query, st.args...))
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		for _, st := range j.stmts {
			if err := st.scan(tx.QueryRow(ctx, st.query, st.args...)); err != nil {
				return err
			}
		}
		return nil
	})
}

// sendGroup writes jobs in one transaction, one batch. Their rows are
// read as they come; a group that fails is written again one by one,
// which reads them again.
func (s *Store) sendGroup(jobs []*groupJob) error {
	ctx := context.Background()
	var b pgx.Batch
	b.Queue(`BEGIN`)
	for _, j := range jobs {
		for _, st := range j.stmts {
			b.Queue(st.query, st.args...)
		}
	}
	b.Queue(`COMMIT`)
	// after an error the batch's statements are skipped to its end, and
	// its connection, left in the failed transaction, is closed when it
	// goes back to the pool, never reused
	br := s.pool.SendBatch(ctx, &b)
	_, err := br.Exec()
	for _, j := range jobs {
		for _, st := range j.stmts {
			if err != nil {
				break
			}
			err = st.scan(br.QueryRow())
		}
	}
	if err == nil {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

// rolledBack reports whether the server's error pe, ending a group's
// transaction, says the transaction was rolled back: an error of a
// statement, or a conflict the server resolved by aborting it; not one
// of the server's going away, which may come after the commit.
func rolledBack(pe *pgconn.PgError) bool {
	return pe.Code == "40001" || pe.Code == "40P01" || pe.Code == "55P03"
}
