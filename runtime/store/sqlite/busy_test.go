package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/store"
)

// A write to a file another connection holds locked is busy, by its
// result code: what opening a new file retries on.
func TestBusyIsTheResultCode(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "locked.db")
	hold(t, path, `BEGIN EXCLUSIVE`)
	other, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(0)")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	_, err = other.ExecContext(ctx, `CREATE TABLE t (x INTEGER)`)
	if err == nil || !busy(err) {
		t.Fatalf("want a busy error, got %v (code %d)", err, code(err))
	}
	if busy(context.Canceled) || code(context.Canceled) != 0 {
		t.Fatal("an error that is not SQLite's is not busy")
	}
}

// A writer holding the file does not hold its readers: every connection
// the store opens while another process writes opens and reads. (Each
// used to record the file's vacuum mode as it opened, a write that
// waited for the writer and failed after the busy timeout.)
func TestReadersOpenBesideAWriter(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "w.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Commit(ctx, &store.Checkpoint{Thread: "t", Seq: 1, Source: store.SourceCreate, Time: time.Now()}); err != nil {
		t.Fatal(err)
	}
	hold(t, path, `BEGIN IMMEDIATE`, `DELETE FROM threads`)
	// every connection the pool may hold but the writer's, each opened
	// now
	var conns []*sql.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range maxConns - 1 {
		c, err := s.db.Conn(ctx)
		if err != nil {
			t.Fatalf("a connection opened beside the writer: %v", err)
		}
		conns = append(conns, c)
		var n int
		if err := c.QueryRowContext(ctx, `SELECT count(*) FROM threads`).Scan(&n); err != nil || n != 1 {
			t.Fatalf("a read beside the writer: %d threads, %v", n, err)
		}
	}
	if open := s.db.Stats().OpenConnections; open != maxConns {
		t.Fatalf("%d connections open, want %d", open, maxConns)
	}
}

// hold runs stmts (a transaction's beginning, then its statements) on a
// connection of its own to the file at path, as another process would,
// and holds the transaction until the test ends.
func hold(t *testing.T, path string, stmts ...string) {
	t.Helper()
	ctx := context.Background()
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.ExecContext(ctx, `ROLLBACK`)
		conn.Close()
	})
	for _, q := range stmts {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
}
