package sqlite

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/store/internal/sqlstore"
)

// The catalog's statements are prepared once and kept; one first met in
// a transaction runs unprepared there (preparing it could open a
// connection, whose set-up waits for the transaction's locks) and is
// prepared once the transaction has ended.
func TestCatalogStatementsArePreparedOnceAndNeverInATransaction(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "p.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// every connection is in use but the transaction's: preparing on the
	// database would open another
	s.db.SetMaxIdleConns(0)
	db := catalogDB{db: s.db, s: s}
	const write = `INSERT INTO leases (thread, owner, expires_at) VALUES (?, 'o', 0)`
	// (a connection opened in the transaction waits out the busy
	// timeout, 10s, past this context)
	txCtx, txCancel := context.WithTimeout(ctx, 5*time.Second)
	defer txCancel()
	err = db.Tx(txCtx, func(tx sqlstore.DB) error {
		if _, err := tx.Exec(txCtx, write, "t1"); err != nil {
			return err
		}
		s.prepared.mu.Lock()
		defer s.prepared.mu.Unlock()
		if s.prepared.m[write] != nil {
			t.Error("a statement was prepared inside a transaction")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	first := s.prepared.m[write]
	if first == nil {
		t.Fatal("a statement met in a transaction was not prepared after it")
	}
	if _, err := db.Exec(ctx, write, "t2"); err != nil {
		t.Fatal(err)
	}
	rows, err := db.Query(ctx, `SELECT count(*) FROM leases`)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	for rows.Next() {
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
	}
	rows.Close()
	if n != 2 || s.prepared.m[write] != first || len(s.prepared.m) != 2 {
		t.Fatalf("%d leases; statements %d, the write's kept: %v", n, len(s.prepared.m), s.prepared.m[write] == first)
	}
}
