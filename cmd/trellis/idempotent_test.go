package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	facade "github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/api/server"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

// turnsFlow counts its turns, each a slow step, so that a server can be
// killed in the middle of one.
const turnsFlow = `version: 1
name: turns
state:
  schema:
    type: object
    properties:
      said: {type: string, default: ""}
      turn_count: {type: integer, default: 0}
  reducers: {turn_count: add}
input: [said]
nodes:
  turn: {kind: set, sleep_ms: "SLEEP", set: {turn_count: "1", said: "input.said"}}
edges:
  - {from: START, to: turn}
  - {from: turn, to: END}
`

// A client waiting on a turn (POST .../runs/wait) whose server is
// SIGKILLed mid-turn retries the same request with the same
// Idempotency-Key on another server: the retry waits for the run the
// first request started, which that server adopts and finishes, and the
// turn is taken once (turn_count 2 after two turns, not 3), on SQLite
// and on PostgreSQL.
func TestRetriedWaitAfterSIGKILLRunsTheTurnOnce(t *testing.T) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			db := "sqlite:" + filepath.Join(t.TempDir(), "t.db")
			if backend == "postgres" {
				db = storetest.Postgres(t)
			}
			flows := t.TempDir()
			if err := os.WriteFile(filepath.Join(flows, "turns.yaml"), []byte(replaceSleep(turnsFlow, 3000)), 0o644); err != nil {
				t.Fatal(err)
			}
			rt, err := facade.Open(ctx, db)
			if err != nil {
				t.Fatal(err)
			}
			cat, _ := store.CatalogOf(rt.Store())
			_, key, err := server.CreateKey(ctx, cat, "acme", "", false)
			rt.Close()
			if err != nil {
				t.Fatal(err)
			}
			start := func() (*api.Client, func() string, func()) {
				addr := freeAddr(t)
				cmd, stderr := kindsProcess(t, "serve", "--flows", flows, "--store", db, "--addr", addr, "--dead-after", "2s", "--lease-ttl", "2s")
				c := api.NewClient("http://"+addr, key)
				waitUp(t, c)
				return c, stderr.String, func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
			}
			a, aLog, killA := start()
			if _, err := a.CreateThread(ctx, api.CreateThread{ID: "ada", Flow: "turns"}); err != nil {
				t.Fatal(err)
			}
			first, err := a.RunWait(api.WithIdempotencyKey(ctx, "turn-1"), "ada", api.StartRun{Input: map[string]any{"said": "one"}})
			if err != nil || first.Status != api.RunSucceeded {
				t.Fatalf("the first turn: %+v %v", first, err)
			}
			// the second turn's wait, cut by the kill
			keyed := api.WithIdempotencyKey(ctx, "turn-2")
			turn := api.StartRun{Input: map[string]any{"said": "two"}}
			cut := make(chan error, 1)
			go func() {
				_, err := a.RunWait(keyed, "ada", turn)
				cut <- err
			}()
			var running string
			for deadline := time.Now().Add(time.Minute); running == ""; time.Sleep(20 * time.Millisecond) {
				runs, err := a.Runs(ctx, "ada")
				if err == nil {
					for _, r := range runs {
						if r.Status == api.RunRunning {
							running = r.ID
						}
					}
				}
				if time.Now().After(deadline) {
					t.Fatalf("the second turn never ran:\n%s", aLog())
				}
			}
			killA()
			if err := <-cut; err == nil {
				t.Fatal("the wait on the killed server was answered")
			}

			b, bLog, _ := start()
			// the client retries, as it would after a lost answer
			again, err := b.RunWait(keyed, "ada", turn)
			if err != nil {
				t.Fatalf("the retried wait: %v\n%s", err, bLog())
			}
			if again.ID != running || again.Status != api.RunSucceeded {
				t.Fatalf("the retried wait answered run %s (%s), want the run the first request started, %s", again.ID, again.Status, running)
			}
			state, err := b.State(ctx, "ada", 0)
			if err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprint(state.Values["turn_count"]); got != "2" {
				t.Fatalf("turn_count after two turns, the second retried: %s, want 2", got)
			}
			runs, err := b.Runs(ctx, "ada")
			if err != nil || len(runs) != 2 {
				t.Fatalf("runs of the thread: %d %v, want 2", len(runs), err)
			}
			// and once more, now that it has ended: the same answer
			third, err := b.RunWait(keyed, "ada", turn)
			if err != nil || third.ID != running {
				t.Fatalf("the wait sent a third time: %+v %v", third, err)
			}
		})
	}
}

func replaceSleep(flow string, ms int) string {
	return strings.ReplaceAll(flow, `"SLEEP"`, fmt.Sprintf(`"%d"`, ms))
}

// waitUp waits for a server process to be ready, as long as a start on a
// busy machine takes (its verdict is /readyz, the deadline only against
// a hang).
func waitUp(t *testing.T, c *api.Client) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); c.Ready(context.Background()) != nil; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the server did not become ready")
		}
	}
}
