// Stopping runs: a cancel, wherever the run runs, and a server's
// shutdown, which stops its runs at their next step boundary and queues
// them again.

package server

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/trellisflow/trellis/runtime/store"
)

// cancel cancels a run wherever it runs: a queued one now, a running one
// through its server (now, when it runs here). It returns the run's
// record once the run has ended, or as it is when ctx ends first.
func (m *manager) cancel(ctx context.Context, tenant, id string) (*store.RunRecord, error) {
	woken, release := m.s.notes.wait(id)
	defer func() { release() }()
	rec, err := m.s.cat.RequestStop(ctx, tenant, id, store.StopCancel)
	if err != nil {
		return nil, err
	}
	if rec.Status == store.RunCancelled {
		// cancelled while queued: a run queued again has events to end
		if err := closeLog(ctx, m.s.cat, m.s.notes, rec); err != nil {
			m.s.log.Warn("ending the events of a cancelled run", "run", id, "error", err.Error())
		}
	}
	if lr := m.get(id); lr != nil {
		lr.request(store.StopCancel)
		select {
		case <-lr.done:
		case <-ctx.Done():
		}
		out := lr.record()
		return &out, nil
	}
	if !rec.Status.Done() && rec.Status != store.RunQueued {
		m.s.notes.send(ctx, noteStop)
	}
	for !rec.Status.Done() {
		select {
		case <-woken:
		case <-ctx.Done():
			return rec, nil
		}
		release()
		woken, release = m.s.notes.wait(id)
		if rec, err = m.s.cat.Run(ctx, tenant, id); err != nil {
			return nil, err
		}
	}
	return rec, nil
}

// shutdown stops claiming runs and stops the running ones at their next
// step boundary, queueing them again to resume; when ctx ends first, it
// cancels them, and after stopGrace gives up on those that still go on:
// it returns whatever they do.
func (m *manager) shutdown(ctx context.Context) {
	m.mu.Lock()
	if m.stopping {
		m.mu.Unlock()
		<-m.shutDone
		return
	}
	m.stopping = true
	live := slices.Collect(maps.Values(m.live))
	m.mu.Unlock()
	defer close(m.shutDone)
	for _, lr := range live {
		lr.request(stopShutdown)
	}
	done := make(chan struct{})
	go func() {
		m.starting.Wait()
		m.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		m.s.log.Warn("the stop timeout is over: cancelling the runs still going")
		m.cancelRuns()
		select {
		case <-done:
		case <-time.After(stopGrace):
			m.mu.Lock()
			left := slices.Collect(maps.Keys(m.live))
			m.mu.Unlock()
			m.s.log.Error("giving up on runs that do not stop: another server adopts them once this one is gone", "runs", left)
			m.giveUp()
			close(m.abandoned)
			select {
			case <-done:
			case <-time.After(time.Second):
			}
		}
	}
	close(m.quit)
	<-m.loopDone
	<-m.beatDone
	m.cancelRuns()
	m.giveUp()
	m.mu.Lock()
	for id := range m.secrets {
		if _, ok := m.live[id]; !ok {
			delete(m.secrets, id)
		}
	}
	m.mu.Unlock()
}
