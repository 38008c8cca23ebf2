package sqlite_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/sqlite"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

func TestMemoryConformance(t *testing.T) {
	storetest.RunMemory(t, func(t *testing.T) store.Store {
		st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "trellis.db"))
		if err != nil {
			t.Fatal(err)
		}
		return st
	})
}

// go test ./runtime/store/sqlite -run '^$' -bench Memory
func BenchmarkMemory(b *testing.B) {
	st, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "trellis.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	storetest.BenchMemory(b, st, 5000)
}

// The full-text index holds the documents with words to index, and only
// those: a document with none (no string holds a word) or put unindexed
// is not in it, whether it was put before migration 038 (whose triggers
// indexed every document, those with nothing to index as empty ones) or
// after; FTS5's own integrity check holds the index to the documents
// throughout.
func TestMemoryIndexHoldsDocumentsWithWords(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "trellis.db")
	st, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	db := openDB(t, path)
	defer db.Close()
	// the triggers as migration 012 made them, and documents they indexed
	execAll(t, db,
		`DROP TRIGGER memory_items_insert`, `DROP TRIGGER memory_items_delete`, `DROP TRIGGER memory_items_update`,
		`CREATE TRIGGER memory_items_insert AFTER INSERT ON memory_items BEGIN
			INSERT INTO memory_fts (rowid, body) VALUES (new.id, new.body); END`,
		`CREATE TRIGGER memory_items_delete AFTER DELETE ON memory_items BEGIN
			INSERT INTO memory_fts (memory_fts, rowid, body) VALUES ('delete', old.id, old.body); END`,
		`CREATE TRIGGER memory_items_update AFTER UPDATE ON memory_items BEGIN
			INSERT INTO memory_fts (memory_fts, rowid, body) VALUES ('delete', old.id, old.body);
			INSERT INTO memory_fts (rowid, body) VALUES (new.id, new.body); END`,
		`DELETE FROM trellis_migrations WHERE version = 38`,
		`INSERT INTO memory_items (tenant, namespace, key, value, body, updated_at, expires_at) VALUES
			('acme', 'n'||char(31), 'words', '"payment service"', 'payment service', 1, 0),
			('acme', 'n'||char(31), 'number', '42', '', 2, 0),
			('acme', 'n'||char(31), 'empty', '{"a": [1, true]}', '', 3, 0)`,
	)
	indexed := func(want int) {
		t.Helper()
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM memory_fts_docsize`).Scan(&n); err != nil || n != want {
			t.Fatalf("%d documents in the full-text index (%v), want %d", n, err, want)
		}
		if _, err := db.Exec(`INSERT INTO memory_fts (memory_fts) VALUES ('integrity-check')`); err != nil {
			t.Fatalf("the full-text index's integrity check: %v", err)
		}
	}
	indexed(3)
	if st, err = sqlite.Open(ctx, path); err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	indexed(1)
	ns := []string{"n"}
	put := func(key, value string, unindexed bool) {
		t.Helper()
		if err := st.PutMemory(ctx, "acme", &store.MemoryItem{Namespace: ns, Key: key, Value: json.RawMessage(value), Updated: time.Unix(9, 0), Unindexed: unindexed}); err != nil {
			t.Fatal(err)
		}
	}
	found := func(text string, want int) {
		t.Helper()
		items, err := st.SearchMemory(ctx, "acme", store.MemoryQuery{Prefix: ns, Text: text, Now: time.Unix(10, 0)})
		if err != nil || len(items) != want {
			t.Fatalf("search %q: %d documents (%v), want %d", text, len(items), err, want)
		}
	}
	found("payment", 1)
	put("quiet", `"payment terms"`, true)
	indexed(1)
	found("payment", 1)
	put("quiet", `"payment terms"`, false)
	indexed(2)
	found("payment", 2)
	put("quiet", `"payment terms"`, true)
	indexed(1)
	put("number", `"now with words"`, false)
	indexed(2)
	put("words", `7`, false)
	indexed(1)
	found("payment", 0)
	for _, key := range []string{"empty", "quiet", "number", "words"} {
		if err := st.DeleteMemory(ctx, "acme", ns, key); err != nil {
			t.Fatal(err)
		}
	}
	indexed(0)
}
