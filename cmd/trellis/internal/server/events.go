package server

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/store"
)

// eventLog holds the events a run emits on this server, in order, and
// records them in the store as they come, so that a client reconnecting
// later, or to another server, misses none. A run's events are one
// sequence across servers and restarts: a log goes on from the last event
// the store holds for its run (one queued again, or adopted), and its
// numbers follow that one.
//
// Streams read the log, and see an event once it is recorded: an event a
// client heard is in the store, whatever becomes of this server. The
// run's last event (run_end or run_error) is held back until the run's
// end is decided (end), so that the log's last event always agrees with
// the run's record: a run this server's shutdown queued again ends its
// part of the log with run_requeued, not the error of its stop. Events
// the engine emits after its last one are dropped.
type eventLog struct {
	cat    store.Catalog
	log    *slog.Logger
	notes  *notifier
	ctx    context.Context // of the store calls
	run    string
	thread string // the public thread id the events name
	first  int64  // the seq before this log's first event
	// last is the type of the log's last event so far ("" for none):
	// the store's, until this log has one of its own
	last string

	mu      sync.Mutex
	items   []logged
	saved   int     // items[:saved] are recorded (or given up on)
	held    *logged // the run's last event, until end
	ended   bool    // no more events come
	closing bool    // the writer returns once it has recorded the rest
	closed  bool    // streams get the last events and return
	changed chan struct{}
	wake    chan struct{}
	done    chan struct{} // closed when the writer has returned
	dropped int
}

type logged struct {
	seq  int64
	typ  string
	data []byte
}

// Events are recorded in batches: at most saveBatch in one write, and a
// write waits up to saveWait after its first event for the others of the
// burst it came in (a step's node and state events, a reply's tokens).
const (
	saveBatch = 256
	saveWait  = 5 * time.Millisecond
)

// newEventLog starts the log of a run whose last recorded event is last
// (nil: it has none).
func newEventLog(ctx context.Context, cat store.Catalog, log *slog.Logger, notes *notifier, run, thread string, last *store.EventRecord) *eventLog {
	l := &eventLog{cat: cat, log: log, notes: notes, ctx: ctx, run: run, thread: thread,
		changed: make(chan struct{}), wake: make(chan struct{}, 1), done: make(chan struct{})}
	if last != nil {
		l.first, l.last = last.Seq, eventType(last.Data)
	}
	go l.save()
	return l
}

func (l *eventLog) add(ev trellis.Event) {
	ev.Thread = l.thread
	data, err := json.Marshal(ev)
	if err != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended || l.held != nil {
		l.dropped++
		return
	}
	it := logged{seq: l.first + int64(len(l.items)) + 1, typ: string(ev.Type), data: data}
	if ev.Type == trellis.RunEnd || ev.Type == trellis.RunError {
		l.held = &it
		return
	}
	l.items = append(l.items, it)
	l.last = it.typ
	l.signal()
}

// signal wakes the writer. The caller holds l.mu.
func (l *eventLog) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// moved tells the streams and end that the log moved. The caller holds
// l.mu.
func (l *eventLog) moved() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// save records the events in order until the log is closed and every
// event is recorded, or the store calls' context ends.
func (l *eventLog) save() {
	defer close(l.done)
	wait := time.NewTimer(saveWait)
	defer wait.Stop()
	for {
		select {
		case <-l.wake:
		case <-l.ctx.Done():
			l.giveUp()
			return
		}
		l.mu.Lock()
		ended := l.ended
		l.mu.Unlock()
		if !ended {
			// the rest of the burst
			wait.Reset(saveWait)
			select {
			case <-wait.C:
			case <-l.ctx.Done():
			}
		}
		for {
			l.mu.Lock()
			batch := l.items[l.saved:min(len(l.items), l.saved+saveBatch)]
			ended = l.ended
			l.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			l.write(batch)
		}
		l.mu.Lock()
		finished := l.closing && l.saved == len(l.items)
		l.mu.Unlock()
		if finished {
			return
		}
	}
}

// write records a batch, trying again while the store fails and the
// context lets it; a batch that cannot be recorded is given up on (and
// shown to streams all the same), so that a failing store does not stall
// the run's clients.
func (l *eventLog) write(batch []logged) {
	recs := make([]store.EventRecord, len(batch))
	for i, it := range batch {
		recs[i] = store.EventRecord{Seq: it.seq, Data: it.data}
	}
	for attempt, backoff := 0, 50*time.Millisecond; ; attempt, backoff = attempt+1, 2*backoff {
		err := l.cat.AppendEvents(l.ctx, l.run, recs)
		if err == nil {
			break
		}
		if errors.Is(err, store.ErrExists) || attempt == 4 || l.ctx.Err() != nil {
			l.log.Error("recording a run's events; going on without them", "run", l.run, "from", recs[0].Seq, "to", recs[len(recs)-1].Seq, "error", err.Error())
			break
		}
		select {
		case <-time.After(backoff):
		case <-l.ctx.Done():
		}
	}
	l.mu.Lock()
	l.saved += len(batch)
	l.moved()
	l.mu.Unlock()
	l.notes.send(l.ctx, noteRun+l.run)
}

// giveUp shows every event to the streams when the store calls' context
// ended before they were recorded.
func (l *eventLog) giveUp() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.saved < len(l.items) {
		l.log.Error("the server stopped before it recorded a run's events", "run", l.run, "events", len(l.items)-l.saved)
		l.saved = len(l.items)
		l.moved()
	}
}

// agrees reports whether an event of type typ says what a run's record
// with status says.
func agrees(typ string, status store.RunStatus) bool {
	switch status {
	case store.RunSucceeded:
		return typ == string(trellis.RunEnd)
	case store.RunFailed, store.RunCancelled:
		return typ == string(trellis.RunError)
	case store.RunQueued:
		return typ == string(api.RunRequeued)
	}
	return true
}

// end takes no more events and records the log's last events, so that
// its last event says what the run's record will: the run's own last
// event when it agrees with status, or else one that does (run_requeued
// for a run queued again, a run_end or run_error the engine could not
// emit). A log with no event at all gets none. It returns once every
// event is recorded, or the store calls' context ended. It may be called
// again when the record's status is decided again.
func (l *eventLog) end(status store.RunStatus, msg string, state map[string]any) {
	l.mu.Lock()
	l.ended = true
	held := l.held
	l.held = nil
	if held != nil && !agrees(held.typ, status) {
		held = nil // its seq goes to the event that agrees
	}
	if held != nil {
		l.items = append(l.items, *held)
		l.last = held.typ
	} else if l.last != "" && !agrees(l.last, status) {
		ev := trellis.Event{Run: l.run, Thread: l.thread, Time: time.Now().UTC(), Error: msg}
		switch status {
		case store.RunSucceeded:
			ev.Type, ev.State = trellis.RunEnd, state
		case store.RunQueued:
			ev.Type = api.RunRequeued
			ev.Error = "the server stopped before the run ended: it is queued again, and resumes on another server or on this one once it restarts"
		default:
			ev.Type = trellis.RunError
		}
		if data, err := json.Marshal(ev); err == nil {
			l.items = append(l.items, logged{seq: l.first + int64(len(l.items)) + 1, typ: string(ev.Type), data: data})
			l.last = string(ev.Type)
		}
	}
	if l.dropped > 0 {
		l.log.Warn("a run's events after its end were dropped", "run", l.run, "events", l.dropped)
		l.dropped = 0
	}
	target := len(l.items)
	l.signal()
	l.mu.Unlock()
	l.flushed(target)
}

// flushed waits until the first n events are recorded, or the writer
// has returned.
func (l *eventLog) flushed(n int) {
	for {
		l.mu.Lock()
		ok := l.saved >= n
		ch := l.changed
		l.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-l.done:
			l.giveUp()
			return
		}
	}
}

// close ends the log: streams get its last events and return. A log
// closed without end (a run refused before it started) records what it
// holds and no last event.
func (l *eventLog) close() {
	l.mu.Lock()
	l.ended, l.closing = true, true
	l.held = nil
	target := len(l.items)
	l.signal()
	l.mu.Unlock()
	l.flushed(target)
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		l.moved()
	}
}

// since returns the recorded events after seq, whether the log is closed
// (and all of it read), and a channel closed when it moves. Events
// before the log's first (those of the run's earlier parts) are not in
// it: the caller reads them from the store.
func (l *eventLog) since(seq int64) ([]logged, bool, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []logged
	if i := seq - l.first; i < int64(l.saved) {
		out = slices.Clone(l.items[max(i, 0):l.saved])
	}
	return out, l.closed && l.saved == len(l.items), l.changed
}

// closeLog gives a run that ended without its server (cancelled while it
// was queued) the last event its record calls for, when it has events.
func closeLog(ctx context.Context, cat store.Catalog, notes *notifier, rec *store.RunRecord) error {
	last, err := cat.LastEvent(ctx, rec.ID)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if agrees(eventType(last.Data), rec.Status) {
		return nil
	}
	ev := trellis.Event{Type: trellis.RunError, Run: rec.ID, Thread: publicID(rec.Thread), Time: time.Now().UTC(), Error: rec.Error}
	data, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	err = cat.AppendEvents(ctx, rec.ID, []store.EventRecord{{Seq: last.Seq + 1, Data: data}})
	if errors.Is(err, store.ErrExists) {
		return nil // another server gave it its last event
	}
	if err == nil {
		notes.send(ctx, noteRun+rec.ID)
	}
	return err
}
