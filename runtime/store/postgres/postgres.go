// Package postgres is the production checkpoint store, on PostgreSQL
// through pgx. Its address is a postgres:// (or postgresql://) URL as pgx
// reads it; several processes may share one database. It uses no named prepared statements, so it works behind
// PgBouncer in transaction mode: each connection caches the parameter and
// result types of the statements it has run, and runs them with binary
// parameters and results, which spares long segments a hex round trip.
//
// A commit is one call of a PL/pgSQL function, whose statements the server
// plans once per session: the thread's head moves only if it is still the
// checkpoint's parent, and the checkpoint and its writes are inserted only
// if it moved, so concurrent writers on one thread can never fork its
// chain.
package postgres

import (
	"bytes"
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/internal/sqlstore"
	"github.com/trellisflow/trellis/runtime/value"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Store is a store.Store on PostgreSQL.
type Store struct {
	pool  *pgxpool.Pool
	cache *sqlstore.Cache
	// Hooks is the store's store.Webhooks and store.Schedules, and
	// Versions its store.Versions: the shared SQL ones.
	sqlstore.Hooks
	sqlstore.Versions
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
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	// statement descriptions, not statements, are cached: binary results
	// with nothing prepared on the server
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	// a run holds a connection only while it writes a step, but many
	// runs write at once: pgx's default (the number of CPUs) queues them
	if !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = max(int32(4*runtime.NumCPU()), 16)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	s := &Store{pool: pool, cache: sqlstore.NewCache(256)}
	s.Catalog = sqlstore.Catalog{DB: catalogDB{q: pool, s: s}}
	s.Hooks, s.Versions = sqlstore.Hooks{DB: s.Catalog.DB}, sqlstore.Versions{DB: s.Catalog.DB}
	if err := s.Migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
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

// Commit implements store.Store.
func (s *Store) Commit(ctx context.Context, cp *store.Checkpoint) error {
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
		err = s.pool.QueryRow(ctx, commitSQL, args...).Scan(&moved)
	}
	if err != nil {
		return err
	}
	if moved == 1 {
		s.cache.Committed(cp)
		return nil
	}
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
func (s *Store) PutPending(ctx context.Context, thread string, parent uint64, node string, writes []store.Write) error {
	b, err := sqlstore.EncodePending(writes)
	if err != nil {
		return err
	}
	_, err = s.pool.Exec(ctx, `INSERT INTO pending (thread, parent, node, writes) VALUES ($1, $2, $3, $4::jsonb)
		ON CONFLICT (thread, parent, node) DO UPDATE SET writes = excluded.writes`, thread, int64(parent), node, string(b))
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

// StateAt implements store.Store.
func (s *Store) StateAt(ctx context.Context, thread string, seq uint64) (*store.Snapshot, error) {
	if seq == 0 { // fold reads 0 as the head
		return nil, store.ErrNotFound
	}
	l, err := s.fold(ctx, thread, seq)
	if err != nil {
		return nil, err
	}
	return l.f.Snapshot(thread), nil
}

// loaded is a state read from the database.
type loaded struct {
	f       *store.Folder
	born    int64
	pending map[string][]store.Write // of the head, when it was loaded as such
}

// snapshot is the loaded state with its pending writes.
func (l *loaded) snapshot(thread string) *store.Snapshot {
	snap := l.f.Snapshot(thread)
	snap.Pending = l.pending
	return snap
}

// fold loads the state at checkpoint seq, or at the thread's head when
// seq is 0 (with the head's pending writes), in one repeatable read
// transaction sent in two round trips: the checkpoint and its fold, then
// the rows the fold names with the commit.
func (s *Store) fold(ctx context.Context, thread string, seq uint64) (*loaded, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	// a connection an error leaves inside the transaction is closed on
	// release, never reused
	defer conn.Release()
	var head pgx.Batch
	head.Queue(`BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY`)
	head.Queue(`SELECT c.seq, t.created_at, c.meta, c.run, c.step, f.seq, f.spans FROM threads t
		JOIN checkpoints c ON c.thread = t.id AND c.seq = CASE WHEN $2::bigint = 0 THEN t.head ELSE $2::bigint END
		LEFT JOIN LATERAL (SELECT seq, spans FROM folds WHERE thread = $1 AND seq <= c.seq ORDER BY seq DESC LIMIT 1) f ON true
		WHERE t.id = $1`, thread, int64(seq))
	br := conn.SendBatch(ctx, &head)
	var meta []byte
	var at int64
	var c *int64
	var spans *string
	var cp store.Checkpoint
	l := &loaded{}
	_, err = br.Exec()
	if err == nil {
		err = br.QueryRow().Scan(&at, &l.born, &meta, &cp.Run, &cp.Step, &c, &spans)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			_, err = conn.Exec(ctx, `ROLLBACK`)
			return nil, cmp.Or(err, store.ErrNotFound)
		}
		return nil, err
	}
	cp.Seq = uint64(at)
	if err := sqlstore.DecodeMeta(meta, &cp); err != nil {
		return nil, err
	}
	var body pgx.Batch
	var sp sqlstore.Spans
	var read []uint64 // the checkpoints up to the fold whose rows are read
	if spans != nil {
		if sp, err = sqlstore.DecodeSpans([]byte(*spans)); err != nil {
			return nil, err
		}
		var ok bool
		if read, ok = sp.Checkpoints(); !ok {
			sp = nil
		}
	}
	var pick func(r sqlstore.FieldRow) bool
	if sp == nil {
		// a thread younger than its first fold: every row it has
		body.Queue(`SELECT seq, writes FROM checkpoints WHERE thread = $1 AND seq <= $2`, thread, at)
	} else {
		fold := uint64(*c)
		want := map[string][]sqlstore.Range{}
		for _, r := range sp.Rows(fold) {
			want[r.Field] = append(want[r.Field], r)
		}
		pick = func(r sqlstore.FieldRow) bool {
			if r.Seq > fold {
				return true
			}
			for _, w := range want[r.Field] {
				if r.Seq >= w.Lo && r.Seq <= w.Hi {
					return true
				}
			}
			return false
		}
		gf, glo, ghi := rangeArrays(sp.Segments())
		// segments are binary, so a query of their own, and come first:
		// they decode while the rows are read
		body.Queue(`
			SELECT g.field, g.last, g.version, true, g.items
			FROM unnest($2::text[], $3::bigint[], $4::bigint[]) AS p(field, lo, hi)
			JOIN segments g ON g.thread = $1 AND g.field = p.field AND g.last BETWEEN p.lo AND p.hi AND g.first >= p.lo`,
			thread, gf, glo, ghi)
		body.Queue(`SELECT seq, writes FROM checkpoints WHERE thread = $1 AND seq = ANY($2)
			UNION ALL
			SELECT seq, writes FROM checkpoints WHERE thread = $1 AND seq > $3 AND seq <= $4`,
			thread, toInt64s(read), *c, at)
	}
	pending := seq == 0 && len(cp.Next) > 0
	if pending {
		body.Queue(`SELECT node, writes::text FROM pending WHERE thread = $1 AND parent = $2`, thread, at)
	}
	body.Queue(`COMMIT`)
	br = conn.SendBatch(ctx, &body)
	var rows sqlstore.Loader
	defer rows.Close()
	if sp != nil {
		err = addRows(br, &rows)
	}
	if err == nil {
		var fr []sqlstore.FieldRow
		if fr, err = checkpointRows(br, nil); err == nil {
			if sp == nil {
				fr = sqlstore.FromBase(fr)
			}
			for _, r := range fr {
				if pick == nil || pick(r) {
					rows.Add(r)
				}
			}
		}
	}
	if err == nil && pending {
		var pr pgx.Rows
		if pr, err = br.Query(); err == nil {
			read := &store.Snapshot{}
			_, err = sqlstore.ReadPending(read, pr)
			pr.Close()
			l.pending = read.Pending
		}
	}
	if err == nil {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	l.f, err = rows.Fold(&cp)
	return l, err
}

// checkpointRows reads the writes of the checkpoints of a batch's next
// query (seq, writes), adding those of the fields keep accepts (all
// when keep is nil) to rows.
func checkpointRows(br pgx.BatchResults, keep func(string) bool) ([]sqlstore.FieldRow, error) {
	q, err := br.Query()
	if err != nil {
		return nil, err
	}
	defer q.Close()
	var out []sqlstore.FieldRow
	for q.Next() {
		var seq int64
		var b []byte
		if err := q.Scan(&seq, &b); err != nil {
			return nil, err
		}
		if out, err = sqlstore.DecodeWrites(uint64(seq), b, keep, out); err != nil {
			return nil, err
		}
	}
	return out, q.Err()
}

func toInt64s(us []uint64) []int64 {
	out := make([]int64, len(us))
	for i, u := range us {
		out[i] = int64(u)
	}
	return out
}

// rangeArrays splits ranges into the arrays the fold queries unnest.
func rangeArrays(rs []sqlstore.Range) (fields []string, lo, hi []int64) {
	for _, r := range rs {
		fields, lo, hi = append(fields, r.Field), append(lo, int64(r.Lo)), append(hi, int64(r.Hi))
	}
	return fields, lo, hi
}

// commitFold commits a checkpoint that also records a fold (see
// sqlstore.FoldPlan), in one transaction and at most three round trips:
// the commit with what the fold is planned from (the newest fold before
// it and the writes of the checkpoints since), then the rows due to
// become segments when there are any, then the fold, its segments and
// the commit of the transaction.
func (s *Store) commitFold(ctx context.Context, cp *store.Checkpoint, args []any) (moved int, err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	// a connection an error leaves inside the transaction is closed on
	// release, never reused
	defer conn.Release()
	thread, c := cp.Thread, int64(cp.Seq)
	var plan pgx.Batch
	plan.Queue(`BEGIN`)
	plan.Queue(commitSQL, args...)
	plan.Queue(`SELECT (SELECT spans FROM folds WHERE thread = $1 AND seq < $2 ORDER BY seq DESC LIMIT 1)`, thread, c)
	plan.Queue(`SELECT seq, writes FROM checkpoints WHERE thread = $1 AND seq <= $2
		AND seq > coalesce((SELECT max(seq) FROM folds WHERE thread = $1 AND seq < $2), 0)`, thread, c)
	br := conn.SendBatch(ctx, &plan)
	var spans *string
	var since []sqlstore.FieldRow
	if _, err = br.Exec(); err == nil {
		err = br.QueryRow().Scan(&moved)
	}
	if err == nil {
		err = br.QueryRow().Scan(&spans)
	}
	if err == nil {
		since, err = checkpointRows(br, nil)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, err
	}
	if moved != 1 {
		_, err = conn.Exec(ctx, `ROLLBACK`)
		return moved, err
	}
	var stored []byte
	if spans != nil {
		stored = []byte(*spans)
	}
	sqlstore.SortRows(since)
	keys := make([]sqlstore.KeyRow, len(since))
	for i, r := range since {
		keys[i] = sqlstore.KeyRow{Field: r.Field, Seq: r.Seq, Append: r.Append}
	}
	p, err := sqlstore.PlanFold(cp.Seq, stored, keys)
	if err != nil {
		return 0, err
	}
	var due []sqlstore.FieldRow
	if len(p.Due) > 0 {
		if due, err = s.dueRows(ctx, conn, thread, p); err != nil {
			return 0, err
		}
	}
	folded, segs, err := p.Finish(due)
	if err != nil {
		return 0, err
	}
	var put pgx.Batch
	if len(segs) > 0 {
		fields, last, first, versions, items := make([]string, len(segs)), make([]int64, len(segs)), make([]int64, len(segs)), make([]int64, len(segs)), make([][]byte, len(segs))
		for i, g := range segs {
			fields[i], last[i], first[i], versions[i], items[i] = g.Field, int64(g.Hi), int64(g.Lo), int64(g.Version), g.Items
		}
		put.Queue(`INSERT INTO segments (thread, field, last, first, version, items)
			SELECT $1, * FROM unnest($2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bytea[])`, thread, fields, last, first, versions, items)
	}
	put.Queue(`INSERT INTO folds (thread, seq, spans) VALUES ($1, $2, $3)`, thread, c, string(folded))
	put.Queue(`COMMIT`)
	return moved, conn.SendBatch(ctx, &put).Close()
}

// dueRows reads the rows a fold joins into segments.
func (s *Store) dueRows(ctx context.Context, conn *pgxpool.Conn, thread string, p *sqlstore.FoldPlan) ([]sqlstore.FieldRow, error) {
	var b pgx.Batch
	b.Queue(`SELECT seq, writes FROM checkpoints WHERE thread = $1 AND seq = ANY($2)`, thread, toInt64s(p.DueCheckpoints()))
	br := conn.SendBatch(ctx, &b)
	rows, err := checkpointRows(br, nil)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	return p.DueRows(rows), nil
}

// addRows reads the field rows of a batch's next query into l.
func addRows(br pgx.BatchResults, l *sqlstore.Loader) error {
	rows, err := br.Query()
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		r, err := scanFieldRow(rows)
		if err != nil {
			return err
		}
		l.Add(r)
	}
	return rows.Err()
}

func scanFieldRow(row pgx.CollectableRow) (sqlstore.FieldRow, error) {
	var r sqlstore.FieldRow
	var seq, version int64
	err := row.Scan(&r.Field, &seq, &version, &r.Append, rowValue{&r})
	r.Seq, r.Version = uint64(seq), uint64(version)
	return r, err
}

// rowValue scans a stored value, JSON text or a packed segment, into its
// row with one copy.
type rowValue struct{ r *sqlstore.FieldRow }

func (v rowValue) ScanBytes(b []byte) error {
	if value.Packed(b) {
		v.r.Packed = string(b)
	} else {
		v.r.Value = bytes.Clone(b)
	}
	return nil
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

// Delete implements store.Store: one call of trellis_delete_thread
// (migration 018), one round trip.
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
// (migration 018), one round trip, for all of threads.
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
