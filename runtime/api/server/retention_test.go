package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/store"
)

// expectGone checks that every route of a thread answers 404 not_found
// for it, as for a thread that never was: the thread's own, its runs'
// (run names one of its runs), its voice session's.
func expectGone(t *testing.T, h *harness, thread, run string) {
	t.Helper()
	checked := 0
	for _, rt := range h.srv.routes() {
		if rt.access != tenant || !strings.Contains(rt.path, "{id}") {
			continue
		}
		path := strings.NewReplacer("{id}", thread, "{run}", run).Replace(rt.path)
		var body io.Reader
		if rt.method == http.MethodPost || rt.method == http.MethodPut {
			body = strings.NewReader("{}")
		}
		req, err := http.NewRequestWithContext(ctx, rt.method, h.base+path, body)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+h.acme.Key)
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := h.http.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", rt.method, path, err)
		}
		var e api.ErrorBody
		err = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound || err != nil || e.Error == nil || e.Error.Code != api.CodeNotFound {
			t.Errorf("%s %s of a thread that is gone: %d %+v %v", rt.method, path, resp.StatusCode, e.Error, err)
		}
		checked++
	}
	if checked < 15 {
		t.Fatalf("checked %d routes of a thread", checked)
	}
}

// A thread deleted through the API, and one the server's retention
// prunes as idle, are gone whole: every route of theirs answers 404, and
// the store keeps no record, run or event of them; an active thread is
// left as it was. The sweeps' present is the test's: an hour after a
// moment between the idle thread's last write and the active one's
// first, whatever the time the turns take.
func TestRetentionPrunesIdleThreadsWhole(t *testing.T) {
	for _, b := range []string{"memory", "sqlite", "postgres"} {
		t.Run(b, func(t *testing.T) {
			h := newHarness(t, b, nil, func(c *Config) {
				c.Retention = Retention{Idle: time.Hour, Every: 50 * time.Millisecond}
			})
			cand := values(t, flowsDir+"/examples/candidate.yaml")
			runs := map[string]string{}
			start := func(id string) {
				t.Helper()
				if _, err := h.acme.CreateThread(ctx, api.CreateThread{ID: id, Flow: "interview", Values: cand}); err != nil {
					t.Fatal(err)
				}
				for _, in := range []map[string]any{nil, {"last_response": "I build data pipelines in Go."}} {
					r, err := h.acme.RunWait(ctx, id, api.StartRun{Input: in})
					if err != nil || r.Status != api.RunSucceeded {
						t.Fatalf("a turn on %s: %+v %v", id, r, err)
					}
					runs[id] = r.ID
				}
			}
			start("idle")
			start("deleted")
			// (a moment the idle thread's writes are before, and the
			// active one's after, on the clock the store's times come from)
			mark := time.Now()
			for !time.Now().After(mark) {
			}
			start("active")
			active, err := h.acme.Thread(ctx, "active")
			if err != nil {
				t.Fatal(err)
			}
			activeRuns, err := h.acme.Runs(ctx, "active")
			if err != nil || len(activeRuns) != 2 {
				t.Fatalf("the active thread's runs: %d %v", len(activeRuns), err)
			}
			if err := h.acme.DeleteThread(ctx, "deleted"); err != nil {
				t.Fatal(err)
			}
			// an hour passes for the sweeps
			h.srv.retention.mu.Lock()
			h.srv.retention.now = func() time.Time { return mark.Add(time.Hour) }
			h.srv.retention.mu.Unlock()
			eventually(t, 30*time.Second, "the idle thread pruned", func() bool {
				_, err := h.acme.Thread(ctx, "idle")
				return err != nil && strings.Contains(err.Error(), string(api.CodeNotFound))
			})
			for _, id := range []string{"idle", "deleted"} {
				expectGone(t, h, id, runs[id])
				key := "acme/" + id
				if _, err := h.srv.cat.Run(ctx, "acme", runs[id]); err == nil {
					t.Errorf("a run of %s is kept", id)
				}
				if evs, err := h.srv.cat.Events(ctx, runs[id], 0, 0); err != nil || len(evs) > 0 {
					t.Errorf("%d events of a run of %s are kept: %v", len(evs), id, err)
				}
				if _, err := h.srv.cfg.Runtime.(*trellis.Runtime).State(ctx, key); err == nil {
					t.Errorf("the checkpoints of %s are kept", id)
				}
			}
			if th, err := h.acme.Thread(ctx, "active"); err != nil || th.Checkpoint != active.Checkpoint {
				t.Fatalf("the active thread: %+v %v (was at %d)", th, err, active.Checkpoint)
			}
			if rs, err := h.acme.Runs(ctx, "active"); err != nil || len(rs) != 2 {
				t.Fatalf("the active thread's runs: %d %v", len(rs), err)
			}
			if evs, err := h.srv.cat.Events(ctx, runs["active"], 0, 0); err != nil || len(evs) == 0 {
				t.Fatalf("the active thread's last run's events: %d %v", len(evs), err)
			}
			if m := scrape(t, h); m["trellis_retention_threads_deleted_total"] != 1 {
				t.Fatalf("threads deleted: %v", m["trellis_retention_threads_deleted_total"])
			}
		})
	}
}

// stream reads a run's events after lastEventID as a client joining it
// does.
func stream(t *testing.T, c *api.Client, thread, run, lastEventID string) []api.StreamEvent {
	t.Helper()
	var out []api.StreamEvent
	for ev, err := range c.JoinStream(ctx, thread, run, lastEventID) {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ev)
	}
	return out
}

// Once a run's events have passed their time to be resumed, the run
// keeps its node-level events as they were, by the same numbers (but
// for the values its checkpoints hold: a state_update's), and its tokens
// merged into one event per node's attempt with the whole text, or none.
func TestRetentionCompactsEvents(t *testing.T) {
	for _, b := range []string{"memory", "sqlite", "postgres"} {
		for _, tokens := range []string{TokensMerge, TokensDrop} {
			t.Run(b+"/"+tokens, func(t *testing.T) {
				h := newHarness(t, b, nil, func(c *Config) {
					c.Retention = Retention{Events: time.Hour, Tokens: tokens, Every: 20 * time.Millisecond}
				})
				if _, err := h.acme.CreateThread(ctx, api.CreateThread{ID: "ada", Flow: "interview", Values: values(t, flowsDir+"/examples/candidate.yaml")}); err != nil {
					t.Fatal(err)
				}
				r, err := h.acme.RunWait(ctx, "ada", api.StartRun{})
				if err != nil || r.Status != api.RunSucceeded {
					t.Fatalf("greeting: %+v %v", r, err)
				}
				whole := stream(t, h.acme, "ada", r.ID, "")
				// the hour passes
				h.srv.retention.mu.Lock()
				h.srv.retention.cfg.Events = time.Nanosecond
				h.srv.retention.mu.Unlock()
				eventually(t, 30*time.Second, "the run's events packed", func() bool {
					due, err := h.srv.cat.RunsToPack(ctx, time.Now(), 10)
					return err == nil && len(due) == 0
				})
				packed := stream(t, h.acme, "ada", r.ID, "")
				var want []api.StreamEvent
				texts := map[string]string{}
				last := map[string]string{}
				for _, ev := range whole {
					if ev.Event.Type != trellis.NodeOutput {
						// what the checkpoints hold is not kept twice (the
						// run's end, recorded without its state, is sent
						// with the state at its checkpoint, packed or not)
						if ev.Event.Type == trellis.StateUpdate {
							ev.Event.Update, ev.Event.Appended = nil, nil
						}
						want = append(want, ev)
						continue
					}
					k := fmt.Sprint(ev.Event.Node, ev.Event.Attempt)
					texts[k] += ev.Event.Text
					last[k] = ev.ID
				}
				if len(texts) == 0 {
					t.Fatal("the run streamed no tokens")
				}
				var merged int
				for _, ev := range packed {
					if ev.Event.Type == trellis.NodeOutput {
						k := fmt.Sprint(ev.Event.Node, ev.Event.Attempt)
						if tokens == TokensDrop || ev.Event.Text != texts[k] || ev.ID != last[k] {
							t.Errorf("token event %s after packing: %q, want %q as %s", ev.ID, ev.Event.Text, texts[k], last[k])
						}
						merged++
						continue
					}
					if len(want) == 0 || ev.ID != want[0].ID || !reflect.DeepEqual(ev.Event, want[0].Event) {
						t.Fatalf("event %s after packing: %+v", ev.ID, ev.Event)
					}
					want = want[1:]
				}
				if len(want) > 0 {
					t.Fatalf("%d node-level events lost, the first %+v", len(want), want[0].Event)
				}
				if tokens == TokensMerge && merged != len(texts) {
					t.Fatalf("%d merged token events, want %d", merged, len(texts))
				}
				// a client resuming after a packed event goes on from there
				tail := stream(t, h.acme, "ada", r.ID, whole[len(whole)-2].ID)
				if len(tail) != 1 || tail[0].ID != whole[len(whole)-1].ID {
					t.Fatalf("resumed after %s: %+v", whole[len(whole)-2].ID, tail)
				}
				m := scrape(t, h)
				if m["trellis_retention_runs_packed_total"] != 1 || m["trellis_retention_events_packed_total"] != float64(len(whole)) {
					t.Fatalf("metrics: %v runs, %v events packed (%d events)", m["trellis_retention_runs_packed_total"], m["trellis_retention_events_packed_total"], len(whole))
				}
			})
		}
	}
}

// A sweep works through idle threads and runs to pack a batch of each in
// turn, so that neither waits for the other's whole backlog (before, a
// sweep deleted every idle thread before it packed a run: under load,
// a backlog of either held the other up for the whole sweep); the
// metric of the backlog counts what is left of each, and nothing once
// the sweep is done.
func TestRetentionInterleavesIdleThreadsAndPacking(t *testing.T) {
	for _, b := range []string{"memory", "sqlite", "postgres"} {
		t.Run(b, func(t *testing.T) {
			h := newHarness(t, b, nil)
			st := h.srv.eng().Store
			old := time.Now().Add(-48 * time.Hour)
			const threads, runs = 40, 200
			for i := range threads {
				if err := st.Commit(ctx, &store.Checkpoint{Thread: fmt.Sprint("acme/idle-", i), Seq: 1, Source: store.SourceCreate, Time: old,
					Writes: []store.Write{{Field: "n", Version: 1, Value: i}}}); err != nil {
					t.Fatal(err)
				}
			}
			evs := []store.EventRecord{{Seq: 1, Data: []byte(`{"type":"run_start"}`)}, {Seq: 2, Data: []byte(`{"type":"node_output","node":"a","text":"hi"}`)},
				{Seq: 3, Data: []byte(`{"type":"run_end"}`)}}
			for i := range runs {
				id := fmt.Sprint("ended-", i)
				if err := h.srv.cat.CreateRun(ctx, &store.RunRecord{ID: id, Tenant: "acme", Thread: "acme/kept", Flow: "interview",
					Status: store.RunSucceeded, Input: []byte("{}"), Created: old, Finished: old.Add(time.Duration(i))}); err != nil {
					t.Fatal(err)
				}
				if err := h.srv.cat.AppendEvents(ctx, id, "", evs); err != nil {
					t.Fatal(err)
				}
			}
			r := h.srv.newRetention(Retention{Idle: 24 * time.Hour, Events: time.Hour, Every: time.Hour, Share: 1, Tokens: TokensMerge}, prometheus.NewRegistry())
			if got := r.backlog(ctx); got != [2]int{threads, runs} {
				t.Fatalf("the backlog before the sweep: %v, want [%d %d]", got, threads, runs)
			}
			var order []string
			deleted, packed := 0, 0
			r.batched = func(kind string, n int) {
				order = append(order, kind)
				if kind == "threads" {
					deleted += n
				} else {
					packed += n
				}
			}
			r.sweep(ctx)
			if deleted != threads || packed != runs {
				t.Fatalf("the sweep deleted %d threads of %d, packed %d runs of %d", deleted, threads, packed, runs)
			}
			// the runs' first batch comes before the threads' last
			first, last := slices.Index(order, "runs"), -1
			for i, k := range order {
				if k == "threads" {
					last = i
				}
			}
			if first < 0 || first > last {
				t.Fatalf("the sweep's batches: %v: a backlog waited for the other's", order)
			}
			r.backlogAt = time.Time{}
			if got := r.backlog(ctx); got != [2]int{} {
				t.Fatalf("the backlog after the sweep: %v", got)
			}
		})
	}
}
