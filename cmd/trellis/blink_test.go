package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	facade "github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/api/server"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

// blinkFlow takes a turn in three steps, a little apart.
const blinkFlow = `version: 1
name: blink
state:
  schema:
    type: object
    properties:
      said: {type: string, default: ""}
      log: {type: array, items: {type: string}, default: []}
      n: {type: integer, default: 0}
  reducers: {log: append, n: add}
input: [said]
nodes:
  hear: {kind: set, sleep_ms: "40", jitter_ms: 40, set: {n: "1"}}
  think: {kind: set, sleep_ms: "40", jitter_ms: 40, set: {n: "1"}}
  note: {kind: set, sleep_ms: "20", set: {log: "[input.said]"}}
edges:
  - {from: START, to: hear}
  - {from: hear, to: think}
  - {from: think, to: note}
  - {from: note, to: END}
`

// A store that blinks, under load: one `trellis serve` process and 20
// threads taking turns without pause, while the store stops taking
// writes for a few seconds — a SQLite file whose disk fills up (a small
// tmpfs), then gets space back; a PostgreSQL server stopped, then
// started again. While it is away, /readyz says so, requests that
// write are answered 503 (unavailable) or 507 (store_full) with nothing
// recorded, and runs under way wait for it. Once it is back, with no
// restart of the server: every run accepted ends exactly once (none
// failed for the store), its events one sequence ending in one event
// that agrees with its status, and within 60 seconds no thread is busy:
// each takes a run at once. The SQLite file passes integrity_check.
//
// Runs wait for the store as long as wait says (the server's
// --store-wait). A wait shorter than the outage leaves runs that could
// neither go on nor record their end: they are queued again (run_requeued
// in their events, then the rest of the run), or, their end unrecorded,
// run again by the same server once the store is back; at least one run
// must go either way, and each still ends once. (The events such a run
// could not record while it waited, store_unavailable among them, are
// not recorded: no client heard them, and its events stay one sequence.)
func blink(t *testing.T, backend string, wait time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var db string
	var fault, recover func()
	var sqlitePath string
	switch backend {
	case "sqlite":
		if os.Geteuid() != 0 {
			t.Skip("a full disk is a small tmpfs, and mounting one needs root")
		}
		dir := t.TempDir()
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", dir).CombinedOutput(); err != nil {
			t.Fatalf("mount a tmpfs: %v: %s", err, out)
		}
		t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
		sqlitePath = filepath.Join(dir, "blink.db")
		db = "sqlite:" + sqlitePath
		filler := filepath.Join(dir, "filler")
		fault = func() { fillDisk(t, filler) }
		recover = func() {
			// the space given back, as an operator would: a larger disk
			if out, err := exec.Command("mount", "-o", "remount,size=512m", dir).CombinedOutput(); err != nil {
				t.Errorf("resize the tmpfs: %v: %s", err, out)
			}
		}
	case "postgres":
		var stop, start func() error
		db, stop, start = storetest.PostgresCluster(t)
		fault = func() {
			if err := stop(); err != nil {
				t.Errorf("stop the PostgreSQL server: %v", err)
			}
		}
		recover = func() {
			if err := start(); err != nil {
				t.Errorf("start the PostgreSQL server again: %v", err)
			}
		}
	}
	flows := t.TempDir()
	if err := os.WriteFile(filepath.Join(flows, "blink.yaml"), []byte(blinkFlow), 0o644); err != nil {
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
	cmd, stderr, c, exited := serveProcess(t, key, "--flows", flows, "--store", db, "--lease-ttl", "3s", "--store-wait", wait.String())
	c.HTTP = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	const threads = 20
	for i := range threads {
		if _, err := c.CreateThread(ctx, api.CreateThread{ID: fmt.Sprint("b", i), Flow: "blink"}); err != nil {
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
	var refusals sync.Map // code -> count
	refused := func(err error) {
		var e *api.Error
		code := "other: " + fmt.Sprint(err)
		if errors.As(err, &e) {
			code = string(e.Code)
		}
		n, _ := refusals.LoadOrStore(code, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := range threads {
		thread := fmt.Sprint("b", w)
		wg.Go(func() {
			for k := 0; !stop.Load() && ctx.Err() == nil; k++ {
				in := api.StartRun{Input: map[string]any{"said": fmt.Sprintf("w%d-k%d", w, k)}, OnBusy: api.OnBusyEnqueue}
				rctx, cancel := context.WithTimeout(ctx, 90*time.Second)
				switch rand.IntN(3) {
				case 0:
					r, err := c.RunWait(rctx, thread, in)
					if err == nil {
						accept(r.ID, thread)
					} else if run, ok := api.WaitAgain(err); ok {
						accept(run, thread)
					} else {
						refused(err)
					}
				case 1:
					r, err := c.StartRun(rctx, thread, in)
					if err == nil {
						accept(r.ID, thread)
						_, _ = c.Join(rctx, thread, r.ID)
					} else {
						refused(err)
					}
				case 2:
					got := false
					for ev, err := range c.StreamRun(rctx, thread, in) {
						if err != nil {
							if !got {
								refused(err)
							}
							break
						}
						if !got {
							got = true
							accept(ev.Run, thread)
						}
					}
				}
				cancel()
				if ctx.Err() == nil {
					time.Sleep(10 * time.Millisecond)
				}
			}
		})
	}

	// the fault, mid-load: the store stops taking writes for a while
	time.Sleep(2 * time.Second)
	faultAt := time.Now()
	fault()
	// while it is away: /readyz says so, and a write is refused with
	// nothing recorded
	var notReady, writeRefused string
	for time.Since(faultAt) < 6*time.Second {
		if notReady == "" {
			if err := c.Ready(ctx); err != nil {
				notReady = err.Error()
			}
		}
		if writeRefused == "" {
			id := fmt.Sprintf("extra-%d", time.Now().UnixNano())
			_, err := c.CreateThread(ctx, api.CreateThread{ID: id, Flow: "blink"})
			want := map[string]api.Code{"sqlite": api.CodeStoreFull, "postgres": api.CodeUnavailable}[backend]
			switch {
			case api.IsCode(err, want):
				writeRefused = err.Error()
			case err != nil:
				t.Errorf("creating a thread while the store is away: %v, want %s", err, want)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	recover()
	backAt := time.Now()
	t.Logf("the store was away %s: /readyz said %q; a write was refused with %q", backAt.Sub(faultAt).Round(time.Millisecond), notReady, writeRefused)
	if notReady == "" {
		t.Error("/readyz said ready all the while the store was away")
	}
	if writeRefused == "" {
		t.Error("no write was refused while the store was away")
	}
	time.Sleep(3 * time.Second)
	stop.Store(true)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("the clients did not finish")
	}
	if err := c.Ready(ctx); err != nil {
		t.Errorf("/readyz once the store is back: %v", err)
	}

	// within 60 seconds of the store's return every run has ended and
	// every thread takes a run at once
	var runs []*store.RunRecord
	for {
		runs = runs[:0]
		open := 0
		for i := range threads {
			page, err := allRuns(ctx, cat, "acme/b"+fmt.Sprint(i))
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range page {
				runs = append(runs, r)
				if !r.Status.Done() {
					open++
				}
			}
		}
		if open == 0 {
			break
		}
		if time.Since(backAt) > 60*time.Second {
			t.Fatalf("%d runs not ended 60s after the store came back:\n%s", open, stderr.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	for i := range threads {
		thread := fmt.Sprint("b", i)
		r, err := c.RunWait(ctx, thread, api.StartRun{Input: map[string]any{"said": "after"}, OnBusy: api.OnBusyReject})
		if err != nil {
			t.Errorf("%s, %s after the store came back: %v", thread, time.Since(backAt).Round(time.Millisecond), err)
			continue
		}
		accept(r.ID, "acme/"+thread)
		if time.Since(backAt) > 60*time.Second {
			t.Errorf("%s took a run only %s after the store came back", thread, time.Since(backAt))
		}
	}
	select {
	case err := <-exited:
		t.Fatalf("the server exited (%v):\n%s", err, stderr.String())
	default:
	}

	// every accepted run recorded, ended once, none failed
	runs = runs[:0]
	for i := range threads {
		page, err := allRuns(ctx, cat, "acme/b"+fmt.Sprint(i))
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, page...)
	}
	recorded := map[string]*store.RunRecord{}
	statuses := map[store.RunStatus]int{}
	for _, r := range runs {
		recorded[r.ID] = r
		statuses[r.Status]++
		if r.Status != store.RunSucceeded {
			t.Errorf("run %s ended %s: %s", r.ID, r.Status, r.Error)
		}
	}
	amu.Lock()
	for run := range accepted {
		if recorded[run] == nil {
			t.Errorf("accepted run %s is not recorded", run)
		}
	}
	nAccepted := len(accepted)
	amu.Unlock()
	waited, requeued := 0, 0
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
		all := " " + strings.Join(types, " ") + " "
		if strings.Contains(all, " store_unavailable ") {
			waited++
		}
		if strings.Contains(all, " run_requeued ") {
			requeued++
		}
		ends := strings.Count(all, " run_end ") + strings.Count(all, " run_error ")
		if len(types) == 0 || types[len(types)-1] != "run_end" || ends != 1 {
			t.Errorf("run %s (%s): events %v", r.ID, r.Status, types)
		}
	}
	// a turn ran once per run that said it
	for i := range threads {
		snap, err := rt.State(ctx, "acme/b"+fmt.Sprint(i))
		if err != nil {
			t.Fatal(err)
		}
		said := map[string]int{}
		for _, s := range snap.Values["log"].([]any) {
			said[s.(string)]++
		}
		for s, n := range said {
			if n > 1 && s != "after" {
				t.Errorf("b%d: turn %s ran %d times", i, s, n)
			}
		}
	}
	if sqlitePath != "" {
		sdb, err := sql.Open("sqlite", "file:"+sqlitePath+"?mode=ro")
		if err != nil {
			t.Fatal(err)
		}
		var ok string
		if err := sdb.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&ok); err != nil || ok != "ok" {
			t.Errorf("integrity_check: %q %v", ok, err)
		}
		sdb.Close()
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-exited; err != nil {
		t.Errorf("the server exited with %v", err)
	}
	logs := stderr.String()
	for _, bad := range []string{"WARNING: DATA RACE", "panic:", `"level":"ERROR"`, "taken over"} {
		if strings.Contains(logs, bad) {
			// the lines that say it come last, where a log cut short
			// keeps them
			var said []string
			for _, line := range strings.Split(logs, "\n") {
				if strings.Contains(line, bad) {
					said = append(said, line)
				}
			}
			t.Errorf("the server logged %q:\n%s\nthe lines that say it:\n%s", bad, logs, strings.Join(said, "\n"))
			break
		}
	}
	codes := map[string]int64{}
	refusals.Range(func(k, v any) bool { codes[k.(string)] = v.(*atomic.Int64).Load(); return true })
	reclaimed := strings.Count(logs, "running again a run whose end this server could not record")
	t.Logf("%d runs (%v), %d accepted, %d waited for the store, %d queued again for it, %d run again once it was back; refusals: %v",
		len(runs), statuses, nAccepted, waited, requeued, reclaimed, codes)
	switch {
	case wait >= time.Minute && waited == 0:
		t.Error("no run waited for the store: the fault came when none was under way")
	case wait < time.Minute && requeued+reclaimed == 0:
		t.Errorf("no run was queued again or run again, though the store was away longer than the %s a run waits", wait)
	}
	for code := range codes {
		if code != string(api.CodeUnavailable) && code != string(api.CodeStoreFull) {
			t.Errorf("a request was refused with %s", code)
		}
	}
}

// serveProcess starts `trellis serve` with args on a port the kernel
// picks, read back from its log (a port found free and then handed to
// the server may be taken by another process meanwhile on a busy
// machine), and returns once it answers /readyz: the process, its log,
// a client with key, and the channel its exit comes on. Should it exit
// first, the test fails with what it logged. A busy machine may take a
// while to start it: the deadline is only against a hang.
func serveProcess(t *testing.T, key string, args ...string) (*exec.Cmd, *syncBuffer, *api.Client, chan error) {
	t.Helper()
	cmd, stderr := kindsProcess(t, append([]string{"serve", "--addr", "127.0.0.1:0"}, args...)...)
	exited, waited := make(chan error, 1), make(chan struct{})
	go func() {
		err := cmd.Wait()
		close(waited)
		exited <- err
	}()
	// the process is waited for here alone: run before kindsProcess's
	// cleanup, this one kills it and lets the Wait above return first
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-waited })
	deadline := time.Now().Add(2 * time.Minute)
	var c *api.Client
	for {
		if c == nil {
			if addr := servingAddr(stderr.String()); addr != "" {
				c = api.NewClient("http://"+addr, key)
			}
		}
		if c != nil && c.Ready(context.Background()) == nil {
			return cmd, stderr, c, exited
		}
		select {
		case err := <-exited:
			t.Fatalf("the server exited (%v) before it was ready:\n%s", err, stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server was not ready in 2 minutes:\n%s", stderr.String())
		}
	}
}

// servingAddr is the address a server's log says it listens on ("" until
// it says so).
func servingAddr(logs string) string {
	for line := range strings.Lines(logs) {
		var l struct{ Msg, Addr string }
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "serving" {
			return l.Addr
		}
	}
	return ""
}

// fillDisk writes a file at path until its file system is full.
func fillDisk(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatalf("fill the disk: %v", err)
	}
	defer f.Close()
	chunk := make([]byte, 256<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return
			}
			t.Fatalf("fill the disk: %v", err)
		}
	}
}

// allRuns lists a thread's runs, every page.
func allRuns(ctx context.Context, cat store.Catalog, thread string) ([]*store.RunRecord, error) {
	var out []*store.RunRecord
	for before := ""; ; {
		page, err := cat.Runs(ctx, store.RunQuery{Tenant: "acme", Thread: thread, Before: before})
		if err != nil || len(page) == 0 {
			return out, err
		}
		out = append(out, page...)
		before = page[len(page)-1].ID
	}
}
