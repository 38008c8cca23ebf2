package server

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/store"
)

// A run's end is recorded with its last step's commit: the record says
// it succeeded at that checkpoint, its run_end is the last stored event,
// and no write of its own follows. Should that commit fail, the run
// fails, and its stored events end with run_error alone. Should its
// reply be lost after it committed, the run's end is recorded once, by
// that commit.
func TestARunsEndGoesWithItsLastCommit(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			rt, h := hookedRuntime(t, b.addr)
			a := serve(t, rt, stepFlows(t, 1), "")
			var mu sync.Mutex
			var ends []*store.RunEnd
			var updates []store.RunStatus
			h.set(func(k *hooks) {
				k.commit = func(cp *store.Checkpoint) {
					mu.Lock()
					defer mu.Unlock()
					if cp.Events != nil && cp.Events.End != nil {
						ends = append(ends, cp.Events.End)
					}
					if cp.Thread == "acme/fails" && len(cp.Next) == 0 && cp.Release != "" {
						panic("a store that fails the last commit")
					}
				}
				k.updateRun = func(r *store.RunRecord) {
					mu.Lock()
					defer mu.Unlock()
					updates = append(updates, r.Status)
				}
			})
			for _, id := range []string{"ends", "fails"} {
				if _, err := a.acme.CreateThread(ctx, api.CreateThread{ID: id, Flow: "steps"}); err != nil {
					t.Fatal(err)
				}
			}
			r, err := a.acme.RunWait(ctx, "ends", api.StartRun{Input: map[string]any{"said": "hi"}})
			if err != nil || r.Status != api.RunSucceeded || r.State["n"] != 3 {
				t.Fatalf("the run: %+v %v", r, err)
			}
			mu.Lock()
			if len(ends) != 1 || !ends[0].Applied || len(updates) != 0 {
				t.Fatalf("the run's end: %d ends with commits (%+v), record changes %v after its start", len(ends), ends, updates)
			}
			end := ends[0]
			ends, updates = nil, nil
			mu.Unlock()
			rec, err := a.srv.cat.Run(ctx, "acme", r.ID)
			head, herr := a.srv.eng().Store.Head(ctx, "acme/ends")
			if err != nil || herr != nil || rec.Status != store.RunSucceeded || rec.WriteID != end.Record.WriteID || rec.Checkpoint != head.Seq || rec.Finished.IsZero() {
				t.Fatalf("the run's record: %+v %v, head %+v %v", rec, err, head, herr)
			}
			evs := storedEvents(t, a.srv.cat, r.ID)
			var types []string
			for _, ev := range evs {
				types = append(types, eventType(ev.Data))
			}
			if n := len(types); n == 0 || types[n-1] != "run_end" || count(types, "run_end") != 1 || evs[n-1].Seq != end.Events[0].Seq {
				t.Fatalf("stored events %v", types)
			}

			// the last commit fails: the run_end that went before it is
			// not recorded, the run's error is
			r, err = a.acme.RunWait(ctx, "fails", api.StartRun{Input: map[string]any{"said": "hi"}})
			if err != nil || r.Status != api.RunFailed || !strings.Contains(r.Error, "panic") {
				t.Fatalf("the run whose last commit failed: %+v %v", r, err)
			}
			mu.Lock()
			if len(ends) != 1 || ends[0].Applied || !slices.Equal(updates, []store.RunStatus{store.RunFailed}) {
				t.Fatalf("the failed run's end: %+v with its commit, record changes %v", ends, updates)
			}
			mu.Unlock()
			types = nil
			for _, ev := range storedEvents(t, a.srv.cat, r.ID) {
				types = append(types, eventType(ev.Data))
			}
			if n := len(types); n == 0 || types[n-1] != "run_error" || count(types, "run_end") != 0 || count(types, "run_error") != 1 {
				t.Fatalf("stored events of the failed run %v", types)
			}

			// the last commit goes through, and its reply is lost: tried
			// again, the commit finds its own checkpoint, and the run's
			// record its end
			var lost *store.RunEnd
			h.set(func(k *hooks) {
				k.committed = func(cp *store.Checkpoint) error {
					mu.Lock()
					defer mu.Unlock()
					if cp.Thread != "acme/lost" || cp.Events == nil || cp.Events.End == nil || lost != nil {
						return nil
					}
					lost = cp.Events.End
					return fmt.Errorf("the reply: %w", syscall.ECONNRESET)
				}
			})
			if _, err := a.acme.CreateThread(ctx, api.CreateThread{ID: "lost", Flow: "steps"}); err != nil {
				t.Fatal(err)
			}
			before := len(a.log.String())
			r, err = a.acme.RunWait(ctx, "lost", api.StartRun{Input: map[string]any{"said": "hi"}})
			if err != nil || r.Status != api.RunSucceeded || r.State["n"] != 3 {
				t.Fatalf("the run whose last commit's reply was lost: %+v %v\n%s", r, err, a.log.String())
			}
			mu.Lock()
			end = lost
			mu.Unlock()
			if end == nil || !end.Applied && end.Record == nil {
				t.Fatalf("no last commit carried the run's end: %+v", end)
			}
			rec, err = a.srv.cat.Run(ctx, "acme", r.ID)
			if err != nil || rec.Status != store.RunSucceeded || rec.WriteID != end.Record.WriteID {
				t.Fatalf("the run's record: %+v %v, want the end its last commit carried", rec, err)
			}
			evs = storedEvents(t, a.srv.cat, r.ID)
			types = nil
			for _, ev := range evs {
				types = append(types, eventType(ev.Data))
			}
			if n := len(types); n == 0 || types[n-1] != "run_end" || count(types, "run_end") != 1 || !bytes.Equal(evs[n-1].Data, end.Events[0].Data) {
				t.Fatalf("stored events of the run whose last commit's reply was lost %v", types)
			}
			logs := a.log.String()[before:]
			for _, bad := range []string{"dropped", "taken over", "level=ERROR", "then failed"} {
				if strings.Contains(logs, bad) {
					t.Fatalf("the server logged %q:\n%s", bad, logs)
				}
			}
		})
	}
}

// A client that reads a run as soon as its stream ends finds it ended,
// with its output: the live run's record says how it ended before its
// streams hear the end.
func TestARunReadOnceItsStreamEndsHasEnded(t *testing.T) {
	greet, err := os.ReadFile(flowsDir + "/examples/greet.yaml")
	if err != nil {
		t.Fatal(err)
	}
	greet = append(greet, "output: \"{{.state.greeting}} ({{.state.greetings}})\"\n"...)
	for _, addr := range []string{"memory", "sqlite", "postgres"} {
		t.Run(addr, func(t *testing.T) {
			a := serve(t, openRuntime(t, storeAddr(t, addr)), flowsWith(t, map[string]string{"greet": string(greet)}), "")
			if _, err := a.acme.CreateThread(ctx, api.CreateThread{ID: "g", Flow: "greet"}); err != nil {
				t.Fatal(err)
			}
			n := 20
			if addr == "memory" {
				n = 200 // the quickest store: its run ends soonest after its commit
			}
			for i := range n {
				var run string
				for ev, err := range a.acme.StreamRun(ctx, "g", api.StartRun{Input: map[string]any{"name": fmt.Sprint("n", i)}}) {
					if err != nil {
						t.Fatal(err)
					}
					run = ev.Run
				}
				r, err := a.acme.Run(ctx, "g", run)
				if err != nil || r.Status != api.RunSucceeded || r.Checkpoint == 0 || r.Output != fmt.Sprintf("Hello, n%d! (%d)", i, i+1) {
					t.Fatalf("run %d read once its stream ended: %+v %v", i, r, err)
				}
			}
		})
	}
}
