package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	facade "github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/nodes/all/alltest"
	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/api/server"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

// chaosFlow takes a turn through nodes whose attempts time out at random
// (and are retried, then written off), a map whose items honour
// cancellation and time out at random, and a map whose items ignore it
// and always outlive their timeout; a secret in its configuration.
const chaosFlow = `version: 1
name: chaos
config:
  token: {type: string, secret: true}
state:
  schema:
    type: object
    properties:
      said: {type: string, default: ""}
      items: {type: array, items: {type: integer}, default: [1, 2, 3, 4, 5, 6]}
      done: {type: array, items: {type: integer}, default: []}
      log: {type: array, items: {type: string}, default: []}
      late: {type: integer, default: 0}
  reducers: {done: append, log: append, late: add}
input: [said]
nodes:
  think:
    kind: set
    jitter_ms: 60
    timeout: 40ms
    retry: {attempts: 2, backoff: 5ms}
    on_error: {set: {late: "1"}}
    set: {late: "0"}
  honour:
    kind: map
    items: "state.items"
    max_concurrency: 3
    on_item_error: skip
    node: {kind: set, jitter_ms: 50, timeout: 30ms, set: {done: "[item]"}}
  ignore:
    kind: map
    items: "state.items"
    max_concurrency: 3
    on_item_error: skip
    node: {kind: sleep, ms: 40, ignore_cancel: true, timeout: 25ms, set: {done: "[item]"}}
  note: {kind: set, set: {log: "[input.said]"}}
edges:
  - {from: START, to: think}
  - {from: think, to: honour}
  - {from: honour, to: ignore}
  - {from: ignore, to: note}
  - {from: note, to: END}
`

// chaosServer is one `trellis serve` of the chaos test.
type chaosServer struct {
	name   string
	cmd    *exec.Cmd
	stderr *syncBuffer
	c      *api.Client
	down   atomic.Bool // signalled: no more requests to it
	exited chan error
	idle   float64 // its goroutines once ready
}

// Many runs over the API on servers sharing one store, while one server
// is stopped with SIGTERM and another killed with SIGKILL: runs with
// random node timeouts, map items that ignore or honour cancellation,
// secret configuration, every on_busy policy, duplicate requests,
// cancels, waits and streams that follow their run from server to
// server. Afterwards: no server crashed or reported a race; every run
// accepted is recorded and ended exactly once, with its events one
// sequence ending in an event that agrees with its status; no turn ran
// twice; each stream's events came once each, in order, across servers;
// the servers left have no run, no secret and no goroutine more than
// when they were idle. Then the store itself fails under load (see
// blink).
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four server processes per store")
	}
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) { chaos(t, backend) })
	}
	// the store itself fails under load (blink_test.go)
	t.Run("sqlite disk full", func(t *testing.T) { blink(t, "sqlite", time.Minute) })
	t.Run("postgres restart", func(t *testing.T) { blink(t, "postgres", time.Minute) })
	// away longer than a run may wait: runs are queued again, and those
	// whose end could not be recorded are run again by the same server
	t.Run("sqlite disk full beyond the wait", func(t *testing.T) { blink(t, "sqlite", time.Second) })
	t.Run("postgres restart beyond the wait", func(t *testing.T) { blink(t, "postgres", time.Second) })
}

func chaos(t *testing.T, backend string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := facade.LoadSource("chaos.yaml", []byte(chaosFlow), facade.WithKinds(alltest.WithTestKinds())); err != nil {
		t.Fatal(err)
	}
	db := "sqlite:" + filepath.Join(t.TempDir(), "chaos.db")
	if backend == "postgres" {
		db = storetest.Postgres(t)
	}
	flows := t.TempDir()
	if err := os.WriteFile(filepath.Join(flows, "chaos.yaml"), []byte(chaosFlow), 0o644); err != nil {
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
	var mu sync.Mutex
	var servers []*chaosServer
	start := func(name string) *chaosServer {
		cmd, stderr, c, exited := serveProcess(t, key, "--flows", flows, "--store", db,
			"--stop-timeout", "10s", "--dead-after", "3s", "--lease-ttl", "3s")
		s := &chaosServer{name: name, cmd: cmd, stderr: stderr, c: c, exited: exited}
		s.c.HTTP = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
		s.idle = metric(t, s, "go_goroutines")
		mu.Lock()
		servers = append(servers, s)
		mu.Unlock()
		return s
	}
	for i := range 3 {
		start(fmt.Sprint("server", i))
	}
	pick := func() *chaosServer {
		mu.Lock()
		defer mu.Unlock()
		var up []*chaosServer
		for _, s := range servers {
			if !s.down.Load() {
				up = append(up, s)
			}
		}
		return up[rand.IntN(len(up))]
	}
	const threads, workers = 10, 20
	// the clients work for this long; the servers stop and die in it
	until := time.Now().Add(7 * time.Second)
	for i := range threads {
		if _, err := servers[0].c.CreateThread(ctx, api.CreateThread{ID: fmt.Sprint("t", i), Flow: "chaos"}); err != nil {
			t.Fatal(err)
		}
	}

	var amu sync.Mutex
	accepted := map[string]string{} // run -> thread
	accept := func(run, thread string) {
		amu.Lock()
		defer amu.Unlock()
		accepted[run] = thread
	}
	known := func() (string, string, bool) {
		amu.Lock()
		defer amu.Unlock()
		for run, thread := range accepted {
			return run, thread, true
		}
		return "", "", false
	}
	var problems sync.Map // what a client saw that must not be
	var streams, followed atomic.Int64
	// follow streams a run from after lastID to its end, from server to
	// server, and checks that its events come once each, in order
	follow := func(thread, run string, seen []api.StreamEvent) {
		for try := 0; try < 40 && ctx.Err() == nil; try++ {
			if n := len(seen); n > 0 {
				switch seen[n-1].Event.Type {
				case "run_end", "run_error":
					return
				}
			}
			lastID := ""
			if len(seen) > 0 {
				lastID = seen[len(seen)-1].ID
			}
			sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			had := len(seen)
			for ev, err := range pick().c.JoinStream(sctx, thread, run, lastID) {
				if err != nil {
					break
				}
				seen = append(seen, ev)
			}
			cancel()
			if len(seen) > had {
				followed.Add(1)
			}
			time.Sleep(100 * time.Millisecond)
		}
		for i, ev := range seen {
			if ev.ID != strconv.Itoa(i+1) {
				problems.Store(run, fmt.Sprintf("stream of %s: event %d has id %s", run, i+1, ev.ID))
				return
			}
		}
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; time.Now().Before(until); k++ {
				if ctx.Err() != nil {
					return
				}
				thread := fmt.Sprint("t", rand.IntN(threads))
				in := api.StartRun{Input: map[string]any{"said": fmt.Sprintf("w%d-k%d", w, k)},
					OnBusy: []string{api.OnBusyReject, api.OnBusyEnqueue, api.OnBusyEnqueue, api.OnBusyInterrupt}[rand.IntN(4)]}
				if rand.IntN(2) == 0 {
					in.Config = map[string]any{"token": "s3cret"}
				}
				if rand.IntN(5) == 0 { // the thread may have been left unfinished
					in.Input, in.Resume = nil, true
				}
				rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				switch rand.IntN(7) {
				case 0, 1: // start in the background
					if r, err := pick().c.StartRun(rctx, thread, in); err == nil {
						accept(r.ID, thread)
					}
				case 2: // the same request twice, to two servers at once
					var dwg sync.WaitGroup
					for range 2 {
						dwg.Add(1)
						go func() {
							defer dwg.Done()
							if r, err := pick().c.StartRun(rctx, thread, in); err == nil {
								accept(r.ID, thread)
							}
						}()
					}
					dwg.Wait()
				case 3: // start and wait
					r, err := pick().c.RunWait(rctx, thread, in)
					if err == nil {
						accept(r.ID, thread)
					} else if run, ok := api.WaitAgain(err); ok {
						accept(run, thread)
					} else if api.IsCode(err, api.CodeRunRequeued) {
						problems.Store("requeued"+thread, fmt.Sprintf("run_requeued without the run: %v", err))
					}
				case 4, 6: // start and stream, to the end wherever it goes
					var seen []api.StreamEvent
					for ev, err := range pick().c.StreamRun(rctx, thread, in) {
						if err != nil {
							break
						}
						seen = append(seen, ev)
					}
					if len(seen) > 0 {
						streams.Add(1)
						accept(seen[0].Run, thread)
						follow(thread, seen[0].Run, seen)
					}
				case 5: // cancel or wait for a run, twice at once
					if run, th, ok := known(); ok {
						var dwg sync.WaitGroup
						for range 2 {
							dwg.Add(1)
							go func() {
								defer dwg.Done()
								if rand.IntN(2) == 0 {
									_, _ = pick().c.Cancel(rctx, th, run)
								} else {
									_, _ = pick().c.Join(rctx, th, run)
								}
							}()
						}
						dwg.Wait()
					}
				}
				cancel()
			}
		}()
	}

	// mid-way: one server stops gracefully, another is killed, and a new
	// one starts
	time.Sleep(2 * time.Second)
	term := servers[0]
	term.down.Store(true)
	termAt := time.Now()
	if err := term.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-term.exited:
		if err != nil {
			t.Errorf("the server stopped with SIGTERM exited with %v", err)
		}
		t.Logf("SIGTERM: the server exited after %s", time.Since(termAt).Round(time.Millisecond))
	case <-time.After(2 * time.Minute): // a bound against a hang
		t.Fatalf("the server stopped with SIGTERM did not exit:\n%s", term.stderr.String())
	}
	time.Sleep(time.Second)
	killed := servers[1]
	killed.down.Store(true)
	if err := killed.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-killed.exited
	start("server3")

	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("the clients did not finish")
	}

	// every recorded run ends (the killed server's are adopted)
	var runs []*store.RunRecord
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		runs = runs[:0]
		open := 0
		for i := range threads {
			for before := ""; ; {
				page, err := cat.Runs(ctx, store.RunQuery{Tenant: "acme", Thread: "acme/t" + fmt.Sprint(i), Before: before})
				if err != nil {
					t.Fatal(err)
				}
				if len(page) == 0 {
					break
				}
				for _, r := range page {
					runs = append(runs, r)
					if !r.Status.Done() {
						open++
					}
				}
				before = page[len(page)-1].ID
			}
		}
		if open == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d runs never ended", open)
		}
	}
	recorded := map[string]*store.RunRecord{}
	statuses := map[store.RunStatus]int{}
	failures := map[string]int{}
	for _, r := range runs {
		recorded[r.ID] = r
		statuses[r.Status]++
		if r.Status == store.RunFailed {
			failures[r.Error]++
		}
	}
	amu.Lock()
	for run := range accepted {
		if recorded[run] == nil {
			t.Errorf("accepted run %s is not recorded", run)
		}
	}
	amu.Unlock()
	problems.Range(func(_, v any) bool {
		t.Error(v)
		return true
	})

	// each run's events: one sequence, one end, agreeing with its status
	withEvents := 0
	for _, r := range runs {
		var types []string
		for after := int64(0); ; {
			evs, err := cat.Events(ctx, r.ID, after, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(evs) == 0 {
				break
			}
			for _, ev := range evs {
				if ev.Seq != after+1 {
					t.Errorf("run %s: event %d follows %d", r.ID, ev.Seq, after)
				}
				after = ev.Seq
				types = append(types, eventType(ev.Data))
			}
		}
		if len(types) == 0 {
			continue
		}
		withEvents++
		last := types[len(types)-1]
		ends := strings.Count(" "+strings.Join(types, " ")+" ", " run_end ") + strings.Count(" "+strings.Join(types, " ")+" ", " run_error ")
		want := map[store.RunStatus]string{store.RunSucceeded: "run_end", store.RunFailed: "run_error", store.RunCancelled: "run_error"}[r.Status]
		if last != want || ends != 1 {
			t.Errorf("run %s (%s, %q): events %v", r.ID, r.Status, r.Error, types)
		}
	}
	// no turn ran twice: a thread's log has what a turn said at most as
	// many times as runs were asked to say it (a request sent twice
	// makes two runs)
	asked := map[string]int{}
	for _, r := range runs {
		var in struct{ Said string }
		_ = json.Unmarshal(r.Input, &in)
		if in.Said != "" {
			asked[r.Thread+" "+in.Said]++
		}
	}
	for i := range threads {
		thread := "acme/t" + fmt.Sprint(i)
		snap, err := rt.State(ctx, thread)
		if err != nil {
			t.Fatal(err)
		}
		said := map[string]int{}
		log, _ := snap.Values["log"].([]any)
		for _, s := range log {
			said[s.(string)]++
		}
		for s, n := range said {
			if n > asked[thread+" "+s] {
				t.Errorf("t%d: turn %s ran %d times, asked of %d runs", i, s, n, asked[thread+" "+s])
			}
		}
	}

	// the servers left: alive, idle, holding nothing
	for _, s := range servers {
		if s.down.Load() {
			continue
		}
		select {
		case err := <-s.exited:
			t.Fatalf("%s exited with %v:\n%s", s.name, err, s.stderr.String())
		default:
		}
		s.c.HTTP.CloseIdleConnections()
		if n := metric(t, s, "trellis_active_runs"); n != 0 {
			t.Errorf("%s: %v runs active after every run ended", s.name, n)
		}
		var n float64
		// (the bounds here are against a hang: a loaded machine takes its
		// time to let go)
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
			if n = metric(t, s, "trellis_run_secrets"); n == 0 || time.Now().After(deadline) {
				break
			}
		}
		if n != 0 {
			t.Errorf("%s: keeps the secrets of %v runs after every run ended", s.name, n)
		}
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
			s.c.HTTP.CloseIdleConnections()
			if n = metric(t, s, "go_goroutines"); n <= s.idle+4 || time.Now().After(deadline) {
				break
			}
		}
		if n > s.idle+4 {
			t.Errorf("%s: %v goroutines, %v when it was idle", s.name, n, s.idle)
		}
		if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := <-s.exited; err != nil {
			t.Errorf("%s exited with %v", s.name, err)
		}
	}
	for _, s := range servers {
		logs := s.stderr.String()
		for _, bad := range []string{"WARNING: DATA RACE", "panic:", `"level":"ERROR"`} {
			if strings.Contains(logs, bad) {
				t.Errorf("%s logged %q:\n%s", s.name, bad, logs)
				break
			}
		}
	}
	t.Logf("%d runs (%d with events): %v; %d accepted; %d streams, %d continued with Last-Event-ID; failures: %v",
		len(runs), withEvents, statuses, len(accepted), streams.Load(), followed.Load(), failures)
	if statuses[store.RunSucceeded] < threads {
		t.Errorf("only %d runs succeeded", statuses[store.RunSucceeded])
	}
}

// metric reads one of a server's Prometheus metrics (without labels).
func metric(t *testing.T, s *chaosServer, name string) float64 {
	t.Helper()
	resp, err := s.c.HTTP.Get(s.c.BaseURL + "/metrics")
	if err != nil {
		t.Fatalf("%s: %v", s.name, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("%s: no metric %s", s.name, name)
	return 0
}
