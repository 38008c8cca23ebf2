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
	for deadline := time.Now().Add(15 * time.Second); ticks() < 2; time.Sleep(100 * time.Millisecond) {
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
	time.Sleep(300 * time.Millisecond) // a tick under way ends
	n := ticks()
	time.Sleep(2 * time.Second)
	if ticks() != n {
		t.Fatalf("a paused schedule fired: %d threads, then %d", n, ticks())
	}
	if out := run("resume", "every"); !strings.Contains(out, "\tnext ") {
		t.Fatalf("resume: %q", out)
	}
	for deadline := time.Now().Add(15 * time.Second); ticks() <= n; time.Sleep(100 * time.Millisecond) {
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
// (run_once) declares, and the ticks after go on one run each.
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
	const before = 6
	// killed between two ticks: a tick is fired and moved on at its
	// second, not half a second after
	time.Sleep(time.Until(time.Unix(first+before, 0).Add(500 * time.Millisecond)))
	for _, p := range procs {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
	}
	time.Sleep(4 * time.Second) // no server runs: ticks are missed
	c, p := start()
	time.Sleep(3 * time.Second)
	if err := c.DeleteSchedule(ctx, "every"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	// the restarted server's account of the ticks missed
	var from, to time.Time
	for _, line := range strings.Split(p.stderr.String(), "\n") {
		var rec struct {
			Msg  string    `json:"msg"`
			From time.Time `json:"from"`
			To   time.Time `json:"to"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "schedule: ticks missed" {
			from, to = rec.From, rec.To
		}
	}
	if from.IsZero() {
		t.Fatalf("the restarted server missed no tick:\n%s", p.stderr.String())
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
	last := int64(0)
	for tick := range runs {
		last = max(last, tick)
	}
	for tick := first; tick <= last; tick++ {
		want := 1
		if tick >= from.Unix() && tick < to.Unix() {
			want = 0 // missed, and run once as the last of them
		}
		if runs[tick] != want {
			t.Errorf("tick %s: %d runs, want %d (missed %s to %s)", time.Unix(tick, 0).UTC().Format(time.TimeOnly), runs[tick], want,
				from.Format(time.TimeOnly), to.Format(time.TimeOnly))
		}
	}
	if to.Unix()-from.Unix() < 2 || last < to.Unix()+1 {
		t.Errorf("missed %s to %s, last tick %s: the downtime's ticks and those after it are not all there", from, to, time.Unix(last, 0))
	}
	t.Logf("ticks %d to %d; missed %d to %d, run once at %d", first, last, from.Unix(), to.Unix(), to.Unix())
}

// A schedule every second on three trellis serve processes sharing
// PostgreSQL starts exactly one run per tick for 30 ticks: no tick is
// missed, none has two runs, and every run succeeds.
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
	sc, err := clients[0].CreateSchedule(ctx, api.CreateSchedule{ID: "every", Flow: "quick", Cron: "* * * * * *", Input: map[string]any{"said": "tick"}})
	if err != nil {
		t.Fatal(err)
	}
	first := sc.Next.Unix()
	last := first + ticks - 1
	time.Sleep(time.Until(time.Unix(last+1, 0).Add(500 * time.Millisecond)))
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
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if runs, err = runsOf(); err != nil {
			t.Fatal(err)
		}
		done := true
		for _, rs := range runs {
			for _, r := range rs {
				done = done && r.Status.Done()
			}
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("runs still going 20s after the schedule was deleted: %v", runs)
		}
	}
	by := map[string]int{}
	for tick, rs := range runs {
		if tick < first || tick > last+1 {
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
