// A run this server executes: its record as it changes, the stop asked
// of it, the events it observes, and how it ends.

package server

import (
	"context"
	"errors"
	"sync"

	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/store"
)

// liveRun is a run running on this server.
type liveRun struct {
	m      *manager
	flow   *loaded
	events *eventLog
	how    launch
	// started receives nil once the run has started, or the error that
	// refused it; done is closed when it has ended and its record says so.
	started chan error
	begun   chan struct{} // closed at run_start
	done    chan struct{}
	stop    chan struct{}
	// retry is how the run waits for the store through outages: its
	// steps, its events and what it reads, within one budget
	retry *store.Retrier
	// unended says its end (or its refusal) could not be recorded: once
	// it is no longer live, the sweep of orphans runs it again. Only its
	// own goroutine (execute) reads and writes it.
	unended bool

	mu       sync.Mutex
	rec      store.RunRecord
	cancel   context.CancelFunc
	why      store.StopReason // the stop asked of the run, when one was
	shutdown bool             // this server's shutdown asked it to stop
	state    map[string]any
	refusal  error // why it was refused before it started
}

// record returns a copy of the run's record.
func (lr *liveRun) record() store.RunRecord {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	return lr.rec
}

// request asks the run to stop: StopCancel now, any other at its next
// step boundary.
func (lr *liveRun) request(why store.StopReason) {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	if why == stopShutdown {
		lr.shutdown = true
	}
	first := lr.why == ""
	now := why == store.StopCancel || why == stopTakenOver
	if first || now {
		lr.why = why
	}
	if now && lr.cancel != nil {
		lr.cancel()
	}
	if first {
		close(lr.stop)
	}
}

func (lr *liveRun) isStarted() bool {
	select {
	case <-lr.begun:
		return true
	default:
		return false
	}
}

func (lr *liveRun) stopReason() store.StopReason {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	return lr.why
}

// observe receives the run's events: it signals the start, and logs every
// event for the run's streams.
func (lr *liveRun) observe(ev engine.Event) {
	if ev.Type == engine.RunStart && !lr.isStarted() {
		close(lr.begun)
		lr.m.s.metrics.active.Inc()
		lr.started <- nil
	}
	lr.m.s.metrics.event(lr.rec.Flow, ev)
	lr.events.add(ev)
}

// refuse forgets a run refused before it started: nothing of it stays
// recorded, and its caller hears why.
func (lr *liveRun) refuse(err error) {
	m := lr.m
	lr.events.close(nil)
	expect := lr.record().State()
	// waiting through the store's outages: a deletion tried again that
	// finds nothing was done by the attempt before
	retry := &store.Retrier{Budget: m.s.cfg.StoreWait}
	for attempt := 0; ; attempt++ {
		derr := retry.Do(m.records, func(again bool) error {
			err := m.s.cat.DeleteRun(m.records, lr.rec.ID, expect)
			if again && errors.Is(err, store.ErrNotFound) {
				return nil
			}
			return err
		})
		if errors.Is(derr, store.ErrRunChanged) && attempt < 8 {
			if fresh, rerr := m.s.cat.Run(m.records, lr.rec.Tenant, lr.rec.ID); rerr == nil && fresh.Status == store.RunRunning && fresh.Server == m.id {
				expect = fresh.State()
				continue
			}
		}
		if derr != nil {
			m.s.log.Warn("forgetting a refused run", "run", lr.rec.ID, "error", derr.Error())
			if store.Classify(derr) != store.Permanent {
				// still recorded as running here: the sweep of orphans
				// ends it once the store is back
				lr.unended = true
			}
		}
		break
	}
	lr.mu.Lock()
	lr.refusal = err
	lr.rec.Status, lr.rec.Error = store.RunFailed, toAPIError(err).Message
	lr.mu.Unlock()
	lr.started <- err
	close(lr.done)
}

// outcome is how a run ends: its status and message, from the error it
// returned, whether it started, whether this server's shutdown stopped
// it, and the stop asked of it.
func outcome(err error, started, shutdown bool, stop store.StopReason) (store.RunStatus, string) {
	var p *runPanic
	stopped := errors.Is(err, engine.ErrStopped) || errors.Is(err, context.Canceled)
	switch {
	case err == nil:
		return store.RunSucceeded, ""
	case errors.As(err, &p):
	case (stop == store.StopCancel || stop == store.StopInterrupt) && (stopped || !started):
		return store.RunCancelled, stop.Message()
	case shutdown && (stopped || !started):
		return store.RunQueued, ""
	case store.Classify(err) != store.Permanent:
		// the store was away longer than the run may wait: the run is
		// not failed for it, but queued again to go on once it is back
		return store.RunQueued, storeAway
	}
	return store.RunFailed, err.Error()
}

// storeAway is what a run queued again for the store's outage says.
const storeAway = "the store was unavailable longer than the run may wait: it is queued again, and goes on once the store is back"

// finish records how the run ended. A run this server's shutdown stopped
// between steps is queued again to resume, here after a restart or on
// another server.
func (lr *liveRun) finish(res *engine.Result, err error) {
	m := lr.m
	ctx := m.records
	started := lr.isStarted()
	if started {
		m.s.metrics.active.Dec()
	}
	defer close(lr.done)
	var p *runPanic
	if err != nil && !started && !errors.As(err, &p) {
		// a run taken over from a server that died may have finished
		// there before it could say so: the thread's checkpoints tell
		if head, herr := m.s.eng().Store.Head(ctx, lr.rec.Thread); herr == nil &&
			head.Run == lr.rec.ID && len(head.Next) == 0 {
			res, err = &engine.Result{State: head.Values, Checkpoint: head.Seq}, nil
		}
	}
	var state map[string]any
	var checkpoint uint64
	if res != nil {
		state, checkpoint = res.State, res.Checkpoint
	} else if head, herr := m.s.eng().Store.Head(ctx, lr.rec.Thread); herr == nil {
		checkpoint = head.Seq
	}
	lr.mu.Lock()
	why, shutdown, rec := lr.why, lr.shutdown, lr.rec
	lr.mu.Unlock()
	// every event is recorded before the run's end is, the events that
	// tell the end with it, and streams hear them only once the run is
	// recorded as ended, so that a client may start the thread's next run
	// as soon as it hears it
	lr.events.drain()
	var out store.RunRecord
	var written []store.EventRecord
	var werr error
	end, tried := lr.events.recordedEnd()
	if end == nil {
		out, written, werr = m.settle(rec, func(cur store.RunRecord) (store.RunRecord, []store.EventRecord) {
			stop := cur.Stop
			if stop == "" && (why == store.StopCancel || why == store.StopInterrupt) {
				stop = why
			}
			status, msg := outcome(err, started, shutdown, stop)
			evs := lr.events.lastEvents(status, msg)
			cur.Status, cur.Error, cur.Stop, cur.Checkpoint, cur.FlowVersion = status, msg, "", checkpoint, rec.FlowVersion
			if status == store.RunQueued {
				cur.Server = ""
				if started && msg != storeAway {
					// stopped between steps: its input is committed. (A
					// run the store stopped may have committed nothing; as a
					// named run it continues from its own checkpoint, if the
					// thread has one, or starts again.)
					cur.Resume, cur.Interrupt = true, false
				}
			} else {
				cur.Finished = m.now()
			}
			return cur, evs
		})
		if errors.Is(werr, errNotOurs) && tried != nil && out.WriteID == tried.Record.WriteID {
			// the last commit recorded the run's end though it seemed
			// to fail: its reply was lost
			end, werr = tried, nil
		}
	}
	if end != nil {
		// recorded with the run's last commit: the thread's head is
		// the run's end, whatever came after it
		out, written = *end.Record, end.Events
		if err != nil {
			m.s.log.Warn("a run ended with its last commit, then failed: its record says it succeeded", "run", rec.ID, "error", err.Error())
		}
	}
	// the live run's record says how it ended before its streams hear
	// the end: a client that reads the run once it hears it finds it
	// ended (and its output)
	lr.mu.Lock()
	lr.rec, lr.state = out, state
	lr.mu.Unlock()
	lr.events.close(written)
	switch {
	case errors.Is(werr, errNotOurs):
		m.s.log.Warn("a run's record was taken over by another server before it ended here", "run", rec.ID, "server", out.Server, "status", string(out.Status))
	case werr != nil && store.Classify(werr) != store.Permanent:
		// its record still says it runs here: once it is no longer live
		// here, the sweep of orphans runs it again, which finds it ended
		// (or goes on with it) and records that
		lr.unended = true
		m.s.log.Warn("recording a run's end: the store is unavailable; the run is ended again once it is back", "run", rec.ID, "error", werr.Error())
	case werr != nil:
		m.s.log.Error("recording a run's end", "run", rec.ID, "error", werr.Error())
	}
	if end == nil {
		// (the commit that recorded the end sent them)
		m.s.notes.send(ctx, noteRun+rec.ID)
		m.s.notes.send(ctx, noteQueue)
	}
	if werr == nil && out.Status != store.RunQueued {
		m.s.metrics.runs.WithLabelValues(rec.Flow, string(out.Status)).Inc()
	}
	m.s.log.Info("run ended", "run", rec.ID, "thread", rec.Thread, "flow", rec.Flow, "status", string(out.Status))
	select {
	case lr.started <- err:
	default:
	}
}

// succeeded is the run's record as it succeeds at its checkpoint, as
// finish would record it, and what its record holds now.
func (lr *liveRun) succeeded(checkpoint uint64) (store.RunRecord, store.RunState) {
	lr.mu.Lock()
	rec := lr.rec
	lr.mu.Unlock()
	expect := rec.State()
	rec.Status, rec.Error, rec.Stop, rec.Checkpoint, rec.Finished = store.RunSucceeded, "", "", checkpoint, lr.m.now()
	return rec, expect
}

// result is the run's record and final state, after it has ended.
func (lr *liveRun) result() (store.RunRecord, map[string]any) {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	return lr.rec, lr.state
}
