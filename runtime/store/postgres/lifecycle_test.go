package postgres_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/internal/pgtest"
	"github.com/trellisflow/trellis/runtime/store/postgres"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

// notPerThread are the tables that hold no thread's data: the migrations
// applied, API keys, servers' heartbeats, the voice signing key, and
// node results cached across threads (by their flow, node and key), and
// the tenants' memory (documents kept across threads, by namespace and
// key: the tables named memory_*), and the versions of flows with their
// files and the version of each flow promoted, which threads share.
// Every other table is one a thread's data can be in.
var notPerThread = []string{"trellis_migrations", "api_keys", "api_servers", "voice_signing_key", "node_cache", "flow_files", "flow_versions",
	"flow_promotions"}

// After a thread is deleted or pruned, no table of the database (every
// table of every migration) holds anything that refers to it.
func TestLifecycle(t *testing.T) {
	var mu sync.Mutex
	urls := map[store.Store]string{}
	open := func(t *testing.T) store.Store {
		url := pgtest.Database(t)
		st := openURL(t, url)
		mu.Lock()
		urls[st] = url
		mu.Unlock()
		return st
	}
	refs := func(t *testing.T, st store.Store, needles []string) []string {
		mu.Lock()
		url := urls[st]
		mu.Unlock()
		return references(t, url, needles)
	}
	probe := open(t)
	var tables []string
	for table := range columns(t, urls[probe]) {
		if !slices.Contains(notPerThread, table) && !strings.HasPrefix(table, "memory_") {
			tables = append(tables, table)
		}
	}
	probe.Close()
	slices.Sort(tables)
	storetest.RunLifecycle(t, open, refs, tables)
}

// columns lists the database's tables and their columns.
func columns(t *testing.T, url string) map[string][]string {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(context.Background(), `SELECT c.table_name, c.column_name FROM information_schema.columns c
		JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name
		WHERE c.table_schema = current_schema() AND t.table_type = 'BASE TABLE'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string][]string{}
	for rows.Next() {
		var table, col string
		if err := rows.Scan(&table, &col); err != nil {
			t.Fatal(err)
		}
		out[table] = append(out[table], col)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// references names the table.column of every value of the database that
// contains a needle (as text).
func references(t *testing.T, url string, needles []string) []string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var out []string
	for table, cols := range columns(t, url) {
		for _, col := range cols {
			for _, n := range needles {
				var k int
				q := `SELECT count(*) FROM ` + pgx.Identifier{table}.Sanitize() + ` WHERE strpos(` + pgx.Identifier{col}.Sanitize() + `::text, $1) > 0`
				if err := conn.QueryRow(ctx, q, n).Scan(&k); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
				if k > 0 && !slices.Contains(out, table+"."+col) {
					out = append(out, table+"."+col)
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// The records of a served thread whose checkpoints an older version
// pruned alone are deleted when the database is migrated; those of a
// thread that has its checkpoints stay.
func TestMigrationDeletesWhatOldPrunesLeft(t *testing.T) {
	ctx := context.Background()
	url := pgtest.Database(t)
	st, err := postgres.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Commit(ctx, &store.Checkpoint{Thread: "acme/kept", Seq: 1, Source: store.SourceCreate}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// back to the schema before the retention migration, with the
	// records old prunes left
	for _, q := range []string{
		`DROP TABLE api_event_packs`, `DROP INDEX threads_children`, `ALTER TABLE api_runs DROP COLUMN events_packed`,
		`DELETE FROM trellis_migrations WHERE version = 16`,
		`INSERT INTO api_threads (id, tenant, flow, metadata, created_at) VALUES ('acme/pruned', 'acme', 'f', '{}', 1), ('acme/kept', 'acme', 'f', '{}', 1)`,
		`INSERT INTO api_runs (id, tenant, thread, flow, flow_version, status, input, error, checkpoint, created_at, started_at, finished_at)
			VALUES ('r-pruned', 'acme', 'acme/pruned', 'f', '', 'succeeded', 'null', '', 3, 1, 1, 2),
			('r-kept', 'acme', 'acme/kept', 'f', '', 'succeeded', 'null', '', 1, 1, 1, 2)`,
		`INSERT INTO api_events (run, seq, data) VALUES ('r-pruned', 1, '{}'), ('r-pruned', 2, '{}'), ('r-kept', 1, '{}'), ('r-gone', 1, '{}')`,
		`INSERT INTO voice_sessions (id, tenant, thread, thread_created, key_hash, signing_key, created_at, expires_at, deadline, renewed_at, caller, caller_at, ended_at)
			VALUES ('v-pruned', 'acme', 'acme/pruned', 1, 'h', 'k', 1, 2, 2, 0, '', 0, 0)`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	st, err = postgres.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if left := references(t, url, []string{"pruned", "r-gone"}); len(left) > 0 {
		t.Fatalf("the migration left what old prunes left in %v", left)
	}
	if _, err := st.Run(ctx, "acme", "r-kept"); err != nil {
		t.Fatalf("a run of a thread with checkpoints: %v", err)
	}
	if evs, err := st.Events(ctx, "r-kept", 0, 0); err != nil || len(evs) != 1 {
		t.Fatalf("events of a thread with checkpoints: %v %v", evs, err)
	}
}

// One call deletes several idle threads, each as Delete does, and leaves
// those written since the cutoff, one a run holds, and one that is
// gone; it takes no lease it keeps.
func TestPruneIdleBatch(t *testing.T) {
	ctx := context.Background()
	st, err := postgres.Open(ctx, pgtest.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cutoff := time.Now().Add(-time.Hour)
	for id, at := range map[string]time.Time{"old-1": cutoff.Add(-time.Minute), "old-2": cutoff.Add(-time.Hour), "new": time.Now(), "held": cutoff.Add(-time.Minute)} {
		if err := st.Commit(ctx, &store.Checkpoint{Thread: id, Seq: 1, Source: store.SourceCreate, Time: at,
			Writes: []store.Write{{Field: "n", Version: 1, Value: 1}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Acquire(ctx, "held", "a run", time.Minute); err != nil {
		t.Fatal(err)
	}
	deleted, err := st.PruneIdle(ctx, []string{"gone", "held", "new", "old-1", "old-2"}, "the prune", cutoff)
	if err != nil || !slices.Equal(deleted, []string{"old-1", "old-2"}) {
		t.Fatalf("deleted %v: %v", deleted, err)
	}
	for _, id := range []string{"old-1", "old-2"} {
		if _, err := st.Head(ctx, id); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("%s after the prune: %v", id, err)
		}
	}
	for _, id := range []string{"new", "held"} {
		if _, err := st.Head(ctx, id); err != nil {
			t.Fatalf("%s after the prune: %v", id, err)
		}
	}
	if err := st.Acquire(ctx, "held", "another run", time.Minute); !errors.Is(err, store.ErrLeased) {
		t.Fatalf("the run's lease after the prune: %v", err)
	}
	for _, id := range []string{"new", "gone"} {
		if err := st.Acquire(ctx, id, "next", time.Minute); err != nil {
			t.Fatalf("a lease left on %s: %v", id, err)
		}
	}
}

// A step's events are one row of the events' table (migration 037),
// not a row each: through the commit's function, an append, a notified
// append and a run's end.
func TestEventRows(t *testing.T) {
	ctx := context.Background()
	url := pgtest.Database(t)
	st := openURL(t, url)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	storetest.EventRows(t, st, func(run string) [][2]int64 {
		rows, err := conn.Query(ctx, `SELECT coalesce(first_seq, seq), seq FROM api_events WHERE run = $1 ORDER BY seq`, run)
		if err != nil {
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([2]int64, error) {
			var v [2]int64
			return v, r.Scan(&v[0], &v[1])
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	})
}
