package postgres_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/internal/pgtest"
	"github.com/trellisflow/trellis/runtime/store/postgres"
)

// A thread written when each write had a row of its own (migrations 1 to
// 16), with a fold and a segment, reads the same once the writes have
// moved into their checkpoints' rows: its head, its states and its
// history; it goes on being written, and is deleted whole.
func TestMigrationMovesWritesIntoCheckpoints(t *testing.T) {
	ctx := context.Background()
	url := pgtest.Database(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	files, err := filepath.Glob("migrations/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE trellis_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		name := filepath.Base(f)
		v, _ := strconv.Atoi(strings.SplitN(name, "_", 2)[0])
		if v > 16 {
			continue
		}
		body, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, string(body)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := conn.Exec(ctx, `INSERT INTO trellis_migrations (version, name) VALUES ($1, $2)`, v, name); err != nil {
			t.Fatal(err)
		}
	}
	// three checkpoints as the old layout kept them: the thread created,
	// a step that appends and replaces, one that writes nothing; with a
	// fold and a segment (which now go)
	for _, q := range []string{
		`INSERT INTO threads (id, head, created_at, updated_at) VALUES ('old', 3, 1000, 3000)`,
		`INSERT INTO checkpoints (thread, seq, parent, run, step, source, at, meta) VALUES
			('old', 1, 0, '', 0, 'create', 1000, '{}'),
			('old', 2, 1, 'r1', 1, 'step', 2000, '{"writers": [{"Node": "a", "Fields": ["log", "n"]}], "next": ["b"]}'),
			('old', 3, 2, 'r1', 2, 'step', 3000, '{"writers": [{"Node": "b", "Fields": null}]}')`,
		`INSERT INTO writes (thread, seq, field, version, append, value) VALUES
			('old', 1, 'log', 1, false, '["start"]'), ('old', 1, 'n', 1, false, '0'), ('old', 1, 'who', 1, false, '{"name": "Ada", "tags": ["a, b]"]}'),
			('old', 2, 'log', 2, true, '["said \"hi\"", {"k": 1}]'), ('old', 2, 'n', 2, false, '1.5')`,
		`INSERT INTO folds (thread, seq, spans) VALUES ('old', 2, '{"log": {"b": 1, "t": 1}}')`,
		`INSERT INTO segments (thread, field, last, first, version, items) VALUES ('old', 'log', 2, 2, 2, '\x5b5d')`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	st, err := postgres.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	wantLog := []any{"start", `said "hi"`, map[string]any{"k": int64(1)}}
	want := map[string]any{"log": wantLog, "n": 1.5, "who": map[string]any{"name": "Ada", "tags": []any{"a, b]"}}}
	head, err := st.Head(ctx, "old")
	if err != nil {
		t.Fatal(err)
	}
	if !sameJSON(head.Values, want) || head.Seq != 3 || head.Versions["log"] != 2 || head.Versions["who"] != 1 {
		t.Fatalf("head after the migration: %+v", head)
	}
	at1, err := st.StateAt(ctx, "old", 1)
	if err != nil || !sameJSON(at1.Values, map[string]any{"log": []any{"start"}, "n": 0, "who": want["who"]}) {
		t.Fatalf("state at 1: %+v %v", at1, err)
	}
	hist, err := st.History(ctx, "old", store.HistoryOptions{})
	if err != nil || len(hist) != 3 {
		t.Fatalf("history: %v %v", hist, err)
	}
	if h := hist[1]; len(h.Writes) != 2 || h.Writes[0].Field != "log" || !h.Writes[0].Append || h.Writes[1].Field != "n" ||
		!reflect.DeepEqual(h.Next, []string{"b"}) || h.Writers[0].Node != "a" || h.Time.UnixNano() != 2000 {
		t.Fatalf("checkpoint 2 in the history: %+v", h)
	}
	if len(hist[0].Writes) != 0 || len(hist[2].Writes) != 3 {
		t.Fatalf("writes of checkpoints 3 and 1: %+v %+v", hist[0].Writes, hist[2].Writes)
	}
	if err := st.Commit(ctx, &store.Checkpoint{Thread: "old", Seq: 4, Parent: 3, Run: "r2", Source: store.SourceStep,
		Writes: []store.Write{{Field: "log", Version: 3, Append: true, Items: []any{"more"}}}}); err != nil {
		t.Fatal(err)
	}
	if head, err := st.Head(ctx, "old"); err != nil || !sameJSON(head.Values["log"], append(wantLog, "more")) {
		t.Fatalf("head after a commit: %+v %v", head, err)
	}
	var rows int
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM folds) + (SELECT count(*) FROM segments)
		+ (SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = 'writes')`).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("the old folds, segments and writes table left: %d %v", rows, err)
	}
	if err := st.Delete(ctx, "old"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Head(ctx, "old"); err == nil {
		t.Fatal("a deleted thread still reads")
	}
}

// sameJSON reports whether a and b are the same JSON documents, whatever
// Go types their numbers have.
func sameJSON(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(x) == string(y)
}
