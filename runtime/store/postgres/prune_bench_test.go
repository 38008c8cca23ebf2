package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/trellisflow/trellis/runtime/store/internal/pgtest"
	"github.com/trellisflow/trellis/runtime/store/postgres"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

// go test ./runtime/store/postgres -run '^$' -bench Prune -benchtime 1x
// (on a server with PostgreSQL's default durability)
func BenchmarkPrune(b *testing.B) {
	ctx := context.Background()
	url := pgtest.DurableDatabase(b)
	st, err := postgres.Open(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	storetest.BenchPrune(b, st, func(b *testing.B, thread string, n int) {
		for _, q := range []string{
			// the writes as the store keeps them (sqlstore.EncodeWrites): n each
			// time, an item appended to log every hundred
			`INSERT INTO checkpoints (thread, seq, parent, run, step, source, at, meta, writes)
			SELECT c.thread, s.i, s.i - 1, c.run, s.i, c.source, c.at + s.i, c.meta, convert_to(CASE WHEN s.i % 100 = 0
				THEN format('[["log",%s,true,[%s]],["n",%s,false,%s]]', s.i, s.i, s.i, s.i) ELSE format('[["n",%s,false,%s]]', s.i, s.i) END, 'UTF8')
			FROM generate_series(3, $2::bigint) s(i), checkpoints c WHERE c.thread = $1 AND c.seq = 2`,
			`UPDATE threads SET head = $2 WHERE id = $1`,
		} {
			if _, err := conn.Exec(ctx, q, thread, n); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// go test ./runtime/store/postgres -run '^$' -bench PruneIdle -benchtime 300x
// ("durable": on a server with PostgreSQL's default durability, each
// commit waiting for its WAL to reach the disk)
func BenchmarkPruneIdle(b *testing.B) {
	for name, database := range map[string]func(testing.TB) string{"fast": pgtest.Database, "durable": pgtest.DurableDatabase} {
		b.Run(name, func(b *testing.B) {
			url := database(b)
			st, err := postgres.Open(context.Background(), url)
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			storetest.BenchPruneIdle(b, st, func(b *testing.B) {
				conn, err := pgx.Connect(context.Background(), url)
				if err != nil {
					b.Fatal(err)
				}
				defer conn.Close(context.Background())
				if _, err := conn.Exec(context.Background(), `ANALYZE`); err != nil {
					b.Fatal(err)
				}
			})
		})
	}
}
