package sandbox_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/trellisflow/trellis/nodes/sandbox"
	"github.com/trellisflow/trellis/nodes/sandbox/sandboxtest"
)

// recorder is a real backend that records the order executions reach it
// (by the name in their image, which the local backend does not use) and
// how many run at once; each process runs once it takes a token from
// hold, or hold is closed.
type recorder struct {
	sandbox.Backend
	hold          chan struct{}
	mu            sync.Mutex
	order         []string
	running, peak int
}

func (r *recorder) Start(ctx context.Context, s sandbox.Spec) (sandbox.Session, error) {
	r.mu.Lock()
	r.order = append(r.order, s.Image)
	r.running++
	r.peak = max(r.peak, r.running)
	r.mu.Unlock()
	sess, err := r.Backend.Start(ctx, s)
	if err != nil {
		r.done()
		return nil, err
	}
	return &recorded{Session: sess, r: r}, nil
}

func (r *recorder) done() {
	r.mu.Lock()
	r.running--
	r.mu.Unlock()
}

type recorded struct {
	sandbox.Session
	r *recorder
}

func (s *recorded) Run(ctx context.Context, p *sandbox.Proc) (*sandbox.Outcome, error) {
	select {
	case <-s.r.hold:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.Session.Run(ctx, p)
}

func (s *recorded) Close() error {
	defer s.r.done()
	return s.Session.Close()
}

// Executions beyond the pool's size wait in the order they came, a
// waiter whose context ends leaves the queue, and the depth is reported.
func TestPoolIsBoundedAndFair(t *testing.T) {
	rec := &recorder{Backend: sandboxtest.Local(t, 1).Backend(), hold: make(chan struct{})}
	pool := sandbox.NewPool(rec, 2, sandbox.Images{Root: sandboxtest.Root()})
	job := func(name string) *sandbox.Job {
		// held until every job is queued
		return &sandbox.Job{Command: []string{"true"}, Image: name, Root: sandboxtest.Root(), Limits: sandbox.Limits{Wall: 30 * time.Second}}
	}
	var wg sync.WaitGroup
	names := []string{"a", "b", "c", "d", "e"}
	errs := make(map[string]error)
	var mu sync.Mutex
	gone, cancel := context.WithCancel(ctx)
	for i, n := range names {
		wg.Add(1)
		c := ctx
		if n == "d" {
			c = gone // gives up while waiting
		}
		go func() {
			defer wg.Done()
			_, err := pool.Exec(c, job(n))
			mu.Lock()
			errs[n] = err
			mu.Unlock()
		}()
		// each comes after the one before
		for deadline := time.Now().Add(time.Minute); ; { // a bound against a hang
			running, queued := pool.Stats()
			if running+queued == i+1 || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	if running, queued := pool.Stats(); running != 2 || queued != 3 {
		t.Errorf("stats %d running, %d queued; want 2, 3", running, queued)
	}
	cancel()
	// d has left the queue before a place comes free (the bounds here
	// only keep a failing test from waiting for ever)
	for deadline := time.Now().Add(time.Minute); ; {
		if _, queued := pool.Stats(); queued == 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	// one execution ends, and the place it frees goes to c, which reaches
	// the backend before the next place frees (two freed at once would
	// race their executions to the backend, whatever the pool's order)
	rec.hold <- struct{}{}
	for deadline := time.Now().Add(time.Minute); ; {
		rec.mu.Lock()
		n := len(rec.order)
		rec.mu.Unlock()
		if n == 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(rec.hold)
	wg.Wait()
	if !errors.Is(errs["d"], context.Canceled) {
		t.Errorf("the waiter that gave up: %v", errs["d"])
	}
	for _, n := range []string{"a", "b", "c", "e"} {
		if errs[n] != nil {
			t.Errorf("%s: %v", n, errs[n])
		}
	}
	if rec.peak != 2 {
		t.Errorf("%d ran at once, want 2", rec.peak)
	}
	got := rec.order[2:]
	if len(rec.order) != 4 || got[0] != "c" || got[1] != "e" {
		t.Errorf("order %v, want a and b, then c, e", rec.order)
	}
	if running, queued := pool.Stats(); running != 0 || queued != 0 {
		t.Errorf("after: %d running, %d queued", running, queued)
	}
}

// A cancelled execution stops on each backend and leaves nothing.
func TestCancelStopsTheExecution(t *testing.T) {
	pools := sandboxtest.Backends(t, 2)
	for name, pool := range pools {
		t.Run(name, func(t *testing.T) {
			c, cancel := context.WithTimeout(ctx, 700*time.Millisecond)
			defer cancel()
			start := time.Now()
			// the code would sleep for ten minutes, its wall time allows
			// it: only the cancellation ends it
			_, err := sandbox.Execute(c, pool, sandbox.Builtin()["python"], sandbox.Submission{Code: "import time\ntime.sleep(600)\n",
				Limits: sandbox.Limits{Wall: 20 * time.Minute}})
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("err %v, want the context's", err)
			}
			if d := time.Since(start); d > 5*time.Minute {
				t.Errorf("stopped after %v", d)
			}
		})
	}
	leftovers(t, pools)
}
