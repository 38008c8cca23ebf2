package sqlite

import (
	"context"
	"database/sql/driver"
	"os"
	"strconv"
	"time"
)

// Checkpoints: a commit appends its pages to the write-ahead log, and a
// checkpoint copies them into the database file, so that the log can
// start again from its beginning. SQLite's own (every 1,000 pages) runs
// in the commit that crosses the mark, holding the writer while it
// copies the pages and syncs the log and the file: every write waiting
// for the writer waits for it too. Here the connections do not
// checkpoint on their own. After checkpointEvery write transactions, or
// once the log's file holds checkpointBytes, a checkpoint runs beside
// the writes (a passive one, which blocks neither writers nor readers)
// and copies the bulk; once it is done, the writer, after its next
// transaction, copies what was committed meanwhile (a few pages), so
// that the whole log is in the file and the log starts again from its
// beginning. (Under a steady stream of writes, a checkpoint beside them
// alone never catches up.) A log starts again only once no reader reads
// from it, and under a steady stream of reads some reader always did: the
// log grew without end, its reads slowing with it. So a log whose file
// holds checkpointBytes is truncated instead: the writer copies it whole
// and empties its file, waiting at most truncateWait for the readers
// still reading from it (those that begin after the copy read the
// database file); readers that take longer leave the truncation to a
// later transaction, truncateAgain on. Should the bulk take longer than
// checkpointFar transactions, the writer waits for it and copies the
// rest; should the log's file reach four times checkpointBytes, its
// bound, the writer truncates it waiting as long as its readers take (at
// most truncateMust: the readers that begin meanwhile read the database
// file, so it is the longest read under way). A log
// that starts again on its own is cut to journalLimit (the
// journal_size_limit pragma). When this process's last connection
// closes, SQLite checkpoints the whole log and removes it.

const (
	// checkpointEvery is how many write transactions go by between two
	// checkpoints
	checkpointEvery = 256
	// checkpointFar is how many may go by before the writer checkpoints
	// whatever the one beside it is doing
	checkpointFar = 4 * checkpointEvery
	// checkpointBytes is the size of the log's file that starts a
	// checkpoint beside the writes, however few transactions it holds (a
	// group commit's can be large)
	checkpointBytes = 4 << 20
	// truncateWait is how long the writer's checkpoint waits for the
	// readers of the log before it leaves the truncation to a later one,
	// truncateAgain transactions on
	truncateWait  = 100 * time.Millisecond
	truncateAgain = 64
	// truncateMust is how long it waits for them once the log's file
	// reaches its bound: new readers read the database file, so the
	// wait is that of the longest read under way
	truncateMust = 2 * time.Second
	// journalLimit is the size a log that starts again is cut to
	journalLimit = 4 << 20
)

// The states of the checkpoint beside the writes.
const (
	bulkIdle = iota
	bulkRunning
	bulkDone
)

// committed counts a committed write transaction towards the next
// checkpoint, and checkpoints the log when it is due (see above). The
// caller holds the writer, and has given the transaction's writers their
// results.
func (s *Store) committed() {
	s.sinceCheckpoint++
	size := s.logSize()
	switch {
	case s.sinceCheckpoint >= s.truncateAt && (s.bulk.Load() == bulkDone || s.sinceCheckpoint >= checkpointFar || size >= 4*checkpointBytes):
		// the one beside, if still running, ends first: two at once,
		// one copies nothing
		s.checkpoints.Wait()
		switch {
		case size < checkpointBytes:
			// a short log: what was committed meanwhile is copied, and
			// the log starts again once no reader reads from it
			s.checkpoint()
		case size >= 4*checkpointBytes:
			// the log's bound: its readers are waited for
			s.truncate(truncateMust)
		case !s.truncate(truncateWait):
			s.truncateAt = s.sinceCheckpoint + truncateAgain
			return
		}
		s.sinceCheckpoint, s.truncateAt = 0, 0
		s.bulk.Store(bulkIdle)
	case (s.sinceCheckpoint >= checkpointEvery || size >= checkpointBytes) && s.bulk.CompareAndSwap(bulkIdle, bulkRunning):
		s.checkpoints.Add(1)
		go func() {
			defer s.checkpoints.Done()
			s.checkpoint()
			s.bulk.Store(bulkDone)
		}()
	}
}

// logSize is the size of the write-ahead log's file (0 when there is
// none).
func (s *Store) logSize() int64 {
	fi, err := os.Stat(s.path + "-wal")
	if err != nil {
		return 0
	}
	return fi.Size()
}

// checkpoint copies the log's frames that no reader needs into the
// database file. One that cannot (another checkpoint under way, here or
// in another process) leaves them to the next.
func (s *Store) checkpoint() {
	// its row (busy, the log's frames, those copied) is read, or the
	// pragma does not run
	var busy, frames, copied int
	_ = s.db.QueryRowContext(context.Background(), `PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &frames, &copied)
}

// truncate copies the whole log into the database file and empties the
// log's file once the readers reading from it are done, waiting for them
// at most wait, and reports whether it did. One that could not has
// copied what it could.
func (s *Store) truncate(wait time.Duration) bool {
	ctx := context.Background()
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return false
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `PRAGMA busy_timeout = `+strconv.Itoa(int(wait/time.Millisecond))); err != nil {
		return false
	}
	busy := 1
	var frames, copied int
	_ = conn.QueryRowContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`).Scan(&busy, &frames, &copied)
	if _, err := conn.ExecContext(ctx, `PRAGMA busy_timeout = `+strconv.Itoa(busyTimeout)); err != nil {
		// a connection left with the short timeout is not kept
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	}
	return busy == 0
}
