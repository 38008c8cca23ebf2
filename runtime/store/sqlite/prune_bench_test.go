package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/trellisflow/trellis/runtime/store/sqlite"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

// go test ./runtime/store/sqlite -run '^$' -bench Prune -benchtime 1x
func BenchmarkPrune(b *testing.B) {
	ctx := context.Background()
	path := filepath.Join(b.TempDir(), "prune.db")
	st, err := sqlite.Open(ctx, path)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	storetest.BenchPrune(b, st, func(b *testing.B, thread string, n int) {
		for _, q := range []string{
			// the writes as the store keeps them (sqlstore.EncodeWrites):
			// n each time, an item appended to log every hundred
			`WITH RECURSIVE s(i) AS (SELECT 3 UNION ALL SELECT i + 1 FROM s WHERE i < ?2)
			INSERT INTO checkpoints (thread, seq, parent, run, step, source, at, meta, writes)
			SELECT c.thread, s.i, s.i - 1, c.run, s.i, c.source, c.at + s.i, c.meta, CASE WHEN s.i % 100 = 0
				THEN format('[["log",%d,true,[%d]],["n",%d,false,%d]]', s.i, s.i, s.i, s.i) ELSE format('[["n",%d,false,%d]]', s.i, s.i) END
			FROM s, checkpoints c WHERE c.thread = ?1 AND c.seq = 2`,
			`UPDATE threads SET head = ?2 WHERE id = ?1`,
		} {
			if _, err := db.ExecContext(ctx, q, thread, n); err != nil {
				b.Fatal(err)
			}
		}
	})
}
