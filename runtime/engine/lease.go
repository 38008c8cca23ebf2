package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/trellisflow/trellis/runtime/store"
)

// Lease is the lease a caller takes for the engine's runs (the owner
// its leases name, and for how long), for a Request that is Leased.
func (e *Engine) Lease() store.LeaseClaim {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.owner == "" {
		e.owner = ownerID()
	}
	return store.LeaseClaim{Owner: e.owner, TTL: e.leaseTTL()}
}

func (e *Engine) leaseTTL() time.Duration {
	if e.LeaseTTL > 0 {
		return e.LeaseTTL
	}
	return DefaultLeaseTTL
}

// claim makes thread busy in this engine and takes its lease in the
// store, for one writer per thread across processes, returning the
// lease's owner; free ends the busy mark (the caller releases the lease).
// A thread another run holds is ErrBusy.
func (e *Engine) claim(ctx context.Context, thread string, leased bool, rt *store.Retrier) (owner string, err error) {
	e.mu.Lock()
	if e.holdsOne && e.one == thread || e.busy[thread] {
		e.mu.Unlock()
		return "", ErrBusy
	}
	if e.owner == "" {
		e.owner = ownerID()
	}
	switch {
	case !e.holdsOne:
		e.one, e.holdsOne = thread, true
	case e.busy == nil:
		e.busy = map[string]bool{thread: true}
	default:
		e.busy[thread] = true
	}
	owner = e.owner
	e.mu.Unlock()
	if leased {
		return owner, nil // taken with the run's claim
	}
	if err := rt.Do(ctx, func(bool) error { return e.Store.Acquire(ctx, thread, owner, e.leaseTTL()) }); err != nil {
		e.free(thread)
		var le *store.LeasedError
		if errors.As(err, &le) {
			return "", &BusyError{Owner: le.Owner, Until: le.Until}
		}
		if errors.Is(err, store.ErrLeased) {
			return "", ErrBusy
		}
		return "", fmt.Errorf("lease thread: %w", err)
	}
	return owner, nil
}

// free ends the busy mark claim made.
func (e *Engine) free(thread string) {
	e.mu.Lock()
	if e.holdsOne && e.one == thread {
		e.one, e.holdsOne = "", false
	} else {
		delete(e.busy, thread)
	}
	e.mu.Unlock()
}

// ownerID names the engine holding leases: its process and host, for
// people reading who holds a thread, and a unique part.
func ownerID() string {
	return ownerPrefix() + strconv.FormatUint(runSeq.Add(1), 36) + ")"
}

// ownerPrefix is read once: an engine per run must not pay for the host
// name's system calls.
var ownerPrefix = sync.OnceValue(func() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("process %d on %s (%s-", os.Getpid(), host, runPrefix)
})

// lease is a run's hold on its thread. Runs of inline nodes renew it at
// step boundaries when it is due; once a step runs a node that may block,
// a goroutine renews it until the run ends.
type lease struct {
	st            store.Store
	thread, owner string
	ttl           time.Duration
	renewed       time.Time
	stop          context.CancelFunc
	done          chan struct{}
	// released is set once a commit released the lease (the run's last
	// checkpoint): nothing renews it or releases it again
	released bool
}

// releaseWith makes cp, the run's last checkpoint, release the lease when
// it is committed: renewing stops first, so that nothing takes it again
// after.
func (l *lease) releaseWith(cp *store.Checkpoint) {
	l.quiet()
	cp.Release = l.owner
}

// committed records that cp's commit (releaseWith's) released the lease.
func (l *lease) committed(cp *store.Checkpoint) {
	l.released = cp.Release == l.owner
}

// quiet stops the renewing in the background, if it runs.
func (l *lease) quiet() {
	if l.stop != nil {
		l.stop()
		<-l.done
		l.stop = nil
	}
}

// keepAlive starts renewing in the background, once.
func (l *lease) keepAlive(ctx context.Context) {
	if l.stop != nil || l.released {
		return
	}
	ctx, l.stop = context.WithCancel(ctx)
	l.done = make(chan struct{})
	go func() {
		defer close(l.done)
		t := time.NewTicker(l.ttl / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				_ = l.st.Acquire(ctx, l.thread, l.owner, l.ttl)
			}
		}
	}()
}

// renewIfDue renews from the run's own goroutine when a third of the
// lease has passed.
func (l *lease) renewIfDue(ctx context.Context, now time.Time) {
	if l.stop == nil && !l.released && now.Sub(l.renewed) > l.ttl/3 {
		if l.st.Acquire(ctx, l.thread, l.owner, l.ttl) == nil {
			l.renewed = now
		}
	}
}

func (l *lease) release(ctx context.Context) {
	l.quiet()
	if l.released {
		return
	}
	if ctx.Done() != nil {
		// released even when the run was cancelled
		ctx = context.WithoutCancel(ctx)
	}
	_ = l.st.Release(ctx, l.thread, l.owner)
}

// fence is the owner a pending write of the run names (see
// store.Store.PutPending): the lease the run holds on its thread, while
// it holds it. A write after the lease was given up, or another took it,
// saves nothing.
func (r *run) fence() string {
	if l := r.lease; l != nil && l.thread == r.req.Thread && !l.released {
		return l.owner
	}
	return ""
}
