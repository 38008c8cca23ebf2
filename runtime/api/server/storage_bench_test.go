package server

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/nodes/llm"
	"github.com/trellisflow/trellis/nodes/llm/llmtest"
	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/schema"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

// interviewAnswers are the candidate's answers of the nine-turn
// interview (the greeting, then eight), as `trellis dev loadtest` gives
// them.
var interviewAnswers = []string{"I build data pipelines in Go at Northwind.", "Backpressure was the hard part; we added bounded queues.",
	"I would test the ties first.", "We cut search latency tenfold.", "The flag service served forty teams."}

// BenchmarkStoragePerTurn measures what the store keeps per turn of the
// nine-turn interview served through the API, its replies streamed by
// the test model (a token event per word): the bytes the database grew
// by (SQLite: its pages in use; PostgreSQL: its tables, indexes and
// TOAST after VACUUM FULL, the room autovacuum leaves for reuse taken
// out) over the turns, as B/turn. "events" keeps every event (no
// retention); "retained-merge" and "retained-drop" are after the event
// retention has passed, the tokens merged or dropped. An op is one
// interview: run with -benchtime 20x or more, so that tables' pages fill.
func BenchmarkStoragePerTurn(b *testing.B) {
	for _, backend := range []string{"sqlite", "postgres"} {
		for _, mode := range []string{"events", "retained-merge", "retained-drop"} {
			b.Run(backend+"/"+mode, func(b *testing.B) {
				benchStorage(b, backend, mode)
			})
		}
	}
}

func benchStorage(b *testing.B, backend, mode string) {
	ctx := context.Background()
	var addr string
	var size func() (all, checkpoints int64)
	switch backend {
	case "sqlite":
		path := filepath.Join(b.TempDir(), "trellis.db")
		addr = "sqlite:" + path
		size = func() (int64, int64) { return sqliteUsed(b, path) }
	case "postgres":
		addr = storetest.Postgres(b)
		size = func() (int64, int64) { return postgresSize(b, addr) }
	}
	ms := httptest.NewServer(llmtest.New())
	defer ms.Close()
	reg := all.WithProvider(func() *llm.Provider {
		return &llm.Provider{BaseURL: ms.URL + "/v1", APIKey: "sk-test", Backoff: time.Millisecond, Retries: 1}
	})
	rt, err := trellis.Open(ctx, addr)
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close()
	srv, err := New(Config{Runtime: rt, FlowsDir: flowsDir, Kinds: reg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(sctx, ln) }()
	defer func() { stop(); <-served }()
	_, key, err := CreateKey(ctx, srv.cat, "acme", "", false)
	if err != nil {
		b.Fatal(err)
	}
	c := api.NewClient("http://"+ln.Addr().String(), key)
	cand := benchValues(b)
	before, cpBefore := size()
	b.ResetTimer()
	for i := range b.N {
		id := fmt.Sprint("candidate-", i)
		if _, err := c.CreateThread(ctx, api.CreateThread{ID: id, Flow: "interview", Values: cand}); err != nil {
			b.Fatal(err)
		}
		for turn := range 9 {
			in := map[string]any{}
			if turn > 0 {
				in["last_response"] = interviewAnswers[(i+turn)%len(interviewAnswers)]
			}
			tokens := 0
			for ev, err := range c.StreamRun(ctx, id, api.StartRun{Input: in}) {
				if err != nil {
					b.Fatal(err)
				}
				if ev.Event.Type == trellis.NodeOutput {
					tokens++
				}
				if ev.Event.Type == trellis.RunError {
					b.Fatalf("turn %d of %s: %s", turn, id, ev.Event.Error)
				}
			}
			if tokens == 0 {
				b.Fatalf("turn %d of %s streamed no tokens", turn, id)
			}
		}
	}
	b.StopTimer()
	if tokens, ok := strings.CutPrefix(mode, "retained-"); ok {
		if _, err := PackEvents(ctx, srv.cat, time.Now(), tokens, nil); err != nil {
			b.Fatal(err)
		}
		if due, err := srv.cat.RunsToPack(ctx, time.Now(), 1); err != nil || len(due) > 0 {
			b.Fatalf("runs left to pack: %v %v", due, err)
		}
	}
	after, cpAfter := size()
	b.ReportMetric(float64(after-before)/float64(9*b.N), "B/turn")
	b.ReportMetric(float64(cpAfter-cpBefore)/float64(9*b.N), "checkpoint-B/turn")
}

func benchValues(b *testing.B) map[string]any {
	v, err := schema.ReadFile(flowsDir + "/examples/candidate.yaml")
	if err != nil {
		b.Fatal(err)
	}
	return v.(map[string]any)
}

// checkpointTables are the tables of the threads' checkpoints (the rest
// is the served records: runs, their events, keys).
var checkpointTables = []string{"threads", "checkpoints", "pending", "leases", "folds", "segments"}

// sqliteUsed is the bytes of a SQLite file's pages in use (its free
// pages left out), and of those the checkpoint tables' and their
// indexes'.
func sqliteUsed(b *testing.B, path string) (all, checkpoints int64) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	var pages, free, size int64
	for q, v := range map[string]*int64{`PRAGMA page_count`: &pages, `PRAGMA freelist_count`: &free, `PRAGMA page_size`: &size} {
		if err := db.QueryRow(q).Scan(v); err != nil {
			b.Fatal(err)
		}
	}
	in := "'" + strings.Join(checkpointTables, "', '") + "'"
	if err := db.QueryRow(`SELECT coalesce(sum(d.pgsize), 0) FROM dbstat d JOIN sqlite_schema s ON s.name = d.name
		WHERE s.tbl_name IN (` + in + `)`).Scan(&checkpoints); err != nil {
		b.Fatal(err)
	}
	return (pages - free) * size, checkpoints
}

// postgresSize is the bytes of a PostgreSQL database's tables, with
// their indexes and TOAST, once VACUUM FULL has compacted them, and of
// those the checkpoint tables'.
func postgresSize(b *testing.B, url string) (all, checkpoints int64) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `VACUUM FULL`); err != nil {
		b.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint,
		coalesce(sum(pg_total_relation_size(c.oid)) FILTER (WHERE c.relname = ANY($1)), 0)::bigint FROM pg_class c
		JOIN pg_namespace s ON s.oid = c.relnamespace WHERE s.nspname = current_schema() AND c.relkind = 'r'`, checkpointTables).Scan(&all, &checkpoints); err != nil {
		b.Fatal(err)
	}
	return all, checkpoints
}
