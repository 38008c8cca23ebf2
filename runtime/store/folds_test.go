package store_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/internal/pgtest"
	"github.com/trellisflow/trellis/runtime/store/internal/sqlstore"
	"github.com/trellisflow/trellis/runtime/value"
)

// A long thread's state is read through its segments, not its rows: once
// the append rows a segment covers are removed behind the store's back,
// and the checkpoints its newest fold does not name are made unreadable, a
// store that has never seen the thread still reads the whole state. The
// segments are packed; one rewritten as JSON, as segments were first
// stored, still reads.
func TestColdReadUsesSegments(t *testing.T) {
	ctx := context.Background()
	const n = 3*sqlstore.FoldEvery + 10
	write := func(t *testing.T, st store.Store) *store.Snapshot {
		if err := st.Commit(ctx, &store.Checkpoint{Thread: "t", Seq: 1, Source: "create", Time: time.Now(),
			Writes: []store.Write{{Field: "log", Version: 1, Value: []any{}}, {Field: "n", Version: 1, Value: 0}}}); err != nil {
			t.Fatal(err)
		}
		for seq := uint64(2); seq <= n; seq++ {
			if err := st.Commit(ctx, &store.Checkpoint{Thread: "t", Seq: seq, Parent: seq - 1, Source: "step", Time: time.Now(),
				Writes: []store.Write{{Field: "log", Version: seq, Append: true, Items: []any{fmt.Sprint("m", seq)}},
					{Field: "n", Version: seq, Value: int(seq)}}}); err != nil {
				t.Fatal(err)
			}
		}
		h, err := st.Head(ctx, "t")
		if err != nil || len(h.Values["log"].([]any)) != n-1 {
			t.Fatalf("head %v %v", h, err)
		}
		return h
	}
	check := func(t *testing.T, want *store.Snapshot, removed int64, open func() store.Store) {
		if removed < 2*sqlstore.FoldEvery {
			t.Fatalf("removed %d rows covered by segments", removed)
		}
		st := open()
		defer st.Close()
		got, err := st.Head(ctx, "t")
		if err != nil || !reflect.DeepEqual(got.Values, want.Values) || !reflect.DeepEqual(got.Versions, want.Versions) {
			t.Fatalf("cold read without the covered rows: %v %v", got, err)
		}
	}
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "s.db")
		open := sqliteOpener(t, path)
		st := open()
		want := write(t, st)
		st.Close()
		db, err := sql.Open("sqlite", path)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		// the writes are in their checkpoints' rows: the appends to log
		// are taken out of them
		res, err := db.Exec(`UPDATE checkpoints SET writes = (SELECT json_group_array(json(w.value)) FROM json_each(checkpoints.writes) w
				WHERE NOT (w.value->>0 = 'log' AND w.value->>2))
			WHERE thread = 't' AND writes <> '' AND EXISTS (SELECT 1 FROM json_each(checkpoints.writes) w WHERE w.value->>0 = 'log' AND w.value->>2)
			AND seq <= (SELECT max(last) FROM segments WHERE thread = 't' AND field = 'log')`)
		if err != nil {
			t.Fatal(err)
		}
		removed, _ := res.RowsAffected()
		// nor are the checkpoints the fold does not name read at all
		if _, err := db.Exec(`UPDATE checkpoints SET writes = 'not JSON' WHERE thread = 't' AND seq > 1
			AND seq < (SELECT max(last) FROM segments WHERE thread = 't')`); err != nil {
			t.Fatal(err)
		}
		var items []byte
		if err := db.QueryRow(`SELECT items FROM segments WHERE thread = 't' AND field = 'log' ORDER BY last LIMIT 1`).Scan(&items); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(`UPDATE segments SET items = ? WHERE thread = 't' AND field = 'log'
			AND last = (SELECT min(last) FROM segments WHERE thread = 't')`, string(asJSON(t, items))); err != nil {
			t.Fatal(err)
		}
		check(t, want, removed, open)
	})
	t.Run("postgres", func(t *testing.T) {
		url := pgtest.Database(t)
		open := postgresOpener(t, url)
		st := open()
		want := write(t, st)
		st.Close()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		// the writes are in their checkpoints' rows: the appends to log
		// are taken out of them
		tag, err := conn.Exec(ctx, `UPDATE checkpoints SET writes = convert_to(coalesce((SELECT jsonb_agg(w)
				FROM jsonb_array_elements(convert_from(writes, 'UTF8')::jsonb) w WHERE NOT (w->>0 = 'log' AND (w->2)::boolean)), '[]')::text, 'UTF8')
			WHERE thread = 't' AND writes <> '' AND convert_from(writes, 'UTF8')::jsonb @> '[["log"]]'
			AND seq <= (SELECT max(last) FROM segments WHERE thread = 't' AND field = 'log')`)
		if err != nil {
			t.Fatal(err)
		}
		// nor are the checkpoints the fold does not name read at all
		if _, err := conn.Exec(ctx, `UPDATE checkpoints SET writes = 'not JSON' WHERE thread = 't' AND seq > 1
			AND seq < (SELECT max(last) FROM segments WHERE thread = 't')`); err != nil {
			t.Fatal(err)
		}
		var items []byte
		if err := conn.QueryRow(ctx, `SELECT items FROM segments WHERE thread = 't' AND field = 'log' ORDER BY last LIMIT 1`).Scan(&items); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, `UPDATE segments SET items = $1 WHERE thread = 't' AND field = 'log'
			AND last = (SELECT min(last) FROM segments WHERE thread = 't')`, asJSON(t, items)); err != nil {
			t.Fatal(err)
		}
		check(t, want, tag.RowsAffected(), open)
	})
}

// asJSON checks that a segment is packed and returns it as JSON, the form
// segments had before they were packed, which a load still reads.
func asJSON(t *testing.T, items []byte) []byte {
	t.Helper()
	if !value.Packed(items) {
		t.Fatalf("segment not packed: %q", items)
	}
	v, err := value.Unpack(string(items))
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// BenchmarkColdLoad loads the state of a 1,000-turn interview from a store
// instance that does not hold it in memory: first in a process that has
// just started (restart: its connection and statements are new too), then
// in one that has already served another thread (uncached):
// go test ./runtime/store -run '^$' -bench ColdLoad
func BenchmarkColdLoad(b *testing.B) {
	ctx := context.Background()
	write := func(b *testing.B, st store.Store, thread string, turns int) {
		if err := st.Commit(ctx, createCheckpoint(thread)); err != nil {
			b.Fatal(err)
		}
		seq := uint64(1)
		for turn := 1; turn <= turns; turn++ {
			for _, cp := range turnCheckpoints(thread, seq, turn) {
				if err := st.Commit(ctx, cp); err != nil {
					b.Fatal(err)
				}
				seq = cp.Seq
			}
		}
	}
	bench := func(b *testing.B, open func() store.Store) {
		st := open()
		write(b, st, "t", 1000)
		write(b, st, "other", 2)
		st.Close()
		load := func(b *testing.B, warm bool) {
			for b.Loop() {
				b.StopTimer()
				st := open()
				if warm {
					if _, err := st.Head(ctx, "other"); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
				h, err := st.Head(ctx, "t")
				if err != nil || len(h.Values["conversation_history"].([]any)) != 2000 {
					b.Fatal(err)
				}
				b.StopTimer()
				st.Close()
				b.StartTimer()
			}
		}
		b.Run("restart", func(b *testing.B) { load(b, false) })
		b.Run("uncached", func(b *testing.B) { load(b, true) })
	}
	b.Run("sqlite", func(b *testing.B) {
		path := filepath.Join(b.TempDir(), "c.db")
		bench(b, sqliteOpener(b, path))
	})
	b.Run("postgres", func(b *testing.B) {
		url := pgtest.Database(b)
		bench(b, postgresOpener(b, url))
	})
}
