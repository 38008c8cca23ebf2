package sqlite

import "context"

// Checkpoints: a commit appends its pages to the write-ahead log, and a
// checkpoint copies them into the database file, so that the log can
// start again from its beginning. SQLite's own (every 1,000 pages) runs
// in the commit that crosses the mark, holding the writer while it
// copies the pages and syncs the log and the file: every write waiting
// for the writer waits for it too. Here the connections do not
// checkpoint on their own. After checkpointEvery write transactions, a
// checkpoint runs beside the writes (a passive one, which blocks neither
// writers nor readers) and copies the bulk; once it is done, the writer,
// after its next transaction, copies what was committed meanwhile (a few
// pages), so that the whole log is in the file and the next write starts
// it again from its beginning. (Under a steady stream of writes, a
// checkpoint beside them alone never catches up, and the log would grow
// without end, its reads slowing with it.) Should the bulk take longer
// than checkpointFar transactions, the writer waits for it and copies
// the rest, so that the log never holds more than checkpointFar
// transactions of this process. When this process's last connection
// closes, SQLite checkpoints the whole log and removes it.

const (
	// checkpointEvery is how many write transactions go by between two
	// checkpoints
	checkpointEvery = 256
	// checkpointFar is how many may go by before the writer checkpoints
	// whatever the one beside it is doing
	checkpointFar = 4 * checkpointEvery
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
	switch {
	case s.bulk.Load() == bulkDone || s.sinceCheckpoint >= checkpointFar:
		// the one beside, if still running, ends first: two at once,
		// one copies nothing
		s.checkpoints.Wait()
		s.checkpoint()
		s.sinceCheckpoint = 0
		s.bulk.CompareAndSwap(bulkDone, bulkIdle)
	case s.sinceCheckpoint >= checkpointEvery && s.bulk.CompareAndSwap(bulkIdle, bulkRunning):
		s.checkpoints.Add(1)
		go func() {
			defer s.checkpoints.Done()
			s.checkpoint()
			s.bulk.Store(bulkDone)
		}()
	}
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
