package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	facade "github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/api/server"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

// trellis schedules creates, lists, pauses, resumes and deletes a served
// schedule through the API, whose ticks start runs on new threads, and
// lists its tick history.
func TestSchedulesCommand(t *testing.T) {
	ctx := context.Background()
	db := "sqlite:" + filepath.Join(t.TempDir(), "t.db")
	flows := t.TempDir()
	if err := os.WriteFile(filepath.Join(flows, "quick.yaml"), []byte(quickFlow), 0o644); err != nil {
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
	_, stderr := kindsProcess(t, "serve", "--flows", flows, "--store", db, "--addr", addr)
	c := api.NewClient("http://"+addr, key)
	waitReady(t, c)
	t.Setenv("TRELLIS_API_KEY", key)
	run := func(args ...string) string {
		t.Helper()
		out, errOut, code := trellis(t, append([]string{"schedules", "--api", "http://" + addr}, args...)...)
		if code != 0 {
			t.Fatalf("schedules %v: %d %s\n%s", args, code, errOut, stderr.String())
		}
		return out
	}
	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, []byte("said: from the values\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := run("create", "--id", "every", "--flow", "quick", "--cron", "* * * * * *", "--zone", "Europe/Paris", "--input", `{"said":"tick"}`, "--metadata", "team=a",
		"--with", values)
	if !strings.HasPrefix(out, "every\tflow quick\t* * * * * *\tEurope/Paris\tmissed skip\tnext ") {
		t.Fatalf("create: %q", out)
	}
	if sc, err := c.Schedule(ctx, "every"); err != nil || sc.Values["said"] != "from the values" {
		t.Fatalf("the schedule's values: %+v %v", sc, err)
	}
	// values the flow refuses are refused as the schedule is created
	if err := os.WriteFile(values, []byte("sayd: hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := trellis(t, "schedules", "--api", "http://"+addr, "create", "--id", "refused", "--flow", "quick", "--cron", "* * * * *", "--with", values); code != 2 ||
		!strings.Contains(errOut, `"sayd"`) || !strings.Contains(errOut, `did you mean "said"`) {
		t.Fatalf("refused values: %d %s", code, errOut)
	}
	if _, err := c.Schedule(ctx, "refused"); !api.IsCode(err, api.CodeNotFound) {
		t.Fatalf("a refused schedule was kept: %v", err)
	}
	if _, errOut, code := trellis(t, "schedules", "--api", "http://"+addr, "create", "--flow", "quick", "--cron", "61 * * * *"); code != 2 || !strings.Contains(errOut, "cron") {
		t.Fatalf("a bad cron: %d %s", code, errOut)
	}
	ticks := func() int {
		ts, err := c.Threads(ctx, api.ThreadQuery{Metadata: map[string]string{"schedule": "every"}})
		if err != nil {
			t.Fatal(err)
		}
		return len(ts.Threads)
	}
	// (the bounds are against a hang: the verdicts are what the store
	// records)
	for deadline := time.Now().Add(time.Minute); ticks() < 2; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no ticks:\n%s", stderr.String())
		}
	}
	if out := run("list"); !strings.Contains(out, "every\tflow quick") || !strings.Contains(out, "last ") {
		t.Fatalf("list: %q", out)
	}
	if out := run("pause", "every"); !strings.Contains(out, "\tpaused\t") {
		t.Fatalf("pause: %q", out)
	}
	// a tick under way when the pause came may still start its run; no
	// tick after the pause does
	paused := time.Now().Unix()
	latest := func() int64 {
		ts, err := c.Threads(ctx, api.ThreadQuery{Metadata: map[string]string{"schedule": "every"}})
		if err != nil {
			t.Fatal(err)
		}
		var last int64
		for _, th := range ts.Threads {
			if tick, err := strconv.ParseInt(th.ID[strings.LastIndex(th.ID, "-")+1:], 10, 64); err == nil {
				last = max(last, tick)
			}
		}
		return last
	}
	time.Sleep(2 * time.Second) // two ticks pass
	if last := latest(); last > paused {
		t.Fatalf("a paused schedule fired: the tick %d, after the pause at %d", last, paused)
	}
	n := ticks()
	if out := run("resume", "every"); !strings.Contains(out, "\tnext ") {
		t.Fatalf("resume: %q", out)
	}
	// a tick after resuming, as the tick history records it (its thread
	// is made before its run starts, and the history written after)
	started := func() int {
		ts, err := c.ScheduleTicks(ctx, "every")
		if err != nil {
			t.Fatal(err)
		}
		k := 0
		for _, tk := range ts.Ticks {
			if tk.Status == string(store.TickStarted) {
				k++
			}
		}
		return k
	}
	for deadline := time.Now().Add(time.Minute); ticks() <= n || started() <= n; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no tick after resuming")
		}
	}
	// its tick history: each tick started a run
	if out := run("ticks", "every"); !strings.Contains(out, "\tstarted run_every_") || strings.Count(out, "\n") < n+1 {
		t.Fatalf("ticks: %q (more than %d ticks fired)", out, n)
	}
	if out := run("delete", "every"); out != "deleted every\n" {
		t.Fatalf("delete: %q", out)
	}
	if _, errOut, code := trellis(t, "schedules", "--api", "http://"+addr, "get", "every"); code == 0 || !strings.Contains(errOut, "no schedule") {
		t.Fatalf("get a deleted schedule: %d %s", code, errOut)
	}
}

// A schedule every second on three trellis serve processes sharing
// PostgreSQL starts one run per tick; with every process SIGKILLed for a
// while, the ticks missed meanwhile get the one run their policy
// (run_once) declares, and the ticks after go on one run each. What the
// servers did is judged by what they recorded: the runs in the store,
// and each server's account of the ticks it found missed (a loaded
// machine can make a live server miss a tick by more than its grace:
// that is recorded too, and counted as such).
func TestScheduleAcrossProcesses(t *testing.T) {
	ctx := context.Background()
	db := storetest.Postgres(t)
	flows := t.TempDir()
	if err := os.WriteFile(filepath.Join(flows, "quick.yaml"), []byte(quickFlow), 0o644); err != nil {
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
	type proc struct {
		cmd    *exec.Cmd
		stderr *syncBuffer
	}
	start := func() (*api.Client, proc) {
		addr := freeAddr(t)
		cmd, stderr := kindsProcess(t, "serve", "--flows", flows, "--store", db, "--addr", addr)
		c := api.NewClient("http://"+addr, key)
		waitReady(t, c)
		return c, proc{cmd, stderr}
	}
	var procs []proc
	var c *api.Client
	for range 3 {
		var p proc
		c, p = start()
		procs = append(procs, p)
	}
	sc, err := c.CreateSchedule(ctx, api.CreateSchedule{ID: "every", Flow: "quick", Cron: "* * * * * *", Missed: "run_once", GraceMS: new(int64(1000)),
		Input: map[string]any{"said": "tick"}})
	if err != nil {
		t.Fatal(err)
	}
	first := sc.Next.Unix()
	// lastTick is the last tick the servers recorded as fired
	lastTick := func(c *api.Client) int64 {
		got, err := c.Schedule(ctx, "every")
		if err != nil || got.LastTick == nil {
			return 0
		}
		return got.LastTick.Unix()
	}
	// (the bounds here are against a hang)
	for deadline := time.Now().Add(2 * time.Minute); lastTick(c) < first+5; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the ticks did not come:\n%s", procs[0].stderr.String())
		}
	}
	for _, p := range procs {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
	}
	down := time.Now()
	time.Sleep(4 * time.Second) // no server runs: ticks are missed
	up := time.Now()
	c, p := start()
	procs = append(procs, p)
	ready := time.Now().Unix()
	// the restarted server fires ticks after the downtime
	for deadline := time.Now().Add(2 * time.Minute); lastTick(c) < ready+2; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no tick after the restart:\n%s", p.stderr.String())
		}
	}
	last := lastTick(c)
	if err := c.DeleteSchedule(ctx, "every"); err != nil {
		t.Fatal(err)
	}
	// every server's account of the ticks missed, the restarted one's
	// apart
	type missed struct{ from, to int64 }
	var all, live, restarted []missed
	for i, p := range procs {
		for _, line := range strings.Split(p.stderr.String(), "\n") {
			var rec struct {
				Msg  string    `json:"msg"`
				From time.Time `json:"from"`
				To   time.Time `json:"to"`
			}
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "schedule: ticks missed" {
				m := missed{rec.From.Unix(), rec.To.Unix()}
				all = append(all, m)
				if i == len(procs)-1 {
					restarted = append(restarted, m)
				} else {
					live = append(live, m)
				}
			}
		}
	}
	threads, err := cat.ListThreads(ctx, store.ThreadQuery{Tenant: "acme", Metadata: map[string]string{"schedule": "every"}})
	if err != nil {
		t.Fatal(err)
	}
	runs := map[int64]int{}
	for _, th := range threads {
		i := strings.LastIndex(th.ID, "-")
		tick, err := strconv.ParseInt(th.ID[i+1:], 10, 64)
		if err != nil {
			t.Fatal(th.ID)
		}
		rs, _ := cat.Runs(ctx, store.RunQuery{Tenant: "acme", Thread: th.ID})
		runs[tick] += len(rs)
	}
	// a tick missed is given up, but for the last of its stretch, which
	// runs once
	givenUp := func(tick int64) bool {
		for _, m := range all {
			if tick >= m.from && tick < m.to {
				return true
			}
		}
		return false
	}
	// a live server may find a tick late while another, slower, is still
	// starting its run: the first tick of a stretch found missed then has
	// that run (the one whose move of the schedule the store took logs
	// the ticks missed; the store refuses the other's)
	startedLate := func(tick int64) bool {
		for _, m := range live {
			if tick == m.from {
				return true
			}
		}
		return false
	}
	for tick := first; tick <= last; tick++ {
		want := 1
		if givenUp(tick) {
			want = 0
		}
		if runs[tick] != want && !(want == 0 && runs[tick] == 1 && startedLate(tick)) {
			t.Errorf("tick %s: %d runs, want %d (missed: %v)", time.Unix(tick, 0).UTC().Format(time.TimeOnly), runs[tick], want, all)
		}
	}
	// the ticks fired while the deletion came: one run each at most
	for tick, n := range runs {
		if tick > last && n > 1 {
			t.Errorf("tick %s, after the last recorded: %d runs", time.Unix(tick, 0).UTC().Format(time.TimeOnly), n)
		}
	}
	// no server ran from the kill to the restart: the restarted server
	// found those ticks missed, and ran once for them
	var downtime int
	for tick := down.Unix() + 1; tick < up.Unix(); tick++ {
		downtime++
		covered := false
		for _, m := range restarted {
			covered = covered || tick >= m.from && tick <= m.to
		}
		if !covered {
			t.Errorf("tick %s, while no server ran: not among the ticks the restarted server found missed %v", time.Unix(tick, 0).UTC().Format(time.TimeOnly), restarted)
		}
	}
	if downtime < 2 || len(restarted) == 0 {
		t.Errorf("%d ticks while no server ran, %v found missed by the restarted server", downtime, restarted)
	}
	t.Logf("ticks %d to %d; down %d to %d; missed %v", first, last, down.Unix(), up.Unix(), all)
}

// A schedule every second on three trellis serve processes sharing
// PostgreSQL starts exactly one run per tick for 30 ticks: no tick is
// missed, none has two runs, and every run succeeds. (A minute's grace:
// a loaded machine makes the servers late, not the ticks missed; the
// test waits for what the store records, not for the clock.)
func TestScheduleThirtyTicksOnThreeProcesses(t *testing.T) {
	const ticks = 30
	ctx := context.Background()
	db := storetest.Postgres(t)
	flows := t.TempDir()
	if err := os.WriteFile(filepath.Join(flows, "quick.yaml"), []byte(quickFlow), 0o644); err != nil {
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
	var clients []*api.Client
	var logs []*syncBuffer
	for range 3 {
		addr := freeAddr(t)
		_, stderr := kindsProcess(t, "serve", "--flows", flows, "--store", db, "--addr", addr)
		c := api.NewClient("http://"+addr, key)
		waitReady(t, c)
		clients, logs = append(clients, c), append(logs, stderr)
	}
	sc, err := clients[0].CreateSchedule(ctx, api.CreateSchedule{ID: "every", Flow: "quick", Cron: "* * * * * *", Input: map[string]any{"said": "tick"},
		GraceMS: new(int64(60_000))})
	if err != nil {
		t.Fatal(err)
	}
	first := sc.Next.Unix()
	last := first + ticks - 1
	// the last tick is fired, as the store records (the bound is against
	// a hang)
	for deadline := time.Now().Add(ticks*time.Second + 2*time.Minute); ; time.Sleep(100 * time.Millisecond) {
		got, err := clients[2].Schedule(ctx, "every")
		if err == nil && got.LastTick != nil && got.LastTick.Unix() >= last {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the tick %d was not fired: %+v %v", last, got, err)
		}
	}
	if err := clients[1].DeleteSchedule(ctx, "every"); err != nil {
		t.Fatal(err)
	}
	runsOf := func() (map[int64][]*store.RunRecord, error) {
		threads, err := cat.ListThreads(ctx, store.ThreadQuery{Tenant: "acme", Metadata: map[string]string{"schedule": "every"}})
		if err != nil {
			return nil, err
		}
		out := map[int64][]*store.RunRecord{}
		for _, th := range threads {
			i := strings.LastIndex(th.ID, "-")
			tick, err := strconv.ParseInt(th.ID[i+1:], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("thread %s: %w", th.ID, err)
			}
			rs, err := cat.Runs(ctx, store.RunQuery{Tenant: "acme", Thread: th.ID})
			if err != nil {
				return nil, err
			}
			out[tick] = append(out[tick], rs...)
		}
		return out, nil
	}
	// the runs of the last ticks end
	var runs map[int64][]*store.RunRecord
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if runs, err = runsOf(); err != nil {
			t.Fatal(err)
		}
		// (a tick's thread is made before its run is queued: one with no
		// run yet is a tick still firing)
		done := true
		for _, rs := range runs {
			done = done && len(rs) > 0
			for _, r := range rs {
				done = done && r.Status.Done()
			}
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("runs still going 2 minutes after the schedule was deleted: %v", runs)
		}
	}
	by := map[string]int{}
	for tick, rs := range runs {
		if tick < first || tick > last && len(rs) != 1 {
			t.Errorf("tick %s: %d runs, outside the ticks %d to %d", time.Unix(tick, 0).UTC().Format(time.TimeOnly), len(rs), first, last)
		}
		for _, r := range rs {
			by[r.Server]++
			if r.Status != store.RunSucceeded {
				t.Errorf("run %s of tick %d: %s %s", r.ID, tick, r.Status, r.Error)
			}
		}
	}
	for tick := first; tick <= last; tick++ {
		if n := len(runs[tick]); n != 1 {
			t.Errorf("tick %s: %d runs, want 1", time.Unix(tick, 0).UTC().Format(time.TimeOnly), n)
		}
	}
	if t.Failed() {
		for i, l := range logs {
			t.Logf("server %d:\n%s", i, l.String())
		}
	}
	t.Logf("%d ticks from %d, runs by server %v", ticks, first, by)
}
