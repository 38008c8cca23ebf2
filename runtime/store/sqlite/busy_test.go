package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
)

// A write to a file another connection holds locked is busy, by its
// result code: what opening a new file retries on.
func TestBusyIsTheResultCode(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "locked.db")
	holder, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	conn, err := holder.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `BEGIN EXCLUSIVE`); err != nil {
		t.Fatal(err)
	}
	defer conn.ExecContext(ctx, `ROLLBACK`)
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
