package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/internal/sqlstore"
)

var _ store.Notifier = (*Store)(nil)

// Notify implements store.Notifier with pg_notify, a statement like any
// other: it goes through a pooler in transaction mode.
func (s *Store) Notify(ctx context.Context, channel, payload string) error {
	_, err := s.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, channel, payload)
	return err
}

// AppendNotify implements store.Notifier in one call (see migrations
// 024 and 037).
func (s *Store) AppendNotify(ctx context.Context, ea *store.EventAppend) error {
	if len(ea.Events) == 0 {
		return nil
	}
	if !sqlstore.Ascending(ea.Events) {
		return sqlstore.Refused(ctx, catalogDB{q: s.pool, s: s}, ea.Run, ea.Holder)
	}
	firsts, seqs, data := eventRowColumns(ea.Events)
	// in a group with the commits and appends waiting beside it
	var recorded int
	err := s.grouped(ctx, `SELECT trellis_append_event_rows($1, $2, $3, $4, $5, $6, $7)`,
		[]any{ea.Run, ea.Holder, firsts, seqs, data, ea.Channel, ea.Payload}, func(row pgx.Row) error { return row.Scan(&recorded) })
	switch {
	case catalogDB{}.Unique(err), err == nil && recorded < 0:
		return store.ErrExists
	case err == nil && recorded == 0:
		return store.ErrRunChanged
	}
	return err
}

// Listen implements store.Notifier on a connection of its own.
func (s *Store) Listen(ctx context.Context, dsn, channel string, fn func(payload string), connected func(up bool)) error {
	cfg := s.pool.Config().ConnConfig.Copy()
	if dsn != "" {
		var err error
		if cfg, err = pgx.ParseConfig(dsn); err != nil {
			return err
		}
	}
	wait := 100 * time.Millisecond
	for ctx.Err() == nil {
		up, err := listen(ctx, cfg, channel, fn, connected)
		if up {
			connected(false)
			wait = 100 * time.Millisecond
		}
		if err == nil || ctx.Err() != nil {
			break
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
		}
		wait = min(2*wait, 5*time.Second)
	}
	return ctx.Err()
}

// listen holds one connection until it fails or ctx ends; up says
// whether it was listening.
func listen(ctx context.Context, cfg *pgx.ConnConfig, channel string, fn func(string), connected func(bool)) (up bool, err error) {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return false, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return false, err
	}
	connected(true)
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true, err
		}
		fn(n.Payload)
	}
}
