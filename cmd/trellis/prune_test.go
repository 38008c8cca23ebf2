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
		INSERT INTO checkpoints (thread, seq, parent, run, step, source, at, meta)
		SELECT c.thread, s.i, s.i - 1, c.run, s.i, c.source, c.at + s.i, c.meta FROM s, checkpoints c WHERE c.thread = 'long' AND c.seq = 2`,
		`WITH RECURSIVE s(i) AS (SELECT 3 UNION ALL SELECT i + 1 FROM s WHERE i < ?1)
		INSERT INTO writes (thread, seq, field, version, append, value) SELECT 'long', i, 'n', i, 0, CAST(i AS TEXT) FROM s`,
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
