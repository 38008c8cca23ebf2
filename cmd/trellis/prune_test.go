package main

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/store"
)

// trellis prune on a long thread works in batches and says how far it
// got; interrupted (SIGINT, a real process), it stops between batches,
// says so and exits 3 (interrupted), every state still listed is intact, and running
// it again finishes.
func TestPruneInterruptedAndFinished(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "long.db")
	st, err := store.Open(ctx, "sqlite:"+path)
	if err != nil {
		t.Fatal(err)
	}
	const n = 100_000
	for _, cp := range []*store.Checkpoint{
		{Thread: "long", Seq: 1, Source: store.SourceCreate, Time: time.Now(), Writes: []store.Write{{Field: "n", Version: 1, Value: 1}}},
		{Thread: "long", Seq: 2, Parent: 1, Run: "r", Step: 1, Source: store.SourceStep, Time: time.Now(), Writes: []store.Write{{Field: "n", Version: 2, Value: 2}}},
	} {
		if err := st.Commit(ctx, cp); err != nil {
			t.Fatal(err)
		}
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`WITH RECURSIVE s(i) AS (SELECT 3 UNION ALL SELECT i + 1 FROM s WHERE i < ?1)
		INSERT INTO checkpoints (thread, seq, parent, run, step, source, at, meta, writes)
		SELECT c.thread, s.i, s.i - 1, c.run, s.i, c.source, c.at + s.i, c.meta, format('[["n",%d,false,%d]]', s.i, s.i)
		FROM s, checkpoints c WHERE c.thread = 'long' AND c.seq = 2`,
		`UPDATE threads SET head = ?1 WHERE id = 'long'`,
	} {
		if _, err := db.Exec(q, n); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	st.Close()

	cmd, stderr := trellisProcess(t, nil, "prune", "long", "--keep", "10", "--batch", "100", "--store", "sqlite:"+path)
	// the first batch reports at once; interrupt after it (under the race
	// detector on a loaded machine, opening and reading 100,000
	// checkpoints can take minutes)
	deadline := time.Now().Add(5 * time.Minute)
	for !strings.Contains(stderr.String(), "older checkpoints removed") && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if !strings.Contains(stderr.String(), "stopped after removing") || !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("interrupted prune: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "long: 100 of 99989 older checkpoints removed") {
		t.Errorf("no progress report:\n%s", stderr.String())
	}
	st, err = store.Open(ctx, "sqlite:"+path)
	if err != nil {
		t.Fatal(err)
	}
	hist, err := st.History(ctx, "long", store.HistoryOptions{Limit: 100})
	if err != nil || len(hist) != 100 {
		t.Fatalf("history %d %v", len(hist), err)
	}
	for _, cp := range []*store.Checkpoint{hist[0], hist[50], hist[99], {Seq: 1}} { // (a state costs a scan here: no folds)
		s, err := st.StateAt(ctx, "long", cp.Seq)
		if err == nil && !reflect.DeepEqual(s.Values, map[string]any{"n": int(cp.Seq)}) || err != nil && cp.Seq > 1000 {
			t.Fatalf("state at %d after the interrupted prune: %v %v", cp.Seq, s, err)
		}
	}
	st.Close()

	out, errs, code := trellis(t, "prune", "long", "--keep", "10", "--store", "sqlite:"+path)
	if code != 0 || !strings.Contains(out, "long: folded") || !strings.Contains(errs, "of") {
		t.Fatalf("second prune: %d %s %s", code, out, errs)
	}
	out, _, _ = trellis(t, "history", "long", "--store", "sqlite:"+path)
	if lines := strings.Count(out, "\n"); lines != 11 {
		t.Fatalf("history after the prune finished (%d lines):\n%s", lines, out)
	}
	var last string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		last = sc.Text()
	}
	if !strings.Contains(last, "base") {
		t.Errorf("the oldest checkpoint is not the base: %s", last)
	}
}

// seedServed writes a served thread as trellis serve would leave it: a
// checkpoint at when, its record, a run that ended at when with a
// streamed reply's tokens among its events, and a queued run if queued.
func seedServed(t *testing.T, st store.Store, id string, when time.Time, queued bool) {
	t.Helper()
	ctx := context.Background()
	if err := st.Commit(ctx, &store.Checkpoint{Thread: id, Seq: 1, Source: store.SourceCreate, Time: when,
		Writes: []store.Write{{Field: "n", Version: 1, Value: 1}}}); err != nil {
		t.Fatal(err)
	}
	cat := st.(store.Catalog)
	if err := cat.CreateThread(ctx, &store.ThreadRecord{ID: id, Tenant: "acme", Flow: "f", Created: when}); err != nil {
		t.Fatal(err)
	}
	run := &store.RunRecord{ID: id + "-run", Tenant: "acme", Thread: id, Flow: "f", Status: store.RunSucceeded, Created: when, Started: when, Finished: when}
	if err := cat.CreateRun(ctx, run); err != nil {
		t.Fatal(err)
	}
	var evs []store.EventRecord
	for i, ev := range []string{`{"type":"run_start"}`, `{"type":"node_start","node":"a"}`, `{"type":"node_output","node":"a","attempt":1,"text":"Hel"}`,
		`{"type":"node_output","node":"a","attempt":1,"text":"lo"}`, `{"type":"node_end","node":"a"}`, `{"type":"run_end"}`} {
		evs = append(evs, store.EventRecord{Seq: int64(i + 1), Data: []byte(ev)})
	}
	if err := cat.AppendEvents(ctx, run.ID, "", evs); err != nil {
		t.Fatal(err)
	}
	if queued {
		if _, err := cat.EnqueueRun(ctx, &store.RunRecord{ID: id + "-queued", Tenant: "acme", Thread: id, Flow: "f", Status: store.RunQueued, Created: when},
			store.BusyEnqueue); err != nil {
			t.Fatal(err)
		}
	}
}

// trellis prune compacts old runs' events and deletes idle served
// threads with all of their data, and trellis delete deletes a served
// thread so too; neither touches a thread with a queued run.
func TestPruneAndDeleteServedThreads(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "served.db")
	db := "sqlite:" + path
	st, err := store.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-40 * 24 * time.Hour)
	seedServed(t, st, "acme/old", old, false)
	seedServed(t, st, "acme/busy", old, true)
	seedServed(t, st, "acme/new", time.Now().Add(-time.Hour), false)
	st.Close()
	for _, bad := range [][]string{{"--idle", "3x"}, {"--share", "0"}, {"--events", "1h", "--tokens", "keep"}, {"--idle", "-2h"}} {
		if _, stderr, exit := trellis(t, append([]string{"prune", "--store", db}, bad...)...); exit != 2 {
			t.Errorf("prune %v: %d %s", bad, exit, stderr)
		}
	}
	out, stderr, exit := trellis(t, "prune", "--events", "10m", "--tokens", "merge", "--share", "1", "--store", db)
	if exit != 0 || !strings.Contains(out, "compacted the events of 3 runs: 18 events, 15 kept") {
		t.Fatalf("prune --events: %d %s %s", exit, out, stderr)
	}
	out, stderr, exit = trellis(t, "prune", "--idle", "30d", "--store", db)
	if exit != 0 || !strings.Contains(out, "deleted 1 idle threads") {
		t.Fatalf("prune --idle: %d %s %s", exit, out, stderr)
	}
	if _, stderr, exit := trellis(t, "delete", "acme/busy", "--store", db); exit != 4 || !strings.Contains(stderr, "queued or running run") {
		t.Fatalf("delete a thread with a queued run: %d %s", exit, stderr)
	}
	if out, stderr, exit := trellis(t, "delete", "acme/new", "--store", db); exit != 0 || out != "deleted acme/new\n" {
		t.Fatalf("delete: %d %s %s", exit, out, stderr)
	}
	if out, stderr, exit := trellis(t, "prune", "--vacuum", "--store", db); exit != 0 || !strings.Contains(out, "rebuilt") {
		t.Fatalf("prune --vacuum: %d %s %s", exit, out, stderr)
	}
	st, err = store.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cat := st.(store.Catalog)
	for _, id := range []string{"acme/old", "acme/new"} {
		if _, err := st.Head(ctx, id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s: %v", id, err)
		}
		if _, err := cat.Run(ctx, "acme", id+"-run"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("the run of %s: %v", id, err)
		}
	}
	evs, err := cat.Events(ctx, "acme/busy-run", 0, 0)
	var texts []string
	for _, e := range evs {
		texts = append(texts, string(e.Data))
	}
	want := []string{`{"type":"run_start"}`, `{"type":"node_start","node":"a"}`, `{"type":"node_output","run":"","thread":"","step":0,"time":"0001-01-01T00:00:00Z","node":"a","attempt":1,"text":"Hello"}`,
		`{"type":"node_end","node":"a"}`, `{"type":"run_end"}`}
	if err != nil || !reflect.DeepEqual(texts, want) {
		t.Fatalf("the compacted events: %v %v", texts, err)
	}
	if evs[2].Seq != 4 {
		t.Fatalf("the merged tokens are numbered %d, not as the last token", evs[2].Seq)
	}
}

// serve's retention flags say what they take, and a wrong value is a
// usage error naming the flag, before anything is opened.
func TestServeRetentionFlags(t *testing.T) {
	_, help, _ := trellis(t, "serve", "--help")
	for _, want := range []string{"-retain-idle duration", "-retain-events duration", "(default 2m0s)", "-retain-tokens string", `(default "merge")`, "-retain-share float", "(default 0.1)", "-retain-every duration"} {
		if !strings.Contains(help, want) {
			t.Errorf("serve --help does not say %q:\n%s", want, help)
		}
	}
	for _, bad := range [][]string{{"--retain-idle", "3x"}, {"--retain-events", "-1m"}, {"--retain-tokens", "keep"}, {"--retain-share", "0"}, {"--retain-share", "2"}} {
		_, stderr, exit := trellis(t, append([]string{"serve", "--store", "memory", "--flows", "testdata/none"}, bad...)...)
		if exit != 2 || !strings.Contains(stderr, strings.TrimPrefix(bad[0], "--")) && !strings.Contains(stderr, bad[1]) {
			t.Errorf("serve %v: %d %s", bad, exit, stderr)
		}
	}
}
