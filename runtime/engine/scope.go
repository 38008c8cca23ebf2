package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trellisflow/trellis/runtime/kind"
)

// A run's lifetime is a scope: nothing it starts outlives it unnoticed.
//
// Inline nodes run on the run's own goroutines; every other node's attempt
// runs on a goroutine of its own, so that the run can stop waiting for it:
// at the node's timeout, or when the run's context ends. The attempt is
// then given up (abandoned): its gate closes at once, so nothing it does
// from then on reaches anyone, and the engine waits for it to return, at
// most the engine's grace (WithGrace). An attempt that honours its context
// returns within the grace and is joined: its late result is dropped. One
// that does not is detached: the run goes on without it (a retry, on_error,
// the next step, or its end), and nothing it does can reach the run, since
// every way out of an attempt (the run's observer, streamed text, measured
// usage, the store's pending writes and cache, nested runs and child
// flows) passes its gate, checked under the gate's lock: once closed, a
// gate lets nothing through. The attempt's view is its own, and a
// detached one stays its own (the retry or the next step gets another), so
// what it reads or writes is no one else's either. A run that detached an
// attempt is not recycled, and until it ends it copies, rather than
// updates in place, the state and variables that attempt may still read.
//
// So Run returns once every goroutine of the run is joined, or detached
// and gated; no event of the run can follow its end. A node that ignores
// its context costs its own goroutine until it returns, and nothing else.
// Late counts all of it.
//
// Closing a gate waits for what is in passage: an event the observer is
// being given (as long as the observer takes to return), or a nested
// node's pending write, which the store bounds by the attempt's context,
// ended by then. The grace bounds the wait for the attempt, not for those.

// Late counts what a run, or all the runs of an engine, gave up on.
type Late struct {
	// Abandoned counts the attempts given up at their node's timeout or
	// when their run was cancelled, before they returned.
	Abandoned int64 `json:"abandoned,omitempty"`
	// Detached counts the abandoned attempts still running once the grace
	// had passed, which the run went on without (their node ignores its
	// context).
	Detached int64 `json:"detached,omitempty"`
	// Dropped counts what abandoned attempts produced after they were given
	// up, and was dropped: events, streamed text, measures, nested results
	// and writes, and the updates they returned late.
	Dropped int64 `json:"dropped,omitempty"`
}

// Late counts what the engine's runs gave up on, since it was made. It
// goes on counting what detached attempts drop after their run returned.
func (e *Engine) Late() Late { return e.late.read() }

type lateCounts struct {
	abandoned, detached, dropped atomic.Int64
}

func (c *lateCounts) read() Late {
	return Late{Abandoned: c.abandoned.Load(), Detached: c.detached.Load(), Dropped: c.dropped.Load()}
}

func (c *lateCounts) reset() {
	c.abandoned.Store(0)
	c.detached.Store(0)
	c.dropped.Store(0)
}

// drop counts something an abandoned attempt produced and the run dropped.
func (r *run) drop() {
	r.late.dropped.Add(1)
	r.e.late.dropped.Add(1)
}

// errAbandoned is what a nested run or child flow of an abandoned attempt
// returns when its context has not ended yet.
var errAbandoned = errors.New("the attempt was given up")

// gate is an attempt's way out of the run. Everything the attempt sends
// out of itself passes through it, holding it (and its parents: the gates
// of the attempts it is nested in) open while it does; closing waits for
// those in passage and lets nothing through afterwards.
type gate struct {
	mu     sync.RWMutex
	closed bool
	parent *gate
}

// enter holds g and its parents open for one passage, and reports false
// (holding nothing) when one of them is closed. A true enter is followed by
// exit.
func (g *gate) enter() bool {
	if g == nil {
		return true
	}
	if !g.parent.enter() {
		return false
	}
	g.mu.RLock()
	if g.closed {
		g.mu.RUnlock()
		g.parent.exit()
		return false
	}
	return true
}

func (g *gate) exit() {
	if g == nil {
		return
	}
	g.mu.RUnlock()
	g.parent.exit()
}

// close waits for the passages in progress and lets nothing through
// afterwards.
func (g *gate) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}

// open readies g for an attempt, under parent, once nothing of an
// earlier attempt can pass it: the attempt returned.
func (g *gate) open(parent *gate) {
	g.mu.Lock()
	g.closed = false
	if g.parent != parent {
		// enter and exit read parent unlocked: a gate reopened under
		// the same parent (see view.reopen) leaves it untouched, as
		// passages of nested attempts still under way read it
		g.parent = parent
	}
	g.mu.Unlock()
}

// attemptResult is what an attempt's goroutine returns.
type attemptResult struct {
	upd kind.Update
	err error
	// passed is false for an update returned after the attempt was
	// given up (its goroutine counted it dropped)
	passed bool
}

// abandon gives up o's running attempt, whose context has ended: its gate
// closes, and the attempt is waited for, the engine's grace at most. A
// joined attempt's view serves the next attempt; a detached one keeps it,
// and o gets a new view (with the usage measured so far: nothing can add
// to it through the closed gate).
func (r *run) abandon(o *outcome, done <-chan attemptResult) {
	v := o.view
	v.gate.close()
	r.late.abandoned.Add(1)
	r.e.late.abandoned.Add(1)
	t := time.NewTimer(r.e.graceTime())
	defer t.Stop()
	select {
	case res := <-done:
		if res.err == nil && res.passed {
			r.drop() // returned as it was given up: late all the same
		}
		// the attempt returned: what comes next (a fallback) may pass
		v.reopen()
	case <-t.C:
		r.late.detached.Add(1)
		r.e.late.detached.Add(1)
		r.detached.Store(true)
		o.view = newView(o.host)
		o.view.usage = v.usage
		r.begin(o.view, o.node, v.vars, v.attempt)
	}
}

// given reports whether the attempt whose gate g is was given up; the
// error is what a nested run or child flow of it then returns.
func (g *gate) given(ctx context.Context) (bool, error) {
	if g.enter() {
		g.exit()
		return false, nil
	}
	if err := ctx.Err(); err != nil {
		return true, err
	}
	return true, errAbandoned
}

// ended is the error of an attempt whose context ended: the run's, or
// its own timeout's.
func ended(ctx context.Context, timeout time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return fmt.Errorf("timed out after %s", timeout)
}
