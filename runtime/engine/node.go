package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/value"
)

// runNodes runs a superstep's nodes on the run's state: each node that may
// block on a goroutine of its own, inline nodes one after another on this
// goroutine. Once goroutines run, the variables are only read (see
// run.Vars): a step that starts them makes them current first. A step
// that runs a node that may block keeps the thread's lease alive from then
// on. The error is the store's failure to save an update as a pending
// write.
func (r *run) runNodes(ctx context.Context, triggered []*flow.Node, outs []outcome) error {
	blocking := 0
	for _, n := range triggered {
		if !n.Inline {
			blocking++
		}
	}
	if blocking > 0 && r.lease != nil {
		r.lease.keepAlive(ctx)
	}
	if blocking <= 1 {
		for i, n := range triggered {
			r.exec(ctx, n, nil, &outs[i])
		}
		return nil
	}
	r.Vars()
	var wg sync.WaitGroup
	left := int32(blocking)
	last := -1 // the node that completed last, its update not saved yet
	for i, n := range triggered {
		if !n.Inline {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.exec(ctx, n, nil, &outs[i])
				if atomic.AddInt32(&left, -1) == 0 {
					// the step's commit follows: see Pending writes
					last = i
					return
				}
				r.saveOutcome(ctx, &outs[i])
			}()
		}
	}
	for i, n := range triggered {
		if n.Inline {
			r.exec(ctx, n, nil, &outs[i])
		}
	}
	wg.Wait()
	if last >= 0 && !stepCommits(outs) {
		r.saveOutcome(ctx, &outs[last])
	}
	for i := range outs {
		if err := outs[i].saveErr; err != nil {
			return err
		}
	}
	return nil
}

// Pending writes. A step's nodes that may block run side by side, and
// each one's update is saved as a pending write once it completes
// (savePending), so that a run resumed after a crash does not run again
// a node that completed while the others still ran. The node that
// completes last saves nothing: the step's commit follows at once, with
// its update, as it does for a step that runs one node that may block,
// and a crash in between runs that node again, as it would that one's.
// Where the step may not commit (a node of it failed) or pauses, its
// update is saved as the others' were (the pause keeps every update not
// saved: pausing).

// stepCommits reports whether every node of a step completed, so that
// its commit follows.
func stepCommits(outs []outcome) bool {
	for i := range outs {
		if outs[i].err != nil {
			return false
		}
	}
	return true
}

// saveOutcome saves the update of o's node, which ran on the step's
// state, as a pending write, and notes it saved.
func (r *run) saveOutcome(ctx context.Context, o *outcome) {
	o.saveErr = r.savePending(ctx, o, r.seq, r.step)
	o.saved = o.saveErr == nil && o.err == nil && o.attempts > 0 && (r.req.Durability == "" || r.req.Durability == Sync)
}

// outcome is one node's result in a superstep.
type outcome struct {
	node *flow.Node
	// view is the one its attempts run on (see view)
	view     *view
	update   kind.Update
	err      error
	attempts int
	took     time.Duration
	route    *flow.Node // on_error route taken
	degraded string     // why the update is a fallback
	cached   bool       // the update was replayed from the node's cache
	repeats  bool       // the update writes a field more than once
	// saveErr is the store's failure to save the node's update as a
	// pending write: the run's failure, not the node's, so on_error does
	// not apply to it.
	saveErr error
	// saved is set once the update was saved as a pending write
	saved bool
	// host is the view of the attempt a nested node runs in (nil for the
	// step's nodes): the node's events pass its gate.
	host *view
}

// emitFor sends an event of o's node: through the gate of the attempt it
// is nested in, if any.
func (r *run) emitFor(o *outcome, ev Event) {
	if o.host != nil {
		o.host.emit(ev)
		return
	}
	ev.Step = r.step
	r.emit(ev)
}

// varsOr is vars, or the run's variables when vars is nil (a node of the
// step).
func (r *run) varsOr(vars map[string]any) map[string]any {
	if vars == nil {
		return r.Vars()
	}
	return vars
}

// fallback evaluates a node's on_error.set.
func (r *run) fallback(n *flow.Node, vars map[string]any, cause error) (kind.Update, error) {
	if len(n.OnError.Set) == 0 {
		return nil, nil
	}
	ev := maps.Clone(vars)
	ev["error"] = cause.Error()
	upd := make(kind.Update, 0, len(n.OnError.Set))
	for _, f := range n.OnError.SetOrder {
		v, err := n.OnError.Set[f].Eval(ev)
		if err != nil {
			return nil, fmt.Errorf("set %s: %w", f, err)
		}
		upd = append(upd, kind.FieldValue{Field: f, Value: v})
	}
	return upd, nil
}

// exec runs one node with its retry and timeout policy, over vars for a
// nested node, over the run's state for a node of the step (vars nil).
func (r *run) exec(ctx context.Context, n *flow.Node, vars map[string]any, o *outcome) {
	o.cached, o.repeats, o.saved = false, false, false
	if o.route != nil || o.saveErr != nil {
		o.route, o.saveErr = nil, nil
	}
	if o.view == nil {
		o.view = newView(o.host)
	}
	if o.view.usage != nil {
		o.view.usage = nil
	}
	if o.host == nil && r.pending != nil {
		if ws, ok := r.pending[n.Name]; ok {
			// completed before the run stopped: take its saved update,
			// and the documents it put
			ws, puts := splitPuts(ws)
			r.keepSavedPuts(n.Name, puts)
			o.node, o.update, o.err, o.attempts, o.took, o.degraded = n, updateOf(ws), nil, 0, 0, ""
			return
		}
	}
	switch {
	case n.Cache != nil:
		r.execCached(ctx, n, vars, o)
	case r.e.Tracer == nil:
		r.attempt(ctx, n, vars, o)
	default:
		r.execNode(ctx, n, vars, o)
	}
}

// execNode runs a node's attempts, traced as the run asks.
func (r *run) execNode(ctx context.Context, n *flow.Node, vars map[string]any, o *outcome) {
	if r.e.Tracer == nil {
		r.attempt(ctx, n, vars, o)
		return
	}
	step := r.step
	if o.host != nil {
		step, _, _ = o.host.position()
	}
	ctx, end := r.e.Tracer.StartNode(ctx, TracedNode{Flow: r.g.Name, Thread: r.req.Thread, Run: r.id, Node: n.Name, Kind: n.Kind, Step: step})
	r.attempt(ctx, n, vars, o)
	end(o.attempts, o.degraded, o.err)
}

// attempt runs a node until it succeeds or its retries are spent: each
// failure that is not permanent waits the retry policy's backoff (doubling
// up to its maximum) and tries again; after the last, a node that has a
// Fallback produces its stand-in update, else the outcome holds the error
// for the barrier (and on_error) to deal with.
func (r *run) attempt(ctx context.Context, n *flow.Node, vars map[string]any, o *outcome) {
	var start time.Time
	timed := r.req.Observe != nil
	if timed {
		start = time.Now()
	}
	// what is unchanged is not written again (see begin)
	o.took = 0
	if o.node != n {
		o.node = n
	}
	backoff := n.Retry.Backoff
	impl := r.impl(n)
	if r.req.StandIns[n].NoBackoff {
		backoff = 0
	}
	// the attempts are numbered as the node's events tell them: a node
	// that did its work again within one (kind.State.Retrying) numbers
	// the next after it; the retry policy counts tries
attempts:
	for attempt, tries := 1, 1; ; attempt, tries = attempt+1, tries+1 {
		o.attempts = attempt
		r.begin(o.view, n, vars, attempt)
		ran := o.view
		var upd kind.Update
		var err error
		if n.Inline && n.Timeout <= 0 {
			// never blocks: run here
			upd, err = safeRun(ctx, impl, o.view)
		} else {
			upd, err = r.call(ctx, n, impl, o)
		}
		// an attempt given up on and not joined keeps its view: o.view
		// is another one now
		st := o.view
		if st == ran && ran.attempt > attempt {
			attempt = ran.attempt
			o.attempts = attempt
		}
		if err == nil {
			o.succeed(upd, st.degraded)
			break
		}
		if _, paused := kind.PausedBy(err); paused || isInterrupt(err) {
			// the node paused the run, or what it ran did: no retry, no
			// fallback
			o.update, o.err, o.degraded = nil, err, ""
			break
		}
		if ctx.Err() != nil || tries >= n.Retry.Attempts || kind.IsPermanent(err) {
			if fb, ok := impl.(kind.Fallback); ok && ctx.Err() == nil && !kind.IsFails(err) {
				upd, ferr := safeFallback(ctx, fb, st, err)
				if ferr == nil {
					o.succeed(upd, err.Error())
					break
				}
				if _, paused := kind.InterruptPayload(ferr); paused {
					// the fallback paused the run (a tool call it makes
					// waits for approval)
					o.update, o.err, o.degraded = nil, ferr, ""
					break
				}
				err = fmt.Errorf("%w; fallback: %v", err, ferr)
			}
			o.update, o.err, o.degraded = nil, err, ""
			break
		}
		if r.req.Observe != nil {
			r.emitFor(o, Event{Type: NodeRetry, Node: n.Name, Kind: n.Kind, Attempt: attempt, Error: err.Error(), Duration: backoff})
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			o.update, o.err, o.degraded = nil, ctx.Err(), ""
			break attempts
		case <-t.C:
		}
		backoff = min(time.Duration(float64(backoff)*n.Retry.Factor), n.Retry.MaxBackoff)
	}
	if timed {
		o.took = time.Since(start)
	}
}

// succeed records an attempt's update. An outcome serves the same node
// step after step, its update often in the same buffer: what is unchanged
// is not written again (see begin).
func (o *outcome) succeed(upd kind.Update, degraded string) {
	if len(upd) != len(o.update) || (upd == nil) != (o.update == nil) || len(upd) > 0 && &upd[0] != &o.update[0] {
		o.update = upd
	}
	if o.err != nil {
		o.err = nil
	}
	if o.degraded != degraded {
		o.degraded = degraded
	}
}

// call runs one attempt on o's view on a goroutine of its own, turning a
// panic into an error and enforcing the node's timeout: the attempt is
// given up (see abandon) when its timeout passes or the run's context ends
// first. (An inline node without a timeout runs on the caller's
// goroutine.)
func (r *run) call(ctx context.Context, n *flow.Node, impl kind.Node, o *outcome) (kind.Update, error) {
	v := o.view
	actx := ctx
	if n.Timeout > 0 {
		var cancel context.CancelFunc
		actx, cancel = context.WithTimeout(ctx, n.Timeout)
		defer cancel()
	}
	done := make(chan attemptResult, 1)
	go func() {
		u, e := safeRun(actx, impl, v)
		// an update returned after the attempt was given up is late
		passed := true
		if e == nil {
			if passed = v.gate.enter(); passed {
				v.gate.exit()
			} else {
				r.drop()
			}
		}
		done <- attemptResult{u, e, passed}
	}()
	var res attemptResult
	select {
	case res = <-done:
	case <-actx.Done():
		select {
		case res = <-done:
			// it returned as its time ran out: its result stands
		default:
			r.abandon(o, done)
			return nil, ended(ctx, n.Timeout)
		}
	}
	if res.err != nil && n.Timeout > 0 && errors.Is(actx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
		return nil, ended(ctx, n.Timeout)
	}
	return res.upd, res.err
}

// impl is what runs as n in this run: its stand-in (Request.StandIns),
// else its own code.
func (r *run) impl(n *flow.Node) kind.Node {
	if si, ok := r.req.StandIns[n]; ok {
		return si.Node
	}
	return n.Impl
}

// safeRun, safeFallback and safeAsk call a node's code, turning a panic
// into the node's error: a node that panics fails as one that returns an
// error does.
func safeRun(ctx context.Context, impl kind.Node, st kind.State) (upd kind.Update, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return impl.Run(ctx, st)
}

func safeFallback(ctx context.Context, fb kind.Fallback, st kind.State, cause error) (upd kind.Update, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return fb.Fallback(ctx, st, cause)
}

func safeAsk(a kind.Asker, st kind.State) (payload any, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return a.Ask(st)
}

// execCached runs a node that has a cache setting: a kept result for its
// key stands for the run; else the node runs, and a result it worked out
// (not a fallback, not a failure) is kept.
func (r *run) execCached(ctx context.Context, n *flow.Node, vars map[string]any, o *outcome) {
	c, ok := store.CacheOf(r.e.Store)
	if !ok {
		r.execNode(ctx, n, vars, o)
		return
	}
	key, err := r.cacheKey(n, r.varsOr(vars))
	if err != nil {
		r.execNode(ctx, n, vars, o)
		return
	}
	if v, hit, err := c.CacheGet(ctx, key, time.Now()); err == nil && hit {
		if upd, err := decodeUpdate(v); err == nil {
			o.node, o.update, o.err, o.attempts, o.took, o.degraded, o.cached = n, upd, nil, 0, 0, "", true
			return
		}
	}
	r.execNode(ctx, n, vars, o)
	if o.err != nil || o.degraded != "" || ctx.Err() != nil {
		return
	}
	b, err := encodeUpdate(o.update)
	if err != nil {
		return
	}
	now := time.Now()
	var expires time.Time
	if n.Cache.TTL > 0 {
		expires = now.Add(n.Cache.TTL)
	}
	if o.host != nil {
		// a nested node keeps its result only while its host's attempt
		// stands
		if !o.host.gate.enter() {
			r.drop()
			return
		}
		defer o.host.gate.exit()
	}
	_ = c.CachePut(ctx, key, b, now, expires)
}

// cacheKey is a node's cache key: its flow, its name and the value of its
// cache.key expression.
func (r *run) cacheKey(n *flow.Node, vars map[string]any) (string, error) {
	v, err := n.Cache.Key.Eval(vars)
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	h.Write([]byte(r.g.Name + "\x00" + n.Path + "\x00"))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// cachedWrite is one field of a kept update.
type cachedWrite struct {
	Field string          `json:"f"`
	Value json.RawMessage `json:"v"`
}

func encodeUpdate(upd kind.Update) ([]byte, error) {
	out := make([]cachedWrite, len(upd))
	for i, fv := range upd {
		b, err := json.Marshal(fv.Value)
		if err != nil {
			return nil, err
		}
		out[i] = cachedWrite{fv.Field, b}
	}
	return json.Marshal(out)
}

func decodeUpdate(b []byte) (kind.Update, error) {
	var ws []cachedWrite
	if err := json.Unmarshal(b, &ws); err != nil {
		return nil, err
	}
	upd := make(kind.Update, len(ws))
	for i, w := range ws {
		v, err := value.Decode(w.Value)
		if err != nil {
			return nil, err
		}
		upd[i] = kind.FieldValue{Field: w.Field, Value: v}
	}
	return upd, nil
}
