package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/store"
	_ "github.com/trellisflow/trellis/runtime/store/all"
	"github.com/trellisflow/trellis/runtime/store/internal/pgtest"
)

// A PostgreSQL server restarted in the middle of a run cuts every
// connection the store holds, and refuses new ones until it is back. A
// run waits for it (its events say when the store went and came back)
// and goes on; one that may not wait fails, and the thread resumes once
// the server is back. Either way the thread reaches the state a run
// without the restart reaches, each execution committed once, on one
// unbroken chain of checkpoints.
func TestPostgresServerRestart(t *testing.T) {
	t.Run("the run waits", func(t *testing.T) { restartMidRun(t, true) })
	t.Run("the run may not wait", func(t *testing.T) { restartMidRun(t, false) })
}

func restartMidRun(t *testing.T, wait bool) {
	const turns = 6
	// the crash flow runs 31 nodes a turn: restart during turn 3's rounds
	const restartAt = 2*31 + 15
	url, restart := pgtest.Restartable(t)
	ctx := context.Background()
	before := serverStart(t, url)
	st, err := store.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	g := crashGraph(t, "")
	opts := []engine.Option{engine.WithLeaseTTL(150 * time.Millisecond)}
	if !wait {
		opts = append(opts, engine.WithStoreWait(-1))
	}
	eng := engine.New(st, opts...)
	starts := 0
	restarted := make(chan error, 1)
	var downs, backs []string
	observe := func(ev engine.Event) {
		switch ev.Type {
		case engine.StoreUnavailable:
			downs = append(downs, ev.Error)
		case engine.StoreBack:
			backs = append(backs, ev.Duration.String())
		case engine.NodeStart:
			if starts++; starts == restartAt {
				// the run goes on while the server goes down
				go func() { restarted <- restart() }()
			}
		}
	}
	var failures []string
	for attempt := 0; ; attempt++ {
		if attempt > 400 {
			t.Fatalf("no progress after %d attempts; failures: %v", attempt, failures)
		}
		head, err := st.Head(ctx, "t")
		if errors.Is(err, store.ErrNotFound) {
			if _, err := eng.Create(ctx, g, "t", nil); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err != nil {
			failures = append(failures, "head: "+err.Error())
			time.Sleep(50 * time.Millisecond)
			continue
		}
		req := engine.Request{Thread: "t", Observe: observe}
		switch {
		case len(head.Next) > 0:
			req.Resume = true
		case head.Values["turn"].(int) < turns:
			req.Input = map[string]any{"turn": head.Values["turn"].(int) + 1}
		}
		if !req.Resume && req.Input == nil {
			break
		}
		if _, err := eng.Run(ctx, g, req); err != nil {
			if !errors.Is(err, engine.ErrBusy) {
				failures = append(failures, "run: "+err.Error())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if starts < restartAt {
		t.Fatalf("the runs started %d nodes; the restart was due at %d", starts, restartAt)
	}
	if err := <-restarted; err != nil {
		t.Fatalf("restart: %v", err)
	}
	if after := serverStart(t, url); !after.After(before) {
		t.Fatalf("the server was not restarted: started at %v, then %v", before, after)
	}
	t.Logf("%d failures across the restart: %s; the store went %d times (%s), came back %d times (after %s)",
		len(failures), strings.Join(failures, "; "), len(downs), strings.Join(downs, "; "), len(backs), strings.Join(backs, ", "))
	if wait {
		if len(failures) > 0 {
			t.Errorf("runs that may wait for the store failed: %s", strings.Join(failures, "; "))
		}
		if len(downs) == 0 || len(backs) != len(downs) {
			t.Errorf("the runs' events: the store went %d times and came back %d times, want it gone and back at least once", len(downs), len(backs))
		}
	} else if len(failures) == 0 {
		t.Fatal("no run or read failed while the server was down: the restart came too late to test anything")
	}

	got, err := st.Head(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	uninterrupted(t, got, turns)
	hist, err := st.History(ctx, "t", store.HistoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hist); i++ { // newest first
		if hist[i].Parent != hist[i+1].Seq {
			t.Fatalf("checkpoint %d has parent %d, but the one before it is %d", hist[i].Seq, hist[i].Parent, hist[i+1].Seq)
		}
	}
}

// serverStart is when the server of url last started.
func serverStart(t *testing.T, url string) time.Time {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var at time.Time
	if err := conn.QueryRow(ctx, `SELECT pg_postmaster_start_time()`).Scan(&at); err != nil {
		t.Fatal(err)
	}
	return at
}
