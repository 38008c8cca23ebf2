package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/memory"
)

// A run's event log takes no event once it has been flushed (its run
// recorded as ended), however the two race: late events are dropped, not
// sent on a closed channel.
func TestEventLogTakesNoEventAfterItsEnd(t *testing.T) {
	st := memory.New()
	notes := &notifier{log: discard(), every: time.Hour}
	for i := range 300 {
		l := newEventLog(ctx, st, discard(), notes, fmt.Sprint("r", i), "", "t", nil, nil, func() {})
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			for range 50 {
				l.add(runEvent("node_output"))
			}
		}()
		go func() {
			defer wg.Done()
			l.drain()
		}()
		wg.Wait()
		l.close(l.lastEvents(store.RunSucceeded, ""))
	}
}

// A run's end does not wait for the rest of a burst of events: once the
// log takes no more, its writer records what it holds at once. (The run's
// record, and so its clients, waited for the window before.)
func TestEventLogEndsWithoutWaitingForTheBurst(t *testing.T) {
	defer func(w time.Duration) { saveWait = w }(saveWait)
	saveWait = time.Hour
	st := memory.New()
	notes := &notifier{log: discard(), every: time.Hour}
	l := newEventLog(ctx, st, discard(), notes, "r", "", "t", nil, nil, func() {})
	l.add(runEvent("node_start"))
	// the writer is waiting for the rest of the burst (the bounds here
	// are against a hang: the burst window is an hour)
	for deadline := time.Now().Add(time.Minute); len(l.wake) > 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the writer never woke")
		}
	}
	drained := make(chan struct{})
	go func() {
		l.drain()
		close(drained)
	}()
	select {
	case <-drained:
	case <-time.After(time.Minute):
		t.Fatal("the log's end waits for the burst window")
	}
	if evs, _, _ := l.since(0); len(evs) != 1 {
		t.Fatalf("the log recorded %d events, want 1", len(evs))
	}
	l.close(l.lastEvents(store.RunSucceeded, ""))
}

// What the clients of a run hear when their server stops in the middle
// of it, and after the run resumes on the next server: the waiting
// clients are answered as soon as the run has stopped (not when the stop
// timeout ends), with where the run went; the streaming client hears
// that the run was queued again, and continues from the next server with
// Last-Event-ID to run_end, with nothing lost or doubled; the run's
// stored events are one sequence whose last event agrees with its status.
func TestClientsAcrossARestart(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			addr := storeAddr(t, b.addr)
			// (steps of 2 s: the runs are still running when the server
			// stops, which a loaded machine reached 1.2 s after they
			// started)
			flows := stepFlows(t, 2000)
			a := serve(t, openRuntime(t, addr), flows, "")
			for _, id := range []string{"s", "w"} {
				if _, err := a.acme.CreateThread(ctx, api.CreateThread{ID: id, Flow: "steps"}); err != nil {
					t.Fatal(err)
				}
			}
			// a streamed run, and a run its client waits on
			var mu sync.Mutex
			var streamed []api.StreamEvent
			streamDone := make(chan error, 1)
			go func() {
				for ev, err := range a.acme.StreamRun(ctx, "s", api.StartRun{Input: map[string]any{"said": "streamed"}}) {
					if err != nil {
						streamDone <- err
						return
					}
					mu.Lock()
					streamed = append(streamed, ev)
					mu.Unlock()
				}
				streamDone <- nil
			}()
			waited := make(chan error, 1)
			go func() {
				_, err := a.acme.RunWait(ctx, "w", api.StartRun{Input: map[string]any{"said": "waited"}})
				waited <- err
			}()
			// and a client waiting on the streamed run by its id
			var run string
			eventually(t, 10*time.Second, "the streamed run's first step", func() bool {
				mu.Lock()
				defer mu.Unlock()
				for _, ev := range streamed {
					if ev.Event.Type == "node_start" {
						run = ev.Run
						return true
					}
				}
				return false
			})
			joined := make(chan error, 1)
			go func() {
				_, err := a.acme.Join(ctx, "s", run)
				joined <- err
			}()
			eventually(t, 10*time.Second, "both runs running", func() bool {
				rs, err := a.acme.Runs(ctx, "w")
				return err == nil && len(rs) == 1 && rs[0].Status == api.RunRunning
			})
			time.Sleep(50 * time.Millisecond) // the join is waiting

			// the server stops: each run stops at the end of its step, not
			// at the stop timeout (10 s), as the server's log says
			a.shutdown(time.Minute)
			if strings.Contains(a.log.String(), "the stop timeout is over") {
				t.Errorf("the server stopped runs whose steps take 2s at its stop timeout, after %s:\n%s", a.took.Round(time.Millisecond), a.log.String())
			}
			for name, ch := range map[string]chan error{"POST runs/wait": waited, "GET runs/{run}/wait": joined} {
				select {
				case err := <-ch:
					var ae *api.Error
					if !errors.As(err, &ae) || ae.Code != api.CodeRunRequeued || ae.Status != 503 {
						t.Fatalf("%s answered %v at the shutdown, want run_requeued", name, err)
					}
					d, _ := ae.Details.(map[string]any)
					if run, ok := api.WaitAgain(err); !ok || d["run"] != run || d["status"] != api.RunQueued {
						t.Fatalf("%s: the answer does not say where the run went: %+v", name, ae)
					}
				case <-time.After(time.Minute):
					t.Fatalf("%s was not answered once its run stopped", name)
				}
			}
			if err := <-streamDone; err != nil {
				t.Fatalf("the stream ended with %v; the server's log:\n%s", err, a.log.String())
			}
			mu.Lock()
			first := streamed
			mu.Unlock()
			if last := first[len(first)-1]; last.Event.Type != api.RunRequeued {
				t.Fatalf("the stream's last event before the restart is %s, want %s", last.Event.Type, api.RunRequeued)
			}

			// the next server resumes both runs; the clients continue there
			b := serve(t, openRuntime(t, addr), flows, a.acme.Key)
			var rest []api.StreamEvent
			for ev, err := range b.acme.JoinStream(ctx, "s", run, first[len(first)-1].ID) {
				if err != nil {
					t.Fatal(err)
				}
				rest = append(rest, ev)
			}
			all := append(first, rest...)
			for i, ev := range all {
				if ev.ID != strconv.Itoa(i+1) {
					t.Fatalf("event %d of the stream has id %s", i+1, ev.ID)
				}
			}
			if last := all[len(all)-1]; last.Event.Type != "run_end" {
				t.Fatalf("the stream after the restart ends in %s", last.Event.Type)
			}
			done, err := b.acme.Join(ctx, "s", run)
			if err != nil || done.Status != api.RunSucceeded || done.State["n"] != 3 {
				t.Fatalf("the streamed run after the restart: %+v %v", done, err)
			}
			rs, err := b.acme.Runs(ctx, "w")
			if err != nil {
				t.Fatal(err)
			}
			if done, err := b.acme.Join(ctx, "w", rs[0].ID); err != nil || done.Status != api.RunSucceeded || done.State["n"] != 3 {
				t.Fatalf("the waited run after the restart: %+v %v", done, err)
			}

			// the stored log: one sequence, its last event the run's end
			for _, id := range []string{run, rs[0].ID} {
				evs := storedEvents(t, b.srv.cat, id)
				var types []string
				for i, ev := range evs {
					if ev.Seq != int64(i+1) {
						t.Fatalf("run %s: stored event %d has seq %d", id, i+1, ev.Seq)
					}
					types = append(types, eventType(ev.Data))
				}
				if count(types, "run_start") != 2 || count(types, string(api.RunRequeued)) != 1 || count(types, "run_error") != 0 || types[len(types)-1] != "run_end" {
					t.Fatalf("run %s: stored events %v", id, types)
				}
			}
			if logs := a.log.String() + b.log.String(); containsAny(logs, "recording a run's events", "level=ERROR") {
				t.Fatalf("the servers logged errors:\n%s", logs)
			}
		})
	}
}

func count(ss []string, s string) int {
	n := 0
	for _, x := range ss {
		if x == s {
			n++
		}
	}
	return n
}

// storedEvents reads every stored event of a run.
func storedEvents(t *testing.T, cat store.Catalog, run string) []store.EventRecord {
	t.Helper()
	var all []store.EventRecord
	for {
		var after int64
		if len(all) > 0 {
			after = all[len(all)-1].Seq
		}
		evs, err := cat.Events(ctx, run, after, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 {
			return all
		}
		all = append(all, evs...)
	}
}

func runEvent(typ string) trellis.Event { return trellis.Event{Type: trellis.EventType(typ)} }

// A node's streamed pieces that come before the writer takes them are
// one event: the same attempt's pieces in a row join, in order; another
// node's piece between them, or the writer (or a commit) having taken
// the first for recording, starts another event. The store holds what
// the streams show, numbered without a gap.
func TestEventLogJoinsAnAttemptsPieces(t *testing.T) {
	defer func(w time.Duration) { saveWait = w }(saveWait)
	saveWait = time.Hour // the writer waits for the log's end
	st := memory.New()
	notes := &notifier{log: discard(), every: time.Hour}
	l := newEventLog(ctx, st, discard(), notes, "r", "", "t", nil, nil, func() {})
	piece := func(node string, attempt int, text string) trellis.Event {
		return trellis.Event{Type: trellis.NodeOutput, Node: node, Attempt: attempt, Text: text}
	}
	l.add(runEvent("node_start"))
	l.add(piece("a", 1, "Hel"))
	l.add(piece("a", 1, "lo"))
	l.add(piece("b", 1, "x"))
	l.add(piece("a", 1, "!"))
	l.add(piece("a", 2, "again"))
	// a step's commit takes them
	var cp store.Checkpoint
	done := l.attach(&cp)
	if done == nil || cp.Events == nil || len(cp.Events.Events) != 5 {
		n := 0
		if cp.Events != nil {
			n = len(cp.Events.Events)
		}
		t.Fatalf("the commit took %d events, want 5", n)
	}
	l.add(piece("a", 2, " and"))
	l.add(piece("a", 2, " again"))
	if err := st.AppendEvents(ctx, "r", "", cp.Events.Events); err != nil {
		t.Fatal(err)
	}
	done(nil)
	l.drain()
	shown, _, _ := l.since(0)
	want := []string{"node_start", "a1:Hello", "b1:x", "a1:!", "a2:again", "a2: and again"}
	var got []string
	for i, it := range shown {
		var ev trellis.Event
		if err := json.Unmarshal(it.data, &ev); err != nil {
			t.Fatal(err)
		}
		if it.seq != int64(i+1) {
			t.Errorf("event %d numbered %d", i+1, it.seq)
		}
		if ev.Type == trellis.NodeOutput {
			got = append(got, fmt.Sprintf("%s%d:%s", ev.Node, ev.Attempt, ev.Text))
		} else {
			got = append(got, string(ev.Type))
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("the streams show %q, want %q", got, want)
	}
	stored, err := st.Events(ctx, "r", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != len(shown) {
		t.Fatalf("the store holds %d events, the streams show %d", len(stored), len(shown))
	}
	for i := range stored {
		if stored[i].Seq != shown[i].seq || string(stored[i].Data) != string(shown[i].data) {
			t.Fatalf("event %d: stored %d %s, shown %d %s", i, stored[i].Seq, stored[i].Data, shown[i].seq, shown[i].data)
		}
	}
	l.close(l.lastEvents(store.RunSucceeded, ""))
}

// A recorded event's type, read from the head of what this server
// encodes and otherwise from the whole document, is what decoding it says.
func TestEventTypeAgreesWithDecoding(t *testing.T) {
	var cases [][]byte
	for _, typ := range []string{"run_start", "node_output", "run_end", "run_requeued", ""} {
		data, err := json.Marshal(trellis.Event{Type: trellis.EventType(typ), Text: `"type":"x"`,
			State: map[string]any{"type": "not this", "big": strings.Repeat("x", 1000)}})
		if err != nil {
			t.Fatal(err)
		}
		cases = append(cases, data)
	}
	cases = append(cases, []byte(`{"type":"a\"b"}`), []byte(`{"type":"a\u0062"}`), []byte(`{"run":"r","type":"node_end"}`),
		[]byte(`{"type": "spaced"}`), []byte(`{"type":"cut`), []byte(`not json`), []byte(``))
	for _, data := range cases {
		var head struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal(data, &head)
		if got := eventType(data); got != head.Type {
			t.Errorf("eventType(%.60s) = %q, decoding says %q", data, got, head.Type)
		}
	}
}
