package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/internal/sqlstore"
)

// catalogDB runs the shared catalog's statements on database/sql.
type catalogDB struct {
	db interface {
		ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
		QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	}
	s *Store
}

func (d catalogDB) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	var n int64
	exec := func() error {
		res, err := d.db.ExecContext(ctx, query, args...)
		if err == nil {
			n, err = res.RowsAffected()
		}
		return err
	}
	if _, inTx := d.db.(*sql.Tx); inTx {
		return n, exec()
	}
	return n, d.s.write(ctx, exec)
}

type closeRows struct{ *sql.Rows }

func (r closeRows) Close() { r.Rows.Close() }

func (d catalogDB) Query(ctx context.Context, query string, args ...any) (sqlstore.CloseRows, error) {
	rows, err := d.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return closeRows{rows}, nil
}

func (d catalogDB) Tx(ctx context.Context, fn func(sqlstore.DB) error) error {
	return d.s.tx(ctx, func(tx *sql.Tx) error { return fn(catalogDB{db: tx, s: d.s}) })
}

// LockThread implements sqlstore.DB: SQLite runs one write transaction at
// a time (they begin IMMEDIATE).
func (d catalogDB) LockThread(context.Context, string) error { return nil }

// Now implements sqlstore.DB. Every process sharing the file is on this
// machine, with this clock; SQLite reads it to the millisecond.
func (d catalogDB) Now() string { return `CAST(unixepoch('subsec') * 1000000000 AS INTEGER)` }

// Shared implements sqlstore.DB: write transactions begin IMMEDIATE, one
// at a time.
func (d catalogDB) Shared() string { return "" }

func (d catalogDB) Unique(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && (se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY || se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE)
}

var _ store.Catalog = (*Store)(nil)
