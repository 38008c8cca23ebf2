package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/store"
)

// RunWebhooks runs the suite of store.Webhooks on a store that keeps a
// Catalog; open returns an empty store for each subtest.
func RunWebhooks(t *testing.T, open func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, st store.Store)
	}{
		{"DueOnlyOnceTheRunEnded", testDeliveryDue},
		{"AttemptsAndBackoff", testDeliveryAttempts},
		{"ExpiredClaimTakenOver", testDeliveryClaimExpiry},
		{"ConcurrentClaimsTakeEachOnce", testDeliveryConcurrentClaims},
		{"TenantsApart", testDeliveryTenants},
		{"OrphansDropped", testDeliveryOrphans},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := open(t)
			t.Cleanup(func() { st.Close() })
			if _, ok := store.WebhooksOf(st); !ok {
				t.Fatalf("%T keeps no webhooks", st)
			}
			tc.fn(t, st)
		})
	}
}

// hookRun records a thread and a run on it with the status given, and a
// delivery of it; it returns the delivery.
func hookRun(t *testing.T, st store.Store, tenant, run string, status store.RunStatus, created time.Time) *store.Delivery {
	t.Helper()
	cat, _ := store.CatalogOf(st)
	thread := tenant + "/" + run + "-thread"
	if err := cat.CreateThread(ctx, &store.ThreadRecord{ID: thread, Tenant: tenant, Flow: "f", Created: created}); err != nil {
		t.Fatal(err)
	}
	r := &store.RunRecord{ID: run, Tenant: tenant, Thread: thread, Flow: "f", Status: status, Created: created}
	if status.Done() {
		r.Finished = created
	}
	if err := cat.CreateRun(ctx, r); err != nil {
		t.Fatal(err)
	}
	d := &store.Delivery{ID: "hook-" + run, Tenant: tenant, Thread: thread, Run: run, URL: "http://127.0.0.1:9/" + run, Created: created}
	if err := hookStore(st).AddDelivery(ctx, d); err != nil {
		t.Fatal(err)
	}
	return d
}

func hookStore(st store.Store) store.Webhooks {
	w, _ := store.WebhooksOf(st)
	return w
}

func claim(t *testing.T, w store.Webhooks, server string, d time.Duration) *store.Delivery {
	t.Helper()
	got, err := w.ClaimDelivery(ctx, server, d)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	return got
}

func testDeliveryDue(t *testing.T, st store.Store) {
	w := hookStore(st)
	now := time.Now().UTC().Add(-time.Second)
	running := hookRun(t, st, "acme", "run-running", store.RunRunning, now)
	if got := claim(t, w, "s1", time.Minute); got != nil {
		t.Fatalf("a delivery of a running run was claimed: %+v", got)
	}
	if err := w.AddDelivery(ctx, &store.Delivery{ID: running.ID, Tenant: "acme", Run: "x", Created: now}); !errors.Is(err, store.ErrExists) {
		t.Fatalf("a second delivery with the same id: %v", err)
	}
	cat, _ := store.CatalogOf(st)
	r, err := cat.Run(ctx, "acme", "run-running")
	if err != nil {
		t.Fatal(err)
	}
	expect := r.State()
	r.Status, r.Finished = store.RunSucceeded, now
	if err := cat.UpdateRun(ctx, r, expect, nil); err != nil {
		t.Fatal(err)
	}
	got := claim(t, w, "s1", time.Minute)
	if got == nil || got.ID != running.ID || got.Run != "run-running" || got.URL != running.URL || got.Status != store.DeliveryPending || got.Attempts != 0 {
		t.Fatalf("the delivery of the ended run: %+v", got)
	}
	if again := claim(t, w, "s2", time.Minute); again != nil {
		t.Fatalf("a claimed delivery was claimed again: %+v", again)
	}
}

func testDeliveryAttempts(t *testing.T, st store.Store) {
	w := hookStore(st)
	now := time.Now().UTC().Add(-time.Second)
	d := hookRun(t, st, "acme", "run-a", store.RunFailed, now)
	got := claim(t, w, "s1", time.Minute)
	if got == nil {
		t.Fatal("no delivery due")
	}
	// the first attempt fails: due again a little later
	retry := time.Now().UTC().Add(500 * time.Millisecond)
	got.Status, got.Next = store.DeliveryPending, retry
	a1 := store.DeliveryAttempt{N: 1, At: now, Server: "s1", Status: 500, Error: "the receiver answered 500", Took: 3 * time.Millisecond}
	if err := w.RecordAttempt(ctx, "s1", got, a1); err != nil {
		t.Fatal(err)
	}
	if err := w.RecordAttempt(ctx, "s1", got, a1); !errors.Is(err, store.ErrClaimLost) {
		t.Fatalf("an attempt recorded twice: %v", err)
	}
	early := claim(t, w, "s2", time.Minute)
	if early != nil && time.Now().Before(retry) {
		t.Fatalf("a delivery backing off was claimed: %+v", early)
	}
	ds, err := w.Deliveries(ctx, "acme", "run-a")
	if err != nil || len(ds) != 1 {
		t.Fatalf("deliveries: %v %v", ds, err)
	}
	if x := ds[0]; x.ID != d.ID || x.Status != store.DeliveryPending || x.Attempts != 1 || !x.Next.Equal(retry) ||
		len(x.Log) != 1 || x.Log[0].Status != 500 || x.Log[0].Error != a1.Error || x.Log[0].Server != "s1" || x.Log[0].Took != a1.Took || !x.Log[0].At.Equal(now) {
		t.Fatalf("after a failed attempt: %+v", x)
	}
	// due again once its backoff passed; the second attempt delivers it
	got = early
	for deadline := time.Now().Add(10 * time.Second); got == nil && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		got = claim(t, w, "s2", time.Minute)
	}
	if got == nil || got.Attempts != 1 {
		t.Fatalf("the delivery due again: %+v", got)
	}
	got.Status, got.Next = store.DeliveryDelivered, time.Time{}
	if err := w.RecordAttempt(ctx, "s2", got, store.DeliveryAttempt{N: 2, At: now, Server: "s2", Status: 204}); err != nil {
		t.Fatal(err)
	}
	if again := claim(t, w, "s1", time.Minute); again != nil {
		t.Fatalf("a delivered delivery was claimed: %+v", again)
	}
	ds, _ = w.Deliveries(ctx, "acme", "run-a")
	if len(ds) != 1 || ds[0].Status != store.DeliveryDelivered || ds[0].Attempts != 2 || len(ds[0].Log) != 2 || ds[0].Log[1].Status != 204 || ds[0].Log[1].Server != "s2" {
		t.Fatalf("after delivery: %+v", ds[0])
	}
}

func testDeliveryClaimExpiry(t *testing.T, st store.Store) {
	w := hookStore(st)
	hookRun(t, st, "acme", "run-c", store.RunSucceeded, time.Now().UTC().Add(-time.Second))
	first := claim(t, w, "dead", 200*time.Millisecond)
	if first == nil {
		t.Fatal("no delivery due")
	}
	if got := claim(t, w, "s2", time.Minute); got != nil {
		t.Fatalf("claimed while the first claim lives: %+v", got)
	}
	var second *store.Delivery
	for deadline := time.Now().Add(10 * time.Second); second == nil && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		second = claim(t, w, "s2", time.Minute)
	}
	if second == nil || second.ID != first.ID {
		t.Fatalf("the expired claim was not taken over: %+v", second)
	}
	first.Status = store.DeliveryDelivered
	if err := w.RecordAttempt(ctx, "dead", first, store.DeliveryAttempt{N: 1, At: time.Now(), Server: "dead", Status: 200}); !errors.Is(err, store.ErrClaimLost) {
		t.Fatalf("the server whose claim expired recorded its attempt: %v", err)
	}
	second.Status = store.DeliveryDelivered
	if err := w.RecordAttempt(ctx, "s2", second, store.DeliveryAttempt{N: 1, At: time.Now(), Server: "s2", Status: 200}); err != nil {
		t.Fatal(err)
	}
}

func testDeliveryConcurrentClaims(t *testing.T, st store.Store) {
	w := hookStore(st)
	const runs, servers = 12, 4
	now := time.Now().UTC().Add(-time.Second)
	for i := range runs {
		hookRun(t, st, "acme", fmt.Sprintf("run-%02d", i), store.RunSucceeded, now.Add(time.Duration(i)))
	}
	var mu sync.Mutex
	taken := map[string]string{}
	var wg sync.WaitGroup
	errs := make(chan error, servers)
	for s := range servers {
		server := fmt.Sprint("s", s)
		wg.Go(func() {
			for {
				d, err := w.ClaimDelivery(ctx, server, time.Minute)
				if errors.Is(err, store.ErrNotFound) {
					return
				}
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				if by, ok := taken[d.ID]; ok {
					errs <- fmt.Errorf("%s claimed by %s and %s", d.ID, by, server)
				}
				taken[d.ID] = server
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(taken) != runs {
		t.Fatalf("%d of %d deliveries claimed", len(taken), runs)
	}
}

func testDeliveryTenants(t *testing.T, st store.Store) {
	w := hookStore(st)
	hookRun(t, st, "acme", "run-t", store.RunSucceeded, time.Now().UTC())
	if ds, err := w.Deliveries(ctx, "other", "run-t"); err != nil || len(ds) != 0 {
		t.Fatalf("another tenant sees the deliveries: %v %v", ds, err)
	}
	if ds, err := w.Deliveries(ctx, "acme", "run-t"); err != nil || len(ds) != 1 {
		t.Fatalf("the tenant's deliveries: %v %v", ds, err)
	}
}

func testDeliveryOrphans(t *testing.T, st store.Store) {
	w := hookStore(st)
	old := time.Now().UTC().Add(-time.Hour)
	hookRun(t, st, "acme", "run-kept", store.RunSucceeded, old)
	for _, d := range []*store.Delivery{
		{ID: "hook-never", Tenant: "acme", Thread: "acme/t", Run: "run-never", URL: "http://127.0.0.1:9/", Created: old},
		{ID: "hook-young", Tenant: "acme", Thread: "acme/t", Run: "run-young", URL: "http://127.0.0.1:9/", Created: time.Now().UTC()},
	} {
		if err := w.AddDelivery(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	n, err := w.DropOrphanDeliveries(ctx, time.Now().Add(-time.Minute))
	if err != nil || n != 1 {
		t.Fatalf("dropped %d: %v", n, err)
	}
	for run, want := range map[string]int{"run-never": 0, "run-young": 1, "run-kept": 1} {
		if ds, err := w.Deliveries(ctx, "acme", run); err != nil || len(ds) != want {
			t.Fatalf("deliveries of %s: %d, want %d (%v)", run, len(ds), want, err)
		}
	}
}

// RunSchedules runs the suite of store.Schedules; open returns an empty
// store for each subtest.
func RunSchedules(t *testing.T, open func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Schedules)
	}{
		{"CreateGetListDelete", testScheduleCRUD},
		{"DueAndAdvance", testScheduleDue},
		{"ConcurrentAdvanceOnce", testScheduleConcurrent},
		{"PauseResume", testSchedulePause},
		{"TickHistory", testScheduleTicks},
		{"LimitHoldsUnderConcurrentCreates", testScheduleLimit},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := open(t)
			t.Cleanup(func() { st.Close() })
			s, ok := store.SchedulesOf(st)
			if !ok {
				t.Fatalf("%T keeps no schedules", st)
			}
			tc.fn(t, s)
		})
	}
}

func schedule(id, tenant string, next time.Time) *store.Schedule {
	return &store.Schedule{ID: id, Tenant: tenant, Flow: "f", Cron: "*/5 * * * *", Zone: "Europe/Paris", Input: json.RawMessage(`{"said":"tick"}`),
		Values: json.RawMessage(`{"who":"ada","n":[1,2]}`), Metadata: map[string]string{"by": "schedule"}, Missed: store.MissedRunOnce,
		Grace: 30 * time.Second, Webhook: "http://127.0.0.1:9/h", Next: next, Created: next.Add(-time.Hour)}
}

func testScheduleCRUD(t *testing.T, s store.Schedules) {
	next := time.Date(2026, 11, 25, 21, 5, 0, 0, time.UTC)
	a := schedule("sch-a", "acme", next)
	a.Thread = "acme/t1"
	for _, sc := range []*store.Schedule{a, schedule("sch-b", "acme", next), schedule("sch-c", "other", next)} {
		if err := s.CreateSchedule(ctx, sc, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CreateSchedule(ctx, schedule("sch-a", "acme", next), 0); !errors.Is(err, store.ErrExists) {
		t.Fatalf("a second schedule sch-a: %v", err)
	}
	got, err := s.Schedule(ctx, "acme", "sch-a")
	if err != nil {
		t.Fatal(err)
	}
	if got.Thread != "acme/t1" || got.Flow != "f" || got.Cron != a.Cron || got.Zone != a.Zone || !sameJSON(got.Input, a.Input) || !sameJSON(got.Values, a.Values) || got.Metadata["by"] != "schedule" ||
		got.Missed != store.MissedRunOnce || got.Grace != a.Grace || got.Webhook != a.Webhook || got.Paused || !got.Next.Equal(next) || !got.Created.Equal(a.Created) {
		t.Fatalf("read back: %+v", got)
	}
	if _, err := s.Schedule(ctx, "other", "sch-a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("another tenant's schedule: %v", err)
	}
	list, err := s.ListSchedules(ctx, store.ScheduleQuery{Tenant: "acme"})
	if err != nil || len(list) != 2 || list[0].ID != "sch-a" || list[1].ID != "sch-b" {
		t.Fatalf("list: %v %v", list, err)
	}
	if list, _ := s.ListSchedules(ctx, store.ScheduleQuery{Tenant: "acme", After: "sch-a", Limit: 1}); len(list) != 1 || list[0].ID != "sch-b" {
		t.Fatalf("second page: %v", list)
	}
	if list, _ := s.ListSchedules(ctx, store.ScheduleQuery{Tenant: "acme", Thread: "acme/t1"}); len(list) != 1 || list[0].ID != "sch-a" {
		t.Fatalf("of a thread: %v", list)
	}
	if err := s.DeleteSchedule(ctx, "other", "sch-a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("another tenant deleted it: %v", err)
	}
	if err := s.DeleteSchedule(ctx, "acme", "sch-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Schedule(ctx, "acme", "sch-a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a deleted schedule: %v", err)
	}
	if err := s.DeleteSchedule(ctx, "acme", "sch-a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleted twice: %v", err)
	}
}

func testScheduleDue(t *testing.T, s store.Schedules) {
	now := time.Date(2026, 11, 25, 21, 0, 0, 0, time.UTC)
	for i, id := range []string{"late", "due", "later"} {
		if err := s.CreateSchedule(ctx, schedule(id, "acme", now.Add(time.Duration(i-1)*time.Minute)), 0); err != nil {
			t.Fatal(err)
		}
	}
	due, err := s.DueSchedules(ctx, now, 10)
	if err != nil || len(due) != 2 || due[0].ID != "late" || due[1].ID != "due" {
		t.Fatalf("due: %v %v", due, err)
	}
	if due, _ := s.DueSchedules(ctx, now, 1); len(due) != 1 || due[0].ID != "late" {
		t.Fatalf("due, one: %v", due)
	}
	tick := store.ScheduleTick{Next: now.Add(5 * time.Minute), LastTick: now.Add(-time.Minute), LastRun: "run-1", LastError: ""}
	if err := s.AdvanceSchedule(ctx, "late", now.Add(-time.Minute), tick); err != nil {
		t.Fatal(err)
	}
	if err := s.AdvanceSchedule(ctx, "late", now.Add(-time.Minute), tick); !errors.Is(err, store.ErrClaimLost) {
		t.Fatalf("advanced from a tick it left: %v", err)
	}
	if err := s.AdvanceSchedule(ctx, "gone", now, tick); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("advanced a schedule that is not: %v", err)
	}
	got, _ := s.Schedule(ctx, "acme", "late")
	if !got.Next.Equal(tick.Next) || !got.LastTick.Equal(tick.LastTick) || got.LastRun != "run-1" {
		t.Fatalf("after advancing: %+v", got)
	}
	if due, _ := s.DueSchedules(ctx, now, 10); len(due) != 1 || due[0].ID != "due" {
		t.Fatalf("due after advancing: %v", due)
	}
}

func testScheduleConcurrent(t *testing.T, s store.Schedules) {
	next := time.Now().UTC().Truncate(time.Second)
	if err := s.CreateSchedule(ctx, schedule("every", "acme", next), 0); err != nil {
		t.Fatal(err)
	}
	var won sync.Map
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			err := s.AdvanceSchedule(ctx, "every", next, store.ScheduleTick{Next: next.Add(time.Second), LastTick: next, LastRun: fmt.Sprint("run-", i),
				History: []store.TickRecord{{Tick: next, At: next, Status: store.TickStarted, Run: fmt.Sprint("run-", i)}}})
			if err == nil {
				won.Store(i, true)
			} else if !errors.Is(err, store.ErrClaimLost) {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	n := 0
	won.Range(func(any, any) bool { n++; return true })
	if n != 1 {
		t.Fatalf("%d servers moved one tick", n)
	}
	got, err := s.Schedule(ctx, "acme", "every")
	if err != nil || len(got.Ticks) != 1 || got.Ticks[0].Run != got.LastRun {
		t.Fatalf("the tick history after servers raced one tick: %+v %v", got.Ticks, err)
	}
}

// A schedule's tick history keeps what each tick did, the newest first,
// the last TickHistory of them: a span of ticks missed stays there as the
// ticks after it are recorded.
func testScheduleTicks(t *testing.T, s store.Schedules) {
	now := time.Date(2026, 11, 25, 21, 0, 0, 0, time.UTC)
	if err := s.CreateSchedule(ctx, schedule("h", "acme", now), 0); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Schedule(ctx, "acme", "h"); err != nil || len(got.Ticks) != 0 {
		t.Fatalf("a new schedule's ticks: %+v %v", got, err)
	}
	missed := store.TickRecord{Tick: now, At: now.Add(time.Hour), Status: store.TickMissed, Error: "ticks missed: run once for all of them",
		MissedFrom: now.Add(-time.Hour), MissedTo: now}
	first := store.ScheduleTick{Next: now.Add(time.Minute), LastTick: now, LastRun: "run-0", LastError: missed.Error,
		History: []store.TickRecord{missed, {Tick: now, At: now.Add(time.Hour), Status: store.TickStarted, Run: "run-0"}}}
	if err := s.AdvanceSchedule(ctx, "h", now, first); err != nil {
		t.Fatal(err)
	}
	next := now.Add(time.Minute)
	for i := 1; i <= 60; i++ {
		tick := store.ScheduleTick{Next: next.Add(time.Minute), LastTick: next, LastRun: fmt.Sprint("run-", i),
			History: []store.TickRecord{{Tick: next, At: next, Status: store.TickStarted, Run: fmt.Sprint("run-", i)}}}
		if i == 3 {
			tick.LastRun, tick.LastError = "", "the run did not start: no thread"
			tick.History = []store.TickRecord{{Tick: next, At: next, Status: store.TickFailed, Error: tick.LastError}}
		}
		if err := s.AdvanceSchedule(ctx, "h", next, tick); err != nil {
			t.Fatal(err)
		}
		if i == 2 {
			got, _ := s.Schedule(ctx, "acme", "h")
			want := []store.TickStatus{store.TickStarted, store.TickStarted, store.TickStarted, store.TickMissed}
			if len(got.Ticks) != 4 || !reflect.DeepEqual([]store.TickStatus{got.Ticks[0].Status, got.Ticks[1].Status, got.Ticks[2].Status, got.Ticks[3].Status}, want) ||
				got.Ticks[0].Run != "run-2" || !got.Ticks[3].MissedFrom.Equal(missed.MissedFrom) || got.Ticks[3].Error != missed.Error || got.LastError != "" {
				t.Fatalf("the tick history two ticks after a missed span: %+v (last error %q)", got.Ticks, got.LastError)
			}
		}
		next = next.Add(time.Minute)
	}
	got, err := s.Schedule(ctx, "acme", "h")
	if err != nil || len(got.Ticks) != store.TickHistory || got.Ticks[0].Run != "run-60" || got.Ticks[store.TickHistory-1].Run != "run-11" {
		t.Fatalf("the tick history after 62 records: %d, the newest %+v %v", len(got.Ticks), got.Ticks[0], err)
	}
	list, err := s.ListSchedules(ctx, store.ScheduleQuery{Tenant: "acme"})
	if err != nil || len(list) != 1 || len(list[0].Ticks) != store.TickHistory {
		t.Fatalf("listed: %+v %v", list, err)
	}
}

func testSchedulePause(t *testing.T, s store.Schedules) {
	now := time.Date(2026, 11, 25, 21, 0, 0, 0, time.UTC)
	if err := s.CreateSchedule(ctx, schedule("p", "acme", now), 0); err != nil {
		t.Fatal(err)
	}
	got, err := s.PauseSchedule(ctx, "acme", "p", true, time.Time{})
	if err != nil || !got.Paused || !got.Next.Equal(now) {
		t.Fatalf("paused: %+v %v", got, err)
	}
	if due, _ := s.DueSchedules(ctx, now.Add(time.Hour), 10); len(due) != 0 {
		t.Fatalf("a paused schedule is due: %v", due)
	}
	if _, err := s.PauseSchedule(ctx, "other", "p", true, time.Time{}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("another tenant paused it: %v", err)
	}
	later := now.Add(2 * time.Hour)
	got, err = s.PauseSchedule(ctx, "acme", "p", false, later)
	if err != nil || got.Paused || !got.Next.Equal(later) {
		t.Fatalf("resumed: %+v %v", got, err)
	}
	if due, _ := s.DueSchedules(ctx, later, 10); len(due) != 1 {
		t.Fatalf("the resumed schedule is not due at its next tick: %v", due)
	}
}

// A tenant's cap holds when creates come at once: of many creates fired
// together, exactly as many as the cap leaves room for are recorded, the
// others are refused with ErrScheduleLimit, and other tenants' schedules
// do not count.
func testScheduleLimit(t *testing.T, s store.Schedules) {
	next := time.Date(2026, 11, 25, 21, 5, 0, 0, time.UTC)
	const limit = 5
	for i := range 3 {
		if err := s.CreateSchedule(ctx, schedule(fmt.Sprintf("other-%d", i), "other", next), 0); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 {
		if err := s.CreateSchedule(ctx, schedule(fmt.Sprintf("first-%d", i), "acme", next), limit); err != nil {
			t.Fatal(err)
		}
	}
	const n = 16
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		errs    = make([]error, n)
		made    int
		refused int
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = s.CreateSchedule(ctx, schedule(fmt.Sprintf("at-once-%02d", i), "acme", next), limit)
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		switch {
		case err == nil:
			made++
		case errors.Is(err, store.ErrScheduleLimit):
			refused++
		default:
			t.Errorf("create %d: %v", i, err)
		}
	}
	if made != limit-2 || refused != n-(limit-2) {
		t.Errorf("%d creates at once under a cap of %d with 2 made: %d made, %d refused", n, limit, made, refused)
	}
	list, err := s.ListSchedules(ctx, store.ScheduleQuery{Tenant: "acme", Limit: store.MaxPage})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != limit {
		t.Errorf("the tenant has %d schedules under a cap of %d", len(list), limit)
	}
	// the other tenant is under no cap of acme's
	if err := s.CreateSchedule(ctx, schedule("other-3", "other", next), 4); err != nil {
		t.Errorf("another tenant's create: %v", err)
	}
	if err := s.CreateSchedule(ctx, schedule("other-4", "other", next), 4); !errors.Is(err, store.ErrScheduleLimit) {
		t.Errorf("another tenant's create past its cap: %v", err)
	}
}
