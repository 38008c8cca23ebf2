// Package postgres is the production checkpoint store, on PostgreSQL
// through pgx. Its address is a postgres:// (or postgresql://) URL as pgx
// reads it; several processes may share one database. Reaching the server
// directly (it reports the address and port dialed, or the socket, as its
// own), each connection prepares its statements once (about half of the
// server's CPU per served turn). Through anything else, PgBouncer in
// transaction mode for one, it uses no named prepared statements: each
// connection caches the parameter and result types of the statements it
// has run, and runs them with binary parameters and results, which spares
// long segments a hex round trip; the server parses and plans each
// statement again. default_query_exec_mode in the URL (cache_statement,
// cache_describe, ...) chooses instead. Reached directly, the server
// plans each prepared statement once, too (plan_cache_mode
// force_generic_plan): they are the store's own, each reading or writing
// rows by key through its indexes, and planning them again at every
// execution, as the server's default does for a statement's first five
// and for those whose generic plan it judges dearer, was a third of a
// step's commit. plan_cache_mode in the URL chooses instead; nothing is
// sent through a pooler, which refuses a session that starts with a
// parameter it does not know.
//
// A commit is one call of a PL/pgSQL function, whose statements the server
// plans once per session: the thread's head moves only if it is still the
// checkpoint's parent, and the checkpoint and its writes are inserted only
// if it moved, so concurrent writers on one thread can never fork its
// chain.
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/internal/sqlstore"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Store is a store.Store on PostgreSQL.
type Store struct {
	pool  *pgxpool.Pool
	cache *sqlstore.Cache
	// commits groups the commits of this process (group.go)
	commits *committer
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

func init() {
	for _, scheme := range []string{"postgres", "postgresql"} {
		store.Register(scheme, func(ctx context.Context, addr string) (store.Store, error) { return Open(ctx, addr) })
	}
}

// Open connects to the database at url and applies pending migrations.
// The URL may set pgxpool's pool_max_conns (default: four per CPU, at
// least 16).
func Open(ctx context.Context, url string) (*Store, error) {
	cfg, err := config(ctx, url)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	s := &Store{pool: pool, cache: sqlstore.NewCache(sqlstore.CacheThreads), commits: newCommitter()}
	s.Catalog = sqlstore.Catalog{DB: catalogDB{q: pool, s: s}}
	s.Hooks, s.Versions = sqlstore.Hooks{DB: s.Catalog.DB}, sqlstore.Versions{DB: s.Catalog.DB}
	s.Requests = sqlstore.Requests{DB: s.Catalog.DB}
	if err := s.Migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

// config is the pool's configuration for url: statement descriptions,
// not statements, are cached (binary results with nothing prepared on
// the server) unless the server is reached directly, or the URL asks for
// a mode; prepared on a direct connection, each is planned once, unless
// the URL says how (see the package's comment). A pooler refuses
// parameters it does not know in a session's start (PgBouncer does), so
// the plans' mode goes only to a server reached directly.
func config(ctx context.Context, url string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	asked := strings.Contains(url, "default_query_exec_mode")
	_, plans := cfg.ConnConfig.RuntimeParams["plan_cache_mode"]
	if !asked {
		cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	}
	prepares := cfg.ConnConfig.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement
	if !asked || prepares && !plans {
		if ok, version := direct(ctx, cfg.ConnConfig); ok {
			cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheStatement
			// (a server before 12 knows no plan_cache_mode, and refuses
			// a session that starts with it)
			if !plans && version >= 120000 {
				cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
			}
		}
	}
	// a run holds a connection only while it writes a step, but many
	// runs write at once: pgx's default (the number of CPUs) queues them
	if !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = max(int32(4*runtime.NumCPU()), 16)
	}
	return cfg, nil
}

// direct reports whether cfg reaches the server itself, with no pooler
// between that could hand a connection's prepared statements to another
// client's session (PgBouncer in transaction mode): the server says it
// was reached at the address and port dialed (over TCP), or at the socket
// dialed (a Unix socket of its own directories, at its port). Several
// hosts, a server that does not answer and a host name that does not
// resolve are taken as not direct. The fallbacks of one host that differ
// only in TLS (sslmode prefer, the default, or allow) are the same
// server. It gives the server's version too (server_version_num).
func direct(ctx context.Context, cfg *pgx.ConnConfig) (ok bool, version int) {
	for _, f := range cfg.Fallbacks {
		if f.Host != cfg.Host || f.Port != cfg.Port {
			return false, 0
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg.Copy())
	if err != nil {
		return false, 0
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var addr, dirs *string
	var port *int32
	var ownPort string
	if err := conn.QueryRow(ctx, `SELECT host(inet_server_addr()), inet_server_port(), current_setting('port'),
		current_setting('unix_socket_directories', true), current_setting('server_version_num')::int`).Scan(&addr, &port, &ownPort, &dirs, &version); err != nil {
		return false, 0
	}
	if strings.HasPrefix(cfg.Host, "/") {
		if addr != nil || dirs == nil || ownPort != strconv.Itoa(int(cfg.Port)) {
			return false, 0
		}
		for _, d := range strings.Split(*dirs, ",") {
			if filepath.Clean(strings.TrimSpace(d)) == filepath.Clean(cfg.Host) {
				return true, version
			}
		}
		return false, 0
	}
	if addr == nil || port == nil || uint16(*port) != cfg.Port {
		return false, 0
	}
	server := net.ParseIP(*addr)
	ips, err := net.DefaultResolver.LookupIP(ctx, "ip", cfg.Host)
	if err != nil || server == nil {
		return false, 0
	}
	return slices.ContainsFunc(ips, server.Equal), version
}

// migrationLock is the advisory lock key that serialises migrations.
const migrationLock = 0x7472656c6c6973 // "trellis"

// Migrate applies the embedded migrations not yet recorded, under a
// transaction-scoped advisory lock, so processes starting together apply
// each migration exactly once.
func (s *Store) Migrate(ctx context.Context) error {
	ms, err := sqlstore.Migrations(migrations)
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrationLock)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS trellis_migrations (
			version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return err
		}
		for _, m := range ms {
			version, name := m.Version, m.Name
			var n int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM trellis_migrations WHERE version = $1`, version).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				continue
			}
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return fmt.Errorf("migration %s: %w", name, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO trellis_migrations (version, name) VALUES ($1, $2)`, version, name); err != nil {
				return err
			}
		}
		return nil
	})
}

// Migrations lists the applied migration versions.
func (s *Store) Migrations(ctx context.Context) ([]int, error) {
	rows, err := s.pool.Query(ctx, `SELECT version FROM trellis_migrations ORDER BY version`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int])
}

// commitSQL commits a checkpoint (see migration 017): 1 when the thread's
// head moved to it, else 0.
const commitSQL = `SELECT trellis_commit($1, $2, $3, $4, $5, $6, $7, $8, $9)`

// Commit implements store.Store: a checkpoint with others before it
// (cp.Before) is committed with them in one transaction of a group, each
// its statement; one of them that records a fold commits them one by one
// (commitEach).
func (s *Store) Commit(ctx context.Context, cp *store.Checkpoint) error {
	err := s.commit(ctx, cp)
	if err != nil && cp.Events != nil && cp.Events.End != nil {
		// rolled back with the rest
		cp.Events.End.Applied = false
	}
	return err
}

func (s *Store) commit(ctx context.Context, cp *store.Checkpoint) error {
	if len(cp.Before) == 0 {
		return s.commitOne(ctx, cp)
	}
	chain := cp.Chain()
	for _, c := range chain[:len(chain)-1] {
		if c.WriteID == "" {
			// the next one is chained to it by its write id
			c.WriteID = sqlstore.NewWriteID()
		}
	}
	stmts := make([]groupStmt, len(chain))
	moved := make([]int, len(chain))
	for i, c := range chain {
		if c.Seq%sqlstore.FoldEvery == 0 {
			return s.commitEach(ctx, chain)
		}
		if err := sqlstore.CheckMemories(c.Memory); err != nil {
			return err
		}
		meta, err := sqlstore.EncodeMeta(c)
		if err != nil {
			return err
		}
		writes, err := sqlstore.EncodeWrites(c.Writes)
		if err != nil {
			return err
		}
		after := ""
		if i > 0 {
			after = chain[i-1].WriteID
		}
		q, args := chainedStatement(c, []any{c.Thread, int64(c.Seq), int64(c.Parent), sqlstore.Nanos(c.Time),
			c.Run, c.Step, string(c.Source), meta, writes}, after)
		stmts[i] = groupStmt{query: q, args: args, scan: func(row pgx.Row) (err error) {
			moved[i], err = scanCommit(row, c)
			return err
		}}
	}
	if err := s.groupedAll(ctx, stmts); err != nil {
		if cp.Events != nil {
			cp.Events.Refused = false
		}
		return err
	}
	for i, c := range chain {
		if moved[i] != 1 {
			// the first's conflict: the others followed it
			return s.notMoved(ctx, chain[0])
		}
		s.cache.Committed(c)
	}
	return nil
}

// commitEach commits a chain one checkpoint at a time, taking one found
// committed by an earlier attempt (its write id) for done.
func (s *Store) commitEach(ctx context.Context, chain []*store.Checkpoint) error {
	for _, c := range chain {
		err := s.commitOne(ctx, c)
		if err = store.Recommitted(ctx, s, c, err); err != nil {
			return err
		}
	}
	return nil
}

// commitOne commits one checkpoint.
func (s *Store) commitOne(ctx context.Context, cp *store.Checkpoint) error {
	if err := sqlstore.CheckMemories(cp.Memory); err != nil {
		return err
	}
	meta, err := sqlstore.EncodeMeta(cp)
	if err != nil {
		return err
	}
	writes, err := sqlstore.EncodeWrites(cp.Writes)
	if err != nil {
		return err
	}
	args := []any{cp.Thread, int64(cp.Seq), int64(cp.Parent), sqlstore.Nanos(cp.Time),
		cp.Run, cp.Step, string(cp.Source), meta, writes}
	var moved int
	if cp.Seq%sqlstore.FoldEvery == 0 {
		moved, err = s.commitFold(ctx, cp, args)
	} else {
		q, args := commitStatement(cp, args)
		moved, err = s.commitGrouped(ctx, cp, q, args)
	}
	if err != nil {
		return err
	}
	if moved == 1 {
		s.cache.Committed(cp)
		return nil
	}
	return s.notMoved(ctx, cp)
}

// notMoved says why cp's commit did not move its thread's head.
func (s *Store) notMoved(ctx context.Context, cp *store.Checkpoint) error {
	if cp.Parent == 0 {
		return store.ErrExists
	}
	var exists bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM threads WHERE id = $1)`, cp.Thread).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		return store.ErrNotFound
	}
	return store.ErrConflict
}

// commitEventsSQL commits a checkpoint with its events and its lease's
// release (see migrations 024 and 037): commitSQL's nine, then run $10,
// the events as rows, their first numbers $11, last numbers $12 and data
// $13 (eventRowColumns), holder $14, notification $16 on channel $15
// (none: the empty text), the owner of the lease to release $17 (none:
// the empty text). It gives commitSQL's result, plus 2 when the events
// were recorded.
const commitEventsSQL = `SELECT trellis_commit_event_rows($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)`

// commitStatement is the statement that commits cp with args (commitSQL's
// nine), with its events and its lease's release if it has them, and
// the documents its step puts (withMemory).
func commitStatement(cp *store.Checkpoint, args []any) (string, []any) {
	return chainedStatement(cp, args, "")
}

// chainedStatement is commitStatement for a checkpoint committed after
// the one whose write id is after (none: ""), in the same transaction:
// it moves the head only onto that very checkpoint, not onto another
// writer's of the same number (a chain whose first did not move leaves
// the rest unmoved too).
func chainedStatement(cp *store.Checkpoint, args []any, after string) (string, []any) {
	ea := cp.Events
	if ea == nil {
		ea = &store.EventAppend{}
	}
	q := commitSQL
	if len(ea.Events) > 0 || cp.Release != "" {
		firsts, seqs, data := eventRowColumns(ea.Events)
		q, args = commitEventsSQL, append(args, ea.Run, firsts, seqs, data, ea.Holder, ea.Channel, ea.Payload, cp.Release)
	}
	if after != "" {
		args = append(args, after)
		call := strings.TrimPrefix(q, "SELECT ")
		q = `SELECT CASE WHEN EXISTS (SELECT 1 FROM checkpoints WHERE thread = $1 AND seq = $3
			AND convert_from(meta, 'UTF8')::jsonb->>'id' = $` + strconv.Itoa(len(args)) + `) THEN ` + call + ` ELSE 0 END`
	}
	if ea.End != nil && cp.Release != "" {
		q, args = withEnd(q, args, ea)
	}
	if len(cp.Memory) > 0 {
		return withMemory(q, args, cp.Memory)
	}
	return q, args
}

// withEnd is the commit statement q (args) of a run's last checkpoint
// that also records the run's end (store.RunEnd), as UpdateRun does, in
// the same statement: only when the head moved and the checkpoint's
// events were recorded (none: when the head moved), and the run's record
// holds what the end expects. Its result is q's plus 4 when the end was
// recorded; the notification of the events goes with an end that has
// none of them, and the end's own (RunEnd.Notes) with it.
func withEnd(q string, args []any, ea *store.EventAppend) (string, []any) {
	end, r := ea.End, ea.End.Record
	n := len(args)
	p := func(i int) string { return "$" + strconv.Itoa(n+i) }
	moved := `(SELECT * FROM c) = 3`
	if len(ea.Events) == 0 {
		moved = `(SELECT * FROM c) % 2 = 1`
	}
	firsts, seqs, data := eventRowColumns(end.Events)
	notes := end.Notes
	if len(ea.Events) == 0 && ea.Payload != "" {
		notes = append([]string{ea.Payload}, notes...)
	}
	args = append(args, string(r.Status), r.Error, int64(r.Checkpoint), sqlstore.Nanos(r.Started), sqlstore.Nanos(r.Finished), r.Resume,
		r.Server, string(r.Stop), r.FlowVersion, r.WriteID, r.ID, string(end.Expect.Status), end.Expect.Server, string(end.Expect.Stop),
		seqs, data, ea.Channel, notes, firsts)
	return `WITH c AS (` + q + `),
	e AS (UPDATE api_runs SET status = ` + p(1) + `, error = ` + p(2) + `, checkpoint = ` + p(3) + `, started_at = ` + p(4) + `,
			finished_at = ` + p(5) + `, resume = ` + p(6) + `, server = ` + p(7) + `, stop = ` + p(8) + `, flow_version = ` + p(9) + `,
			write_id = ` + p(10) + `
		WHERE ` + moved + ` AND id = ` + p(11) + ` AND status = ` + p(12) + ` AND server = ` + p(13) + ` AND stop = ` + p(14) + ` RETURNING id),
	ev AS (INSERT INTO api_events (run, first_seq, seq, data) SELECT e.id, nullif(u.f, 0), u.s, u.d
		FROM e, unnest(` + p(19) + `::bigint[], ` + p(15) + `::bigint[], ` + p(16) + `::text[]) AS u(f, s, d)
		RETURNING 1),
	note AS (SELECT pg_notify(` + p(17) + `, n) FROM e, unnest(` + p(18) + `::text[]) AS n WHERE ` + p(17) + ` <> '')
	SELECT (SELECT * FROM c) + 4 * (SELECT count(*) FROM e)::integer + 0 * (SELECT count(*) FROM note)::integer`, args
}

// withMemory is the commit statement q (args) that also puts a step's
// documents, as PutMemory does, when it moves the thread's head (its
// result is odd), in the same statement: the documents are written in
// the step's transaction, or not at all, and the commit stays one
// statement of a group. Expired documents are deleted first, but for
// those the step puts again (one statement changes a row once).
func withMemory(q string, args []any, puts []store.MemoryPut) (string, []any) {
	cols, now := sqlstore.MemoryColumns(puts)
	n := len(args)
	p := func(i int) string { return "$" + strconv.Itoa(n+i) }
	args = append(append(args, cols[:]...), now)
	return `WITH c AS (` + q + `),
	u AS (SELECT * FROM unnest(` + p(1) + `::text[], ` + p(2) + `::text[], ` + p(3) + `::text[], ` + p(4) + `::text[], ` + p(5) + `::text[], ` +
		p(6) + `::bigint[], ` + p(7) + `::bigint[]) AS u(tenant, namespace, key, value, body, updated_at, expires_at)
		WHERE (SELECT * FROM c) % 2 = 1),
	gone AS (DELETE FROM memory_items m WHERE (SELECT * FROM c) % 2 = 1 AND m.expires_at <> 0 AND m.expires_at <= ` + p(8) + `
		AND NOT EXISTS (SELECT 1 FROM u WHERE u.tenant = m.tenant AND u.namespace = m.namespace AND u.key = m.key)),
	put AS (INSERT INTO memory_items (tenant, namespace, key, value, body, updated_at, expires_at) SELECT * FROM u
		ON CONFLICT (tenant, namespace, key) DO UPDATE SET value = excluded.value, body = excluded.body,
			updated_at = excluded.updated_at, expires_at = excluded.expires_at)
	SELECT * FROM c`, args
}

// eventRowColumns are events' rows (sqlstore.EventRows) as arrays: the
// rows' first numbers (0: a row of one event), their last and their
// data.
func eventRowColumns(evs []store.EventRecord) ([]int64, []int64, []string) {
	rows := sqlstore.EventRows(evs)
	firsts, seqs, data := make([]int64, len(rows)), make([]int64, len(rows)), make([]string, len(rows))
	for i, r := range rows {
		firsts[i], seqs[i], data[i] = r.First, r.Last, r.Data
	}
	return firsts, seqs, data
}

// scanCommit reads the result of cp's commitStatement: whether the
// thread's head moved (1) and, with events, whether they were refused
// (the head moved, and they were not recorded).
func scanCommit(row pgx.Row, cp *store.Checkpoint) (moved int, err error) {
	if err = row.Scan(&moved); err != nil {
		return 0, err
	}
	if ea := cp.Events; ea != nil && ea.End != nil && cp.Release != "" {
		ea.End.Applied = moved&4 != 0
		moved &^= 4
	}
	if ea := cp.Events; ea != nil && len(ea.Events) > 0 {
		ea.Refused = moved == 1
		if moved == 3 {
			moved = 1
		}
	}
	return moved, nil
}

// Head implements store.Store.
func (s *Store) Head(ctx context.Context, thread string) (*store.Snapshot, error) {
	if !s.cache.Holds(thread) {
		// nothing to catch up from: the head, its state and its pending
		// writes in one load
		l, err := s.fold(ctx, thread, 0)
		if err != nil {
			return nil, err
		}
		s.cache.Put(thread, l.born, l.f)
		return l.snapshot(thread), nil
	}
	var head, born int64
	if err := s.pool.QueryRow(ctx, `SELECT head, created_at FROM threads WHERE id = $1`, thread).Scan(&head, &born); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, store.ErrNotFound
		}
		return nil, err
	}
	seq := uint64(head)
	snap, err := s.cache.Load(ctx, thread, seq, born,
		func(ctx context.Context, after, head uint64) ([]*store.Checkpoint, error) {
			return s.History(ctx, thread, store.HistoryOptions{After: after, Before: head + 1})
		},
		func(ctx context.Context) (*store.Folder, error) {
			l, err := s.fold(ctx, thread, seq)
			if err != nil {
				return nil, err
			}
			return l.f, nil
		})
	if err != nil {
		return nil, err
	}
	return s.withPending(ctx, snap)
}

// withPending adds the pending writes of an unfinished run to snap.
func (s *Store) withPending(ctx context.Context, snap *store.Snapshot) (*store.Snapshot, error) {
	if len(snap.Next) == 0 {
		return snap, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT node, writes::text FROM pending WHERE thread = $1 AND parent = $2`, snap.Thread, int64(snap.Seq))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return sqlstore.ReadPending(snap, rows)
}

// PutPending implements store.Store.
func (s *Store) PutPending(ctx context.Context, thread string, parent uint64, node string, writes []store.Write, owner string) error {
	return s.putPending(ctx, thread, parent, node, writes, owner, false)
}

// PutPendingQuick implements store.QuickPending: the write's
// transaction does not wait for its log to reach the disk
// (synchronous_commit off for it alone), so a node completing beside
// others costs the step no flush of its own; the next write that waits
// for one (a step's commit) makes it durable too, the log being written
// in order.
func (s *Store) PutPendingQuick(ctx context.Context, thread string, parent uint64, node string, writes []store.Write, owner string) error {
	return s.putPending(ctx, thread, parent, node, writes, owner, true)
}

// putPending inserts a pending write, quick or not. The lease's row is
// read FOR SHARE: a lease taken meanwhile by another owner waits for the
// write, which the new holder then reads, or the write waits for it and
// finds it another's (ErrLeased: nothing inserted).
func (s *Store) putPending(ctx context.Context, thread string, parent uint64, node string, writes []store.Write, owner string, quick bool) error {
	b, err := sqlstore.EncodePending(writes)
	if err != nil {
		return err
	}
	from := ""
	if quick {
		from = ` FROM (SELECT set_config('synchronous_commit', 'off', true)) AS quick`
	}
	tag, err := s.pool.Exec(ctx, `INSERT INTO pending (thread, parent, node, writes) SELECT $1, $2, $3, $4::jsonb`+from+`
		WHERE $5 = '' OR EXISTS (SELECT 1 FROM leases WHERE thread = $1 AND owner = $5 FOR SHARE)
		ON CONFLICT (thread, parent, node) DO UPDATE SET writes = excluded.writes`, thread, int64(parent), node, string(b), owner)
	if err == nil && tag.RowsAffected() == 0 {
		return store.ErrLeased
	}
	return err
}

// Acquire implements store.Store.
//
// Lease times are the server's clock, not the callers': processes on
// machines whose clocks disagree still see one expiry.
func (s *Store) Acquire(ctx context.Context, thread, owner string, ttl time.Duration) error {
	tag, err := s.pool.Exec(ctx, `WITH now AS (SELECT (extract(epoch FROM clock_timestamp()) * 1e9)::bigint AS ns)
		INSERT INTO leases (thread, owner, expires_at) SELECT $1, $2, ns + $3 FROM now
		ON CONFLICT (thread) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at
		WHERE leases.owner = excluded.owner OR leases.expires_at < (SELECT ns FROM now)`, thread, owner, ttl.Nanoseconds())
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		le := &store.LeasedError{}
		var until int64
		if err := s.pool.QueryRow(ctx, `SELECT owner, expires_at FROM leases WHERE thread = $1`, thread).Scan(&le.Owner, &until); err != nil {
			return store.ErrLeased
		}
		le.Until = time.Unix(0, until)
		return le
	}
	return nil
}

// Release implements store.Store.
func (s *Store) Release(ctx context.Context, thread, owner string) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM leases WHERE thread = $1 AND owner = $2`, thread, owner)
	return err
}

// History implements store.Store.
func (s *Store) History(ctx context.Context, thread string, opts store.HistoryOptions) ([]*store.Checkpoint, error) {
	var exists bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM threads WHERE id = $1)`, thread).Scan(&exists); err != nil {
		return nil, err
	}
	if !exists {
		return nil, store.ErrNotFound
	}
	q := `SELECT seq, parent, run, step, source, at, meta, writes FROM checkpoints WHERE thread = $1`
	args := []any{thread}
	if opts.Before > 0 {
		args = append(args, int64(opts.Before))
		q += ` AND seq < $` + strconv.Itoa(len(args))
	}
	if opts.After > 0 {
		args = append(args, int64(opts.After))
		q += ` AND seq > $` + strconv.Itoa(len(args))
	}
	if opts.Source != "" {
		args = append(args, string(opts.Source))
		q += ` AND source = $` + strconv.Itoa(len(args))
	}
	if opts.Run != "" {
		args = append(args, opts.Run)
		q += ` AND run = $` + strconv.Itoa(len(args))
	}
	q += ` ORDER BY seq DESC`
	if opts.Limit > 0 && opts.Node == "" {
		q += ` LIMIT ` + strconv.Itoa(opts.Limit)
	}
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	var out []*store.Checkpoint
	for rows.Next() {
		cp := &store.Checkpoint{Thread: thread}
		var seq, parent, at int64
		var meta, writes []byte
		if err := rows.Scan(&seq, &parent, &cp.Run, &cp.Step, &cp.Source, &at, &meta, &writes); err != nil {
			rows.Close()
			return nil, err
		}
		cp.Seq, cp.Parent, cp.Time = uint64(seq), uint64(parent), sqlstore.Time(at)
		if err := sqlstore.DecodeMeta(meta, cp); err != nil {
			rows.Close()
			return nil, err
		}
		frs, err := sqlstore.DecodeWrites(cp.Seq, writes, nil, nil)
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
		args = append(args, sqlstore.Nanos(opts.IdleSince))
		q += ` AND updated_at < $` + strconv.Itoa(len(args))
	}
	if opts.Prefix != "" {
		args = append(args, opts.Prefix)
		q += ` AND starts_with(id, $` + strconv.Itoa(len(args)) + `)`
	}
	if opts.Roots {
		q += ` AND strpos(id, '` + store.ChildSep + `') = 0`
	}
	if a := opts.After; a != nil {
		args = append(args, sqlstore.Nanos(a.Updated), a.ID)
		n := strconv.Itoa(len(args) - 1)
		q += ` AND (updated_at < $` + n + ` OR (updated_at = $` + n + ` AND id > $` + strconv.Itoa(len(args)) + `))`
	}
	q += ` ORDER BY updated_at DESC, id`
	if opts.Limit > 0 {
		q += ` LIMIT ` + strconv.Itoa(opts.Limit)
	}
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.ThreadInfo, error) {
		var ti store.ThreadInfo
		var head, c, u int64
		err := row.Scan(&ti.ID, &head, &c, &u)
		ti.Head, ti.Created, ti.Updated = uint64(head), sqlstore.Time(c), sqlstore.Time(u)
		return ti, err
	})
}

// Close implements store.Store.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

var (
	_ store.Store     = (*Store)(nil)
	_ store.Versions  = (*Store)(nil)
	_ store.Webhooks  = (*Store)(nil)
	_ store.Schedules = (*Store)(nil)
)
