package sqlite_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/sqlite"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "trellis.db"))
		if err != nil {
			t.Fatal(err)
		}
		return st
	})
}

func TestMigrationsIdempotentAndConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.db")
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	stores := make([]*sqlite.Store, 4)
	for i := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stores[i], errs[i] = sqlite.Open(ctx, path)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
		defer stores[i].Close()
	}
	if err := stores[0].Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := stores[0].Migrations(ctx)
	if err != nil || !reflect.DeepEqual(got, allMigrations(t)) {
		t.Fatalf("migrations %v %v", got, err)
	}
	// the file is made in incremental vacuum mode, whichever made it
	db := openDB(t, path)
	defer db.Close()
	var mode int
	if err := db.QueryRow(`PRAGMA auto_vacuum`).Scan(&mode); err != nil || mode != 2 {
		t.Fatalf("auto_vacuum %d (%v), want 2 (incremental)", mode, err)
	}
}

func TestTwoProcesses(t *testing.T) {
	storetest.RunShared(t, func(t *testing.T) (store.Store, store.Store) {
		path := filepath.Join(t.TempDir(), "shared.db")
		a, err := sqlite.Open(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		b, err := sqlite.Open(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		return a, b
	})
}

// A database written before the writes table was clustered keeps every
// thread through the migration that rebuilds it, and through the one
// that moves the writes into their checkpoints' rows.
func TestClusteringMigrationKeepsThreads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"migrations/001_checkpoints.sql", "migrations/002_pending_and_leases.sql"} {
		body, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(string(body)); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	execAll(t, db,
		`CREATE TABLE trellis_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`,
		`INSERT INTO trellis_migrations VALUES (1, '001_checkpoints', 0), (2, '002_pending_and_leases', 0)`,
		`INSERT INTO threads VALUES ('t', 3, 1, 3)`,
		`INSERT INTO checkpoints VALUES ('t', 1, 0, 'r', 0, 'create', 1, '{}'), ('t', 2, 1, 'r', 1, 'step', 2, '{}'), ('t', 3, 2, 'r', 2, 'step', 3, '{}')`,
		`INSERT INTO writes VALUES ('t', 1, 'log', 1, 0, '[]'), ('t', 1, 'n', 1, 0, '0'),
			('t', 2, 'log', 2, 1, '["a"]'), ('t', 2, 'n', 2, 0, '1'), ('t', 3, 'log', 3, 1, '["b","c"]')`,
	)
	db.Close()
	st, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	got, err := st.Migrations(context.Background())
	if err != nil || !reflect.DeepEqual(got, allMigrations(t)) {
		t.Fatalf("migrations %v %v", got, err)
	}
	snap, err := st.Head(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(snap.Values, map[string]any{"log": []any{"a", "b", "c"}, "n": 1}) || snap.Versions["log"] != 3 {
		t.Fatalf("state after migration %v versions %v", snap.Values, snap.Versions)
	}
	// the writes moved into their checkpoints' rows
	hist, err := st.History(context.Background(), "t", store.HistoryOptions{})
	if err != nil || len(hist) != 3 {
		t.Fatalf("history after migration: %v %v", hist, err)
	}
	if w := hist[1].Writes; len(w) != 2 || w[0].Field != "log" || !w[0].Append || !reflect.DeepEqual(w[0].Items, []any{"a"}) || w[1].Field != "n" || w[1].Value != 1 {
		t.Fatalf("writes of checkpoint 2 after migration: %+v", w)
	}
	if at1, err := st.StateAt(context.Background(), "t", 1); err != nil || !reflect.DeepEqual(at1.Values, map[string]any{"log": []any{}, "n": 0}) {
		t.Fatalf("state at 1 after migration: %v %v", at1, err)
	}
	if err := st.Delete(context.Background(), "t"); err != nil {
		t.Fatal(err)
	}
}

func TestCatalogConformance(t *testing.T) {
	storetest.RunCatalog(t, func(t *testing.T) store.Store {
		st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "trellis.db"))
		if err != nil {
			t.Fatal(err)
		}
		return st
	})
}

// The whole path names the database file, whatever it holds (a "?" once
// cut the name and dropped WAL mode); an empty path is refused rather than
// read as a throwaway database; every open error names the file.
func TestPaths(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"a?b.db", "c#d.db", "e%3fx.db", "f g.db", "h?_pragma=journal_mode(DELETE).db"} {
		dir := t.TempDir()
		path := filepath.Join(dir, name)
		st, err := sqlite.Open(ctx, path)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := st.Commit(ctx, &store.Checkpoint{Thread: "t", Seq: 1, Writes: []store.Write{{Field: "x", Version: 1, Value: 1}}}); err != nil {
			t.Fatal(err)
		}
		st.Close()
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if e.Name() != name && e.Name() != name+"-wal" && e.Name() != name+"-shm" {
				t.Errorf("%s: a file named %q", name, e.Name())
			}
		}
		head := make([]byte, 20)
		f, err := os.Open(path)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		_, err = f.Read(head)
		f.Close()
		if err != nil || head[18] != 2 || head[19] != 2 { // the file format of WAL mode
			t.Errorf("%s: not in WAL mode: % x %v", name, head[18:20], err)
		}
		again, err := sqlite.Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		if snap, err := again.Head(ctx, "t"); err != nil || snap.Values["x"] != 1 {
			t.Errorf("%s: reopened: %+v %v", name, snap, err)
		}
		again.Close()
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "plain")
	if err := os.WriteFile(file, []byte(strings.Repeat("not SQLite ", 500)), 0o644); err != nil {
		t.Fatal(err)
	}
	for path, why := range map[string]string{
		"":                              "no file path",
		":memory:":                      `"memory"`, // and names it
		dir:                             "is a directory",
		filepath.Join(file, "under.db"): "not a directory",
		file:                            "not a database",
		// SQLite cannot open it, and the system says why
		"/proc/trellis-sqlite-test.db": "no such file or directory",
	} {
		_, err := store.Open(ctx, "sqlite:"+path)
		if err == nil || !strings.Contains(err.Error(), why) || !strings.Contains(err.Error(), path) {
			t.Errorf("sqlite:%s: %v, want an error naming the path and saying %q", path, err, why)
		}
	}
}

// An address that names the scheme alone is refused: it names no file
// (and opened a file called "sqlite" in the working directory).
func TestSchemeAloneIsNoPath(t *testing.T) {
	dir := t.TempDir()
	wd, _ := os.Getwd()
	if err := os.Chdir(dir); err != nil {
		t.Fatal(err)
	}
	defer os.Chdir(wd)
	for _, addr := range []string{"sqlite", "sqlite:"} {
		if st, err := store.Open(context.Background(), addr); err == nil || !strings.Contains(err.Error(), "sqlite:PATH") {
			if st != nil {
				st.Close()
			}
			t.Errorf("%q: %v", addr, err)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("files made: %v", entries)
	}
}

// allMigrations is every migration's number, as the files in migrations/
// are numbered (numbers may be left for migrations of other branches).
func allMigrations(t *testing.T) []int {
	t.Helper()
	files, err := filepath.Glob("migrations/*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("no migrations: %v", err)
	}
	out := make([]int, len(files))
	for i, f := range files {
		n, err := strconv.Atoi(strings.SplitN(filepath.Base(f), "_", 2)[0])
		if err != nil {
			t.Fatalf("migration %s: %v", f, err)
		}
		out[i] = n
	}
	return out
}
