package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/nodes/llm"
	"github.com/trellisflow/trellis/nodes/llm/llmtest"
	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

// BenchmarkPackEvents measures how fast the retention packs the events
// of ended runs (Retention.Events), on SQLite and PostgreSQL, with the
// whole machine: the events of the nine turns of the interview served
// through the API, the test model streaming its replies (a token event
// per word), copied to b.N ended runs, then packed with their tokens
// merged, as a sweep does. It reports runs/s and events/s packed. An op
// is one run: run with -benchtime 2000x or so.
func BenchmarkPackEvents(b *testing.B) {
	for _, backend := range []string{"sqlite", "postgres"} {
		b.Run(backend, func(b *testing.B) { benchPack(b, backend) })
	}
}

func benchPack(b *testing.B, backend string) {
	ctx := context.Background()
	addr := "sqlite:" + filepath.Join(b.TempDir(), "trellis.db")
	if backend == "postgres" {
		addr = storetest.Postgres(b)
	}
	rt, err := trellis.Open(ctx, addr)
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close()
	turns := interviewEvents(b, rt)
	cat, _ := store.CatalogOf(rt.Store())
	// the template's own runs are out of the way
	if _, err := PackEvents(ctx, cat, time.Now(), TokensMerge, nil); err != nil {
		b.Fatal(err)
	}
	// b.N runs that ended an hour ago, each with one turn's events
	ended := time.Now().Add(-time.Hour)
	events := 0
	for i := range b.N {
		evs := turns[i%len(turns)]
		id := fmt.Sprintf("run-%d", i)
		if err := cat.CreateRun(ctx, &store.RunRecord{ID: id, Tenant: "acme", Thread: "acme/bench", Flow: "interview",
			Status: store.RunSucceeded, Input: []byte("{}"), Created: ended, Started: ended, Finished: ended.Add(time.Duration(i))}); err != nil {
			b.Fatal(err)
		}
		if err := cat.AppendEvents(ctx, id, "", evs); err != nil {
			b.Fatal(err)
		}
		events += len(evs)
	}
	b.ResetTimer()
	start := time.Now()
	done, err := PackEvents(ctx, cat, time.Now(), TokensMerge, nil)
	took := time.Since(start)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	if done.Runs != b.N || done.Events != events {
		b.Fatalf("packed %d runs of %d, %d events of %d", done.Runs, b.N, done.Events, events)
	}
	b.ReportMetric(float64(b.N)/took.Seconds(), "runs/s")
	b.ReportMetric(float64(events)/took.Seconds(), "events/s")
	b.ReportMetric(float64(events)/float64(b.N), "events/run")
}

// interviewEvents serves the nine-turn interview once on rt and returns
// each turn's events as the store recorded them.
func interviewEvents(b *testing.B, rt *trellis.Runtime) [][]store.EventRecord {
	ctx := context.Background()
	ms := httptest.NewServer(llmtest.New())
	defer ms.Close()
	reg := all.WithProvider(func() *llm.Provider {
		return &llm.Provider{BaseURL: ms.URL + "/v1", APIKey: "sk-test", Backoff: time.Millisecond, Retries: 1}
	})
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
	if _, err := c.CreateThread(ctx, api.CreateThread{ID: "template", Flow: "interview", Values: benchValues(b)}); err != nil {
		b.Fatal(err)
	}
	var turns [][]store.EventRecord
	for turn := range 9 {
		in := map[string]any{}
		if turn > 0 {
			in["last_response"] = interviewAnswers[turn%len(interviewAnswers)]
		}
		r, err := c.RunWait(ctx, "template", api.StartRun{Input: in})
		if err != nil {
			b.Fatal(err)
		}
		evs, err := allEvents(ctx, srv.cat, r.ID)
		if err != nil {
			b.Fatal(err)
		}
		turns = append(turns, evs)
	}
	return turns
}

// BenchmarkRetentionUnderLoad measures whether the retention keeps pace
// with a server under load, on SQLite and PostgreSQL: while 20 clients
// take interview turns without pause (the test model answering at
// once), the server's sweeps (every 250ms, working a tenth of the time
// as by default) delete a backlog of 300 idle threads and pack the
// events of a backlog of 3,000 runs that ended an hour ago, and of the
// runs the clients' turns end (two seconds after they end). Over a
// 20-second window it reports the runs packed and the threads deleted
// per second, the runs served per second, and the runs left to pack at
// its end. Run it with -benchtime 1x.
func BenchmarkRetentionUnderLoad(b *testing.B) {
	for _, backend := range []string{"sqlite", "postgres"} {
		b.Run(backend, func(b *testing.B) { benchRetentionUnderLoad(b, backend) })
	}
}

func benchRetentionUnderLoad(b *testing.B, backend string) {
	const (
		clients = 20
		backlog = 3000
		idle    = 300
		window  = 20 * time.Second
	)
	ctx := context.Background()
	addr := "sqlite:" + filepath.Join(b.TempDir(), "trellis.db")
	if backend == "postgres" {
		addr = storetest.Postgres(b)
	}
	rt, err := trellis.Open(ctx, addr)
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close()
	turns := interviewEvents(b, rt)
	st := rt.Store()
	cat, _ := store.CatalogOf(st)
	if _, err := PackEvents(ctx, cat, time.Now(), TokensMerge, nil); err != nil {
		b.Fatal(err)
	}
	ended := time.Now().Add(-time.Hour)
	for i := range backlog {
		id := fmt.Sprintf("old-run-%d", i)
		if err := cat.CreateRun(ctx, &store.RunRecord{ID: id, Tenant: "acme", Thread: "acme/template", Flow: "interview",
			Status: store.RunSucceeded, Input: []byte("{}"), Created: ended, Started: ended, Finished: ended.Add(time.Duration(i))}); err != nil {
			b.Fatal(err)
		}
		if err := cat.AppendEvents(ctx, id, "", turns[i%len(turns)]); err != nil {
			b.Fatal(err)
		}
	}
	old := time.Now().Add(-40 * 24 * time.Hour)
	for i := range idle {
		thread := fmt.Sprintf("acme/idle-%d", i)
		if err := st.Commit(ctx, &store.Checkpoint{Thread: thread, Seq: 1, Source: store.SourceCreate, Time: old,
			Writes: []store.Write{{Field: "n", Version: 1, Value: i}}}); err != nil {
			b.Fatal(err)
		}
		if err := cat.CreateThread(ctx, &store.ThreadRecord{ID: thread, Tenant: "acme", Flow: "interview", Created: old}); err != nil {
			b.Fatal(err)
		}
		run := fmt.Sprintf("idle-run-%d", i)
		if err := cat.CreateRun(ctx, &store.RunRecord{ID: run, Tenant: "acme", Thread: thread, Flow: "interview",
			Status: store.RunSucceeded, Input: []byte("{}"), Created: old, Started: old, Finished: old}); err != nil {
			b.Fatal(err)
		}
		if err := cat.AppendEvents(ctx, run, "", turns[i%len(turns)]); err != nil {
			b.Fatal(err)
		}
	}
	ms := httptest.NewServer(llmtest.New())
	defer ms.Close()
	reg := all.WithProvider(func() *llm.Provider {
		return &llm.Provider{BaseURL: ms.URL + "/v1", APIKey: "sk-test", Backoff: time.Millisecond, Retries: 1}
	})
	srv, err := New(Config{Runtime: rt, FlowsDir: flowsDir, Kinds: reg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Retention: Retention{Idle: 30 * 24 * time.Hour, Events: 2 * time.Second, Every: 250 * time.Millisecond}})
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
	counter := func(name string) float64 {
		mfs, err := srv.metrics.reg.Gather()
		if err != nil {
			b.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name && len(mf.Metric) == 1 {
				return mf.Metric[0].GetCounter().GetValue()
			}
		}
		return 0
	}
	b.ResetTimer()
	packed0, deleted0 := counter("trellis_retention_runs_packed_total"), counter("trellis_retention_threads_deleted_total")
	start := time.Now()
	var servedRuns atomic.Int64
	var wg sync.WaitGroup
	for w := range clients {
		wg.Go(func() {
			for k := 0; time.Since(start) < window; k++ {
				id := fmt.Sprintf("load-%d-%d", w, k)
				if _, err := c.CreateThread(ctx, api.CreateThread{ID: id, Flow: "interview", Values: cand}); err != nil {
					b.Error(err)
					return
				}
				for turn := 0; turn < 9 && time.Since(start) < window; turn++ {
					in := map[string]any{}
					if turn > 0 {
						in["last_response"] = interviewAnswers[(w+turn)%len(interviewAnswers)]
					}
					if _, err := c.RunWait(ctx, id, api.StartRun{Input: in}); err != nil {
						b.Error(err)
						return
					}
					servedRuns.Add(1)
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	packed, deleted := counter("trellis_retention_runs_packed_total")-packed0, counter("trellis_retention_threads_deleted_total")-deleted0
	b.StopTimer()
	left, err := cat.RunsToPack(ctx, time.Now().Add(-2*time.Second), 100000)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(packed/took.Seconds(), "packed-runs/s")
	b.ReportMetric(deleted/took.Seconds(), "deleted-threads/s")
	b.ReportMetric(float64(servedRuns.Load())/took.Seconds(), "served-runs/s")
	b.ReportMetric(float64(len(left)), "runs-left")
}
