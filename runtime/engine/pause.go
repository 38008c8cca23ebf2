package engine

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/trellisflow/trellis/runtime/expression"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/value"
)

// A run pauses where something waits for a person, at any depth (see
// kind.Paused). Its askers pause it before their step (questions); a node
// pauses it midway through a step when what it runs paused: a map's item
// that asks, a child flow that paused. The step then does not commit: the
// thread's newest checkpoint still names the step's nodes, the nodes that
// completed keep their updates as pending writes, and so do two records
// of the step, each the moment it is made:
//
//   - NODE#flow (NODE[KEY]#flow for a node's keyed children): the
//     namespace of the child flow the node started, so that the node run
//     again (after a resume, a crash, an update of the thread) goes on
//     with the same child, and a fork of the thread forks it too;
//   - NODE[INDEX]#ask: the question a map's item asked.
//
// What a thread's unfinished run waits on is read from them (Asks),
// through the child flows' threads at every depth. A question's id is its
// namespace chain and the asking node (review:7|approve), unique however
// many items ask the same; its path names the nodes (review/approve).

// The names of a step's records among its pending writes.
const (
	askRecord    = "#ask"
	answerRecord = "#answer"
)

// askName is the record of the question nested node name asked.
func askName(name string) string { return name + askRecord }

// keepAnswer records the answer a step was given for question id, once
// what it answered completed (an asker, a map's item) or went on (a child
// flow): the step's checkpoint records every answer the step took,
// across the runs that resumed it.
func (r *run) keepAnswer(ctx context.Context, seq uint64, id string, a any) error {
	if err := r.keep(ctx, seq, id+answerRecord, []store.Write{{Value: a}}); err != nil {
		return fmt.Errorf("keep the answer to %s: %w", id, err)
	}
	return nil
}

// keptAnswers adds the answers the runs that resumed a step before this
// one kept (see keepAnswer) to answered.
func keptAnswers(pending map[string][]store.Write, answered map[string]any) map[string]any {
	for key, ws := range pending {
		id, ok := strings.CutSuffix(key, answerRecord)
		if !ok || len(ws) != 1 {
			continue
		}
		if answered == nil {
			answered = map[string]any{}
		}
		if _, given := answered[id]; !given {
			answered[id] = ws[0].Value
		}
	}
	return answered
}

// keep records a piece of a step's work under name: in the store as a
// pending write of the checkpoint seq the step follows (with sync
// durability, as node updates are; otherwise it is held and written once
// the run's checkpoints are, if the run pauses), and for the attempts of
// this step.
func (r *run) keep(ctx context.Context, seq uint64, name string, writes []store.Write) error {
	if r.req.Durability == "" || r.req.Durability == Sync {
		if err := r.landed(); err != nil {
			return err
		}
		if err := r.e.Store.PutPending(ctx, r.req.Thread, seq, name, writes, r.fence()); err != nil {
			return err
		}
	} else {
		r.nestedMu.Lock()
		r.held = append(r.held, heldWrite{name: name, writes: writes})
		r.nestedMu.Unlock()
	}
	upd := make(kind.Update, len(writes))
	for i, w := range writes {
		upd[i] = kind.FieldValue{Field: w.Field, Value: w.Value}
	}
	r.nestedMu.Lock()
	if r.nestedDone == nil {
		r.nestedDone = map[string]nestedRun{}
	}
	r.nestedDone[name] = nestedRun{seq: seq, update: upd}
	r.nestedMu.Unlock()
	return nil
}

// heldWrite is a pending write of a run that does not commit each step
// (Async, Exit durability), written if the run pauses.
type heldWrite struct {
	name   string
	writes []store.Write
}

// recorded returns the record name of the step, as the run was resumed
// with it or as an earlier attempt of the step kept it; read while the
// attempt's gate is open.
func (r *run) recorded(seq uint64, name string) (any, bool) {
	if ws, ok := r.pending[name]; ok && len(ws) == 1 {
		return ws[0].Value, true
	}
	r.nestedMu.Lock()
	done, ok := r.nestedDone[name]
	r.nestedMu.Unlock()
	if ok && done.seq == seq && len(done.update) == 1 {
		return done.update[0].Value, true
	}
	return nil, false
}

// writeHeld writes the pending writes a paused run held (not Sync) on
// its newest checkpoint, now committed.
func (r *run) writeHeld(ctx context.Context) error {
	for _, h := range r.held {
		if err := r.e.Store.PutPending(ctx, r.req.Thread, r.seq, h.name, h.writes, r.fence()); err != nil {
			return fmt.Errorf("keep %s for the paused run: %w", h.name, err)
		}
	}
	r.held = nil
	return nil
}

// pausedMidway ends a run whose step's nodes paused it (see paused).
type pausedMidway struct{ in *Interrupt }

func (p *pausedMidway) Error() string { return "the run paused midway through a step" }

// paused looks for the nodes of a step that paused the run. With some,
// the step does not commit: the updates of the nodes that completed are
// kept as pending writes, so that the resumed step runs only the nodes
// that paused (and those that failed: they are tried again), and the run
// ends paused with every question they brought back.
func (r *run) paused(ctx context.Context, outs []outcome) (*Interrupt, error) {
	var in *Interrupt
	for i := range outs {
		if outs[i].err == nil {
			continue
		}
		n := outs[i].node
		if payload, ok := kind.InterruptPayload(outs[i].err); ok {
			// the node's own pause midway (a tool call waiting for
			// approval): its question is kept (NODE#ask) for the
			// thread's questions to list
			if payload, ok = normalized(payload); !ok {
				return nil, &NodeError{Node: n.Name, Kind: n.Kind, Pos: n.Pos, Err: fmt.Errorf("ask: the question is not a JSON value")}
			}
			if err := r.keep(ctx, r.seq, onceName(n.Name, askKey), []store.Write{{Value: payload}}); err != nil {
				return nil, fmt.Errorf("step %d: keep the question of node %q: %w", r.step, n.Name, err)
			}
			if in == nil {
				in = &Interrupt{}
			}
			in.Before = append(in.Before, n.Name)
			in.Asks = append(in.Asks, Ask{ID: n.Name, Path: n.Name, Payload: payload})
			continue
		}
		p, ok := kind.PausedBy(outs[i].err)
		if !ok {
			continue
		}
		if in == nil {
			in = &Interrupt{}
		}
		for _, q := range p.Questions {
			if q.ID == "" {
				q.ID = n.Name
			}
			if q.Path == "" {
				q.Path = q.ID
			}
			if q.Payload, ok = normalized(q.Payload); !ok {
				return nil, &NodeError{Node: n.Name, Kind: n.Kind, Pos: n.Pos, Err: fmt.Errorf("ask %s: the question is not a JSON value", q.Path)}
			}
			in.Asks = append(in.Asks, q)
			in.Before = append(in.Before, q.Path)
		}
		in.Before = append(in.Before, p.Before...)
		in.After = append(in.After, p.After...)
	}
	if in == nil {
		return nil, nil
	}
	for i := range outs {
		o := &outs[i]
		if o.err != nil || o.attempts == 0 || o.saved {
			// paused or failed (it runs again), or taken from a pending
			// write or the cache already
			continue
		}
		if err := r.keepUpdate(ctx, o); err != nil {
			return nil, err
		}
		if a, ok := r.answers[o.node.Name]; ok {
			if err := r.keepAnswer(ctx, r.seq, o.node.Name, a); err != nil {
				return nil, err
			}
		}
	}
	if r.req.Observe != nil {
		for i := range outs {
			n := outs[i].node
			if p, ok := kind.PausedBy(outs[i].err); ok {
				r.emit(Event{Type: NodeEnd, Step: r.step, Node: n.Name, Kind: n.Kind, Attempt: outs[i].attempts, Duration: outs[i].took,
					Usage: outs[i].view.usage, Interrupt: interruptOf(p)})
			} else if isInterrupt(outs[i].err) {
				r.emit(Event{Type: NodeEnd, Step: r.step, Node: n.Name, Kind: n.Kind, Attempt: outs[i].attempts, Duration: outs[i].took,
					Usage: outs[i].view.usage, Interrupt: &Interrupt{Before: []string{n.Name}}})
			}
		}
	}
	return in, nil
}

// keepUpdate keeps the update of a node that completed in a step that
// paused: a pending write, whatever the run's durability.
func (r *run) keepUpdate(ctx context.Context, o *outcome) error {
	ws := make([]store.Write, len(o.update))
	for i, fv := range o.update {
		v, err := value.Normalize(fv.Value)
		if err != nil {
			return &NodeError{Node: o.node.Name, Kind: o.node.Kind, Pos: o.node.Pos, Err: err}
		}
		ws[i] = store.Write{Field: fv.Field, Value: v}
	}
	if err := r.keep(ctx, r.seq, o.node.Name, ws); err != nil {
		return fmt.Errorf("step %d: save the update of node %q: %w", r.step, o.node.Name, err)
	}
	o.saved = true
	return nil
}

func normalized(v any) (any, bool) {
	n, err := value.Normalize(v)
	return n, err == nil
}

// interruptOf is the pause p as an Interrupt (for a node's end event).
func interruptOf(p *kind.Paused) *Interrupt {
	in := &Interrupt{Asks: p.Questions, After: p.After}
	for _, q := range p.Questions {
		in.Before = append(in.Before, q.Path)
	}
	in.Before = append(in.Before, p.Before...)
	return in
}

// childPause is the pause of a child flow's run under namespace ns,
// started by the node (or item) name, as its parent's node returns it:
// ids under the namespace, paths under the node.
func childPause(in *Interrupt, ns, name string) *kind.Paused {
	p := &kind.Paused{}
	asked := map[string]bool{}
	for _, a := range in.Asks {
		path := a.Path
		if path == "" {
			path = a.ID
		}
		asked[path] = true
		p.Questions = append(p.Questions, kind.Question{ID: ns + NSSep + a.ID, Path: name + "/" + path, Payload: a.Payload})
	}
	for _, b := range in.Before {
		if !asked[b] {
			p.Before = append(p.Before, name+"/"+b)
		}
	}
	for _, a := range in.After {
		p.After = append(p.After, name+"/"+a)
	}
	return p
}

// childAnswers are the answers for the child flow under namespace ns,
// by their ids in the child.
func childAnswers(answers map[string]any, ns string) map[string]any {
	var out map[string]any
	prefix := ns + NSSep
	for id, a := range answers {
		if rest, ok := strings.CutPrefix(id, prefix); ok {
			if out == nil {
				out = map[string]any{}
			}
			out[rest] = a
		}
	}
	return out
}

// askNested pauses for the question of a nested asker (a map's item)
// that has no answer: it is asked over the item's variables, kept as the
// step's record, and returned as the item's pause.
func (r *run) askNested(ctx context.Context, v *view, n *flow.Node, a kind.Asker, vars map[string]any) error {
	payload, err := safeAsk(a, kind.View(n.Name, vars))
	if err == nil {
		payload, err = value.Normalize(payload)
	}
	if err != nil {
		return &NodeError{Node: n.Name, Kind: n.Kind, Pos: n.Pos, Err: fmt.Errorf("ask: %w", err)}
	}
	if !v.gate.enter() {
		r.drop()
		_, err := v.gate.given(ctx)
		return err
	}
	_, seq := v.at()
	err = r.keep(ctx, seq, askName(n.Name), []store.Write{{Value: payload}})
	v.gate.exit()
	if err != nil {
		return fmt.Errorf("keep the question of %s: %w", n.Name, err)
	}
	return &kind.Paused{Questions: []kind.Question{{ID: n.Name, Path: n.Name, Payload: payload}}}
}

// Asks lists the questions a thread's unfinished run waits on, at every
// depth: those of the askers among its next nodes that have no answer
// kept (a pending write), as the run would ask them over the thread's
// state and the run's input; those its step's nodes kept (a map's items);
// and those of the child flows its step's nodes started, read from their
// threads in turn.
func (e *Engine) Asks(ctx context.Context, g *flow.Graph, thread string) ([]Ask, error) {
	head, err := e.Store.Head(ctx, thread)
	if err != nil {
		return nil, err
	}
	return e.asksAt(ctx, g, thread, head, "", "", 0)
}

// maxDepth bounds how deep Asks follows child flows (flows that include
// each other are a load error; this guards against a store that says
// otherwise).
const maxDepth = 64

func (e *Engine) asksAt(ctx context.Context, g *flow.Graph, thread string, head *store.Snapshot, idPrefix, pathPrefix string, depth int) ([]Ask, error) {
	if len(head.Next) == 0 || depth > maxDepth {
		return nil, nil
	}
	var asks []Ask
	var vars map[string]any
	for _, name := range head.Next {
		n, ok := g.Node(name)
		if !ok {
			continue
		}
		if _, done := head.Pending[name]; done {
			continue
		}
		if isAsker(n) {
			if vars == nil {
				input, cfg := runInput(ctx, e.Store, nil, thread, head.Seq)
				if input == nil {
					input = map[string]any{}
				}
				vars = map[string]any{}
				expression.Bind(vars, "state", head.Values)
				expression.Bind(vars, "input", input)
				if g.ConfigShape != nil {
					cfg, _, err := resolveConfig(g, cfg, nil)
					if err != nil {
						return nil, err
					}
					vars["config"] = cfg
				}
			}
			payload, err := safeAsk(n.Impl.(kind.Asker), kind.View(name, vars))
			if err == nil {
				payload, err = value.Normalize(payload)
			}
			if err != nil {
				return nil, &NodeError{Node: n.Name, Kind: n.Kind, Pos: n.Pos, Err: fmt.Errorf("ask: %w", err)}
			}
			asks = append(asks, Ask{ID: idPrefix + name, Path: pathPrefix + name, Payload: payload})
			continue
		}
		for _, rec := range stepRecords(head.Pending, name) {
			if _, done := head.Pending[rec.item]; done && rec.item != name {
				continue
			}
			switch rec.what {
			case askRecord:
				if ws := head.Pending[rec.key]; len(ws) == 1 {
					asks = append(asks, Ask{ID: idPrefix + rec.item, Path: pathPrefix + rec.item, Payload: ws[0].Value})
				}
			case store.ChildRecord:
				ws := head.Pending[rec.key]
				ns, _ := ws[0].Value.(string)
				child := childGraph(n, rec.item != name)
				if ns == "" || child == nil {
					continue
				}
				ct := ChildThread(thread, ns)
				ch, err := e.Store.Head(ctx, ct)
				if err != nil {
					continue // the child did not commit its start
				}
				more, err := e.asksAt(ctx, child, ct, ch, idPrefix+ns+NSSep, pathPrefix+rec.item+"/", depth+1)
				if err != nil {
					return nil, err
				}
				asks = append(asks, more...)
			}
		}
	}
	return asks, nil
}

// record is one of a step's records among its pending writes: key, the
// node or item it is of, and what it records.
type record struct {
	key, item, what string
	index           int
}

// stepRecords lists the records of node name among pending, its own first,
// then its items' by index.
func stepRecords(pending map[string][]store.Write, name string) []record {
	var out []record
	for key, ws := range pending {
		if len(ws) != 1 {
			continue
		}
		var what string
		item, ok := strings.CutSuffix(key, askRecord)
		if ok {
			what = askRecord
		} else if item, ok = strings.CutSuffix(key, store.ChildRecord); ok {
			what = store.ChildRecord
		} else {
			continue
		}
		rest, ok := strings.CutPrefix(item, name)
		if !ok {
			continue
		}
		index := -1
		if rest != "" {
			k, ok := strings.CutPrefix(rest, "[")
			if k, ok = strings.CutSuffix(k, "]"); !ok {
				continue
			}
			i, err := strconv.Atoi(k)
			if err != nil {
				i = 0
			}
			index = i
		}
		out = append(out, record{key: key, item: item, what: what, index: index})
	}
	slices.SortFunc(out, func(a, b record) int {
		return cmp.Or(cmp.Compare(a.index, b.index), strings.Compare(a.item, b.item), strings.Compare(a.what, b.what))
	})
	return out
}

// childGraph is the flow node n runs as a child: its own (a subflow),
// or its items' (a map of subflows).
func childGraph(n *flow.Node, item bool) *flow.Graph {
	c, ok := n.Impl.(kind.Composite)
	if !ok {
		return nil
	}
	parts := c.Parts()
	sf := parts.Flow
	if item && parts.Nested != nil {
		if nn, ok := parts.Nested.Impl.(*flow.Node); ok {
			if nc, ok := nn.Impl.(kind.Composite); ok {
				sf = nc.Parts().Flow
			}
		}
	}
	if sf == nil {
		return nil
	}
	g, _ := sf.Graph.(*flow.Graph)
	return g
}

// ResolveAnswers checks the answers a resumed run of g on thread would be
// given, as that run checks them (an *InputError naming each that no
// question the thread's run waits on has as its id or path), and returns
// them keyed by the questions' ids: what a caller that queues the run
// refuses at once.
func (e *Engine) ResolveAnswers(ctx context.Context, g *flow.Graph, thread string, answers map[string]any) (map[string]any, error) {
	if len(answers) == 0 {
		return answers, nil
	}
	head, err := e.Store.Head(ctx, thread)
	if err != nil {
		return nil, err
	}
	return e.resolveAnswers(ctx, g, head, answers)
}

// PathOf is the path of the question whose id is id: its namespaces'
// node names (NODE, NODE[KEY]) and its asking node, joined by /
// (review:7|approve is review/approve); an id asked at the top of a run
// is its own path.
func PathOf(id string) string {
	levels := strings.Split(id, NSSep)
	for i, l := range levels[:len(levels)-1] {
		levels[i], _, _ = strings.Cut(l, ":")
	}
	return strings.Join(levels, "/")
}

// ChildFlow is the flow a child thread of a thread of g runs: the one
// under namespace ns (NODE:SEQ, NODE[KEY]:SEQ for a map's item, nested
// levels joined by NSSep), as RunFlow ran it. ok is false when no node of
// g runs a flow at ns.
func ChildFlow(g *flow.Graph, ns string) (child *flow.Graph, ok bool) {
	for _, level := range strings.Split(ns, NSSep) {
		name, _, _ := strings.Cut(level, ":")
		node, _, keyed := strings.Cut(name, "[")
		n, found := g.Node(node)
		if !found {
			return nil, false
		}
		if g = childGraph(n, keyed); g == nil {
			return nil, false
		}
	}
	return g, true
}

// resolveAnswers checks the answers a run of g on a thread whose newest
// state is head is given, and names each by its question's id: an asking
// node of the run by its name, as before any question is asked; any other
// by a question the thread's unfinished run waits on, by its id or its
// path. An answer that is neither is refused, naming the questions there
// are.
func (e *Engine) resolveAnswers(ctx context.Context, g *flow.Graph, head *store.Snapshot, answers map[string]any) (map[string]any, error) {
	if len(answers) == 0 {
		return answers, nil
	}
	out := make(map[string]any, len(answers))
	var pending []Ask
	listed := false
	var probs inputProblems
	for _, id := range sortedKeys(answers) {
		if n, ok := g.Node(id); ok && isAsker(n) {
			out[id] = answers[id]
			continue
		}
		if n, ok := g.Node(id); ok && isInterrupter(n) {
			// by its name, as an asking node's
			if err := n.Impl.(kind.Interrupter).CheckAnswer(answers[id]); err != nil {
				probs.add(&InputError{Field: "answers." + id, Reason: err.Error()})
				continue
			}
			out[id] = answers[id]
			continue
		}
		if !listed && len(head.Next) > 0 {
			listed = true
			var err error
			if pending, err = e.asksAt(ctx, g, head.Thread, head, "", "", 0); err != nil {
				return nil, err
			}
		}
		i := slices.IndexFunc(pending, func(a Ask) bool { return a.ID == id })
		if i < 0 {
			i = slices.IndexFunc(pending, func(a Ask) bool { return a.Path == id })
		}
		if i < 0 {
			reason := "no question the thread's run waits on has this id or path"
			if len(pending) > 0 {
				var ids []string
				for _, a := range pending {
					ids = append(ids, a.Path)
				}
				reason += " (it waits on " + strings.Join(ids, ", ") + ")"
			} else if len(head.Next) == 0 {
				reason = "not a node of this flow that asks a question, and the thread's run waits on none"
			}
			probs.add(&InputError{Field: "answers." + id, Reason: reason})
			continue
		}
		if _, dup := out[pending[i].ID]; dup {
			probs.add(&InputError{Field: "answers." + id, Reason: "answers a question answered already by " + pending[i].ID + " or " + pending[i].Path})
			continue
		}
		if n := askingNode(g, pending[i].ID); n != nil {
			if it, ok := n.Impl.(kind.Interrupter); ok {
				if err := it.CheckAnswer(answers[id]); err != nil {
					probs.add(&InputError{Field: "answers." + id, Reason: err.Error()})
					continue
				}
			}
		}
		out[pending[i].ID] = answers[id]
	}
	if err := probs.err(); err != nil {
		return nil, err
	}
	return out, nil
}

// consumed moves the answers of a step's nested questions (a map's items,
// child flows of the step's nodes) from the run's answers to answered,
// once the step commits.
func (r *run) consumed(triggered []*flow.Node, answered map[string]any) map[string]any {
	for id, a := range r.answers {
		for _, n := range triggered {
			rest, ok := strings.CutPrefix(id, n.Name)
			if ok && (strings.HasPrefix(rest, "[") || strings.HasPrefix(rest, ":")) {
				if answered == nil {
					answered = map[string]any{}
				}
				answered[id] = a
				delete(r.answers, id)
				break
			}
		}
	}
	return answered
}

// isInterrupt reports whether err is a node's own pause midway (a tool
// call waiting for approval, see kind.Interrupt).
func isInterrupt(err error) bool {
	_, ok := kind.InterruptPayload(err)
	return ok
}

// askingNode is the node of g, or of the child flow at any depth, that
// asks the question whose id is id (nil for a map's item, whose node
// is the map's).
func askingNode(g *flow.Graph, id string) *flow.Node {
	if i := strings.LastIndex(id, NSSep); i >= 0 {
		child, ok := ChildFlow(g, id[:i])
		if !ok {
			return nil
		}
		g, id = child, id[i+len(NSSep):]
	}
	n, ok := g.Node(id)
	if !ok {
		return nil
	}
	return n
}
