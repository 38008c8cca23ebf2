// Package sqlite is the embedded checkpoint store: one SQLite file, no
// server, no cgo (modernc.org/sqlite). Its address is sqlite:PATH; it is
// the default store (store.Default). Write transactions begin IMMEDIATE, so
// two processes sharing a file serialise their commits instead of failing
// halfway.
package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"modernc.org/sqlite" // and the database/sql driver "sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/internal/sqlstore"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Store is a store.Store in a SQLite file.
type Store struct {
	db    *sql.DB
	path  string // the database's file
	cache *sqlstore.Cache
	st    statements
	// prepared are the shared catalog's statements, prepared once
	prepared *preparedCache
	// writer is the token a write holds while it runs: SQLite runs one
	// write at a time, and a writer that finds the database busy polls
	// for it (the busy timeout) where one queued here is woken as soon as
	// it is free. A write waits only as long as its context lets it.
	// Writers in other processes still meet the busy timeout. The writes
	// waiting for it are committed together (group.go).
	writer  chan struct{}
	waiting sqlstore.Waiting[*job]
	// wconn is the connection the writer's transactions run on (guarded
	// by the writer): SQLite drops a connection's page cache when another
	// connection wrote since it last read, so writes that moved from
	// connection to connection read again from the file the pages the
	// one before them had just written.
	wconn *sql.Conn
	// writes counts the write transactions committed
	writes atomic.Int64
	// the log's checkpoints (checkpoint.go): the write transactions
	// since the last whole one (guarded by the writer), the state of the
	// one beside the writes, and that one running
	sinceCheckpoint int
	truncateAt      int
	bulk            atomic.Int32
	checkpoints     sync.WaitGroup
	// Hooks is the store's store.Webhooks and store.Schedules, and
	// Versions its store.Versions: the shared SQL ones.
	sqlstore.Hooks
	sqlstore.Versions
	// Requests is its store.Requests: the idempotency keys of the API's
	// creating requests.
	sqlstore.Requests
	// Catalog is the store's store.Catalog: the shared SQL catalog on
	// this database.
	sqlstore.Catalog
}

// statements are the queries every run makes (leases, commits and the
// folds they record, loads, pending writes), prepared once: compiling
// them took about a quarter of a commit's time.
type statements struct {
	createThread, advanceThread, threadExists, dropPending, insertCheckpoint,
	head, checkpoint, lastFold, youngState, foldedSegments, foldedState, pending, putPending, acquire, release,
	foldKeys, foldRows, putSegment, putFold *sql.Stmt
}

func (st *statements) prepare(ctx context.Context, db *sql.DB) error {
	for _, q := range []struct {
		stmt  **sql.Stmt
		query string
	}{
		{&st.createThread, `INSERT INTO threads (id, head, created_at, updated_at) VALUES (?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`},
		{&st.advanceThread, `UPDATE threads SET head = ?, updated_at = ? WHERE id = ? AND head = ?`},
		{&st.threadExists, `SELECT 1 FROM threads WHERE id = ?`},
		{&st.dropPending, `DELETE FROM pending WHERE thread = ? AND parent < ?`},
		{&st.insertCheckpoint, `INSERT INTO checkpoints (thread, seq, parent, run, step, source, at, meta, writes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`},
		{&st.head, `SELECT head, created_at FROM threads WHERE id = ?`},
		{&st.checkpoint, `SELECT meta, run, step FROM checkpoints WHERE thread = ? AND seq = ?`},
		{&st.lastFold, `SELECT seq, spans FROM folds WHERE thread = ? AND seq <= ? ORDER BY seq DESC LIMIT 1`},
		// the state of a thread younger than its first fold: every row it has
		{&st.youngState, `SELECT seq, writes FROM checkpoints WHERE thread = ?1 AND seq <= ?2`},
		// the state through a fold: segments first, so that they decode
		// while the rows are read, then the checkpoints the fold names
		// and those after it
		{&st.foldedSegments, `
			SELECT g.field, g.last, g.version, 1, g.items
			FROM json_each(?2) p CROSS JOIN segments g
				ON g.thread = ?1 AND g.field = p.value->>0 AND g.last BETWEEN p.value->>1 AND p.value->>2 AND g.first >= p.value->>1`},
		{&st.foldedState, `
			SELECT seq, writes FROM checkpoints WHERE thread = ?1 AND seq IN (SELECT value FROM json_each(?2))
			UNION ALL
			SELECT seq, writes FROM checkpoints WHERE thread = ?1 AND seq > ?3 AND seq <= ?4`},
		// recording a fold
		{&st.foldKeys, `SELECT seq, writes FROM checkpoints WHERE thread = ? AND seq > ? AND seq <= ?`},
		{&st.foldRows, `SELECT seq, writes FROM checkpoints WHERE thread = ?1 AND seq IN (SELECT value FROM json_each(?2))`},
		{&st.putSegment, `INSERT INTO segments (thread, field, last, first, version, items) VALUES (?, ?, ?, ?, ?, ?)`},
		{&st.putFold, `INSERT INTO folds (thread, seq, spans) VALUES (?, ?, ?)`},
		{&st.pending, `SELECT node, writes FROM pending WHERE thread = ? AND parent = ?`},
		{&st.putPending, `INSERT INTO pending (thread, parent, node, writes) SELECT ?1, ?2, ?3, ?4
			WHERE ?5 = '' OR EXISTS (SELECT 1 FROM leases WHERE thread = ?1 AND owner = ?5)
			ON CONFLICT (thread, parent, node) DO UPDATE SET writes = excluded.writes`},
		{&st.acquire, `INSERT INTO leases (thread, owner, expires_at) VALUES (?1, ?2, ?3)
			ON CONFLICT (thread) DO UPDATE SET owner = ?2, expires_at = ?3
			WHERE leases.owner = ?2 OR leases.expires_at < ?4`},
		{&st.release, `DELETE FROM leases WHERE thread = ? AND owner = ?`},
	} {
		var err error
		if *q.stmt, err = db.PrepareContext(ctx, q.query); err != nil {
			return fmt.Errorf("prepare %q: %w", q.query, err)
		}
	}
	return nil
}

func init() {
	store.Register("sqlite", func(ctx context.Context, addr string) (store.Store, error) {
		path, ok := strings.CutPrefix(addr, "sqlite:")
		if !ok {
			// "sqlite" alone: not a file named sqlite
			return nil, fmt.Errorf(`sqlite store %q: write sqlite:PATH, such as sqlite:.trellis/trellis.db`, addr)
		}
		return Open(ctx, path)
	})
}

// Open opens (creating if needed) the database at path and applies any
// pending migrations. The whole of path names the file, whatever
// characters it holds; errors name it.
func Open(ctx context.Context, path string) (*Store, error) {
	switch path {
	case "":
		return nil, errors.New(`sqlite store: no file path: write sqlite:PATH, such as sqlite:.trellis/trellis.db`)
	case ":memory:":
		return nil, errors.New(`sqlite store :memory:: an in-memory SQLite database is not shared between connections: use the store "memory"`)
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return nil, fmt.Errorf("sqlite store %s: is a directory, not a database file", path)
	}
	s, err := open(ctx, path)
	if err != nil {
		if code(err) == sqlite3.SQLITE_CANTOPEN { // say why
			if f, oerr := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644); oerr != nil {
				err = oerr
			} else {
				f.Close()
			}
		}
		return nil, fmt.Errorf("sqlite store %s: %w", path, err)
	}
	return s, nil
}

// uriPath escapes the characters a SQLite URI filename gives a meaning
// to, so that they stay part of the file's name.
var uriPath = strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23")

func open(ctx context.Context, path string) (*Store, error) {
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
	}
	q := url.Values{}
	// Every connection opened applies these. Temporary files stay in
	// memory: the journal of a group commit's savepoints (each job's
	// pages as they were) spilled to a file written page by page. (The
	// vacuum mode is not one of them: see migrationsTable.)
	for _, p := range []string{"journal_mode(WAL)", "busy_timeout(" + strconv.Itoa(busyTimeout) + ")", "synchronous(NORMAL)",
		"foreign_keys(ON)", "wal_autocheckpoint(0)", "journal_size_limit(" + strconv.Itoa(journalLimit) + ")", "temp_store(MEMORY)"} {
		q.Add("_pragma", p)
	}
	q.Set("_txlock", "immediate")
	// a clean path never starts with "//", which a URI reads as a host
	db, err := sql.Open("sqlite", "file:"+uriPath.Replace(filepath.Clean(path))+"?"+q.Encode())
	if err != nil {
		return nil, err
	}
	// connections are kept open: opening one applies the pragmas and
	// prepares the statements again
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	s := &Store{db: db, path: filepath.Clean(path), cache: sqlstore.NewCache(sqlstore.CacheThreads), prepared: &preparedCache{db: db}, writer: make(chan struct{}, 1)}
	s.Catalog = sqlstore.Catalog{DB: catalogDB{db: db, s: s}}
	s.Hooks, s.Versions = sqlstore.Hooks{DB: s.Catalog.DB}, sqlstore.Versions{DB: s.Catalog.DB}
	s.Requests = sqlstore.Requests{DB: s.Catalog.DB}
	// Two processes opening a new file at once contend for the switch to
	// WAL mode, which can fail with "database is locked" without waiting
	// for the busy timeout: retry, as the loser will find the work done.
	for attempt, wait := 0, 5*time.Millisecond; ; attempt++ {
		if err = s.Migrate(ctx); err == nil || !busy(err) || attempt == 20 {
			break
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			err = ctx.Err()
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
	if err == nil {
		err = s.st.prepare(ctx, db)
	}
	if err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

func busy(err error) bool { return code(err) == sqlite3.SQLITE_BUSY }

// code is the primary result code of an SQLite error, 0 for any other
// error.
func code(err error) int {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return 0
	}
	return se.Code() & 0xff
}

// Migrate applies the embedded migrations not yet recorded in the
// trellis_migrations table, each in its own immediate transaction, so two
// processes migrating at once apply each migration exactly once.
func (s *Store) Migrate(ctx context.Context) error {
	if err := s.migrationsTable(ctx); err != nil {
		return fmt.Errorf("migrations table: %w", err)
	}
	ms, err := sqlstore.Migrations(migrations)
	if err != nil {
		return err
	}
	for _, m := range ms {
		version, name, body := m.Version, m.Name, m.SQL
		err := s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM trellis_migrations WHERE version = ?`, version).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				return nil
			}
			if _, err := tx.ExecContext(ctx, body); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO trellis_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
				version, name, time.Now().UnixNano())
			return err
		})
		if err != nil {
			return fmt.Errorf("migration %s: %w", name, err)
		}
	}
	return nil
}

// migrationsTable makes the table of applied migrations. A new file is
// made in incremental vacuum mode, so that ReturnSpace can give room
// back: the switch to WAL mode has written the file's first page, so the
// mode is set by rebuilding the file while it has no table yet (a moment).
// It is set here, once, and not as a pragma of every connection: there
// it records the mode again in a write transaction each time a
// connection opens, and a read that needed a new connection waited for
// every writer, failing as "database is locked" after the busy timeout.
func (s *Store) migrationsTable(ctx context.Context) error {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	var tables, mode int
	if err := conn.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema`).Scan(&tables); err != nil {
		return err
	}
	if err := conn.QueryRowContext(ctx, `PRAGMA auto_vacuum`).Scan(&mode); err != nil {
		return err
	}
	if tables == 0 && mode != incremental {
		for _, q := range []string{`PRAGMA auto_vacuum = INCREMENTAL`, `VACUUM`} {
			if _, err := conn.ExecContext(ctx, q); err != nil {
				return err
			}
		}
	}
	_, err = conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS trellis_migrations (
		version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`)
	return err
}

// Migrations lists the applied migration versions.
func (s *Store) Migrations(ctx context.Context) ([]int, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT version FROM trellis_migrations ORDER BY version`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// maxConns bounds the connections: one writes at a time, the others read.
const maxConns = 8

// busyTimeout is how long, in milliseconds, a connection waits for a
// database another process (or the log's truncation) holds.
const busyTimeout = 10000

// write runs a write that is no transaction of its own (a vacuum) alone,
// once this process's writes before it are done, and adds the time it
// held the writer to ctx's store.Hold.
func (s *Store) write(ctx context.Context, fn func() error) error {
	select {
	case s.writer <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	held := time.Now()
	defer func() {
		<-s.writer
		store.AddHold(ctx, time.Since(held))
	}()
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := fn(); err != nil {
		return err
	}
	s.writes.Add(1)
	s.committed()
	return nil
}

// WriteTransactions implements store.WriteCounter: the transactions this
// process's writer committed (a group of writes is one).
func (s *Store) WriteTransactions() int64 { return s.writes.Load() }

// begin runs fn in a transaction on the writer's connection. The caller
// holds the writer.
func (s *Store) begin(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if s.wconn == nil {
		c, err := s.db.Conn(ctx)
		if err != nil {
			return err
		}
		s.wconn = c
	}
	tx, err := s.wconn.BeginTx(ctx, nil)
	if err != nil {
		if errors.Is(err, sql.ErrConnDone) || errors.Is(err, driver.ErrBadConn) {
			// the next write takes another
			s.wconn.Close()
			s.wconn = nil
		}
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// Commit implements store.Store: cp and the checkpoints before it
// (cp.Before) in one transaction.
func (s *Store) Commit(ctx context.Context, cp *store.Checkpoint) error {
	chain := cp.Chain()
	rows := make([]encoded, len(chain))
	for i, c := range chain {
		var err error
		if rows[i].meta, err = sqlstore.EncodeMeta(c); err != nil {
			return err
		}
		if rows[i].writes, err = sqlstore.EncodeWrites(c.Writes); err != nil {
			return err
		}
	}
	err := s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		for i, c := range chain {
			if err := s.commitIn(ctx, tx, c, rows[i]); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		for _, c := range chain {
			s.cache.Committed(c)
		}
	} else if cp.Events != nil && cp.Events.End != nil {
		// rolled back with the rest
		cp.Events.End.Applied = false
	}
	return err
}

// encoded is a checkpoint's row, encoded before its transaction.
type encoded struct{ meta, writes []byte }

// commitIn commits one checkpoint in tx.
func (s *Store) commitIn(ctx context.Context, tx *sql.Tx, cp *store.Checkpoint, row encoded) error {
	at := sqlstore.Nanos(cp.Time)
	if cp.Parent == 0 {
		res, err := tx.StmtContext(ctx, s.st.createThread).ExecContext(ctx, cp.Thread, cp.Seq, at, at)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return store.ErrExists
		}
	} else {
		res, err := tx.StmtContext(ctx, s.st.advanceThread).ExecContext(ctx, cp.Seq, at, cp.Thread, cp.Parent)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			var one int
			if err := tx.StmtContext(ctx, s.st.threadExists).QueryRowContext(ctx, cp.Thread).Scan(&one); errors.Is(err, sql.ErrNoRows) {
				return store.ErrNotFound
			}
			return store.ErrConflict
		}
	}
	if _, err := tx.StmtContext(ctx, s.st.dropPending).ExecContext(ctx, cp.Thread, cp.Seq); err != nil {
		return err
	}
	if _, err := tx.StmtContext(ctx, s.st.insertCheckpoint).ExecContext(ctx,
		cp.Thread, cp.Seq, cp.Parent, cp.Run, cp.Step, string(cp.Source), at, string(row.meta), string(row.writes)); err != nil {
		return err
	}
	if cp.Events != nil {
		if err := sqlstore.AppendWithCheckpoint(ctx, catalogDB{db: tx, s: s}, cp.Events); err != nil {
			return err
		}
	}
	if cp.Release != "" {
		if _, err := tx.StmtContext(ctx, s.st.release).ExecContext(ctx, cp.Thread, cp.Release); err != nil {
			return err
		}
	}
	if len(cp.Memory) > 0 {
		if err := sqlstore.PutMemories(ctx, catalogDB{db: tx, s: s}, sqlstore.SQLite, cp.Memory); err != nil {
			return err
		}
	}
	if cp.Seq%sqlstore.FoldEvery == 0 {
		return sqlstore.RecordFold(ctx, foldTx{tx, s}, cp.Thread, cp.Seq)
	}
	return nil
}

// Head implements store.Store.
func (s *Store) Head(ctx context.Context, thread string) (*store.Snapshot, error) {
	var head uint64
	var born int64
	if err := s.st.head.QueryRowContext(ctx, thread).Scan(&head, &born); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, store.ErrNotFound
		}
		return nil, err
	}
	snap, err := s.cache.Load(ctx, thread, head, born,
		func(ctx context.Context, after, head uint64) ([]*store.Checkpoint, error) {
			return s.History(ctx, thread, store.HistoryOptions{After: after, Before: head + 1})
		},
		func(ctx context.Context) (*store.Folder, error) { return s.fold(ctx, thread, head) })
	if err != nil {
		return nil, err
	}
	return s.withPending(ctx, snap)
}

// StateAt implements store.Store.
func (s *Store) StateAt(ctx context.Context, thread string, seq uint64) (*store.Snapshot, error) {
	f, err := s.fold(ctx, thread, seq)
	if err != nil {
		return nil, err
	}
	return f.Snapshot(thread), nil
}

// withPending adds the pending writes of an unfinished run to snap.
func (s *Store) withPending(ctx context.Context, snap *store.Snapshot) (*store.Snapshot, error) {
	if len(snap.Next) == 0 {
		return snap, nil
	}
	rows, err := s.st.pending.QueryContext(ctx, snap.Thread, snap.Seq)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return sqlstore.ReadPending(snap, rows)
}

// PutPending implements store.Store.
func (s *Store) PutPending(ctx context.Context, thread string, parent uint64, node string, writes []store.Write, owner string) error {
	b, err := sqlstore.EncodePending(writes)
	if err != nil {
		return err
	}
	return s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.StmtContext(ctx, s.st.putPending).ExecContext(ctx, thread, parent, node, string(b), owner)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return cmp.Or(err, store.ErrLeased)
		}
		return nil
	})
}

// Acquire implements store.Store.
func (s *Store) Acquire(ctx context.Context, thread, owner string, ttl time.Duration) error {
	var n int64
	err := s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		now := time.Now()
		res, err := tx.StmtContext(ctx, s.st.acquire).ExecContext(ctx, thread, owner, now.Add(ttl).UnixNano(), now.UnixNano())
		if err == nil {
			n, err = res.RowsAffected()
		}
		return err
	})
	if err != nil {
		return err
	}
	if n == 0 {
		le := &store.LeasedError{}
		var until int64
		if err := s.db.QueryRowContext(ctx, `SELECT owner, expires_at FROM leases WHERE thread = ?`, thread).Scan(&le.Owner, &until); err != nil {
			return store.ErrLeased
		}
		le.Until = time.Unix(0, until)
		return le
	}
	return nil
}

// Release implements store.Store.
func (s *Store) Release(ctx context.Context, thread, owner string) error {
	return s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.StmtContext(ctx, s.st.release).ExecContext(ctx, thread, owner)
		return err
	})
}

// History implements store.Store.
func (s *Store) History(ctx context.Context, thread string, opts store.HistoryOptions) ([]*store.Checkpoint, error) {
	var exists int
	if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM threads WHERE id = ?`, thread).Scan(&exists); err != nil {
		return nil, err
	}
	if exists == 0 {
		return nil, store.ErrNotFound
	}
	q := `SELECT seq, parent, run, step, source, at, meta, writes FROM checkpoints WHERE thread = ?`
	args := []any{thread}
	if opts.Before > 0 {
		q += ` AND seq < ?`
		args = append(args, opts.Before)
	}
	if opts.After > 0 {
		q += ` AND seq > ?`
		args = append(args, opts.After)
	}
	if opts.Source != "" {
		q += ` AND source = ?`
		args = append(args, string(opts.Source))
	}
	if opts.Run != "" {
		q += ` AND run = ?`
		args = append(args, opts.Run)
	}
	q += ` ORDER BY seq DESC`
	if opts.Limit > 0 && opts.Node == "" {
		q += ` LIMIT ` + strconv.Itoa(opts.Limit)
	}
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	var out []*store.Checkpoint
	for rows.Next() {
		cp := &store.Checkpoint{Thread: thread}
		var at int64
		var meta, writes string
		if err := rows.Scan(&cp.Seq, &cp.Parent, &cp.Run, &cp.Step, &cp.Source, &at, &meta, &writes); err != nil {
			rows.Close()
			return nil, err
		}
		cp.Time = sqlstore.Time(at)
		if err := sqlstore.DecodeMeta([]byte(meta), cp); err != nil {
			rows.Close()
			return nil, err
		}
		frs, err := sqlstore.DecodeWrites(cp.Seq, []byte(writes), nil, nil)
		if err == nil {
			err = sqlstore.AttachWrites([]*store.Checkpoint{cp}, frs)
		}
		if err != nil {
			rows.Close()
			return nil, err
		}
		if opts.Keep(cp) {
			out = append(out, cp)
			if opts.Limit > 0 && len(out) == opts.Limit {
				break
			}
		}
	}
	rows.Close()
	return out, rows.Err()
}

// Threads implements store.Store.
func (s *Store) Threads(ctx context.Context, opts store.ThreadOptions) ([]store.ThreadInfo, error) {
	q := `SELECT id, head, created_at, updated_at FROM threads WHERE true`
	var args []any
	if !opts.IdleSince.IsZero() {
		q += ` AND updated_at < ?`
		args = append(args, sqlstore.Nanos(opts.IdleSince))
	}
	if opts.Prefix != "" {
		q += ` AND substr(id, 1, ?) = ?`
		args = append(args, len(opts.Prefix), opts.Prefix)
	}
	if opts.Roots {
		q += ` AND instr(id, '` + store.ChildSep + `') = 0`
	}
	if a := opts.After; a != nil {
		at := sqlstore.Nanos(a.Updated)
		q += ` AND (updated_at < ? OR (updated_at = ? AND id > ?))`
		args = append(args, at, at, a.ID)
	}
	q += ` ORDER BY updated_at DESC, id`
	if opts.Limit > 0 {
		q += ` LIMIT ` + strconv.Itoa(opts.Limit)
	}
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.ThreadInfo
	for rows.Next() {
		var ti store.ThreadInfo
		var c, u int64
		if err := rows.Scan(&ti.ID, &ti.Head, &c, &u); err != nil {
			return nil, err
		}
		ti.Created, ti.Updated = sqlstore.Time(c), sqlstore.Time(u)
		out = append(out, ti)
	}
	return out, rows.Err()
}

// Delete implements store.Store, with the threads of its child flows
// (childThreads).
func (s *Store) Delete(ctx context.Context, thread string) error {
	var gone []string
	err := s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		children, err := childThreads(ctx, tx, thread)
		if err != nil {
			return err
		}
		gone = append(children, thread)
		return sqlstore.DeleteThread(ctx, catalogDB{db: tx, s: s}, thread, children)
	})
	for _, id := range gone {
		s.cache.Forget(id)
	}
	return err
}

// childThreads lists the threads of the child flows thread ran: those
// whose ids sort between its own with ChildSep and with the next
// character (SQLite compares text byte by byte).
func childThreads(ctx context.Context, tx *sql.Tx, thread string) ([]string, error) {
	rows, err := tx.QueryContext(ctx, `SELECT id FROM threads WHERE id >= ? AND id < ?`,
		thread+store.ChildSep, thread+string(rune(store.ChildSep[0]+1)))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var children []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		children = append(children, id)
	}
	return children, rows.Err()
}

// Close implements store.Store.
func (s *Store) Close() error {
	s.checkpoints.Wait()
	s.writer <- struct{}{}
	if s.wconn != nil {
		s.wconn.Close()
		s.wconn = nil
	}
	<-s.writer
	s.prepared.close()
	return s.db.Close()
}

var (
	_ store.Store     = (*Store)(nil)
	_ store.Versions  = (*Store)(nil)
	_ store.Webhooks  = (*Store)(nil)
	_ store.Schedules = (*Store)(nil)
)
