package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/sqlite"
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
	paths := map[store.Store]string{}
	open := func(t *testing.T) store.Store {
		path := filepath.Join(t.TempDir(), "l.db")
		st, err := sqlite.Open(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		paths[st] = path
		mu.Unlock()
		return st
	}
	refs := func(t *testing.T, st store.Store, needles []string) []string {
		mu.Lock()
		path := paths[st]
		mu.Unlock()
		return references(t, path, needles)
	}
	probe := open(t)
	tables := perThreadTables(t, paths[probe])
	probe.Close()
	storetest.RunLifecycle(t, open, refs, tables)
}

// columns lists the database's tables and their columns.
func columns(t *testing.T, db *sql.DB) map[string][]string {
	t.Helper()
	rows, err := db.Query(`SELECT m.name, c.name FROM sqlite_master m JOIN pragma_table_info(m.name) c
		WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite_%'`)
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
	return out
}

func perThreadTables(t *testing.T, path string) []string {
	db := openDB(t, path)
	defer db.Close()
	var out []string
	for table := range columns(t, db) {
		if !slices.Contains(notPerThread, table) && !strings.HasPrefix(table, "memory_") {
			out = append(out, table)
		}
	}
	slices.Sort(out)
	return out
}

func openDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// execAll runs statements on db, failing the test at the first that
// fails.
func execAll(t *testing.T, db *sql.DB, stmts ...string) {
	t.Helper()
	for _, q := range stmts {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// references names the table.column of every value of the database that
// contains a needle (as text).
func references(t *testing.T, path string, needles []string) []string {
	t.Helper()
	db := openDB(t, path)
	defer db.Close()
	var out []string
	for table, cols := range columns(t, db) {
		for _, col := range cols {
			for _, n := range needles {
				var k int
				q := fmt.Sprintf(`SELECT count(*) FROM %q WHERE instr(CAST(%q AS TEXT), ?) > 0`, table, col)
				if err := db.QueryRow(q, n).Scan(&k); err != nil {
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
	path := filepath.Join(t.TempDir(), "old.db")
	st, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Commit(ctx, &store.Checkpoint{Thread: "acme/kept", Seq: 1, Source: store.SourceCreate}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	db := openDB(t, path)
	defer db.Close()
	// back to the schema before the retention migration, with the
	// records old prunes left
	execAll(t, db,
		`DROP TABLE api_event_packs`, `DROP INDEX api_runs_to_pack`, `ALTER TABLE api_runs DROP COLUMN events_packed`,
		`DELETE FROM trellis_migrations WHERE version = 14`,
		`INSERT INTO api_threads (id, tenant, flow, metadata, created_at) VALUES ('acme/pruned', 'acme', 'f', '{}', 1), ('acme/kept', 'acme', 'f', '{}', 1)`,
		`INSERT INTO api_runs (id, tenant, thread, flow, flow_version, status, input, error, checkpoint, created_at, started_at, finished_at)
			VALUES ('r-pruned', 'acme', 'acme/pruned', 'f', '', 'succeeded', 'null', '', 3, 1, 1, 2),
			('r-kept', 'acme', 'acme/kept', 'f', '', 'succeeded', 'null', '', 1, 1, 1, 2)`,
		`INSERT INTO api_events (run, seq, data) VALUES ('r-pruned', 1, '{}'), ('r-pruned', 2, '{}'), ('r-kept', 1, '{}'), ('r-gone', 1, '{}')`,
		`INSERT INTO voice_sessions (id, tenant, thread, thread_created, key_hash, signing_key, created_at, expires_at, deadline, renewed_at, caller, caller_at, ended_at)
			VALUES ('v-pruned', 'acme', 'acme/pruned', 1, 'h', 'k', 1, 2, 2, 0, '', 0, 0)`,
	)
	st, err = sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if left := references(t, path, []string{"pruned", "r-gone"}); len(left) > 0 {
		t.Fatalf("the migration left what old prunes left in %v", left)
	}
	if _, err := st.Run(ctx, "acme", "r-kept"); err != nil {
		t.Fatalf("a run of a thread with checkpoints: %v", err)
	}
	if evs, err := st.Events(ctx, "r-kept", 0, 0); err != nil || len(evs) != 1 {
		t.Fatalf("events of a thread with checkpoints: %v %v", evs, err)
	}
}

// The migration that keeps a run's events in the order they were
// appended (037), and the one that keeps a step's events in one row
// (039), keep every event of a file made before them: the same data under
// the same numbers, read in order, and a number still taken once.
func TestEventsMigrationKeepsEvents(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	st, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateThread(ctx, &store.ThreadRecord{ID: "acme/t", Tenant: "acme", Flow: "f"}); err != nil {
		t.Fatal(err)
	}
	want := map[string][]store.EventRecord{}
	for i, run := range []string{"run_b", "run_a", "run_c"} {
		if err := st.CreateRun(ctx, &store.RunRecord{ID: run, Tenant: "acme", Thread: "acme/t", Flow: "f", Status: store.RunRunning, Server: "s"}); err != nil {
			t.Fatal(err)
		}
		for seq := int64(1); seq <= int64(5+i); seq++ {
			data := fmt.Appendf(nil, `{"type":"node_end","text":"%s %d é \u0000 %s"}`, run, seq, strings.Repeat("x", int(seq)*3000*int(seq%2)))
			want[run] = append(want[run], store.EventRecord{Seq: seq, Data: data})
		}
	}
	st.Close()
	// the table as it was before the migration, holding these events
	db := openDB(t, path)
	defer db.Close()
	execAll(t, db,
		`DROP TABLE api_events`,
		`CREATE TABLE api_events (run TEXT NOT NULL, seq INTEGER NOT NULL, data TEXT NOT NULL, PRIMARY KEY (run, seq)) WITHOUT ROWID`,
		`DELETE FROM trellis_migrations WHERE version IN (37, 39)`,
	)
	for run, evs := range want {
		for _, e := range evs {
			if _, err := db.Exec(`INSERT INTO api_events (run, seq, data) VALUES (?, ?, ?)`, run, e.Seq, string(e.Data)); err != nil {
				t.Fatal(err)
			}
		}
	}
	st, err = sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var layout string
	if err := db.QueryRow(`SELECT sql FROM sqlite_master WHERE name = 'api_events'`).Scan(&layout); err != nil || strings.Contains(layout, "WITHOUT ROWID") {
		t.Fatalf("the events' table after the migration: %q %v", layout, err)
	}
	for run, evs := range want {
		got, err := st.Events(ctx, run, 0, 0)
		if err != nil || !slices.EqualFunc(got, evs, func(a, b store.EventRecord) bool { return a.Seq == b.Seq && string(a.Data) == string(b.Data) }) {
			t.Fatalf("events of %s after the migration: %d of %d, %v", run, len(got), len(evs), err)
		}
		if got, err := st.Events(ctx, run, 2, 2); err != nil || len(got) != 2 || got[0].Seq != 3 || got[1].Seq != 4 {
			t.Fatalf("a page of %s's events after the migration: %v %v", run, got, err)
		}
	}
	if err := st.AppendEvents(ctx, "run_a", "", []store.EventRecord{{Seq: 2, Data: []byte(`{"type":"again"}`)}}); err == nil {
		t.Fatal("a number taken before the migration was taken again")
	}
	if err := st.AppendEvents(ctx, "run_a", "", []store.EventRecord{{Seq: 7, Data: []byte(`{"type":"next"}`)}}); err != nil {
		t.Fatal(err)
	}
	if got, err := st.Events(ctx, "run_a", 5, 0); err != nil || len(got) != 2 || got[0].Seq != 6 || string(got[1].Data) != `{"type":"next"}` {
		t.Fatalf("events after one appended after the migration: %v %v", got, err)
	}
}

// A step's events are one row of the events' table (migration 039),
// not a row each.
func TestEventRows(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rows.db")
	st, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	db := openDB(t, path)
	defer db.Close()
	storetest.EventRows(t, st, func(run string) [][2]int64 {
		rows, err := db.Query(`SELECT coalesce(first_seq, seq), seq FROM api_events WHERE run = ? ORDER BY seq`, run)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out [][2]int64
		for rows.Next() {
			var r [2]int64
			if err := rows.Scan(&r[0], &r[1]); err != nil {
				t.Fatal(err)
			}
			out = append(out, r)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	})
}
