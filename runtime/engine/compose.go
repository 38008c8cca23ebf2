package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/schema"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/value"
)

// NSSep separates a thread's id from the namespace of a child flow's
// thread (THREAD|NODE:SEQ), and the levels of nested namespaces. Thread
// ids a person creates cannot hold it.
const NSSep = store.ChildSep

// ChildThread is the thread of the child flow a node ran under namespace
// ns of thread.
func ChildThread(thread, ns string) string { return thread + NSSep + ns }

// IsNamespace reports whether ns is a child flow's namespace as RunFlow
// makes them: NODE:SEQ or NODE[KEY]:SEQ, nested levels joined by NSSep.
func IsNamespace(ns string) bool { return namespaceFormat.MatchString(ns) }

var namespaceFormat = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\[[0-9]+\])?:[0-9]+(\|[A-Za-z_][A-Za-z0-9_]*(\[[0-9]+\])?:[0-9]+)*$`)

// resolveConfig gives a run its configuration: the flow's defaults,
// overlaid by the values recorded for the run (a resumed run's), then by
// the values the request gives. Every value is checked against its
// entry's schema; a key the flow does not declare is refused. It returns
// the configuration and the part a checkpoint may record (given values,
// not secret ones).
func resolveConfig(g *flow.Graph, recorded, given map[string]any) (cfg, record map[string]any, err error) {
	if len(g.Config) == 0 {
		if len(given) > 0 {
			k := sortedKeys(given)[0]
			return nil, nil, &InputError{Field: "config." + k, Reason: "this flow declares no run configuration"}
		}
		return nil, nil, nil
	}
	cfg = make(map[string]any, len(g.Config))
	for _, f := range g.Config {
		if f.HasDefault {
			cfg[f.Name] = f.Default
		}
	}
	maps.Copy(cfg, recorded)
	var probs inputProblems
	for _, k := range sortedKeys(given) {
		f, ok := g.ConfigField(k)
		if !ok {
			var names []string
			for _, f := range g.Config {
				names = append(names, f.Name)
			}
			probs.add(&InputError{Field: "config." + k, Reason: "not in this flow's config (" + strings.Join(names, ", ") + ")", Suggestion: diag.Suggest(k, names)})
			continue
		}
		v, err := value.Normalize(given[k])
		if err == nil {
			v = schema.Coerce(f.Shape, v)
			err = f.Validator.Validate(v)
			// recorded, it reads back as the store hands it back
			v, _ = value.Settle(v)
		}
		if err != nil {
			probs.add(&InputError{Field: "config." + k, Reason: err.Error()})
			continue
		}
		cfg[k] = v
		if !f.Secret {
			if record == nil {
				record = map[string]any{}
			}
			record[k] = v
		}
	}
	if err := probs.err(); err != nil {
		return nil, nil, err
	}
	for k, v := range recorded {
		if _, given := given[k]; !given {
			if record == nil {
				record = map[string]any{}
			}
			record[k] = v
		}
	}
	return cfg, record, nil
}

// maxSteps is the run's superstep limit: the flow's, or what its
// expression over the configuration gives.
func (r *run) maxSteps() (int, error) {
	if r.g.MaxStepsExpr == nil {
		return r.g.MaxSteps, nil
	}
	v, err := r.g.MaxStepsExpr.Eval(map[string]any{"config": r.config})
	if err != nil {
		return 0, fmt.Errorf("limits.max_steps: %w", err)
	}
	n, ok := v.(int)
	if !ok || n < 1 {
		return 0, fmt.Errorf("limits.max_steps: %v is not a positive integer", v)
	}
	return n, nil
}

// RunNested implements kind.State. A nested run is part of its host's
// attempt: its events, its pending write and the record that it completed
// pass the host's gate, so a host given up on (see scope.go) leaves no
// trace of its nested runs from then on.
func (v *view) RunNested(ctx context.Context, nd *kind.Nested, key string, extra map[string]any) (kind.Update, error) {
	r := v.run
	if r == nil {
		return nil, kind.ErrOutsideRun
	}
	base, ok := nd.Impl.(*flow.Node)
	if !ok {
		return nil, errors.New("not a nested node of this flow")
	}
	n := *base
	n.Name = v.n.Name + "[" + key + "]"
	if si, ok := r.req.StandIns[base]; ok {
		// (a copy: the graph's node is not changed)
		n.Impl = si.Node
		if si.NoBackoff {
			n.Retry.Backoff = 0
		}
	}
	// what the run knows of the nested run, read while the host stands
	if !v.gate.enter() {
		_, err := v.gate.given(ctx)
		return nil, err
	}
	step, seq := v.at()
	ws, saved := v.run.pending[n.Name]
	r.nestedMu.Lock()
	done, ok := r.nestedDone[n.Name]
	r.nestedMu.Unlock()
	answer, answered := r.answers[n.Name]
	v.gate.exit()
	if saved {
		// completed before the run stopped
		return updateOf(ws), nil
	}
	if ok && done.seq == seq {
		// completed in an earlier attempt of its host, this step
		return slices.Clone(done.update), nil
	}
	vars := make(map[string]any, len(v.vars)+len(extra))
	maps.Copy(vars, v.vars)
	maps.Copy(vars, extra)
	observe := r.req.Observe != nil
	if observe {
		v.emit(Event{Type: NodeStart, Node: n.Name, Kind: n.Kind})
	}
	if a, asks := n.Impl.(kind.Asker); asks && !answered {
		// an item that asks, with no answer yet: it pauses
		err := r.askNested(ctx, v, &n, a, vars)
		if p, ok := kind.PausedBy(err); ok && observe {
			v.emit(Event{Type: NodeEnd, Node: n.Name, Kind: n.Kind, Interrupt: interruptOf(p)})
		}
		return nil, err
	}
	o := outcome{host: v}
	r.exec(ctx, &n, vars, &o)
	if p, ok := kind.PausedBy(o.err); ok {
		// what the item ran paused (a child flow): so does the item,
		// and it runs again when the run is resumed
		if observe {
			v.emit(Event{Type: NodeEnd, Node: n.Name, Kind: n.Kind, Attempt: o.attempts, Duration: o.took, Usage: o.view.usage, Interrupt: interruptOf(p)})
		}
		return nil, p
	}
	if o.err != nil {
		if observe {
			v.emit(Event{Type: NodeFailed, Node: n.Name, Kind: n.Kind, Attempt: o.attempts, Duration: o.took, Error: o.err.Error(), Usage: o.view.usage})
		}
		return nil, o.err
	}
	upd := make(kind.Update, len(o.update))
	copy(upd, o.update)
	o.update = upd
	if !v.gate.enter() {
		// the host was given up while this ran: its result is late
		r.drop()
		_, err := v.gate.given(ctx)
		return nil, err
	}
	err := r.savePending(ctx, &o, seq, step)
	if err == nil && answered {
		err = r.keepAnswer(ctx, seq, n.Name, answer)
	}
	if err == nil {
		r.nestedMu.Lock()
		if r.nestedDone == nil {
			r.nestedDone = map[string]nestedRun{}
		}
		r.nestedDone[n.Name] = nestedRun{seq: seq, update: upd}
		r.nestedMu.Unlock()
	}
	v.gate.exit()
	if err != nil {
		return nil, err
	}
	if observe {
		v.emit(Event{Type: NodeEnd, Node: n.Name, Kind: n.Kind, Attempt: o.attempts, Duration: o.took, Update: upd.Map(),
			Degraded: o.degraded, Usage: o.view.usage, Cached: o.cached})
	}
	return upd, nil
}

// nestedRun is the update of a nested run that completed in the step
// following checkpoint seq.
type nestedRun struct {
	seq    uint64
	update kind.Update
}

// updateOf turns saved writes back into an update.
func updateOf(ws []store.Write) kind.Update {
	upd := make(kind.Update, len(ws))
	for i, w := range ws {
		upd[i] = kind.FieldValue{Field: w.Field, Value: w.Value}
	}
	return upd
}

// RunFlow implements kind.State: the child runs as a named run on its own
// thread, so that running it again (a step resumed after a crash or a
// pause, a retry) continues it or takes its result. The child's namespace
// is recorded with the step (NODE#flow, see store.ChildRecord) before it
// starts, so that the node run again finds the same child even after the
// thread moved on (an update of the paused thread), and a fork of the
// step forks it. A child that pauses pauses the node (a *kind.Paused
// naming its questions under the namespace); the answers of a resumed run
// that name the namespace are the child's.
func (v *view) RunFlow(ctx context.Context, sf *kind.Subflow, key string, values, input, cfg map[string]any) (map[string]any, error) {
	r := v.run
	if r == nil {
		return nil, kind.ErrOutsideRun
	}
	g, ok := sf.Graph.(*flow.Graph)
	if !ok {
		return nil, errors.New("not a flow compiled by this runtime")
	}
	name := v.n.Name
	if key != "" {
		name += "[" + key + "]"
	}
	rec := name + store.ChildRecord
	if !v.gate.enter() {
		_, err := v.gate.given(ctx)
		return nil, err
	}
	_, seq := v.at()
	kept, found := r.recorded(seq, rec)
	answers := r.answers
	ns, _ := kept.(string)
	var err error
	if !found || ns == "" {
		ns = name + ":" + strconv.FormatUint(seq, 10)
		err = r.keep(ctx, seq, rec, []store.Write{{Value: ns}})
	}
	v.gate.exit()
	if err != nil {
		return nil, fmt.Errorf("subflow %s: record its namespace: %w", g.Name, err)
	}
	// the child thread's one run is named by the namespace, which a run
	// resuming this step (under another run id) finds again
	// the child waits for the store within this run's budget, and this
	// run's events tell its waits
	req := Request{Thread: ChildThread(r.req.Thread, ns), ID: ns, Durability: r.req.Durability, Config: cfg,
		Values: values, Input: input, Replies: r.req.Replies, Answers: childAnswers(answers, ns), child: true, Retry: r.retry}
	if r.req.Observe != nil {
		req.Observe = func(ev Event) {
			switch ev.Type {
			case RunStart, RunEnd, RunError:
				// the run's own lifecycle: the node's events tell it
				return
			}
			if ev.NS == "" {
				ev.NS = ns
			} else {
				ev.NS = ns + NSSep + ev.NS
			}
			// the child is part of this attempt: given up, it is silent
			if !v.gate.enter() {
				r.drop()
				return
			}
			defer v.gate.exit()
			r.forward(ev)
		}
	}
	res, err := r.e.Run(ctx, g, req)
	if err != nil {
		return nil, fmt.Errorf("subflow %s on thread %s: %w", g.Name, req.Thread, err)
	}
	if len(req.Answers) > 0 {
		// the child took them (its checkpoints record them too)
		if !v.gate.enter() {
			r.drop()
			_, err := v.gate.given(ctx)
			return nil, err
		}
		for id, a := range req.Answers {
			if err == nil {
				err = r.keepAnswer(ctx, seq, ns+NSSep+id, a)
			}
		}
		v.gate.exit()
		if err != nil {
			return nil, err
		}
	}
	if res.Interrupt != nil {
		return nil, childPause(res.Interrupt, ns, name)
	}
	return res.State, nil
}

// forward passes a child run's event on to this run's observer, as this
// run's, its namespace telling where it happened. The child's run_start,
// run_end and run_error stay with it: the node's own start and end events
// stand for them, so an observer's run ends once.
func (r *run) forward(ev Event) {
	ev.Run, ev.Thread = r.id, r.req.Thread
	if ev.Time.IsZero() {
		ev.Time = time.Now()
	}
	r.emitMu.Lock()
	r.req.Observe(ev)
	r.emitMu.Unlock()
}
