package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	facade "github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/nodes/llm/llmtest"
	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/api/server"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

// counterFlow takes a turn in two steps: a model call, then a count that
// appends what was said, so every turn that succeeded is in the log once.
const counterFlow = `version: 1
name: counter
state:
  schema:
    type: object
    properties:
      said: {type: string, default: ""}
      thought: {type: string, default: ""}
      n: {type: integer, default: 0}
      log: {type: array, items: {type: string}, default: []}
  reducers: {log: append}
input: [said]
nodes:
  think: {kind: llm, prompt: think.prompt, writes: {thought: output}}
  count: {kind: assign, set: {n: "state.n + 1", log: "input.said"}}
edges:
  - {from: START, to: think}
  - {from: think, to: count}
  - {from: count, to: END}
`

const thinkPrompt = `---
fallback: "nothing"
---
Think about {{.input.said}}.
`

// Three servers on one PostgreSQL, 200 clients over 50 threads with
// mixed busy policies; one server is killed with SIGKILL part way. Every
// run that was accepted ends once, its thread's history is one unbroken
// chain, and every turn that succeeded is in its thread's log exactly once.
func TestReplicasShareOneDatabase(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three server processes")
	}
	ctx := context.Background()
	flows := t.TempDir()
	os.WriteFile(filepath.Join(flows, "counter.yaml"), []byte(counterFlow), 0o644)
	os.WriteFile(filepath.Join(flows, "think.prompt"), []byte(thinkPrompt), 0o644)
	model := llmtest.New(llmtest.Rule{Replies: []llmtest.Reply{{Content: "hmm", Delay: 30 * time.Millisecond}}})
	ms := httptest.NewServer(model)
	defer ms.Close()
	db := storetest.Postgres(t)
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
	env := []string{"OPENAI_BASE_URL=" + ms.URL + "/v1", "OPENAI_API_KEY=k"}
	var clients []*api.Client
	var servers []*procInfo
	for range 3 {
		addr := freeAddr(t)
		cmd, stderr := trellisProcess(t, env, "serve", "--flows", flows, "--store", db, "--addr", addr,
			"--lease-ttl", "2s", "--dead-after", "2s")
		c := api.NewClient("http://"+addr, key)
		waitReady(t, c)
		clients = append(clients, c)
		servers = append(servers, &procInfo{cmd: cmd, stderr: stderr})
	}
	const threads, workers, turns = 50, 200, 3
	for i := range threads {
		if _, err := clients[i%3].CreateThread(ctx, api.CreateThread{ID: fmt.Sprint("t", i), Flow: "counter"}); err != nil {
			t.Fatal(err)
		}
	}
	var killed atomic.Bool
	alive := func(i int) bool { return i != 0 || !killed.Load() }
	var mu sync.Mutex
	accepted := map[string]string{} // run id -> thread
	var refused, retried atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range turns {
				thread := fmt.Sprint("t", (w*7+k)%threads)
				policy := []string{api.OnBusyReject, api.OnBusyEnqueue, api.OnBusyEnqueue, api.OnBusyInterrupt}[rand.IntN(4)]
				say := fmt.Sprintf("w%d-k%d", w, k)
				var run *api.Run
				for attempt := 0; attempt < 20; attempt++ {
					s := rand.IntN(3)
					if !alive(s) {
						continue
					}
					r, err := clients[s].StartRun(ctx, thread, api.StartRun{Input: map[string]any{"said": say}, OnBusy: policy})
					if api.IsCode(err, api.CodeThreadBusy) {
						refused.Add(1)
						break
					}
					if err != nil {
						// the server died under the request: whether it took the run
						// is checked from the records at the end
						retried.Add(1)
						time.Sleep(20 * time.Millisecond)
						break
					}
					run = r
					break
				}
				if run == nil {
					continue
				}
				mu.Lock()
				accepted[run.ID] = thread
				mu.Unlock()
				// follow the run to its end, from any live server
				for attempt := 0; attempt < 100; attempt++ {
					s := rand.IntN(3)
					if !alive(s) {
						continue
					}
					jctx, cancel := context.WithTimeout(ctx, 5*time.Second)
					r, err := clients[s].Join(jctx, thread, run.ID)
					cancel()
					if err == nil && r.Done() {
						break
					}
				}
			}
		}()
	}
	// kill a server while it runs runs
	var victim string
	if m := regexp.MustCompile(`"server":"(server_[0-9a-f]+)"`).FindStringSubmatch(servers[0].stderr.String()); m != nil {
		victim = m[1]
	}
	time.Sleep(500 * time.Millisecond)
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if rs, err := cat.ServerRuns(ctx, victim); err == nil && len(rs) > 0 {
			break
		}
	}
	killed.Store(true)
	if err := servers[0].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()

	// every recorded run ends: the killed server's runs are adopted (the
	// bound is against a hang)
	deadline := time.Now().Add(3 * time.Minute)
	var runs []*store.RunRecord
	for {
		runs = runs[:0]
		open := 0
		for i := range threads {
			rs, err := cat.Runs(ctx, store.RunQuery{Tenant: "acme", Thread: "acme/t" + fmt.Sprint(i)})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rs {
				runs = append(runs, r)
				if !r.Status.Done() {
					open++
				}
			}
		}
		if open == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d runs never ended", open)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for id := range accepted {
		if !slices.ContainsFunc(runs, func(r *store.RunRecord) bool { return r.ID == id }) {
			t.Fatalf("accepted run %s is not recorded", id)
		}
	}
	succeeded := map[string]map[string]bool{} // thread -> said
	statuses := map[store.RunStatus]int{}
	for _, r := range runs {
		statuses[r.Status]++
		if r.Status == store.RunFailed {
			t.Errorf("run %s failed: %s", r.ID, r.Error)
			dumpThread(t, rt, cat, r.Thread)
		}
		if r.Status == store.RunSucceeded {
			var in struct{ Said string }
			_ = json.Unmarshal(r.Input, &in)
			if succeeded[r.Thread] == nil {
				succeeded[r.Thread] = map[string]bool{}
			}
			succeeded[r.Thread][in.Said] = true
		}
	}
	for i := range threads {
		thread := "acme/t" + fmt.Sprint(i)
		snap, err := rt.State(ctx, thread)
		if err != nil {
			t.Fatal(err)
		}
		log, _ := snap.Values["log"].([]any)
		seen := map[string]bool{}
		for _, s := range log {
			if seen[s.(string)] {
				dumpThread(t, rt, cat, thread)
				t.Fatalf("%s: turn %s ran twice", thread, s)
			}
			seen[s.(string)] = true
			if !succeeded[thread][s.(string)] {
				dumpThread(t, rt, cat, thread)
				t.Fatalf("%s: turn %s is in the log but its run did not succeed", thread, s)
			}
		}
		if len(seen) != len(succeeded[thread]) || snap.Values["n"] != len(log) {
			dumpThread(t, rt, cat, thread)
			t.Fatalf("%s: %d turns succeeded, the log has %d, n is %v", thread, len(succeeded[thread]), len(log), snap.Values["n"])
		}
		hist, err := rt.History(ctx, thread, facade.HistoryOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for j, cp := range hist {
			if cp.Seq != uint64(len(hist)-j) || cp.Parent != cp.Seq-1 {
				t.Fatalf("%s: the history is not one chain at checkpoint %d (parent %d)", thread, cp.Seq, cp.Parent)
			}
		}
	}
	adopted := strings.Count(servers[1].stderr.String(), "adopting a run") + strings.Count(servers[2].stderr.String(), "adopting a run")
	t.Logf("%d runs: %v; %d refused busy, %d requests cut by the kill, %d runs of the killed server adopted",
		len(runs), statuses, refused.Load(), retried.Load(), adopted)
	if os.Getenv("TRELLIS_KEEP_LOGS") != "" {
		for i, sv := range servers {
			os.WriteFile(fmt.Sprintf("/tmp/replica%d.log", i), []byte(sv.stderr.String()), 0o644)
		}
	}
	if adopted == 0 {
		t.Fatal("the killed server had no run to adopt: the test did not test adoption")
	}
	if statuses[store.RunSucceeded] < threads {
		t.Fatalf("only %d runs succeeded", statuses[store.RunSucceeded])
	}
}

type procInfo struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
}

// dumpThread logs a thread's checkpoints and runs, to see what went wrong.
func dumpThread(t *testing.T, rt *facade.Runtime, cat store.Catalog, thread string) {
	hist, _ := rt.History(context.Background(), thread, facade.HistoryOptions{})
	for _, cp := range hist {
		var w []string
		for _, x := range cp.Writes {
			w = append(w, fmt.Sprintf("%s=%v%v", x.Field, x.Value, x.Items))
		}
		t.Logf("checkpoint %d parent %d run %s step %d %s next %v writes %v", cp.Seq, cp.Parent, cp.Run, cp.Step, cp.Source, cp.Next, w)
	}
	runs, _ := cat.Runs(context.Background(), store.RunQuery{Tenant: "acme", Thread: thread})
	for _, r := range runs {
		t.Logf("run %s %s server %s input %s error %q resume %v interrupt %v", r.ID, r.Status, r.Server, r.Input, r.Error, r.Resume, r.Interrupt)
	}
}
