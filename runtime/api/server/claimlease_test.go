package server

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/store"
)

// A run started on a free thread takes the thread's lease with its claim,
// in the enqueue's transaction: the engine runs it without taking the
// lease again, holds it while it runs (no other holder gets it) and gives
// it up at its end. A run queued behind another takes no lease with its
// claim and the engine takes it as before.
func TestARunOnAFreeThreadTakesItsLeaseWithItsClaim(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			rt, h := hookedRuntime(t, b.addr)
			s := serve(t, rt, stepFlows(t, 150), "")
			var mu sync.Mutex
			var acquired []string
			h.set(func(k *hooks) {
				k.acquire = func(thread, owner string) {
					mu.Lock()
					defer mu.Unlock()
					acquired = append(acquired, thread)
				}
			})
			takes := func() int {
				mu.Lock()
				defer mu.Unlock()
				n := len(acquired)
				acquired = nil
				return n
			}
			if _, err := s.acme.CreateThread(ctx, api.CreateThread{ID: "t1", Flow: "steps"}); err != nil {
				t.Fatal(err)
			}
			takes()
			first, err := s.acme.StartRun(ctx, "t1", api.StartRun{Input: map[string]any{"said": "a"}})
			if err != nil {
				t.Fatal(err)
			}
			// while it runs, the thread is its engine's
			var le *store.LeasedError
			if err := h.full.Acquire(ctx, "acme/t1", "someone-else", time.Minute); !errors.As(err, &le) || le.Owner != rt.Engine().Lease().Owner {
				t.Fatalf("while the run runs, another holder's acquire: %v", err)
			}
			second, err := s.acme.StartRun(ctx, "t1", api.StartRun{Input: map[string]any{"said": "b"}, OnBusy: api.OnBusyEnqueue})
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range []string{first.ID, second.ID} {
				r, err := s.acme.Join(ctx, "t1", id)
				if err != nil || r.Status != api.RunSucceeded {
					t.Fatalf("run %s: %+v %v", id, r, err)
				}
			}
			// the first took its lease with its claim; the second,
			// claimed once the first ended, had its engine take it
			if n := takes(); n != 1 {
				t.Fatalf("the engine took the lease %d times for a run claimed as it was queued and one queued behind it, want 1", n)
			}
			if err := h.full.Acquire(ctx, "acme/t1", "someone-else", time.Minute); err != nil {
				t.Fatalf("after the runs, the thread is held: %v", err)
			}
		})
	}
}

// A run claimed with its thread's lease that this server will not run
// after all (its shutdown began) is queued again and gives the lease up
// at once: the thread is not held for the lease's time.
func TestALeaseTakenWithAClaimIsGivenUpWhenTheRunDoesNotStart(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			rt, h := hookedRuntime(t, b.addr)
			s := serve(t, rt, stepFlows(t, 1), "")
			if _, err := s.acme.CreateThread(ctx, api.CreateThread{ID: "t1", Flow: "steps"}); err != nil {
				t.Fatal(err)
			}
			m := s.srv.runs
			claim := rt.Engine().Lease()
			rec := &store.RunRecord{ID: "run-not-started", Tenant: "acme", Thread: "acme/t1", Flow: "steps", Created: time.Now(), Server: m.id, Lease: &claim}
			if busy, err := s.srv.cat.EnqueueRun(ctx, rec, store.BusyReject); err != nil || busy || !claim.Taken {
				t.Fatalf("claimed with its lease: busy %v, taken %v, %v", busy, claim.Taken, err)
			}
			m.mu.Lock()
			m.stopping = true // as a shutdown begins
			m.mu.Unlock()
			lr := m.launch(rec, launch{waiting: true})
			err := h.full.Acquire(ctx, "acme/t1", "someone-else", time.Minute)
			if err == nil {
				err = h.full.Release(ctx, "acme/t1", "someone-else")
			}
			m.mu.Lock()
			m.stopping = false
			m.mu.Unlock()
			if lr != nil {
				t.Fatal("a run launched as the server stops")
			}
			if err != nil {
				t.Fatalf("the thread is still held after the run was given back: %v", err)
			}
		})
	}
}
