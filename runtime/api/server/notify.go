package server

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trellisflow/trellis/runtime/store"
)

// Servers sharing a store that carries notifications (PostgreSQL) tell
// each other at once what they would otherwise find by polling it:
//
//	run ID   the run recorded events, or ended: its streams read on
//	queue    a run ended or was queued again: a thread's next run may start
//	stop     a run was asked to stop: its server passes the request on
//
// Notifications only wake; what they announce is read from the store, so
// a lost one costs a poll's delay and nothing else.
const notifyChannel = "trellis_runs"

// sendWithin bounds a notification's sending: one lost costs a poll.
const sendWithin = 5 * time.Second

// The notifications' payloads.
const (
	noteQueue = "queue"
	noteStop  = "stop"
	noteRun   = "run " // and the run's id
)

// notifier sends and hears the notifications, and wakes what waits on
// them.
type notifier struct {
	n     store.Notifier // nil: the store carries none
	log   interface{ Warn(string, ...any) }
	every time.Duration // the poll's period without notifications
	// heard is set while the listening connection is up: polls then
	// come ten times less often, as a safety net.
	heard atomic.Bool

	mu      sync.Mutex
	waiters map[string]map[chan struct{}]struct{}
	kick    func() // wakes the dispatcher
	// kickStops wakes the dispatcher to pass on stop requests too
	kickStops func()
}

// pollEvery is how often to look at the store for what a notification
// would announce.
func (n *notifier) pollEvery() time.Duration {
	if n.heard.Load() {
		return 10 * n.every
	}
	return n.every
}

// listen hears notifications until ctx ends.
func (n *notifier) listen(ctx context.Context, dsn string) {
	if n.n == nil {
		return
	}
	err := n.n.Listen(ctx, dsn, notifyChannel, n.heardPayload, n.connected)
	if err != nil && ctx.Err() == nil {
		n.log.Warn("listening for other servers' notifications; polling instead", "error", err.Error())
	}
}

// connected hears the listening connection come and go: while it is
// down, nothing is heard, and the store is polled at its full pace.
func (n *notifier) connected(up bool) {
	n.heard.Store(up)
	// (re)connected: anything may have been missed; lost: the waiters'
	// polls were set for a connection that is gone
	n.kickStops()
	n.wakeAll()
}

func (n *notifier) heardPayload(p string) {
	switch {
	case p == noteQueue:
		n.kick()
	case p == noteStop:
		n.kickStops()
	case strings.HasPrefix(p, noteRun):
		n.wake(p[len(noteRun):])
	}
}

// send notifies the servers sharing the store (this one too), whether
// or not ctx ends first, within a few seconds.
func (n *notifier) send(ctx context.Context, payload string) {
	if n.n == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sendWithin)
	defer cancel()
	if err := n.n.Notify(ctx, notifyChannel, payload); err != nil {
		n.log.Warn("notifying other servers", "error", err.Error())
	}
}

// wait returns a channel closed at the next notification about run, or
// at the next poll's time, whichever comes first; done releases it.
func (n *notifier) wait(run string) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	n.mu.Lock()
	if n.waiters == nil {
		n.waiters = map[string]map[chan struct{}]struct{}{}
	}
	if n.waiters[run] == nil {
		n.waiters[run] = map[chan struct{}]struct{}{}
	}
	n.waiters[run][ch] = struct{}{}
	n.mu.Unlock()
	t := time.AfterFunc(n.pollEvery(), func() { n.release(run, ch, true) })
	return ch, func() {
		t.Stop()
		n.release(run, ch, false)
	}
}

// release forgets a waiter, closing its channel when wake says so.
func (n *notifier) release(run string, ch chan struct{}, wake bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.waiters[run][ch]; !ok {
		return
	}
	delete(n.waiters[run], ch)
	if len(n.waiters[run]) == 0 {
		delete(n.waiters, run)
	}
	if wake {
		close(ch)
	}
}

func (n *notifier) wake(run string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for ch := range n.waiters[run] {
		close(ch)
	}
	delete(n.waiters, run)
}

func (n *notifier) wakeAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, chs := range n.waiters {
		for ch := range chs {
			close(ch)
		}
	}
	clear(n.waiters)
}
