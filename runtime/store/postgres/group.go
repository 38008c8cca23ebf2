package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/internal/sqlstore"
)

// Group commit: the checkpoints this process commits while one commit is
// under way are committed together in the next transaction, sent as one
// batch (one round trip, one transaction, one flush of the log) where
// each would have had its own. A commit is one statement that reports a
// conflict as a result, not an error, so a group fails only on an error
// of the database's (a lost connection, a deadlock): its checkpoints are
// then committed one by one, each with its own result. Commits of one
// thread follow each other (a run waits for each), so a group never
// holds two of the same thread. The first waiting commit to find no group
// under way sends the group for all (it leads); each returns once its
// own result is known.
//
// A commit in a group runs without its context's cancellation (the
// others' work is in the same transaction); one whose context ends while
// it waits is taken out of the group and returns the context's error.

// groupMax bounds the commits in one transaction.
const groupMax = 64

// commitJob is one commit waiting for a transaction.
type commitJob struct {
	ctx   context.Context
	cp    *store.Checkpoint
	query string
	args  []any
	moved int
	err   error
	done  chan struct{}
}

// committer queues the commits and holds the token of the group under
// way.
type committer struct {
	token chan struct{}
	sqlstore.Waiting[*commitJob]
}

func newCommitter() *committer { return &committer{token: make(chan struct{}, 1)} }

// commitGrouped commits cp with its statement (commitStatement) in a
// group, and returns scanCommit's result.
func (s *Store) commitGrouped(ctx context.Context, cp *store.Checkpoint, query string, args []any) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	j := &commitJob{ctx: ctx, cp: cp, query: query, args: args, done: make(chan struct{})}
	c := s.commits
	c.Add(j)
	for {
		select {
		case <-j.done:
			return j.moved, j.err
		case c.token <- struct{}{}:
			for jobs := c.Take(groupMax); len(jobs) > 0; jobs = c.Take(groupMax) {
				s.commitGroup(jobs)
			}
			<-c.token
		case <-ctx.Done():
			if c.Drop(j) {
				return 0, ctx.Err()
			}
			<-j.done
			return j.moved, j.err
		}
	}
}

// commitGroup commits jobs in one transaction, or one by one if it
// fails, and ends each with its result.
func (s *Store) commitGroup(jobs []*commitJob) {
	defer func() {
		for _, j := range jobs {
			close(j.done)
		}
	}()
	if len(jobs) > 1 && s.sendGroup(jobs) == nil {
		return
	}
	for _, j := range jobs {
		j.moved, j.err = scanCommit(s.pool.QueryRow(context.WithoutCancel(j.ctx), j.query, j.args...), j.cp)
	}
}

// sendGroup commits jobs in one transaction, one batch, setting their
// results when it commits.
func (s *Store) sendGroup(jobs []*commitJob) error {
	ctx := context.Background()
	var b pgx.Batch
	b.Queue(`BEGIN`)
	for _, j := range jobs {
		b.Queue(j.query, j.args...)
	}
	b.Queue(`COMMIT`)
	// after an error the batch's statements are skipped to its end, and
	// its connection, left in the failed transaction, is closed when it
	// goes back to the pool, never reused
	br := s.pool.SendBatch(ctx, &b)
	moved := make([]int, len(jobs))
	_, err := br.Exec()
	for i, j := range jobs {
		if err != nil {
			break
		}
		moved[i], err = scanCommit(br.QueryRow(), j.cp)
	}
	if err == nil {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		for _, j := range jobs {
			if j.cp.Events != nil {
				j.cp.Events.Refused = false
			}
		}
		return err
	}
	for i, j := range jobs {
		j.moved = moved[i]
	}
	return nil
}
