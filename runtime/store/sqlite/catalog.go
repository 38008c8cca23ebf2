package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"sync"

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
	exec := func(ctx context.Context, tx *sql.Tx) error {
		var res sql.Result
		var err error
		if st := d.s.prepared.get(ctx, query, false); st != nil {
			res, err = tx.StmtContext(ctx, st).ExecContext(ctx, args...)
		} else {
			res, err = tx.ExecContext(ctx, query, args...)
		}
		if err == nil {
			n, err = res.RowsAffected()
		}
		return err
	}
	if tx, ok := d.db.(*sql.Tx); ok {
		return n, exec(shared(ctx), tx)
	}
	return n, d.s.tx(ctx, exec)
}

// shared is the context of a statement in a write transaction, which the
// writes of others may share (group.go): ctx without its cancellation,
// as an interrupted statement would roll the whole transaction back.
func shared(ctx context.Context) context.Context { return context.WithoutCancel(ctx) }

type closeRows struct{ *sql.Rows }

func (r closeRows) Close() { r.Rows.Close() }

func (d catalogDB) Query(ctx context.Context, query string, args ...any) (sqlstore.CloseRows, error) {
	var rows *sql.Rows
	var err error
	tx, inTx := d.db.(*sql.Tx)
	if inTx {
		ctx = shared(ctx)
	}
	if st := d.s.prepared.get(ctx, query, !inTx); st != nil && inTx {
		rows, err = tx.StmtContext(ctx, st).QueryContext(ctx, args...)
	} else if st != nil {
		rows, err = st.QueryContext(ctx, args...)
	} else {
		rows, err = d.db.QueryContext(ctx, query, args...)
	}
	if err != nil {
		return nil, err
	}
	return closeRows{rows}, nil
}

// preparedCache keeps the shared catalog's statements prepared, by their
// text: compiling a statement cost about as much as running it. Texts
// past its bound (a statement built with values in its text) run
// unprepared.
//
// A statement is prepared on the database, which may open a connection,
// and opening one takes locks a transaction of this process may hold: a
// statement first met in a transaction runs unprepared there and is
// prepared once the transaction has ended (prepareWanted).
type preparedCache struct {
	db     *sql.DB
	mu     sync.Mutex
	m      map[string]*sql.Stmt
	wanted map[string]bool
	closed bool
}

const preparedMax = 512

// get is query's prepared statement, or nil where it runs unprepared;
// now says it may be prepared now (no transaction is open).
func (c *preparedCache) get(ctx context.Context, query string, now bool) *sql.Stmt {
	c.mu.Lock()
	st, ok := c.m[query]
	full := len(c.m)+len(c.wanted) >= preparedMax
	if !ok && !full && !now {
		if c.wanted == nil {
			c.wanted = map[string]bool{}
		}
		c.wanted[query] = true
	}
	c.mu.Unlock()
	if ok || full || !now {
		return st
	}
	return c.prepare(ctx, query)
}

// prepare prepares query and keeps it (outside the lock: it waits for a
// connection).
func (c *preparedCache) prepare(ctx context.Context, query string) *sql.Stmt {
	st, err := c.db.PrepareContext(ctx, query)
	if err != nil {
		return nil // it fails again unprepared, and says why there
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if was, ok := c.m[query]; ok || c.closed {
		st.Close()
		return was
	}
	if c.m == nil {
		c.m = map[string]*sql.Stmt{}
	}
	c.m[query] = st
	return st
}

// prepareWanted prepares the statements met in transactions, once none
// is open.
func (c *preparedCache) prepareWanted(ctx context.Context) {
	c.mu.Lock()
	wanted := c.wanted
	c.wanted = nil
	c.mu.Unlock()
	for q := range wanted {
		c.prepare(ctx, q)
	}
}

func (c *preparedCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, st := range c.m {
		st.Close()
	}
	c.m, c.closed = nil, true
}

func (d catalogDB) Tx(ctx context.Context, fn func(sqlstore.DB) error) error {
	return d.s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error { return fn(catalogDB{db: tx, s: d.s}) })
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
