package server

import (
	"flag"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/schedule"
	"github.com/trellisflow/trellis/runtime/store"
)

var scheduleTicks = flag.Int("schedule-ticks", 6, "how many ticks of a schedule every second TestScheduleOneRunPerTickOnThreeServers watches (make schedule-soak: 30)")

// The schedule routes create, list, read, pause, resume and delete a
// tenant's schedules, and refuse what cannot run with the field at
// fault.
func TestScheduleRoutes(t *testing.T) {
	s := serve(t, openRuntime(t, "memory"), stepFlows(t, 1), "")
	if _, err := s.acme.CreateThread(ctx, api.CreateThread{ID: "t1", Flow: "steps"}); err != nil {
		t.Fatal(err)
	}
	onThread, err := s.acme.CreateSchedule(ctx, api.CreateSchedule{ID: "nightly", Thread: "t1", Cron: "0 3 * * *", Zone: "Europe/Paris",
		Input: map[string]any{"said": "good night"}, Missed: "run_once"})
	if err != nil {
		t.Fatal(err)
	}
	if onThread.Flow != "steps" || onThread.Thread != "t1" || onThread.Next == nil || onThread.Next.UTC().Hour() != 2 && onThread.Next.UTC().Hour() != 1 ||
		onThread.Missed != "run_once" || onThread.GraceMS != schedule.DefaultGrace.Milliseconds() || onThread.Input["said"] != "good night" {
		t.Fatalf("created: %+v", onThread)
	}
	fresh, err := s.acme.CreateSchedule(ctx, api.CreateSchedule{Flow: "steps", Cron: "*/5 * * * *", Metadata: map[string]string{"team": "a"}})
	if err != nil || !strings.HasPrefix(fresh.ID, "sched_") || fresh.Zone != "UTC" || fresh.Missed != "skip" {
		t.Fatalf("created: %+v %v", fresh, err)
	}
	for _, c := range []struct {
		in    api.CreateSchedule
		code  api.Code
		field string
	}{
		{api.CreateSchedule{ID: "nightly", Flow: "steps", Cron: "* * * * *"}, api.CodeScheduleExists, ""},
		{api.CreateSchedule{Flow: "steps", Cron: "every night"}, api.CodeInvalidInput, "cron"},
		{api.CreateSchedule{Flow: "steps", Cron: "* * * * *", Zone: "Mars/Olympus"}, api.CodeInvalidInput, "zone"},
		{api.CreateSchedule{Flow: "steps", Cron: "* * * * *", Missed: "catch_up"}, api.CodeInvalidInput, "missed"},
		{api.CreateSchedule{Flow: "nope", Cron: "* * * * *"}, api.CodeInvalidInput, "flow"},
		{api.CreateSchedule{Cron: "* * * * *"}, api.CodeInvalidInput, "flow"},
		{api.CreateSchedule{Thread: "nope", Cron: "* * * * *"}, api.CodeInvalidInput, "thread"},
		{api.CreateSchedule{Thread: "t1", Flow: "steps", Cron: "* * * * *"}, api.CodeInvalidInput, "thread"},
		{api.CreateSchedule{Flow: "steps", Cron: "* * * * *", Input: map[string]any{"nope": 1}}, api.CodeInvalidInput, "input"},
		{api.CreateSchedule{Flow: "steps", Cron: "* * * * *", Webhook: "http://127.0.0.1:9/h"}, api.CodeInvalidInput, "webhook"},
		{api.CreateSchedule{ID: "a b", Flow: "steps", Cron: "* * * * *"}, api.CodeInvalidInput, "id"},
	} {
		_, err := s.acme.CreateSchedule(ctx, c.in)
		if !api.IsCode(err, c.code) || c.field != "" && !strings.Contains(fmt.Sprint(asAPIError(err).Details), "field:"+c.field) {
			t.Errorf("%+v: %v, want %s on %s", c.in, err, c.code, c.field)
		}
	}
	list, err := s.acme.Schedules(ctx, "", 1)
	if err != nil || len(list.Schedules) != 1 || list.Schedules[0].ID != "nightly" || list.Next != "nightly" {
		t.Fatalf("first page: %+v %v", list, err)
	}
	if list, err = s.acme.Schedules(ctx, list.Next, 0); err != nil || len(list.Schedules) != 1 || list.Schedules[0].ID != fresh.ID {
		t.Fatalf("second page: %+v %v", list, err)
	}
	paused, err := s.acme.PauseSchedule(ctx, "nightly", true)
	if err != nil || !paused.Paused || paused.Next != nil {
		t.Fatalf("paused: %+v %v", paused, err)
	}
	resumed, err := s.acme.PauseSchedule(ctx, "nightly", false)
	if err != nil || resumed.Paused || resumed.Next == nil || !resumed.Next.After(time.Now()) {
		t.Fatalf("resumed: %+v %v", resumed, err)
	}
	_, other, err := CreateKey(ctx, s.srv.cat, "other", "", false)
	if err != nil {
		t.Fatal(err)
	}
	oc := api.NewClient(s.base, other)
	if _, err := oc.Schedule(ctx, "nightly"); !api.IsCode(err, api.CodeNotFound) {
		t.Fatalf("another tenant reads it: %v", err)
	}
	if err := oc.DeleteSchedule(ctx, "nightly"); !api.IsCode(err, api.CodeNotFound) {
		t.Fatalf("another tenant deletes it: %v", err)
	}
	if err := s.acme.DeleteSchedule(ctx, "nightly"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.acme.Schedule(ctx, "nightly"); !api.IsCode(err, api.CodeNotFound) {
		t.Fatalf("a deleted schedule: %v", err)
	}
	// a thread's schedules go with it
	if _, err := s.acme.CreateSchedule(ctx, api.CreateSchedule{ID: "of-t1", Thread: "t1", Cron: "0 3 * * *"}); err != nil {
		t.Fatal(err)
	}
	if err := s.acme.DeleteThread(ctx, "t1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.acme.Schedule(ctx, "of-t1"); !api.IsCode(err, api.CodeNotFound) {
		t.Fatalf("the schedule of a deleted thread: %v", err)
	}
}

// A server bounds what a tenant's schedules ask of it: @every takes
// whole seconds (1ns or 1500ms would be rounded by the cron library into
// something else than asked), a schedule firing closer together than
// the server's minimum interval is refused naming cron, and a tenant has
// as many schedules as the server keeps and no more (409 limit_reached),
// another tenant's count apart.
func TestScheduleLimits(t *testing.T) {
	s := serve(t, openRuntime(t, "memory"), stepFlows(t, 1), "", func(c *Config) {
		c.Schedules = ScheduleLimits{PerTenant: 3, MinInterval: time.Minute}
	})
	for _, cron := range []string{"@every 1ns", "@every 1500ms", "* * * * * *", "@every 30s", "0,30 * * * * *", "*/20 * * * * *"} {
		_, err := s.acme.CreateSchedule(ctx, api.CreateSchedule{Flow: "steps", Cron: cron})
		if ae := asAPIError(err); ae == nil || ae.Code != api.CodeInvalidInput || !strings.Contains(fmt.Sprint(ae.Details), "field:cron") {
			t.Errorf("%q: %v", cron, err)
		}
	}
	for i, cron := range []string{"@every 1m", "*/5 * * * *", "0 3 * * *"} {
		if _, err := s.acme.CreateSchedule(ctx, api.CreateSchedule{ID: fmt.Sprint("s", i), Flow: "steps", Cron: cron}); err != nil {
			t.Fatalf("%q: %v", cron, err)
		}
	}
	_, err := s.acme.CreateSchedule(ctx, api.CreateSchedule{ID: "s4", Flow: "steps", Cron: "0 4 * * *"})
	if ae := asAPIError(err); ae == nil || ae.Code != api.CodeLimitReached || ae.Status != 409 || !strings.Contains(ae.Message, "3 schedules") {
		t.Fatalf("a fourth schedule: %v", err)
	}
	if _, err := s.acme.Schedule(ctx, "s4"); !api.IsCode(err, api.CodeNotFound) {
		t.Fatalf("the refused schedule was kept: %v", err)
	}
	_, other, err := CreateKey(ctx, s.srv.cat, "other", "", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := api.NewClient(s.base, other).CreateSchedule(ctx, api.CreateSchedule{Flow: "steps", Cron: "0 4 * * *"}); err != nil {
		t.Fatalf("another tenant's first schedule: %v", err)
	}
	if err := s.acme.DeleteSchedule(ctx, "s0"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.acme.CreateSchedule(ctx, api.CreateSchedule{ID: "s4", Flow: "steps", Cron: "0 4 * * *"}); err != nil {
		t.Fatalf("a schedule in the place of one deleted: %v", err)
	}
	// by default a tenant's schedule may fire every second, and no finer
	d := serve(t, openRuntime(t, "memory"), stepFlows(t, 1), "")
	if _, err := d.acme.CreateSchedule(ctx, api.CreateSchedule{Flow: "steps", Cron: "* * * * * *"}); err != nil {
		t.Fatalf("every second by default: %v", err)
	}
	if _, err := d.acme.CreateSchedule(ctx, api.CreateSchedule{Flow: "steps", Cron: "@every 1ns"}); !api.IsCode(err, api.CodeInvalidInput) {
		t.Fatalf("@every 1ns by default: %v", err)
	}
}

// Creates fired at once, by two servers sharing the store, do not take a
// tenant past its cap: the count and the insert are one transaction of
// the store's, so exactly as many are made as the cap leaves room for
// and the others are refused 409 limit_reached.
func TestScheduleCapHoldsUnderConcurrentCreates(t *testing.T) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			addr := storeAddr(t, backend)
			limits := func(c *Config) { c.Schedules = ScheduleLimits{PerTenant: 4, MinInterval: time.Minute} }
			a := serve(t, openRuntime(t, addr), stepFlows(t, 1), "", limits)
			b := serve(t, openRuntime(t, addr), stepFlows(t, 1), a.acme.Key, limits)
			if _, err := a.acme.CreateSchedule(ctx, api.CreateSchedule{ID: "first", Flow: "steps", Cron: "0 3 * * *"}); err != nil {
				t.Fatal(err)
			}
			const n = 12
			var wg sync.WaitGroup
			start := make(chan struct{})
			errs := make([]error, n)
			for i := range n {
				c := a.acme
				if i%2 == 1 {
					c = b.acme
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					_, errs[i] = c.CreateSchedule(ctx, api.CreateSchedule{ID: fmt.Sprintf("at-once-%02d", i), Flow: "steps", Cron: "0 4 * * *"})
				}()
			}
			close(start)
			wg.Wait()
			made := 0
			for i, err := range errs {
				if err == nil {
					made++
				} else if ae := asAPIError(err); ae == nil || ae.Code != api.CodeLimitReached || ae.Status != 409 {
					t.Errorf("create %d: %v", i, err)
				}
			}
			list, err := a.acme.Schedules(ctx, "", 0)
			if err != nil {
				t.Fatal(err)
			}
			if made != 3 || len(list.Schedules) != 4 {
				t.Errorf("%d creates at once under a cap of 4 with one made: %d made, the tenant has %d", n, made, len(list.Schedules))
			}
		})
	}
}

// tickOf reads the tick of a schedule's thread or run id (…-UNIX or
// …_UNIX).
func tickOf(id string) (int64, bool) {
	i := strings.LastIndexAny(id, "-_")
	n, err := strconv.ParseInt(id[i+1:], 10, 64)
	return n, err == nil
}

// A schedule every second, on three servers sharing a store, starts
// exactly one run per tick: every tick from the first seen to the last
// has its thread with one run, which succeeded, and no tick has two. (A
// minute's grace: a loaded machine makes the servers late, not the
// ticks missed; the test waits for what the store records, not for the
// clock.)
func TestScheduleOneRunPerTickOnThreeServers(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			addr := storeAddr(t, b.name)
			flows := stepFlows(t, 1)
			var servers []*served
			key := ""
			for range 3 {
				s := serve(t, openRuntime(t, addr), flows, key)
				key = s.acme.Key
				servers = append(servers, s)
			}
			sc, err := servers[0].acme.CreateSchedule(ctx, api.CreateSchedule{ID: "every", Flow: "steps", Cron: "* * * * * *", Input: map[string]any{"said": "tick"},
				GraceMS: new(int64(60_000))})
			if err != nil {
				t.Fatal(err)
			}
			first := sc.Next.Unix()
			last := first + int64(*scheduleTicks) - 1
			// the last tick watched is fired, as the store records
			eventually(t, time.Minute+time.Duration(*scheduleTicks)*time.Second, "the last tick", func() bool {
				got, err := servers[2].acme.Schedule(ctx, "every")
				return err == nil && got.LastTick != nil && got.LastTick.Unix() >= last
			})
			if err := servers[1].acme.DeleteSchedule(ctx, "every"); err != nil {
				t.Fatal(err)
			}
			rt := servers[0].rt
			cat, _ := store.CatalogOf(rt.Store())
			var threads []*store.ThreadRecord
			// the runs of the last ticks end
			eventually(t, time.Minute, "the runs' ends", func() bool {
				if threads, err = cat.ListThreads(ctx, store.ThreadQuery{Tenant: "acme", Metadata: map[string]string{"schedule": "every"}}); err != nil {
					t.Fatal(err)
				}
				for _, th := range threads {
					runs, err := cat.Runs(ctx, store.RunQuery{Tenant: "acme", Thread: th.ID})
					if err != nil {
						t.Fatal(err)
					}
					if len(runs) == 0 {
						// its thread made, its run not queued yet: the
						// tick is still firing
						return false
					}
					for _, r := range runs {
						if !r.Status.Done() {
							return false
						}
					}
				}
				return true
			})
			ticks := map[int64]int{}
			by := map[string]int{}
			for _, th := range threads {
				tick, ok := tickOf(th.ID)
				if !ok {
					t.Fatalf("thread %s", th.ID)
				}
				runs, err := cat.Runs(ctx, store.RunQuery{Tenant: "acme", Thread: th.ID})
				if err != nil {
					t.Fatal(err)
				}
				ticks[tick] += len(runs)
				for _, r := range runs {
					if r.Status != store.RunSucceeded {
						t.Errorf("run %s of tick %d: %s %s", r.ID, tick, r.Status, r.Error)
					}
					if rt, ok := tickOf(r.ID); !ok || rt != tick {
						t.Errorf("run %s on the thread of tick %d", r.ID, tick)
					}
					by[r.Server]++
				}
			}
			var seen []int64
			for tick := range ticks {
				seen = append(seen, tick)
			}
			sort.Slice(seen, func(i, j int) bool { return seen[i] < seen[j] })
			for tick := first; tick <= last; tick++ {
				if ticks[tick] != 1 {
					t.Errorf("tick %s: %d runs", time.Unix(tick, 0).UTC().Format(time.TimeOnly), ticks[tick])
				}
			}
			// the ticks fired while the deletion came: one run each, too
			for tick, n := range ticks {
				if tick > last && n != 1 {
					t.Errorf("tick %s, after the last watched: %d runs", time.Unix(tick, 0).UTC().Format(time.TimeOnly), n)
				}
			}
			if len(seen) == 0 || seen[0] != first {
				t.Errorf("ticks %v, want %d to %d (and those fired before the deletion)", seen, first, last)
			}
			t.Logf("%d ticks, %d runs, by server %v", len(seen), len(threads), by)
		})
	}
}

// A tick missed by more than its grace is skipped, or run once for all
// the ticks missed, as the schedule declares; the tick after them is
// next.
func TestScheduleMissedTicks(t *testing.T) {
	s := serve(t, openRuntime(t, "sqlite:"+t.TempDir()+"/s.db"), stepFlows(t, 1), "")
	sched, _ := store.SchedulesOf(s.rt.Store())
	now := time.Now().UTC().Truncate(time.Minute).Add(30 * time.Second)
	for _, policy := range []store.MissedPolicy{store.MissedSkip, store.MissedRunOnce} {
		t.Run(string(policy), func(t *testing.T) {
			id := "down-" + string(policy)
			// every minute, last fired an hour ago: 60 ticks missed
			sc := &store.Schedule{ID: id, Tenant: "acme", Flow: "steps", Cron: "* * * * *", Zone: "UTC", Missed: policy, Grace: 10 * time.Second,
				Input: []byte(`{"said":"late"}`), Paused: true, Created: now.Add(-2 * time.Hour)}
			if _, err := schedule.Check(sc, now.Add(-time.Hour)); err != nil {
				t.Fatal(err)
			}
			if err := sched.CreateSchedule(ctx, sc, 0); err != nil {
				t.Fatal(err)
			}
			if err := s.srv.fire(ctx, sc, now); err != nil {
				t.Fatal(err)
			}
			got, err := sched.Schedule(ctx, "acme", id)
			if err != nil {
				t.Fatal(err)
			}
			latest := now.Truncate(time.Minute) // the last tick at least the grace ago
			if !got.Next.Equal(latest.Add(time.Minute)) || !strings.Contains(got.LastError, "missed") {
				t.Fatalf("after the missed ticks: next %s, last error %q", got.Next, got.LastError)
			}
			cat, _ := store.CatalogOf(s.rt.Store())
			threads, _ := cat.ListThreads(ctx, store.ThreadQuery{Tenant: "acme", Metadata: map[string]string{"schedule": id}})
			switch policy {
			case store.MissedSkip:
				if len(threads) != 0 || got.LastRun != "" {
					t.Fatalf("skipped ticks started %d runs (%s)", len(threads), got.LastRun)
				}
			case store.MissedRunOnce:
				if len(threads) != 1 || got.LastRun != tickRunID(id, latest) || !got.LastTick.Equal(latest) {
					t.Fatalf("run once: %d threads, last run %s at %s", len(threads), got.LastRun, got.LastTick)
				}
				eventually(t, 10*time.Second, "the run", func() bool {
					r, err := cat.Run(ctx, "acme", got.LastRun)
					return err == nil && r.Status == store.RunSucceeded
				})
			}
			// fired again from where it was, by a server that read it late:
			// nothing more starts
			if err := s.srv.fire(ctx, sc, now); err != nil {
				t.Fatal(err)
			}
			threads2, _ := cat.ListThreads(ctx, store.ThreadQuery{Tenant: "acme", Metadata: map[string]string{"schedule": id}})
			if len(threads2) != len(threads) {
				t.Fatalf("a stale fire started %d runs more", len(threads2)-len(threads))
			}
		})
	}
}

// A server that queued a tick's run and died before it moved the
// schedule on leaves the tick to the next server: that tick, past its
// grace by then, is not among those missed (its run is queued), and the
// ticks after it are.
func TestScheduleTickQueuedByADeadServer(t *testing.T) {
	s := serve(t, openRuntime(t, "memory"), stepFlows(t, 1), "")
	sched, _ := store.SchedulesOf(s.rt.Store())
	now := time.Now().UTC().Truncate(time.Second)
	// paused: only the fires of the test fire it
	sc := &store.Schedule{ID: "crash", Tenant: "acme", Flow: "steps", Cron: "* * * * * *", Zone: "UTC", Missed: store.MissedRunOnce, Grace: time.Second,
		Input: []byte(`{"said":"tick"}`), Paused: true, Created: now.Add(-time.Hour)}
	if _, err := schedule.Check(sc, now.Add(-10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := sched.CreateSchedule(ctx, sc, 0); err != nil {
		t.Fatal(err)
	}
	due := sc.Next
	// the dead server's part: the tick's run, and no more
	if err := s.srv.startTick(ctx, sc, due, tickRunID(sc.ID, due)); err != nil {
		t.Fatal(err)
	}
	if err := s.srv.fire(ctx, sc, now); err != nil {
		t.Fatal(err)
	}
	got, err := sched.Schedule(ctx, "acme", "crash")
	if err != nil {
		t.Fatal(err)
	}
	if !got.LastTick.Equal(due) || got.LastRun != tickRunID(sc.ID, due) || got.LastError != "" || !got.Next.Equal(due.Add(time.Second)) {
		t.Fatalf("after the queued tick: last %s %s, error %q, next %s; want the tick %s taken as fired", got.LastTick, got.LastRun, got.LastError, got.Next, due)
	}
	if err := s.srv.fire(ctx, got, now); err != nil {
		t.Fatal(err)
	}
	if got, err = sched.Schedule(ctx, "acme", "crash"); err != nil {
		t.Fatal(err)
	}
	missed := fmt.Sprintf("ticks missed from %s to %s", due.Add(time.Second).Format(time.RFC3339), now.Add(-time.Second).Format(time.RFC3339))
	if !strings.HasPrefix(got.LastError, missed) || !got.LastTick.Equal(now.Add(-time.Second)) {
		t.Fatalf("after the missed ticks: last %s, error %q; want %q", got.LastTick, got.LastError, missed)
	}
	cat, _ := store.CatalogOf(s.rt.Store())
	threads, _ := cat.ListThreads(ctx, store.ThreadQuery{Tenant: "acme", Metadata: map[string]string{"schedule": "crash"}})
	if len(threads) != 2 {
		t.Fatalf("%d threads, want the queued tick's and the one run for the missed ticks", len(threads))
	}
}

// Two servers reading a schedule at once may disagree on how late its
// tick is (their clocks, or their pace on a loaded machine): the one
// whose move of the schedule the store took has its account of the
// ticks missed in the tick history and in its log; the other, whose
// move the store refused, logs no ticks missed (it missed none).
func TestScheduleMissedTicksLoggedOnceRecorded(t *testing.T) {
	rt := openRuntime(t, "memory")
	flows := stepFlows(t, 1)
	first := serve(t, rt, flows, "")
	second := serve(t, rt, flows, first.acme.Key)
	sched, _ := store.SchedulesOf(rt.Store())
	now := time.Now().UTC().Truncate(time.Second)
	// paused: only the fires of the test fire it
	sc := &store.Schedule{ID: "late", Tenant: "acme", Flow: "steps", Cron: "* * * * * *", Zone: "UTC", Missed: store.MissedSkip, Grace: time.Second,
		Input: []byte(`{"said":"tick"}`), Paused: true, Created: now.Add(-time.Hour)}
	if _, err := schedule.Check(sc, now.Add(-10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := sched.CreateSchedule(ctx, sc, 0); err != nil {
		t.Fatal(err)
	}
	due := sc.Next
	// both read the schedule due; the first moves it on, finding three
	// ticks missed; the second, later still, finds five
	if err := first.srv.fire(ctx, sc, due.Add(4*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := second.srv.fire(ctx, sc, due.Add(6*time.Second)); err != nil {
		t.Fatal(err)
	}
	got, err := sched.Schedule(ctx, "acme", "late")
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Ticks) != 1 || got.Ticks[0].Status != store.TickMissed || !got.Ticks[0].MissedTo.Equal(due.Add(3*time.Second)) {
		t.Fatalf("the tick history: %+v; want the first server's ticks missed, to %s", got.Ticks, due.Add(3*time.Second))
	}
	if n := strings.Count(first.log.String(), "schedule: ticks missed"); n != 1 {
		t.Errorf("the first server logged %d spans of ticks missed, want the one it recorded:\n%s", n, first.log.String())
	}
	if strings.Contains(second.log.String(), "schedule: ticks missed") {
		t.Errorf("the second server, whose move the store refused, logged ticks missed:\n%s", second.log.String())
	}
}

// A schedule of a thread queues each tick's run on the thread; a tick
// whose run cannot start says why on the schedule.
func TestScheduleOnAThread(t *testing.T) {
	s := serve(t, openRuntime(t, "memory"), stepFlows(t, 1), "")
	if _, err := s.acme.CreateThread(ctx, api.CreateThread{ID: "t1", Flow: "steps"}); err != nil {
		t.Fatal(err)
	}
	sc, err := s.acme.CreateSchedule(ctx, api.CreateSchedule{ID: "beat", Thread: "t1", Cron: "* * * * * *", Input: map[string]any{"said": "beat"}})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "three runs on the thread", func() bool {
		runs, err := s.acme.Runs(ctx, "t1")
		return err == nil && len(runs) >= 3
	})
	if err := s.acme.DeleteSchedule(ctx, "beat"); err != nil {
		t.Fatal(err)
	}
	runs, _ := s.acme.Runs(ctx, "t1")
	for _, r := range runs {
		if tick, ok := tickOf(r.ID); !ok || tick < sc.Next.Unix() || r.Input["said"] != "beat" {
			t.Errorf("run %+v", r)
		}
	}
}

// Three servers firing the same tick at once, from the same reading of
// the schedule, start one run between them.
func TestScheduleConcurrentFiresStartOneRun(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			addr := storeAddr(t, b.name)
			flows := stepFlows(t, 1)
			hooks, secret := hookConfig(t, "127.0.0.1")
			recv := newReceiver(t, secret)
			var servers []*served
			key := ""
			for range 3 {
				s := serve(t, openRuntime(t, addr), flows, key, func(c *Config) { c.Webhooks = hooks })
				key = s.acme.Key
				servers = append(servers, s)
			}
			sched, _ := store.SchedulesOf(servers[0].rt.Store())
			hookStore, _ := store.WebhooksOf(servers[0].rt.Store())
			fired := 0
			cat, _ := store.CatalogOf(servers[0].rt.Store())
			for round := range 5 {
				for _, onThread := range []bool{false, true} {
					id := fmt.Sprintf("race-%d-%v", round, onThread)
					now := time.Now().UTC()
					// paused: only the fires of the test fire it
					sc := &store.Schedule{ID: id, Tenant: "acme", Flow: "steps", Cron: "* * * * * *", Zone: "UTC", Missed: store.MissedSkip,
						Grace: time.Minute, Input: []byte(`{"said":"race"}`), Paused: true, Created: now, Webhook: recv.srv.URL + "/" + id}
					if onThread {
						if _, err := servers[0].acme.CreateThread(ctx, api.CreateThread{ID: id, Flow: "steps"}); err != nil {
							t.Fatal(err)
						}
						sc.Thread = "acme/" + id
					}
					if _, err := schedule.Check(sc, now.Add(-2*time.Second)); err != nil {
						t.Fatal(err)
					}
					if err := sched.CreateSchedule(ctx, sc, 0); err != nil {
						t.Fatal(err)
					}
					errs := make(chan error, len(servers))
					start := make(chan struct{})
					for _, s := range servers {
						go func() {
							<-start
							errs <- s.srv.fire(ctx, sc, now)
						}()
					}
					close(start)
					for range servers {
						if err := <-errs; err != nil {
							t.Fatal(err)
						}
					}
					var runs []*store.RunRecord
					if onThread {
						rs, err := cat.Runs(ctx, store.RunQuery{Tenant: "acme", Thread: sc.Thread})
						if err != nil {
							t.Fatal(err)
						}
						runs = rs
					} else {
						threads, _ := cat.ListThreads(ctx, store.ThreadQuery{Tenant: "acme", Metadata: map[string]string{"schedule": id}})
						for _, th := range threads {
							rs, _ := cat.Runs(ctx, store.RunQuery{Tenant: "acme", Thread: th.ID})
							runs = append(runs, rs...)
						}
					}
					for _, r := range runs {
						if ds, err := hookStore.Deliveries(ctx, "acme", r.ID); err != nil || len(ds) != 1 {
							t.Fatalf("%s: the run has %d webhook deliveries (%v)", id, len(ds), err)
						}
					}
					fired += len(runs)
					if len(runs) != 1 {
						t.Fatalf("%s: three servers firing one tick started %d runs", id, len(runs))
					}
					got, _ := sched.Schedule(ctx, "acme", id)
					if !got.Next.Equal(sc.Next.Add(time.Second)) {
						t.Fatalf("%s: next %s, want %s", id, got.Next, sc.Next.Add(time.Second))
					}
				}
			}
			eventually(t, 20*time.Second, "the webhooks", func() bool { return len(recv.received()) >= fired })
			time.Sleep(300 * time.Millisecond)
			ids := map[string]int{}
			for _, h := range recv.received() {
				ids[h.event.Data.ID]++
				if !h.valid {
					t.Errorf("a message with no valid signature: %+v", h)
				}
			}
			if len(ids) != fired || len(recv.received()) != fired {
				t.Fatalf("%d messages of %d runs for %d runs fired", len(recv.received()), len(ids), fired)
			}
		})
	}
}

// An idle server reads the schedules once a horizon, not every poll, and
// wakes for the first tick within it: a schedule another server made
// (written to the store, as that server does, with no word to this one)
// is fired here at its tick, and looked at once before it. The server's
// clock is the test's: it stands still until the tick comes.
func TestScheduleLoopSleepsUntilTheNextTick(t *testing.T) {
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	s := serve(t, openRuntime(t, "memory"), stepFlows(t, 1), "", func(c *Config) { c.clock = func() time.Time { return time.Unix(0, clock.Load()) } })
	horizon := 10 * s.srv.cfg.PollEvery
	if wait := s.srv.fireDue(ctx, horizon); wait != horizon {
		t.Fatalf("no schedule: waits %v, want the horizon %v", wait, horizon)
	}
	sched, _ := store.SchedulesOf(s.rt.Store())
	now := time.Unix(0, clock.Load()).UTC()
	sc := &store.Schedule{ID: "soon", Tenant: "acme", Flow: "steps", Cron: "0 0 1 1 *", Zone: "UTC", Missed: store.MissedSkip,
		Grace: time.Minute, Input: []byte(`{"said":"soon"}`), Created: now}
	if _, err := schedule.Check(sc, now); err != nil {
		t.Fatal(err)
	}
	sc.Next = now.Add(horizon / 2) // a tick within the horizon
	if err := sched.CreateSchedule(ctx, sc, 0); err != nil {
		t.Fatal(err)
	}
	if wait := s.srv.fireDue(ctx, horizon); wait != horizon/2 {
		t.Fatalf("a tick in %v: waits %v", horizon/2, wait)
	}
	tick := sc.Next
	clock.Store(tick.UnixNano()) // the tick comes
	// (a bound against a hang: the loop wakes within the horizon)
	deadline := time.Now().Add(time.Minute)
	for {
		got, err := sched.Schedule(ctx, "acme", "soon")
		if err != nil {
			t.Fatal(err)
		}
		if got.LastRun != "" {
			if !got.LastTick.Equal(tick) || got.LastRun != tickRunID("soon", tick) {
				t.Fatalf("fired %s for %v, want the tick %v", got.LastRun, got.LastTick, tick)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the tick was not fired\n%s", s.log.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cat, _ := store.CatalogOf(s.rt.Store())
	runs, err := cat.Runs(ctx, store.RunQuery{Tenant: "acme", Thread: "acme/soon-" + strconv.FormatInt(tick.Unix(), 10)})
	if err != nil || len(runs) != 1 {
		t.Fatalf("runs of the tick: %d %v", len(runs), err)
	}
	got, err := sched.Schedule(ctx, "acme", "soon")
	if err != nil || got.LastRun == "" || !got.Next.After(now.Add(time.Hour)) {
		t.Fatalf("after its tick: %+v %v", got, err)
	}
}

// The record of missed ticks outlives the next tick: the schedule's tick
// history keeps the missed span (with what the missed policy did) under
// the tick started after it, listed with its run and where the run
// stands; last_error says only what the last tick did.
func TestScheduleTickHistoryKeepsMissedTicks(t *testing.T) {
	s := serve(t, openRuntime(t, "sqlite:"+t.TempDir()+"/s.db"), stepFlows(t, 1), "")
	sched, _ := store.SchedulesOf(s.rt.Store())
	now := time.Now().UTC().Truncate(time.Minute).Add(30 * time.Second)
	sc := &store.Schedule{ID: "down", Tenant: "acme", Flow: "steps", Cron: "* * * * *", Zone: "UTC", Missed: store.MissedSkip, Grace: 10 * time.Second,
		Input: []byte(`{"said":"late"}`), Paused: true, Created: now.Add(-2 * time.Hour)}
	if _, err := schedule.Check(sc, now.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := sched.CreateSchedule(ctx, sc, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.srv.fire(ctx, sc, now); err != nil {
		t.Fatal(err)
	}
	// the next tick, on time
	sc, err := sched.Schedule(ctx, "acme", "down")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.srv.fire(ctx, sc, sc.Next.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	got, err := s.acme.Schedule(ctx, "down")
	if err != nil || got.LastError != "" || got.LastRun == "" {
		t.Fatalf("after the tick on time: %+v %v", got, err)
	}
	var ticks *api.ScheduleTicks
	eventually(t, 10*time.Second, "the tick's run, listed as succeeded", func() bool {
		ticks, err = s.acme.ScheduleTicks(ctx, "down")
		return err == nil && len(ticks.Ticks) == 2 && ticks.Ticks[0].RunStatus == "succeeded"
	})
	started, missed := ticks.Ticks[0], ticks.Ticks[1]
	if started.Status != "started" || started.Run != got.LastRun || started.Thread == "" || !started.Tick.Equal(*got.LastTick) {
		t.Fatalf("the tick started: %+v", started)
	}
	if missed.Status != "missed" || !strings.Contains(missed.Error, "skipped") || missed.MissedFrom == nil || missed.MissedTo == nil ||
		!missed.MissedTo.Before(started.Tick) || missed.Run != "" {
		t.Fatalf("the missed ticks: %+v", missed)
	}
	if _, err := s.acme.ScheduleTicks(ctx, "nope"); !api.IsCode(err, api.CodeNotFound) {
		t.Fatalf("the ticks of no schedule: %v", err)
	}
}
