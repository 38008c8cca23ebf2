package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/internal/pgtest"
)

// By default a store's connections prepare no statement on the server,
// as PgBouncer in transaction mode needs; with default_query_exec_mode=
// cache_statement in the URL, each prepares its statements once.
func TestStatementsPreparedOnlyWhenAsked(t *testing.T) {
	ctx := context.Background()
	for _, prepared := range []bool{false, true} {
		// one connection: the statements' session is the one counted
		url := pgtest.WithParam(pgtest.Database(t), "pool_max_conns", "1")
		if prepared {
			url = pgtest.WithParam(url, "default_query_exec_mode", "cache_statement")
		}
		s := openStore(t, url)
		for i := range 3 {
			cp := &store.Checkpoint{Thread: "t", Seq: uint64(i + 1), Parent: uint64(i), Run: "r", Source: store.SourceStep, Time: time.Now(),
				Writes: []store.Write{{Field: "n", Version: uint64(i + 1), Value: i}}}
			if err := s.Commit(ctx, cp); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.Head(ctx, "t"); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_prepared_statements WHERE NOT from_sql`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if (n > 0) != prepared {
			t.Errorf("prepared statements asked for: %v; the connection holds %d", prepared, n)
		}
	}
}
