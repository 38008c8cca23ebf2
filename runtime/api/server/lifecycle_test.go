package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

// hooked is a store whose calls a test intercepts, with hooks it sets
// (set) while servers use the store.
type hooked struct {
	full
	mu sync.Mutex
	h  hooks
}

type hooks struct {
	enqueue      func()                           // before EnqueueRun
	claim        func() bool                      // before ClaimRun: false claims nothing
	appendEvents func(ctx context.Context) error  // before AppendEvents
	commit       func(cp *store.Checkpoint)       // before Commit
	committed    func(cp *store.Checkpoint) error // after Commit succeeded: the error it returns instead
	del          func(thread string) error        // before the store deletes a thread and all of it
	events       func(after int64, n int)         // after Events, with how many it read
	runs         func(limit int)                  // before Runs
	beat         func() error                     // before Beat
	acquire      func(thread, owner string)       // before Acquire
	updateRun    func(r *store.RunRecord)         // before UpdateRun
}

func (h *hooked) set(fn func(*hooks)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	fn(&h.h)
}

func (h *hooked) get() hooks {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.h
}

func (h *hooked) EnqueueRun(ctx context.Context, r *store.RunRecord, p store.BusyPolicy) (bool, error) {
	if fn := h.get().enqueue; fn != nil {
		fn()
	}
	return h.full.EnqueueRun(ctx, r, p)
}

func (h *hooked) ClaimRun(ctx context.Context, server, id string, now time.Time) (*store.RunRecord, error) {
	if fn := h.get().claim; fn != nil && !fn() {
		return nil, store.ErrNotFound
	}
	return h.full.ClaimRun(ctx, server, id, now)
}

func (h *hooked) AppendEvents(ctx context.Context, run, holder string, evs []store.EventRecord) error {
	if fn := h.get().appendEvents; fn != nil {
		if err := fn(ctx); err != nil {
			return err
		}
	}
	return h.full.AppendEvents(ctx, run, holder, evs)
}

func (h *hooked) Commit(ctx context.Context, cp *store.Checkpoint) error {
	if fn := h.get().commit; fn != nil {
		fn(cp)
	}
	err := h.full.Commit(ctx, cp)
	if fn := h.get().committed; fn != nil && err == nil {
		err = fn(cp)
	}
	return err
}

func (h *hooked) UpdateRun(ctx context.Context, r *store.RunRecord, expect store.RunState, evs []store.EventRecord) error {
	if fn := h.get().updateRun; fn != nil {
		fn(r)
	}
	return h.full.UpdateRun(ctx, r, expect, evs)
}

func (h *hooked) Delete(ctx context.Context, thread string) error {
	if fn := h.get().del; fn != nil {
		if err := fn(thread); err != nil {
			return err
		}
	}
	return h.full.Delete(ctx, thread)
}

func (h *hooked) Events(ctx context.Context, run string, after int64, limit int) ([]store.EventRecord, error) {
	evs, err := h.full.Events(ctx, run, after, limit)
	if fn := h.get().events; fn != nil {
		fn(after, len(evs))
	}
	return evs, err
}

func (h *hooked) Acquire(ctx context.Context, thread, owner string, ttl time.Duration) error {
	if fn := h.get().acquire; fn != nil {
		fn(thread, owner)
	}
	return h.full.Acquire(ctx, thread, owner, ttl)
}

func (h *hooked) Beat(ctx context.Context, server string) error {
	if fn := h.get().beat; fn != nil {
		if err := fn(); err != nil {
			return err
		}
	}
	return h.full.Beat(ctx, server)
}

func (h *hooked) Runs(ctx context.Context, q store.RunQuery) ([]*store.RunRecord, error) {
	if fn := h.get().runs; fn != nil {
		fn(q.Limit)
	}
	return h.full.Runs(ctx, q)
}

// hookedRuntime opens a store of backend and returns a runtime over it
// with hooks.
func hookedRuntime(t *testing.T, backend string) (*trellis.Runtime, *hooked) {
	t.Helper()
	st, err := store.Open(ctx, storeAddr(t, backend))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	h := &hooked{full: st.(full)}
	return trellis.New(h), h
}

// A cancel sent to one server while the server running the run shuts
// down is not lost: the run ends cancelled (the shutdown does not queue
// it again over the cancel), the cancel answers so, and no server
// resumes it.
func TestCancelDuringTheRunningServersShutdown(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			addr := storeAddr(t, b.addr)
			flows := stepFlows(t, 600)
			a := serve(t, openRuntime(t, addr), flows, "")
			other := serve(t, openRuntime(t, addr), flows, a.acme.Key)
			if _, err := a.acme.CreateThread(ctx, api.CreateThread{ID: "t", Flow: "steps"}); err != nil {
				t.Fatal(err)
			}
			run, err := a.acme.StartRun(ctx, "t", api.StartRun{Input: map[string]any{"said": "hi"}})
			if err != nil || run.Status != api.RunRunning {
				t.Fatalf("start: %+v %v", run, err)
			}
			time.Sleep(100 * time.Millisecond) // the first step is under way
			go a.shutdown(time.Minute)
			eventually(t, 5*time.Second, "the shutdown", func() bool {
				a.srv.runs.mu.Lock()
				defer a.srv.runs.mu.Unlock()
				return a.srv.runs.stopping
			})
			got, err := other.acme.Cancel(ctx, "t", run.ID)
			if err != nil || got.Status != api.RunCancelled {
				t.Fatalf("the cancel through the other server answered %+v %v", got, err)
			}
			a.shutdown(time.Minute)
			// the other server would claim a run queued again by now
			time.Sleep(time.Second)
			got, err = other.acme.Run(ctx, "t", run.ID)
			if err != nil || got.Status != api.RunCancelled {
				t.Fatalf("the run after the shutdown: %+v %v", got, err)
			}
			if st, err := other.acme.State(ctx, "t", 0); err != nil || st.Values["n"] == 3 {
				t.Fatalf("the cancelled run went on to the end: %+v %v", st, err)
			}
		})
	}
}

const secretFlow = `version: 1
name: secretive
config:
  token: {type: string, secret: true}
  ms: {type: integer, default: 300}
state:
  schema:
    type: object
    properties:
      saw: {type: string, default: ""}
nodes:
  look: {kind: set, sleep_ms: "config.ms", set: {saw: "config.token ?? 'none'"}}
edges:
  - {from: START, to: look}
  - {from: look, to: END}
`

// The secret configuration of runs that never execute on a server is
// not kept there: not of runs refused, nor of runs queued that end
// elsewhere or are cancelled before they start.
func TestSecretsOfRunsThatNeverRunHere(t *testing.T) {
	addr := storeAddr(t, "sqlite")
	flows := flowsWith(t, map[string]string{"secretive": secretFlow})
	st, err := store.Open(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	h := &hooked{full: st.(full)}
	a := serve(t, trellis.New(h), flows, "")
	if _, err := a.acme.CreateThread(ctx, api.CreateThread{ID: "t", Flow: "secretive"}); err != nil {
		t.Fatal(err)
	}
	// the thread is busy until the test cancels its run (a time would
	// be one a loaded machine's requests may outlast)
	first, err := a.acme.StartRun(ctx, "t", api.StartRun{Config: map[string]any{"ms": 3_600_000}})
	if err != nil {
		t.Fatal(err)
	}
	secret := map[string]any{"token": strings.Repeat("s", 1024)}
	for range 100 {
		if _, err := a.acme.StartRun(ctx, "t", api.StartRun{Config: secret}); !api.IsCode(err, api.CodeThreadBusy) {
			t.Fatalf("a run on a busy thread: %v", err)
		}
	}
	var queued []string
	for range 5 {
		r, err := a.acme.StartRun(ctx, "t", api.StartRun{Config: secret, OnBusy: api.OnBusyEnqueue})
		if err != nil {
			t.Fatal(err)
		}
		queued = append(queued, r.ID)
	}
	for _, id := range queued {
		if r, err := a.acme.Cancel(ctx, "t", id); err != nil || r.Status != api.RunCancelled {
			t.Fatalf("cancel of a queued run: %+v %v", r, err)
		}
	}
	if r, err := a.acme.Cancel(ctx, "t", first.ID); err != nil || r.Status != api.RunCancelled {
		t.Fatalf("the first run: %+v %v", r, err)
	}
	secrets := func() int {
		a.srv.runs.mu.Lock()
		defer a.srv.runs.mu.Unlock()
		return len(a.srv.runs.secrets)
	}
	eventually(t, 5*time.Second, fmt.Sprintf("forgetting the secrets (%d kept)", secrets()), func() bool { return secrets() == 0 })

	// a run queued here and run by another server: its secret goes too
	// (the first run, cancelled part way, left the thread unfinished)
	busy, err := a.acme.StartRun(ctx, "t", api.StartRun{Config: map[string]any{"ms": 2000}, OnBusy: api.OnBusyInterrupt})
	if err != nil {
		t.Fatal(err)
	}
	// (the server looks for secrets to forget just as the run is queued:
	// a run the store does not know yet is not one that ended)
	h.set(func(k *hooks) { k.enqueue = func() { a.srv.runs.forgetSecrets(ctx) } })
	if _, err := a.acme.StartRun(ctx, "t", api.StartRun{Config: secret, OnBusy: api.OnBusyEnqueue}); err != nil {
		t.Fatal(err)
	}
	h.set(func(k *hooks) { k.enqueue = nil })
	if secrets() != 1 {
		t.Fatalf("%d secrets kept for the run queued here", secrets())
	}
	// it runs elsewhere: this server claims nothing more, the other
	// takes it once the first run is done
	h.set(func(k *hooks) { k.claim = func() bool { return false } })
	other := serve(t, openRuntime(t, addr), flows, a.acme.Key)
	if _, err := other.acme.Join(ctx, "t", busy.ID); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) { // a bound against a hang
		rs, err := other.acme.Runs(ctx, "t")
		if err == nil && rs[0].Status == api.RunSucceeded {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the queued run did not run elsewhere: %+v %v\n%s", rs[:2], err, other.log.String())
		}
	}
	eventually(t, 5*time.Second, "forgetting the secret of a run another server ran", func() bool { return secrets() == 0 })
}

// A run its caller starts just as the server's shutdown begins is
// stopped like the others (queued again, before it ran a step), not left
// running after Serve returns.
func TestRunStartedAsTheShutdownBegins(t *testing.T) {
	rt, h := hookedRuntime(t, "sqlite")
	a := serve(t, rt, stepFlows(t, 400), "")
	if _, err := a.acme.CreateThread(ctx, api.CreateThread{ID: "t", Flow: "steps"}); err != nil {
		t.Fatal(err)
	}
	entered, proceed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	h.set(func(k *hooks) {
		k.enqueue = func() {
			once.Do(func() {
				close(entered)
				<-proceed
			})
		}
	})
	started := make(chan error, 1)
	go func() {
		_, err := a.acme.StartRun(ctx, "t", api.StartRun{Input: map[string]any{"said": "late"}})
		started <- err
	}()
	<-entered
	go a.shutdown(time.Minute)
	eventually(t, 5*time.Second, "the shutdown", func() bool {
		a.srv.runs.mu.Lock()
		defer a.srv.runs.mu.Unlock()
		return a.srv.runs.stopping
	})
	close(proceed)
	a.shutdown(time.Minute)
	if err := <-started; err != nil && !api.IsCode(err, api.CodeUnavailable) {
		t.Fatalf("the run's start answered %v", err)
	}
	a.srv.runs.mu.Lock()
	live := len(a.srv.runs.live)
	a.srv.runs.mu.Unlock()
	runs, err := a.srv.cat.Runs(ctx, store.RunQuery{Tenant: "acme", Thread: "acme/t"})
	if err != nil {
		t.Fatal(err)
	}
	if live != 0 || len(runs) != 1 || runs[0].Status != store.RunQueued {
		t.Fatalf("after Serve returned: %d runs live, records %+v", live, *runs[0])
	}
	if st, err := rt.State(ctx, "acme/t"); err != nil || st.Values["n"] != 0 {
		t.Fatalf("the run ran steps during the shutdown: %v %v", st, err)
	}
}

// Servers whose clocks disagree do not take each other's live runs: a
// server's heartbeat and its staleness are both judged by the store's
// clock.
func TestSkewedClocksKeepTheirRuns(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			addr := storeAddr(t, b.addr)
			flows := stepFlows(t, 800)
			behind := func(c *Config) { c.clock = func() time.Time { return time.Now().Add(-30 * time.Second) } }
			a := serve(t, openRuntime(t, addr), flows, "", behind)
			other := serve(t, openRuntime(t, addr), flows, a.acme.Key, func(c *Config) { c.DeadAfter = 2 * time.Second })
			if _, err := a.acme.CreateThread(ctx, api.CreateThread{ID: "t", Flow: "steps"}); err != nil {
				t.Fatal(err)
			}
			run, err := a.acme.StartRun(ctx, "t", api.StartRun{Input: map[string]any{"said": "hi"}})
			if err != nil {
				t.Fatal(err)
			}
			done, err := a.acme.Join(ctx, "t", run.ID)
			if err != nil || done.Status != api.RunSucceeded {
				t.Fatalf("the run: %+v %v", done, err)
			}
			if strings.Contains(other.log.String(), "adopting") {
				t.Fatalf("a live server's run was adopted:\n%s", other.log.String())
			}
		})
	}
}

// A store that hangs does not keep Serve from returning: runs and their
// records get until the stop timeout, then a short grace, and Serve
// returns whatever is still stuck.
func TestAHungStoreDoesNotHoldShutdown(t *testing.T) {
	rt, h := hookedRuntime(t, "sqlite")
	a := serve(t, rt, stepFlows(t, 200), "", func(c *Config) { c.StopTimeout = time.Second })
	if _, err := a.acme.CreateThread(ctx, api.CreateThread{ID: "t", Flow: "steps"}); err != nil {
		t.Fatal(err)
	}
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	var hung atomic.Bool
	h.set(func(k *hooks) {
		k.appendEvents = func(context.Context) error {
			if hung.Load() {
				<-hang // as a database that answers nothing, whatever the caller's context says
			}
			return nil
		}
	})
	if _, err := a.acme.StartRun(ctx, "t", api.StartRun{Input: map[string]any{"said": "hi"}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	hung.Store(true)
	// the store answers nothing until the test ends: a Serve that waited
	// for it would never return (shutdown fails the test after a minute)
	a.shutdown(time.Minute)
}

// Deleting a thread is one step as other requests see it: a run started
// while the thread is being deleted is refused, and a deletion that
// fails part way leaves the thread's listing whole and can be retried.
func TestDeletingAThread(t *testing.T) {
	rt, h := hookedRuntime(t, "sqlite")
	a := serve(t, rt, stepFlows(t, 50), "")
	for _, id := range []string{"t", "u", "v"} {
		if _, err := a.acme.CreateThread(ctx, api.CreateThread{ID: id, Flow: "steps"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.acme.RunWait(ctx, "t", api.StartRun{Input: map[string]any{"said": "one"}}); err != nil {
		t.Fatal(err)
	}
	entered, proceed := make(chan struct{}), make(chan struct{})
	h.set(func(k *hooks) {
		k.del = func(thread string) error {
			if thread == "acme/t" {
				close(entered)
				<-proceed
			}
			return nil
		}
	})
	deleted := make(chan error, 1)
	go func() { deleted <- a.acme.DeleteThread(ctx, "t") }()
	<-entered
	type answer struct {
		r   *api.Run
		err error
	}
	started := make(chan answer, 1)
	go func() {
		r, err := a.acme.StartRun(ctx, "t", api.StartRun{Input: map[string]any{"said": "two"}, OnBusy: api.OnBusyEnqueue})
		started <- answer{r, err}
	}()
	select {
	case got := <-started:
		if got.err == nil {
			t.Errorf("a run was accepted on a thread being deleted: %+v", got.r)
		}
	case <-time.After(time.Minute): // the deletion waits for the test until then
		t.Errorf("a run started on a thread being deleted waits for the thread")
	}
	close(proceed)
	if err := <-deleted; err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // what the accepted run would do, it has done
	if _, err := rt.State(ctx, "acme/t"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the deleted thread has checkpoints again: %v", err)
	}
	if logs := a.log.String(); strings.Contains(logs, "level=ERROR") {
		t.Errorf("errors logged:\n%s", logs)
	}

	// a deletion whose transaction fails
	var fail atomic.Bool
	fail.Store(true)
	h.set(func(k *hooks) {
		k.del = func(string) error {
			if fail.CompareAndSwap(true, false) {
				return errors.New("the database went away")
			}
			return nil
		}
	})
	if err := a.acme.DeleteThread(ctx, "u"); err == nil {
		t.Fatal("the failed deletion answered success")
	}
	list, err := a.acme.Threads(ctx, api.ThreadQuery{})
	if err != nil {
		t.Fatalf("the listing after a failed deletion: %v", err)
	}
	for _, th := range list.Threads {
		if th.ID == "u" {
			if _, err := a.acme.State(ctx, "u", 0); err != nil {
				t.Fatalf("thread u is listed, but its state answers %v", err)
			}
		}
	}
	if err := a.acme.DeleteThread(ctx, "u"); err != nil {
		t.Fatalf("the deletion again: %v", err)
	}
	if _, err := a.acme.Thread(ctx, "u"); !api.IsCode(err, api.CodeNotFound) {
		t.Fatalf("the deleted thread: %v", err)
	}
	list, err = a.acme.Threads(ctx, api.ThreadQuery{})
	if err != nil || len(list.Threads) != 1 || list.Threads[0].ID != "v" {
		t.Fatalf("the listing at the end: %+v %v", list, err)
	}
}

// A cancel request whose client gives up ends with it, even when the
// run does not stop yet.
func TestCancelFollowsItsRequest(t *testing.T) {
	rt, h := hookedRuntime(t, "sqlite")
	a := serve(t, rt, stepFlows(t, 100), "")
	if _, err := a.acme.CreateThread(ctx, api.CreateThread{ID: "c", Flow: "steps"}); err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(entered) }); close(release) })
	h.set(func(k *hooks) {
		k.commit = func(cp *store.Checkpoint) {
			if cp.Thread == "acme/c" && cp.Seq == 3 {
				once.Do(func() { close(entered) })
				<-release // a commit the database does not answer, ignoring cancellation
			}
		}
	})
	run, err := a.acme.StartRun(ctx, "c", api.StartRun{Input: map[string]any{"said": "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	<-entered
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := a.acme.Cancel(cctx, "c", run.ID); err == nil {
		t.Fatal("the cancel answered while its run could not stop")
	}
	path := "/v1/threads/c/runs/" + run.ID + "/cancel"
	eventually(t, 3*time.Second, "the cancel request's end", func() bool { return strings.Contains(a.log.String(), "path="+path) })
}

// A server whose notifications' connection drops polls at its full pace
// until it is back.
func TestPollingWhileNotificationsAreLost(t *testing.T) {
	db := storetest.Postgres(t)
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newTCPProxy(t, u.Host)
	direct := *u
	direct.Host = proxy.addr()
	a := serve(t, openRuntime(t, db), stepFlows(t, 10), "", func(c *Config) {
		c.NotifyURL = direct.String()
		c.PollEvery = 100 * time.Millisecond
	})
	eventually(t, 10*time.Second, "hearing notifications", func() bool { return a.srv.notes.heard.Load() })
	if p := a.srv.notes.pollEvery(); p != time.Second {
		t.Fatalf("polls every %s while notified", p)
	}
	proxy.close()
	eventually(t, 5*time.Second, "polling at full pace without notifications", func() bool {
		return a.srv.notes.pollEvery() == 100*time.Millisecond
	})
}

// tcpProxy forwards loopback connections to a server until closed.
type tcpProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln}
	t.Cleanup(p.close)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(s, c); s.Close() }()
			go func() { _, _ = io.Copy(c, s); c.Close() }()
		}
	}()
	return p
}

func (p *tcpProxy) addr() string { return p.ln.Addr().String() }

func (p *tcpProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// The server reads a run's stored events and a thread's runs a page at
// a time, however many there are.
func TestReadsArePaged(t *testing.T) {
	rt, h := hookedRuntime(t, "sqlite")
	a := serve(t, rt, stepFlows(t, 1), "")
	if _, err := a.acme.CreateThread(ctx, api.CreateThread{ID: "t", Flow: "steps"}); err != nil {
		t.Fatal(err)
	}
	run, err := a.acme.RunWait(ctx, "t", api.StartRun{Input: map[string]any{"said": "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	// a long log, as a run streaming many tokens leaves
	stored := storedEvents(t, a.srv.cat, run.ID)
	var more []store.EventRecord
	for i := range 2500 {
		more = append(more, store.EventRecord{Seq: int64(len(stored) + i + 1), Data: []byte(`{"type":"node_output","text":"x"}`)})
	}
	if err := a.srv.cat.AppendEvents(ctx, run.ID, "", more); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var reads []string
	h.set(func(k *hooks) {
		k.events = func(after int64, n int) {
			mu.Lock()
			defer mu.Unlock()
			reads = append(reads, fmt.Sprintf("events after %d: %d", after, n))
		}
	})
	h.set(func(k *hooks) {
		k.runs = func(limit int) {
			mu.Lock()
			defer mu.Unlock()
			reads = append(reads, fmt.Sprintf("runs limit %d", limit))
		}
	})
	n := 0
	for _, err := range a.acme.JoinStream(ctx, "t", run.ID, "") {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != len(stored)+2500 {
		t.Fatalf("streamed %d events of %d", n, len(stored)+2500)
	}
	if _, err := a.acme.Runs(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if err := a.acme.DeleteThread(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, r := range reads {
		var x, k int
		if _, err := fmt.Sscanf(r, "events after %d: %d", &x, &k); err == nil && k > 1000 {
			t.Errorf("one read of %s", r)
		}
		if _, err := fmt.Sscanf(r, "runs limit %d", &k); err == nil && (k <= 0 || k > 1000) {
			t.Errorf("a read of a thread's %s", r)
		}
	}
}

// A panic in a run fails that run, with its stack in the log and a
// count in the metrics, and nothing else: the server and its other runs
// go on.
func TestAPanicFailsItsRunOnly(t *testing.T) {
	rt, h := hookedRuntime(t, "sqlite")
	a := serve(t, rt, stepFlows(t, 1), "")
	for _, id := range []string{"boom", "fine"} {
		if _, err := a.acme.CreateThread(ctx, api.CreateThread{ID: id, Flow: "steps"}); err != nil {
			t.Fatal(err)
		}
	}
	h.set(func(k *hooks) {
		k.commit = func(cp *store.Checkpoint) {
			if cp.Thread == "acme/boom" && cp.Seq == 3 {
				panic("a store with a bug")
			}
		}
	})
	r, err := a.acme.RunWait(ctx, "boom", api.StartRun{Input: map[string]any{"said": "hi"}})
	if err != nil || r.Status != api.RunFailed || !strings.Contains(r.Error, "panic") {
		t.Fatalf("the run that panicked: %+v %v", r, err)
	}
	r, err = a.acme.RunWait(ctx, "fine", api.StartRun{Input: map[string]any{"said": "hi"}})
	if err != nil || r.Status != api.RunSucceeded {
		t.Fatalf("another run after the panic: %+v %v", r, err)
	}
	if logs := a.log.String(); !strings.Contains(logs, "panic") || !strings.Contains(logs, "hooked).Commit") {
		t.Fatalf("the panic's stack is not in the log:\n%s", logs)
	}
	resp, err := http.Get(a.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(b), "trellis_run_panics_total 1") {
		t.Fatalf("no panic counted:\n%s", b)
	}
}

// A server whose heartbeat is not heard loses its runs to another,
// though it is alive: once the other has adopted a run, the first adds
// nothing more to the run's events nor to its record, and stops it; the
// other runs it to its end, with its events one sequence and one end.
func TestALiveServerWhoseRunIsAdopted(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			addr := storeAddr(t, b.addr)
			flows := stepFlows(t, 700)
			st, err := store.Open(ctx, addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			h := &hooked{full: st.(full)}
			a := serve(t, trellis.New(h), flows, "")
			if _, err := a.acme.CreateThread(ctx, api.CreateThread{ID: "t", Flow: "steps"}); err != nil {
				t.Fatal(err)
			}
			// a's run goes no further than its second step's commit
			// until its record says another server took it: a goes on
			// past the adoption, whatever the machine's pace
			adopted := make(chan struct{})
			h.set(func(k *hooks) {
				k.commit = func(cp *store.Checkpoint) {
					if cp.Thread == "acme/t" && cp.Step == 2 && len(cp.Next) > 0 {
						select {
						case <-adopted:
						case <-time.After(time.Minute):
						}
					}
				}
			})
			run, err := a.acme.StartRun(ctx, "t", api.StartRun{Input: map[string]any{"said": "hi"}})
			if err != nil {
				t.Fatal(err)
			}
			// a's beats go unheard; b takes its run
			h.set(func(k *hooks) { k.beat = func() error { return errors.New("the network dropped the beat") } })
			other := serve(t, openRuntime(t, addr), flows, a.acme.Key, func(c *Config) { c.DeadAfter = 500 * time.Millisecond })
			go func() {
				defer close(adopted)
				for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
					if rec, err := st.(store.Catalog).Run(ctx, "acme", run.ID); err == nil && rec.Server == other.srv.runs.id {
						return
					}
				}
			}()
			done, err := other.acme.Join(ctx, "t", run.ID)
			if err != nil || done.Status != api.RunSucceeded || done.State["n"] != 3 {
				t.Fatalf("the adopted run: %+v %v", done, err)
			}
			if !strings.Contains(other.log.String(), "adopting") {
				t.Fatalf("the run was not adopted:\n%s", other.log.String())
			}
			eventually(t, 5*time.Second, "the first server letting the run go", func() bool {
				return strings.Contains(a.log.String(), "records no more of its events")
			})
			var types []string
			for i, ev := range storedEvents(t, other.srv.cat, run.ID) {
				if ev.Seq != int64(i+1) {
					t.Fatalf("stored event %d has seq %d", i+1, ev.Seq)
				}
				types = append(types, eventType(ev.Data))
			}
			// a's part, then b's from where a stopped
			if count(types, "run_start") != 2 || count(types, "run_end")+count(types, "run_error") != 1 || types[len(types)-1] != "run_end" {
				t.Fatalf("stored events %v", types)
			}
			if st, err := other.acme.State(ctx, "t", 0); err != nil || len(st.Values["log"].([]any)) != 1 {
				t.Fatalf("the turn ran %v times: %v", st.Values["log"], err)
			}
		})
	}
}
