package server

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/store"
)

// eventLog holds the events a run emits on this server, in order, and
// records them in the store as they come, so that a client reconnecting
// later, or to another server, misses none. A run's events are one
// sequence across servers and restarts: a log goes on from the last event
// the store holds for its run (one queued again, or adopted), and its
// numbers follow that one. The store records them only while this server
// holds the run: once another server took it over, this one adds nothing.
//
// Streams read the log and see an event once it is recorded: an event a
// client heard is in the store, whatever becomes of this server, and its
// number is never given to another. The run's last event (run_end or
// run_error) is held back, and the events that end the log are recorded
// with the run's end (lastEvents, then close), so that the log's last
// event always agrees with the run's record: a run this server's
// shutdown queued again ends its part of the log with run_requeued, not
// the error of its stop. Events the engine emits after its last one are
// dropped.
type eventLog struct {
	cat    store.Catalog
	log    *slog.Logger
	notes  *notifier
	ctx    context.Context // of the store calls
	run    string
	holder string // the server whose events these are
	thread string // the public thread id the events name
	first  int64  // the seq before this log's first event
	// stored is the type of the last event the store held when the log
	// began ("" for none)
	stored string
	// lost is called once when the store refuses the events: another
	// server took the run over
	lost func()
	// retry waits through the store's outages, within the run's budget
	retry *store.Retrier

	// wmu is held by whoever records events (the writer, or a commit
	// carrying them: attach), so that they are recorded in order
	wmu sync.Mutex

	mu    sync.Mutex
	items []logged
	saved int     // items[:saved] are recorded
	taken int     // items[:taken] are recorded or being recorded
	held  *logged // the run's last event
	// heldSent is the held run_end as streams send it, with the run's
	// final state (held.data is it as recorded, without: see sendable)
	heldSent *encoding
	ended    bool // no more events come
	broken   bool // the store refuses the events: no more are recorded
	closed   bool // streams get the last events and return
	changed  chan struct{}
	wake     chan struct{}
	// ending is closed when the log takes no more events: the writer
	// waits no longer for the rest of a burst
	ending  chan struct{}
	done    chan struct{} // closed when the writer has returned
	dropped int
	// ends, when set, is the record of the run as it ends at a commit
	// with no next node (its checkpoint), and what its record holds
	// now: a run whose run_end is held when its last commit carries the
	// rest of its events has its end recorded with them (attach), and
	// endRecorded is that end once recorded, endTried the end of a
	// last commit that failed (its reply may have been lost after it
	// committed)
	ends        func(checkpoint uint64) (store.RunRecord, store.RunState)
	endRecorded *store.RunEnd
	endTried    *store.RunEnd
}

type logged struct {
	seq  int64
	typ  string
	data []byte // nil for a node_output that pieces joined since it was encoded
	// out is a node_output event: pieces of the same attempt's output
	// after it join its text until it is taken to be recorded (join)
	out *engine.Event
}

// Events are recorded in batches: at most saveBatch in one write, and a
// write waits up to saveWait after its first event for the others of the
// burst it came in (a step's node and state events, a reply's tokens).
const saveBatch = 256

var saveWait = 5 * time.Millisecond

// newEventLog starts the log of a run holder runs, whose last recorded
// event is last (nil: it has none).
func newEventLog(ctx context.Context, cat store.Catalog, log *slog.Logger, notes *notifier, run, holder, thread string, last *store.EventRecord,
	retry *store.Retrier, lost func()) *eventLog {
	l := &eventLog{cat: cat, log: log, notes: notes, ctx: ctx, run: run, holder: holder, thread: thread, lost: lost, retry: retry,
		changed: make(chan struct{}), wake: make(chan struct{}, 1), ending: make(chan struct{}), done: make(chan struct{})}
	if last != nil {
		l.first, l.stored = last.Seq, eventType(last.Data)
	}
	go l.save()
	return l
}

func (l *eventLog) add(ev engine.Event) {
	ev.Thread = l.thread
	if ev.Type == engine.NodeOutput && l.join(ev) {
		return
	}
	var full *engine.Event
	if ev.Type == engine.RunEnd {
		// recorded without the final state (see sendable), and sent with
		// it as encoded beside the run's last commit (the state as it
		// is now: the engine may go on updating its map in place)
		f := ev
		f.State = maps.Clone(ev.State)
		full = &f
		ev.State = nil
	}
	data, err := ev.JSON()
	if err != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if h := l.held; h != nil && h.typ == string(engine.RunEnd) && ev.Type == engine.RunError && !l.ended && !l.broken && l.endRecorded == nil {
		// the run's end went before its last commit, which failed:
		// the error is its end
		h.typ, h.data = string(ev.Type), data
		l.heldSent = nil
		return
	}
	if l.ended || l.broken || l.held != nil {
		l.dropped++
		return
	}
	it := logged{seq: l.first + int64(len(l.items)) + 1, typ: string(ev.Type), data: data}
	if ev.Type == engine.RunEnd || ev.Type == engine.RunError {
		l.held, l.heldSent = &it, encodeBeside(full)
		return
	}
	if ev.Type == engine.NodeOutput {
		it.out = &ev
	}
	l.items = append(l.items, it)
	l.signal()
}

// join adds a piece of a node's streamed output to the log's last event
// when that is the same attempt's output and not yet taken to be
// recorded: its text goes on, and it is encoded again when taken. The
// pieces a burst brings (a reply's tokens arriving together) are one
// event in the store and to its clients, who would have heard them at
// once anyway: streams show an event once it is recorded.
func (l *eventLog) join(ev engine.Event) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(l.items)
	if n == 0 || n-1 < max(l.saved, l.taken) || l.ended || l.broken || l.held != nil {
		return false
	}
	last := &l.items[n-1]
	o := last.out
	if o == nil || o.Node != ev.Node || o.NS != ev.NS || o.Step != ev.Step || o.Attempt != ev.Attempt || o.Kind != ev.Kind {
		return false
	}
	o.Text += ev.Text
	last.data = nil
	return true
}

// take returns the next batch of events to record, encoding those that
// joined pieces since they were added, and marks them taken: no piece
// joins them any more. The caller holds l.mu.
func (l *eventLog) take() []logged {
	batch := l.items[l.saved:min(len(l.items), l.saved+saveBatch)]
	for i := range batch {
		it := &batch[i]
		if it.data == nil {
			it.data, _ = it.out.JSON()
		}
		it.out = nil
	}
	l.taken = l.saved + len(batch)
	return batch
}

// note adds an event the server tells of the run (its waits for the
// store) while the run's own go on: none once its last is held back, or
// the log has ended.
func (l *eventLog) note(ev engine.Event) {
	l.mu.Lock()
	done := l.ended || l.broken || l.held != nil
	l.mu.Unlock()
	if !done {
		l.add(ev)
	}
}

// signal wakes the writer. The caller holds l.mu.
func (l *eventLog) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// moved tells the streams and drain that the log moved. The caller
// holds l.mu.
func (l *eventLog) moved() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// save records the events in order until the log has ended and every
// event is recorded, the store refuses them, or the store calls' context
// ends.
func (l *eventLog) save() {
	defer close(l.done)
	wait := time.NewTimer(saveWait)
	defer wait.Stop()
	for {
		select {
		case <-l.wake:
		case <-l.ctx.Done():
			l.fail("the server stopped before it recorded a run's events", l.ctx.Err())
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
			case <-l.ending:
			case <-l.ctx.Done():
			}
		}
		for {
			l.wmu.Lock()
			l.mu.Lock()
			batch := l.take()
			l.mu.Unlock()
			if len(batch) == 0 {
				l.wmu.Unlock()
				break
			}
			ok := l.write(batch)
			l.wmu.Unlock()
			if !ok {
				return
			}
		}
		l.mu.Lock()
		finished := l.ended && l.saved == len(l.items)
		l.mu.Unlock()
		if finished {
			return
		}
	}
}

// write records a batch, waiting through the store's outages as the
// run's budget allows. A batch whose first events may have been recorded
// already finds their numbers taken: tried again after a failure that
// may have come after it was recorded, or handed back by a step's commit
// that failed so (attach), or refused as no longer this server's when
// that commit recorded the run's end. Read back, its own events are not taken for
// another server's (store.Recorded): another's would not be these
// bytes; the rest of the batch is recorded after them. It reports
// whether the log goes on.
func (l *eventLog) write(batch []logged) bool {
	recs := records(batch)
	err := l.retry.Do(l.ctx, func(bool) error {
		for {
			err := l.append(recs)
			if !errors.Is(err, store.ErrExists) && !errors.Is(err, store.ErrRunChanged) {
				return err
			}
			// the first of them may be recorded (by a commit that carried
			// them, or an attempt whose reply was lost): the rest go on.
			// (A last commit that carried them with the run's end, its
			// reply lost, left the record no longer this server's: the
			// events are refused, though recorded.)
			n, rerr := store.Recorded(l.ctx, l.cat, l.run, recs)
			switch {
			case rerr != nil:
				return rerr
			case n == 0:
				return err
			case n == len(recs):
				return nil
			}
			recs = recs[n:]
		}
	})
	switch {
	case errors.Is(err, store.ErrRunChanged) || errors.Is(err, store.ErrExists):
		// another server took the run over: its events are its own
		l.fail("a run taken over by another server: this one records no more of its events", nil)
		l.lost()
		return false
	case err != nil:
		l.fail("recording a run's events", err)
		return false
	}
	l.mu.Lock()
	l.saved += len(batch)
	l.moved()
	l.mu.Unlock()
	return true
}

// append records events of the log, and sends their notification with
// them where the store carries notifications.
func (l *eventLog) append(recs []store.EventRecord) error {
	if l.notes.n == nil {
		return l.cat.AppendEvents(l.ctx, l.run, l.holder, recs)
	}
	return l.notes.n.AppendNotify(l.ctx, l.appendOf(recs))
}

// appendOf is the store's append of events of the log, with the
// notification that announces them where the store carries
// notifications.
func (l *eventLog) appendOf(recs []store.EventRecord) *store.EventAppend {
	ea := &store.EventAppend{Run: l.run, Holder: l.holder, Events: recs}
	if l.notes.n != nil {
		ea.Channel, ea.Payload = notifyChannel, noteRun+l.run
	}
	return ea
}

// attach gives a checkpoint of the run the events not yet recorded (but
// the run's last, held back), to record in its commit's transaction: a
// step's events cost no write of their own. The function it returns
// hears how the commit ended: recorded, the events are shown; refused,
// the run was taken over (as in write); failed, they wait for the
// writer. The writer waits meanwhile, so that events are recorded in
// order.
func (l *eventLog) attach(cp *store.Checkpoint) func(error) {
	if !l.wmu.TryLock() {
		if !l.endsWith(cp) {
			// the writer is recording: the events are its, the commit
			// does not wait for it
			return nil
		}
		// the run's last commit waits for the writer's append, so that
		// the run's end goes with it rather than in a write of its own
		l.wmu.Lock()
	}
	l.mu.Lock()
	batch := l.take()
	var end *store.RunEnd
	if l.taken == len(l.items) && l.endsWithLocked(cp) {
		// the run ends with this commit: its end goes with it
		rec, expect := l.ends(cp.Seq)
		rec.WriteID = store.NewWriteID()
		h := l.held
		end = &store.RunEnd{Record: &rec, Expect: expect, Events: []store.EventRecord{{Seq: h.seq, Data: h.data}}}
		if l.notes.n != nil {
			// the thread's next run may wait in the queue
			end.Notes = []string{noteQueue}
		}
	}
	if l.broken || len(batch) == 0 && end == nil {
		l.mu.Unlock()
		l.wmu.Unlock()
		return nil
	}
	l.mu.Unlock()
	ea := l.appendOf(records(batch))
	ea.End = end
	cp.Events = ea
	return func(err error) {
		defer l.wmu.Unlock()
		switch {
		case err != nil:
			l.mu.Lock()
			if end != nil {
				l.endTried = end
			}
			l.signal()
			l.mu.Unlock()
		case ea.Refused:
			l.fail("a run taken over by another server: this one records no more of its events", nil)
			l.lost()
		default:
			// the notification went with them
			l.mu.Lock()
			l.saved += len(batch)
			if end != nil && end.Applied {
				l.endRecorded = end
			}
			l.moved()
			l.mu.Unlock()
		}
	}
}

// endsWith reports whether the run ends with the commit of cp: its
// run_end is held, and cp names no next node and releases the thread.
func (l *eventLog) endsWith(cp *store.Checkpoint) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.endsWithLocked(cp)
}

// endsWithLocked is endsWith; the caller holds l.mu.
func (l *eventLog) endsWithLocked(cp *store.Checkpoint) bool {
	h := l.held
	return h != nil && h.typ == string(engine.RunEnd) && l.ends != nil && !l.ended && !l.broken && len(cp.Next) == 0 && cp.Release != ""
}

// recordedEnd is the run's end recorded with its last commit, if it was
// (see attach), and else the end of a last commit that failed, if one
// did: that commit may have recorded it all the same, its reply lost,
// and the run's record then carries its write id.
func (l *eventLog) recordedEnd() (recorded, tried *store.RunEnd) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.endRecorded, l.endTried
}

// records are the store's records of a batch of events.
func records(batch []logged) []store.EventRecord {
	recs := make([]store.EventRecord, len(batch))
	for i, it := range batch {
		recs[i] = store.EventRecord{Seq: it.seq, Data: it.data}
	}
	return recs
}

// fail gives up on the events not recorded: they are never shown, and
// their numbers stay free for whoever goes on with the run.
func (l *eventLog) fail(msg string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.broken {
		return
	}
	l.broken = true
	if n := len(l.items) - l.saved; n > 0 || err != nil {
		attrs := []any{"run", l.run, "events", n}
		level := slog.LevelError
		if err != nil {
			attrs = append(attrs, "error", err.Error())
			if store.Classify(err) != store.Permanent {
				// the store's outage, told as such: not a fault of the
				// server's
				level = slog.LevelWarn
			}
		}
		l.log.Log(context.Background(), level, msg, attrs...)
	}
	l.items = l.items[:l.saved]
	l.moved()
}

// drain takes no more events and returns once every event it holds but
// the last is recorded, or given up on.
func (l *eventLog) drain() {
	l.mu.Lock()
	if !l.ended {
		l.ended = true
		close(l.ending)
	}
	l.signal()
	if l.dropped > 0 {
		l.log.Warn("a run's events after its end were dropped", "run", l.run, "events", l.dropped)
		l.dropped = 0
	}
	l.mu.Unlock()
	for {
		l.mu.Lock()
		ok := l.broken || l.saved == len(l.items)
		ch := l.changed
		l.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-l.done:
		}
	}
}

// agrees reports whether an event of type typ says what a run's record
// with status says.
func agrees(typ string, status store.RunStatus) bool {
	switch status {
	case store.RunSucceeded:
		return typ == string(engine.RunEnd)
	case store.RunFailed, store.RunCancelled:
		return typ == string(engine.RunError)
	case store.RunQueued:
		return typ == string(api.RunRequeued)
	}
	return true
}

// lastEvents are the events that end the drained log as a run's record
// with status says, to be recorded with the record: the run's own last
// event when it agrees, or else one that does (run_requeued for a run
// queued again, a run_end or run_error the engine could not emit). A log
// with no event at all gets none.
func (l *eventLog) lastEvents(status store.RunStatus, msg string) []store.EventRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	seq := l.first + int64(len(l.items)) + 1
	if h := l.held; h != nil && agrees(h.typ, status) {
		return []store.EventRecord{{Seq: seq, Data: h.data}}
	}
	last := l.stored
	if n := len(l.items); n > 0 {
		last = l.items[n-1].typ
	}
	if l.held == nil && (last == "" || agrees(last, status)) {
		return nil
	}
	return []store.EventRecord{{Seq: seq, Data: lastEvent(l.run, l.thread, status, msg)}}
}

// lastEvent is the event that tells a run's record with status (a
// run_end without the state, as the engine's are recorded).
func lastEvent(run, thread string, status store.RunStatus, msg string) []byte {
	ev := engine.Event{Run: run, Thread: thread, Time: time.Now().UTC(), Error: msg}
	switch status {
	case store.RunSucceeded:
		ev.Type = engine.RunEnd
	case store.RunQueued:
		ev.Type = api.RunRequeued
		if ev.Error == "" {
			ev.Error = "the server stopped before the run ended: it is queued again, and resumes on another server or on this one once it restarts"
		}
	default:
		ev.Type = engine.RunError
	}
	data, _ := ev.JSON()
	return data
}

// close ends the log with the last events recorded with the run's end
// (none when it was not recorded): streams get them and return.
func (l *eventLog) close(last []store.EventRecord) {
	l.drain()
	l.mu.Lock()
	l.broken = true // nothing more is recorded
	l.items = l.items[:l.saved]
	if len(last) > 0 && last[0].Seq == l.first+int64(len(l.items))+1 {
		for _, ev := range last {
			l.items = append(l.items, logged{seq: ev.Seq, typ: eventType(ev.Data), data: ev.Data})
		}
		l.saved = len(l.items)
	}
	l.closed = true
	l.moved()
	l.signal()
	l.mu.Unlock()
	<-l.done
}

// sent is the recorded run_end numbered seq as streams send it, with
// the run's final state, when it is the run's own end this log held
// and it encodes (nil otherwise), once it is encoded.
func (l *eventLog) sent(seq int64) []byte {
	l.mu.Lock()
	enc := l.heldSent
	if l.held == nil || l.held.seq != seq || l.held.typ != string(engine.RunEnd) {
		enc = nil
	}
	l.mu.Unlock()
	if enc == nil {
		return nil
	}
	<-enc.done
	return enc.data
}

// encoding is an event's JSON, encoded on a goroutine of its own: the
// run's end with its whole state (tens of kilobytes for a long thread) is
// encoded while the run's last commit is under way, not before it.
type encoding struct {
	done chan struct{}
	data []byte // nil when the event does not encode
}

// encodeBeside starts encoding ev (nil: no event, no encoding).
func encodeBeside(ev *engine.Event) *encoding {
	if ev == nil {
		return nil
	}
	e := &encoding{done: make(chan struct{})}
	go func() {
		defer close(e.done)
		e.data, _ = ev.JSON()
	}()
	return e
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
	return out, l.closed, l.changed
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
	data := lastEvent(rec.ID, publicID(rec.Thread), rec.Status, rec.Error)
	err = cat.AppendEvents(ctx, rec.ID, "", []store.EventRecord{{Seq: last.Seq + 1, Data: data}})
	if errors.Is(err, store.ErrExists) {
		return nil // another server gave it its last event
	}
	if err == nil {
		notes.send(ctx, noteRun+rec.ID)
	}
	return err
}
