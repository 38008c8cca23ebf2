package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/internal/sqlstore"
)

// querier is what the pool and a transaction share.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// catalogDB runs the shared catalog's statements on pgx, numbering their
// placeholders.
type catalogDB struct {
	q querier
	s *Store
}

// numbered holds each catalog statement with $n placeholders, made once.
var numbered sync.Map // string -> string

func number(query string) string {
	if n, ok := numbered.Load(query); ok {
		return n.(string)
	}
	var b strings.Builder
	i := 0
	for _, r := range query {
		if r == '?' {
			i++
			b.WriteString("$" + strconv.Itoa(i))
			continue
		}
		b.WriteRune(r)
	}
	numbered.Store(query, b.String())
	return b.String()
}

func (d catalogDB) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := d.q.Exec(ctx, number(query), args...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

type closeRows struct{ pgx.Rows }

func (r closeRows) Close() { r.Rows.Close() }

func (d catalogDB) Query(ctx context.Context, query string, args ...any) (sqlstore.CloseRows, error) {
	rows, err := d.q.Query(ctx, number(query), args...)
	if err != nil {
		return nil, err
	}
	return closeRows{rows}, nil
}

func (d catalogDB) Tx(ctx context.Context, fn func(sqlstore.DB) error) error {
	return pgx.BeginFunc(ctx, d.s.pool, func(tx pgx.Tx) error { return fn(catalogDB{q: tx, s: d.s}) })
}

// LockThread implements sqlstore.DB with a transaction-scoped advisory
// lock on the thread's name, which works whether the thread has rows yet
// or not, and behind PgBouncer in transaction mode.
func (d catalogDB) LockThread(ctx context.Context, thread string) error {
	_, err := d.q.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, thread)
	return err
}

// Now implements sqlstore.DB: the server's clock, which every process
// sharing the database reads, whatever their own clocks say.
func (d catalogDB) Now() string { return `(extract(epoch FROM clock_timestamp()) * 1e9)::bigint` }

// Shared implements sqlstore.DB.
func (d catalogDB) Shared() string { return " FOR SHARE" }

func (d catalogDB) Unique(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

var _ store.Catalog = (*Store)(nil)

// EnqueueRun implements store.Catalog in one call (see migration 036),
// deciding as the shared catalog's does.
func (s *Store) EnqueueRun(ctx context.Context, r *store.RunRecord, policy store.BusyPolicy) (busy bool, err error) {
	input, answers, cfg := sqlstore.RunValues(r)
	var owner string
	var ttl int64
	if r.Lease != nil {
		owner, ttl = r.Lease.Owner, r.Lease.TTL.Nanoseconds()
		r.Lease.Taken = false
	}
	var outcome int
	var created int64
	var taken bool
	err = s.pool.QueryRow(ctx, `SELECT * FROM trellis_enqueue_run($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15,
		$16, $17, $18, $19, $20, $21, $22)`,
		r.ID, r.Tenant, r.Thread, r.Flow, r.FlowVersion, input, r.Error, int64(r.Checkpoint), sqlstore.RecordTime(r.Created), sqlstore.RecordTime(r.Finished),
		r.Resume, r.Interrupt, r.Server, string(r.Stop), answers, cfg, r.Trace, r.WriteID,
		string(policy), r.Lease != nil, owner, ttl).Scan(&outcome, &busy, &created, &taken)
	switch {
	case err != nil:
		if (catalogDB{}).Unique(err) {
			return busy, store.ErrExists
		}
		return busy, err
	case outcome == 1:
		return busy, store.ErrNotFound
	case outcome == 2:
		return busy, store.ErrBusy
	}
	if created != sqlstore.RecordTime(r.Created) {
		r.Created = sqlstore.Time(created)
	}
	sqlstore.Queued(r, busy)
	if r.Lease != nil {
		r.Lease.Taken = taken
	}
	return busy, nil
}

// PackEvents implements store.Catalog in one call (see migration 035):
// the packs are compressed before it, which only swaps the rows.
func (s *Store) PackEvents(ctx context.Context, packs []store.EventPack) (int, error) {
	runs, lasts, throughs := make([]string, len(packs)), make([]int64, len(packs)), make([]int64, len(packs))
	counts, data := make([]int32, len(packs)), make([][]byte, len(packs))
	for i, p := range packs {
		runs[i], throughs[i] = p.Run, p.Through
		if len(p.Events) == 0 {
			continue
		}
		b, err := sqlstore.EncodePack(p.Events)
		if err != nil {
			return 0, fmt.Errorf("pack the events of run %s: %w", p.Run, err)
		}
		data[i], lasts[i], counts[i] = b, p.Events[len(p.Events)-1].Seq, int32(len(p.Events))
	}
	var n int
	err := s.pool.QueryRow(ctx, `SELECT trellis_pack_events($1, $2, $3, $4, $5)`, runs, lasts, counts, data, throughs).Scan(&n)
	return n, err
}
