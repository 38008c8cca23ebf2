package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	facade "github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/api/server"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

// kindsProcess starts the command line in a process of its own, with the
// runtime's test kinds (see TestMain).
func kindsProcess(t *testing.T, args ...string) (*exec.Cmd, *syncBuffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "TRELLIS_AS_MAIN=test-kinds")
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, &stderr
}

// stepsFlow takes a turn in three steps of a second each.
const stepsFlow = `version: 1
name: steps
state:
  schema:
    type: object
    properties:
      said: {type: string, default: ""}
      n: {type: integer, default: 0}
  reducers: {n: add}
input: [said]
nodes:
  one:   {kind: set, sleep_ms: "1000", set: {n: "1"}}
  two:   {kind: set, sleep_ms: "1000", set: {n: "1"}}
  three: {kind: set, sleep_ms: "1000", set: {n: "1"}}
edges:
  - {from: START, to: one}
  - {from: one, to: two}
  - {from: two, to: three}
  - {from: three, to: END}
`

// SIGTERM in the middle of runs, with a client streaming one and another
// waiting on a second: the server exits as soon as the runs have stopped
// at the end of their steps (not when its stop timeout ends), and exits
// 0; the waiting client is answered with where its run went, the
// streaming one hears run_requeued; on the next server both runs resume,
// the stream continues with Last-Event-ID to run_end with every event
// once, and the stored events are one sequence ending in run_end.
func TestSIGTERMMidRun(t *testing.T) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			ctx := context.Background()
			db := "sqlite:" + filepath.Join(t.TempDir(), "t.db")
			if backend == "postgres" {
				db = storetest.Postgres(t)
			}
			flows := t.TempDir()
			if err := os.WriteFile(filepath.Join(flows, "steps.yaml"), []byte(stepsFlow), 0o644); err != nil {
				t.Fatal(err)
			}
			rt, err := facade.Open(ctx, db)
			if err != nil {
				t.Fatal(err)
			}
			defer rt.Close()
			cat, _ := store.CatalogOf(rt.Store())
			_, key, err := server.CreateKey(ctx, cat, "acme", "", false)
			if err != nil {
				t.Fatal(err)
			}
			addr := freeAddr(t)
			args := []string{"serve", "--flows", flows, "--store", db, "--addr", addr, "--stop-timeout", "30s"}
			first, stderr := kindsProcess(t, args...)
			c := api.NewClient("http://"+addr, key)
			waitReady(t, c)
			for _, id := range []string{"s", "w"} {
				if _, err := c.CreateThread(ctx, api.CreateThread{ID: id, Flow: "steps"}); err != nil {
					t.Fatal(err)
				}
			}
			var mu sync.Mutex
			var streamed []api.StreamEvent
			streamErr := make(chan error, 1)
			go func() {
				for ev, err := range c.StreamRun(ctx, "s", api.StartRun{Input: map[string]any{"said": "streamed"}}) {
					if err != nil {
						streamErr <- err
						return
					}
					mu.Lock()
					streamed = append(streamed, ev)
					mu.Unlock()
				}
				streamErr <- nil
			}()
			waited := make(chan error, 1)
			go func() {
				_, err := c.RunWait(ctx, "w", api.StartRun{Input: map[string]any{"said": "waited"}})
				waited <- err
			}()
			for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) { // a bound against a hang
				mu.Lock()
				n := len(streamed)
				mu.Unlock()
				rs, err := c.Runs(ctx, "w")
				if n > 0 && err == nil && len(rs) == 1 && rs[0].Status == api.RunRunning {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the runs did not start:\n%s", stderr.String())
				}
			}
			time.Sleep(200 * time.Millisecond) // both are in their first step

			start := time.Now()
			if err := first.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if err := first.Wait(); err != nil {
				t.Fatalf("serve exited with %v:\n%s", err, stderr.String())
			}
			// a step takes a second: the runs stop at its end, not at the
			// stop timeout (30 s), as the server's log says
			took := time.Since(start)
			if strings.Contains(stderr.String(), "the stop timeout is over") {
				t.Fatalf("serve stopped runs in steps of a second at its stop timeout, after %s:\n%s", took.Round(time.Millisecond), stderr.String())
			}
			t.Logf("serve exited %s after SIGTERM, with runs in steps of a second", took.Round(time.Millisecond))
			var waitedRun string
			select {
			case err := <-waited:
				var ae *api.Error
				if !errors.As(err, &ae) || ae.Code != api.CodeRunRequeued {
					t.Fatalf("the waiting client got %v, want run_requeued", err)
				}
				d, _ := ae.Details.(map[string]any)
				waitedRun, _ = d["run"].(string)
				if waitedRun == "" || d["status"] != api.RunQueued {
					t.Fatalf("the answer does not say where the run went: %+v", ae)
				}
			case <-time.After(time.Minute): // a bound against a hang
				t.Fatal("the waiting client was not answered")
			}
			if err := <-streamErr; err != nil {
				t.Fatalf("the stream ended with %v", err)
			}
			mu.Lock()
			before := streamed
			mu.Unlock()
			last := before[len(before)-1]
			if last.Event.Type != api.RunRequeued {
				t.Fatalf("the stream ended with %s", last.Event.Type)
			}

			// the next server resumes both
			second, stderr2 := kindsProcess(t, args...)
			waitReady(t, c)
			var after []api.StreamEvent
			for ev, err := range c.JoinStream(ctx, "s", last.Run, last.ID) {
				if err != nil {
					t.Fatal(err)
				}
				after = append(after, ev)
			}
			all := append(before, after...)
			for i, ev := range all {
				if ev.ID != strconv.Itoa(i+1) {
					t.Fatalf("event %d of the stream has id %s", i+1, ev.ID)
				}
			}
			if end := all[len(all)-1]; end.Event.Type != "run_end" || end.Event.State["n"] != 3 {
				t.Fatalf("the stream after the restart ends with %+v", end.Event)
			}
			done, err := c.Join(ctx, "w", waitedRun)
			if err != nil || done.Status != api.RunSucceeded || done.State["n"] != 3 {
				t.Fatalf("the waited run after the restart: %+v %v", done, err)
			}
			for _, run := range []string{last.Run, waitedRun} {
				var types []string
				for after := int64(0); ; {
					evs, err := cat.Events(ctx, run, after, 0)
					if err != nil {
						t.Fatal(err)
					}
					if len(evs) == 0 {
						break
					}
					for _, ev := range evs {
						if ev.Seq != after+1 {
							t.Fatalf("run %s: stored event %d follows %d", run, ev.Seq, after)
						}
						after = ev.Seq
						types = append(types, eventType(ev.Data))
					}
				}
				if types[len(types)-1] != "run_end" || strings.Count(strings.Join(types, " "), "run_requeued") != 1 {
					t.Fatalf("run %s: stored events %v", run, types)
				}
			}
			if err := second.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if err := second.Wait(); err != nil {
				t.Fatalf("the second serve: %v\n%s", err, stderr2.String())
			}
			if logs := stderr.String() + stderr2.String(); strings.Contains(logs, `"level":"ERROR"`) {
				t.Fatalf("the servers logged errors:\n%s", logs)
			}
		})
	}
}

// eventType reads a stored event's type.
func eventType(data []byte) string {
	_, rest, _ := strings.Cut(string(data), `"type":"`)
	typ, _, _ := strings.Cut(rest, `"`)
	return typ
}
