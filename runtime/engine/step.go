package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/schema"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/value"
)

// execute drives a run from its input to its end. A new run applies its
// input (one checkpoint, naming the entry nodes so that a run that dies
// before its first step can be resumed) and routes from START; a resumed
// run starts from the nodes its last checkpoint names. Then it runs
// supersteps until no node is triggered, the context ends, Request.Stop is
// closed (checked after each step that leaves nodes to run), a step fails
// or max_steps is exceeded. Whatever happens, the commits of an Async or Exit
// run are completed (or, for a failed Exit run, dropped) before it returns.
// An observed run starts with run_start once its input is accepted, and
// ends with run_end or run_error; a run refused for its input emits no
// event.
func (r *run) execute(ctx context.Context) (res *Result, err error) {
	observe := r.req.Observe != nil
	started := false
	start := func() {
		// run_start follows the input's acceptance: a run refused for
		// its input emits nothing and returns the error alone
		started = true
		if observe {
			r.emit(Event{Type: RunStart})
			r.watch.begin(r)
		}
	}
	if observe {
		defer func() {
			r.watch.end()
			switch {
			case !started:
			case err != nil:
				// (after a run_end that went before a failed last commit)
				r.emit(Event{Type: RunError, Step: r.step, Error: err.Error(), Duration: time.Since(r.started)})
			case res != nil && !r.ended:
				r.emit(Event{Type: RunEnd, Step: r.step, State: res.State, Duration: time.Since(r.started), Interrupt: res.Interrupt})
			}
		}()
	}
	defer func() {
		// the steps held are committed whatever ended the run: they
		// were done (a cancelled run's too, as they would have been);
		// a commit still under way beside a step that panicked ends
		// first
		// (a context that outlives a cancelled run's, only when a commit
		// is left to end)
		if r.pipe.Load() != nil {
			if perr := r.joinPipe(context.WithoutCancel(ctx)); err == nil && perr != nil {
				res, err = nil, perr
			}
		}
		if len(r.chain) > 0 {
			if ferr := r.flushChain(context.WithoutCancel(ctx)); err == nil && ferr != nil {
				res, err = nil, ferr
			}
		}
		if ferr := r.flush(ctx, err == nil); err == nil && ferr != nil {
			res, err = nil, ferr
		}
		if res != nil && res.Interrupt != nil && len(r.held) > 0 {
			// a run that does not commit each step keeps what its paused
			// step completed once its checkpoints are in
			if herr := r.writeHeld(ctx); herr != nil {
				res, err = nil, herr
			}
		}
		if res != nil {
			res.Checkpoint = r.seq
		}
	}()
	// a panic the nodes' own guards did not catch ends the run as a run
	// error, seen as one by the defers above: its commits are dropped or
	// completed as for any failure, its observer gets run_error, and Run
	// releases the thread (but does not pool the run: a node of the step
	// may still be running on a goroutine of its own)
	defer func() {
		if p := recover(); p != nil {
			r.detached.Store(true)
			res, err = nil, &PanicError{Step: r.step, Value: p, Stack: debug.Stack()}
		}
	}()
	var triggered []*flow.Node
	recorded := false // a checkpoint names the entry nodes
	if r.resumed != nil {
		// the checkpoint it resumes names its nodes
		triggered, recorded = r.resumed, true
		start()
	} else {
		cp, err := r.applyInput()
		if err != nil {
			return nil, err
		}
		if len(r.record) > 0 {
			// the configuration the run was given is recorded with its
			// input, so that a resumed run has it again
			if cp == nil {
				cp = &store.Checkpoint{Thread: r.req.Thread, Seq: r.seq + 1, Parent: r.seq, Run: r.id, Source: store.SourceInput, Time: time.Now()}
			}
			cp.Config = r.record
		}
		if r.creating != nil {
			// the thread is new: it is recorded now that its first run
			// is accepted (a refused input leaves nothing behind)
			if err := r.commitNow(ctx, r.creating, nil); err != nil {
				return nil, fmt.Errorf("create thread %q: %w", r.req.Thread, err)
			}
			r.creating = nil
		}
		start()
		if triggered, err = r.route(nil); err != nil {
			return nil, err
		}
		if cp != nil {
			// the input checkpoint names the entry nodes, so a run that
			// dies before its first step can be resumed
			for _, n := range triggered {
				cp.Next = append(cp.Next, n.Name)
			}
			if r.holds(triggered) {
				r.hold(cp)
			} else if err := r.commit(ctx, cp); err != nil {
				return nil, fmt.Errorf("commit input: %w", err)
			}
			r.seq = cp.Seq
			recorded = true
		}
		if r.e.reload {
			// the first step runs on the state and input as another
			// process reads them back
			if err := r.reloadState(ctx); err != nil {
				return nil, err
			}
		}
	}
	// a resumed run runs the step it paused before
	pauseBefore := r.resumed == nil
	for len(triggered) > 0 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var pause *Interrupt
		if pauseBefore && (r.g.Pauses || r.req.PauseFirst) {
			if names := pausing(triggered, func(n *flow.Node) bool { return n.InterruptBefore || r.req.PauseFirst }); len(names) > 0 {
				pause = &Interrupt{Before: names}
			}
		}
		if pause == nil && r.g.Asks {
			asks, err := r.questions(triggered)
			if err != nil {
				return nil, err
			}
			if len(asks) > 0 {
				pause = &Interrupt{Asks: asks}
				for _, a := range asks {
					pause.Before = append(pause.Before, a.ID)
				}
			}
		}
		if pause != nil {
			// the last checkpoint names the triggered nodes, so that
			// resuming runs them; a run that took no input pausing
			// before its first step records them now
			if r.step == 0 && !recorded {
				if err := r.recordStart(ctx, triggered); err != nil {
					return nil, err
				}
				recorded = true
			}
			if len(pause.Asks) > 0 {
				if err := r.keepAnswers(ctx, triggered); err != nil {
					return nil, err
				}
			}
			return r.result(pause), nil
		}
		pauseBefore = true
		r.step++
		if r.step > r.limit {
			return nil, r.limitError(triggered)
		}
		ran := triggered
		triggered, err = r.superstep(ctx, triggered)
		if pm, ok := err.(*pausedMidway); ok {
			if r.step == 0 && !recorded {
				// the run took no input: its paused step is named now,
				// so that resuming runs it
				if err := r.recordStart(ctx, ran); err != nil {
					return nil, err
				}
				recorded = true
			}
			return r.result(pm.in), nil
		}
		if err != nil {
			return nil, err
		}
		if len(triggered) > 0 {
			if r.g.Pauses {
				if names := pausing(ran, func(n *flow.Node) bool { return n.InterruptAfter }); len(names) > 0 {
					return r.result(&Interrupt{After: names}), nil
				}
			}
			if r.req.Stop != nil {
				select {
				case <-r.req.Stop:
					// the step's checkpoint names the triggered nodes:
					// the run can be resumed from here
					return nil, ErrStopped
				default:
				}
			}
		}
	}
	return r.result(nil), nil
}

// recordStart commits the checkpoint that names the nodes of a run's
// first step, for a run that took no input and paused there.
func (r *run) recordStart(ctx context.Context, triggered []*flow.Node) error {
	cp := &store.Checkpoint{Thread: r.req.Thread, Seq: r.seq + 1, Parent: r.seq, Run: r.id, Source: store.SourceInput, Time: time.Now(), Config: r.record}
	for _, n := range triggered {
		cp.Next = append(cp.Next, n.Name)
	}
	if err := r.commit(ctx, cp); err != nil {
		return fmt.Errorf("commit the pause: %w", err)
	}
	from := r.seq
	r.seq = cp.Seq
	if r.req.Durability != "" && r.req.Durability != Sync {
		return nil // held, and written with the run's checkpoints
	}
	// what the paused step kept (questions, children's namespaces, the
	// updates of its nodes that completed) goes on with the checkpoint
	// that names the step
	r.nestedMu.Lock()
	var names []string
	for name, nr := range r.nestedDone {
		if nr.seq == from {
			names = append(names, name)
		}
	}
	r.nestedMu.Unlock()
	slices.Sort(names)
	for _, name := range names {
		r.nestedMu.Lock()
		nr := r.nestedDone[name]
		r.nestedMu.Unlock()
		ws := make([]store.Write, len(nr.update))
		for i, fv := range nr.update {
			ws[i] = store.Write{Field: fv.Field, Value: fv.Value}
		}
		if err := r.e.Store.PutPending(ctx, r.req.Thread, r.seq, name, ws, r.fence()); err != nil {
			return fmt.Errorf("keep %s for the paused run: %w", name, err)
		}
		r.nestedMu.Lock()
		r.nestedDone[name] = nestedRun{seq: r.seq, update: nr.update}
		r.nestedMu.Unlock()
	}
	return nil
}

// questions asks the step's askers that have neither an answer in the
// request nor a pending write (an answer kept from an earlier resume).
func (r *run) questions(triggered []*flow.Node) ([]Ask, error) {
	var asks []Ask
	for _, n := range triggered {
		a, ok := r.impl(n).(kind.Asker)
		if !ok {
			continue
		}
		if _, kept := r.pending[n.Name]; kept {
			continue
		}
		if _, given := r.answers[n.Name]; given {
			continue
		}
		payload, err := safeAsk(a, kind.View(n.Name, r.Vars()))
		if err != nil {
			return nil, &NodeError{Node: n.Name, Kind: n.Kind, Pos: n.Pos, Err: fmt.Errorf("ask: %w", err)}
		}
		if payload, err = value.Normalize(payload); err != nil {
			return nil, &NodeError{Node: n.Name, Kind: n.Kind, Pos: n.Pos, Err: fmt.Errorf("ask: %w", err)}
		}
		asks = append(asks, Ask{ID: n.Name, Path: n.Name, Payload: payload})
	}
	return asks, nil
}

// keepAnswers runs the askers of a paused step that were answered and
// saves their updates as pending writes, so that the answers wait for the
// others' (with sync durability: the others do not save pending writes).
func (r *run) keepAnswers(ctx context.Context, triggered []*flow.Node) error {
	for _, n := range triggered {
		if _, ok := r.impl(n).(kind.Asker); !ok {
			continue
		}
		if _, given := r.answers[n.Name]; !given {
			continue
		}
		if _, kept := r.pending[n.Name]; kept {
			continue
		}
		var o outcome
		r.exec(ctx, n, nil, &o)
		if o.err != nil {
			return &NodeError{Node: n.Name, Kind: n.Kind, Pos: n.Pos, Err: o.err}
		}
		if err := r.savePending(ctx, &o, r.seq, r.step); err != nil {
			return err
		}
		if err := r.keepAnswer(ctx, r.seq, n.Name, r.answers[n.Name]); err != nil {
			return err
		}
	}
	return nil
}

// result is the run's outcome so far.
func (r *run) result(in *Interrupt) *Result {
	return &Result{Run: r.id, Thread: r.req.Thread, State: r.state(), Checkpoint: r.seq, Steps: r.step, Path: r.path,
		g: r.g, visits: r.visits, Interrupt: in}
}

// pausing names the nodes of a step that pause the run.
func pausing(nodes []*flow.Node, pauses func(*flow.Node) bool) []string {
	var names []string
	for _, n := range nodes {
		if pauses(n) {
			names = append(names, n.Name)
		}
	}
	return names
}

// applyInput validates the input and applies it through the reducers. It
// returns the checkpoint recording it (nil when there is no input). Every
// problem is reported at once; on a new thread the input is checked
// together with the initial values, so a required field is satisfied by
// either.
func (r *run) applyInput() (*store.Checkpoint, error) {
	// the input fields the schema requires that the thread was created
	// without: this run brings them, or is refused
	var owed []string
	if r.creating == nil {
		owed = owedInputs(r.g, r.values)
	}
	if len(r.req.Input) == 0 {
		var probs inputProblems
		if r.creating == nil {
			probs.addOwed(owed, nil)
			probs.addRead(r.g, nil)
			return nil, probs.err()
		}
		// a new thread with no input: its initial values alone must hold
		if len(r.req.Values) > 0 || !r.records.defaultsHold {
			probs.addState(r.g, r.values, nil)
		}
		probs.addRead(r.g, nil)
		return nil, probs.err()
	}
	next := maps.Clone(r.values)
	r.input = make(map[string]any, len(r.req.Input))
	cp := &store.Checkpoint{Thread: r.req.Thread, Seq: r.seq + 1, Parent: r.seq, Run: r.id, Source: store.SourceInput, Time: time.Now()}
	var probs inputProblems
	for _, k := range sortedKeys(r.req.Input) {
		f, v, nv, read, ie := inputValue(r.g, k, r.req.Input[k], next[k])
		if read {
			r.input[k] = v
		}
		if ie != nil {
			probs.add(ie)
			continue
		}
		next[k] = nv
		r.versions[f.Index]++
		cp.Writes = append(cp.Writes, writeOf(f, r.versions[f.Index], nv, v))
		if !f.Reducer.Appends && f.Reducer.Spec.Name != "replace" {
			// the write holds what the reducer made of the input; a
			// resumed run reads the input itself from here
			if cp.Input == nil {
				cp.Input = map[string]any{}
			}
			cp.Input[k] = v
		}
	}
	if r.creating != nil || r.g.FullValidation {
		probs.addState(r.g, next, r.req.Input)
	}
	probs.addOwed(owed, r.req.Input)
	probs.addRead(r.g, r.req.Input)
	if err := probs.err(); err != nil {
		return nil, err
	}
	r.values = next
	for i, f := range r.g.Fields {
		r.cur[i] = next[f.Name]
		r.inSlots[i] = r.input[f.Name]
	}
	if len(cp.Writes) == 0 {
		return nil, nil
	}
	return cp, nil
}

// inputValue reads field k of a run's input, raw, as it applies to the
// field's current value: the field is an input of g, and the value,
// normalised and coerced to the field's shape (v), reduced onto current
// (nv) holds for the field's schema. read says whether v was read (the
// field is an input, and its value JSON), whatever else is wrong.
func inputValue(g *flow.Graph, k string, raw, current any) (f *flow.Field, v, nv any, read bool, ie *InputError) {
	f, ok := g.Field(k)
	if !ok || !f.Input {
		var names []string
		for _, in := range g.Inputs {
			names = append(names, in.Name)
		}
		reason := "not an input of this flow"
		if len(names) > 0 {
			reason += " (inputs: " + strings.Join(names, ", ") + ")"
		}
		return nil, nil, nil, false, &InputError{Field: k, Reason: reason, Suggestion: diag.Suggest(k, names)}
	}
	v, err := normalizeFor(f, raw)
	if err != nil {
		return f, nil, nil, false, &InputError{Field: k, Reason: err.Error()}
	}
	if nv, err = reduce(f, current, v); err != nil {
		return f, v, nil, true, &InputError{Field: k, Reason: err.Error()}
	}
	if err := validateField(f, nv, v); err != nil {
		return f, v, nil, true, &InputError{Field: k, Reason: err.Error()}
	}
	return f, v, nv, true, nil
}

// inputProblems gathers what is wrong with a run's input.
type inputProblems []*InputError

func (p *inputProblems) add(e *InputError) { *p = append(*p, e) }

// addOwed reports the required input fields a thread has no value for
// that the input does not give.
func (p *inputProblems) addOwed(owed []string, input map[string]any) {
	for _, name := range owed {
		if _, given := input[name]; !given {
			p.add(&InputError{Field: name, Reason: "required: the thread has no value for it yet, so its run gives it as input"})
		}
	}
}

// addRead reports the inputs the flow reads as input.NAME with nothing to
// fall back on (flow.Field.ReadAt) that input does not give: the read
// would meet nothing, so the run is refused before anything runs.
// These are the needed inputs of every run that validate lists
// (flow.Graph.NeededInputs).
func (p *inputProblems) addRead(g *flow.Graph, input map[string]any) {
	for _, n := range g.NeededInputs() {
		if _, given := input[n.Name]; !n.EveryRun || given {
			continue
		}
		p.add(&InputError{Field: n.Name, Reason: fmt.Sprintf("required: the flow reads input.%s at %s with nothing to fall back on; give it, or read it there as input.%s ?? a value",
			n.Name, n.ReadAt, n.Name)})
	}
}

// addState reports what the whole state breaks once the input is
// applied: a required field neither given nor defaulted by its name,
// anything else as the schema words it; a field given as input was
// checked on its own.
func (p *inputProblems) addState(g *flow.Graph, state, input map[string]any) {
	err := g.Root().Validate(state)
	var se *schema.Error
	if err == nil {
		return
	}
	if !errors.As(err, &se) {
		p.add(&InputError{Reason: err.Error()})
		return
	}
	for _, c := range se.Causes {
		if c.Keyword == "required" && c.Pointer == "" {
			for _, name := range g.Root().Shape.Required {
				_, given := input[name]
				if _, ok := state[name]; !ok && !given {
					reason := "required: give it as input, or a value when the thread is created"
					if f, ok := g.Field(name); ok && !f.Input {
						reason = "required, and not an input of this flow: give it a default, or a value when the thread is created"
					}
					p.add(&InputError{Field: name, Reason: reason})
				}
			}
			continue
		}
		if c.Pointer == "" {
			// a constraint of the whole state
			p.add(&InputError{Reason: "the state: " + c.Message})
			continue
		}
		field, _, _ := strings.Cut(strings.TrimPrefix(c.Pointer, "/"), "/")
		if _, given := input[config.Unescape(field)]; given && len(*p) > 0 {
			continue
		}
		in, _ := c.Under("/" + field)
		p.add(&InputError{Field: config.Unescape(field), Reason: in.String()})
	}
}

// err is nil, the one problem, or the first with the others in More.
func (p inputProblems) err() error {
	if len(p) == 0 {
		return nil
	}
	first := *p[0]
	first.More = p[1:]
	return &first
}

// superstep runs one step of the run, the heart of the runtime:
//
//  1. Every triggered node runs on the same snapshot: nodes that may block
//     each on a goroutine of their own, inline nodes one after another
//     here. A blocking node's update is saved as a pending write the moment
//     it completes, so a crash does not run it again.
//  2. The barrier merges the updates through the fields' reducers in node
//     declaration order (never completion order, so the result does not
//     depend on timing), enforces single writers and declared writes, and
//     validates each changed field against its sub-schema (the whole state
//     too, when the schema constrains it as a whole).
//  3. The step becomes a checkpoint: one write per changed field (for an
//     append field only the items this step appended), the nodes that ran
//     and what each wrote.
//  4. The edges of the nodes that ran are fired on the post-barrier state,
//     giving the next triggered set; the checkpoint records it, so an
//     unfinished run can be resumed from here.
//  5. The checkpoint is committed as the run's durability says, the
//     thread's lease renewed when due, and the step's changes emitted.
//
// It returns the nodes triggered for the next step (none: the run is
// over).
func (r *run) superstep(ctx context.Context, triggered []*flow.Node) ([]*flow.Node, error) {
	observe := r.req.Observe != nil
	if cap(r.outs) < len(triggered) {
		r.outs = make([]outcome, len(triggered))
	}
	outs := r.outs[:len(triggered)]
	if observe {
		for _, n := range triggered {
			r.emit(Event{Type: NodeStart, Step: r.step, Node: n.Name, Kind: n.Kind})
		}
	}
	if len(r.chain) > 0 && r.mayBlock(triggered) {
		// the steps held commit before a node that may block starts
		// (with its node_start events), or beside nodes that are
		// contained (see Pipelined commits)
		if r.beside(triggered) {
			r.flushBeside(ctx)
		} else if err := r.flushChain(ctx); err != nil {
			return nil, err
		}
	}
	err := r.runNodes(ctx, triggered, outs)
	if jerr := r.joinPipe(ctx); jerr != nil {
		return nil, jerr
	}
	if err != nil {
		return nil, err
	}
	if in, err := r.paused(ctx, outs); err != nil || in != nil {
		// the step does not commit: what its nodes put is not written
		r.dropPuts()
		if err == nil {
			// the step does not commit: a resumed run runs it again
			r.step--
			err = &pausedMidway{in}
		}
		return nil, err
	}
	// saved updates belong to the first superstep of a resumed run only,
	// an answer to the first step that runs its asker
	kept := r.pending
	r.pending = nil
	r.held = r.held[:0]
	if r.nestedDone != nil {
		r.nestedMu.Lock()
		r.nestedDone = nil
		r.nestedMu.Unlock()
	}
	var answered map[string]any
	if len(r.answers) > 0 {
		for _, n := range triggered {
			if a, ok := r.answers[n.Name]; ok {
				if answered == nil {
					answered = map[string]any{}
				}
				answered[n.Name] = a
				delete(r.answers, n.Name)
			}
		}
		answered = r.consumed(triggered, answered)
	}
	if kept != nil {
		answered = keptAnswers(kept, answered)
	}
	if r.req.RecordPath {
		names := make([]string, len(triggered))
		for i, n := range triggered {
			names[i] = n.Name
		}
		r.path = append(r.path, names)
	}
	changed, err := r.barrier(ctx, outs)
	if err != nil {
		return nil, err
	}
	// the slab's checkpoint is zeroed: a part the step does not have is
	// left unwritten (a pointer written while the collector marks costs
	// a write barrier, a nil one too)
	cp := r.checkpoint()
	cp.Thread, cp.Seq, cp.Parent, cp.Run, cp.Step, cp.Source = r.req.Thread, r.seq+1, r.seq, r.id, r.step, store.SourceStep
	if replies, puts := r.takeRecords(); replies != nil || puts != nil {
		cp.Replies, cp.Memory = replies, puts
	}
	if answered != nil {
		cp.Answers = answered
	}
	if len(changed) > 0 {
		// one write per changed field; an append field records only the
		// items this step appended (several writers fold in order)
		writes := take(&r.slabs.writes, len(changed))[:0]
		for _, f := range changed {
			r.versions[f.Index]++
			w := store.Write{Field: f.Name, Version: r.versions[f.Index]}
			if f.Reducer.Appends {
				list := r.cur[f.Index].([]any)
				w.Items, w.Append = list[r.oldLen[f.Index]:len(list):len(list)], true
			} else {
				w.Value = r.cur[f.Index]
			}
			writes = append(writes, w)
		}
		cp.Writes = writes
		if r.g.FullValidation {
			if err := r.g.Root().Validate(r.state()); err != nil {
				return nil, fmt.Errorf("step %d: state rejected: %w", r.step, err)
			}
		}
	}
	if o := &outs[0]; len(outs) == 1 && len(o.update) == len(o.node.WriteList) && !o.repeats {
		cp.Writers = r.records.alone[o.node.Index]
	} else {
		writers := take(&r.slabs.writers, len(outs))[:0]
		for i := range outs {
			writers = append(writers, store.NodeWrites{Node: outs[i].node.Name, Fields: writtenFields(outs[i].node, outs[i].update, outs[i].repeats)})
		}
		cp.Writers = writers
	}
	// routing on the post-barrier state
	following, err := r.route(outs)
	if err != nil {
		return nil, err
	}
	cp.Time = r.clock(outs)
	switch len(following) {
	case 0:
	case 1:
		cp.Next = r.records.only[following[0].Index]
		if joins := r.runState(); joins != nil {
			cp.Joins = joins
		}
	default:
		names := take(&r.slabs.names, len(following))[:0]
		for _, n := range following {
			names = append(names, n.Name)
		}
		cp.Next = names
		if joins := r.runState(); joins != nil {
			cp.Joins = joins
		}
	}
	// a step whose clock was just read (one that called out of the
	// process, or every clockEvery steps) times its commit from it
	timed := observe && r.sinceClock == 0
	last := len(following) == 0 && r.lease != nil && (r.req.Durability == "" || r.req.Durability == Sync)
	if last {
		// the run's last checkpoint ends its hold on the thread
		r.lease.releaseWith(cp)
	}
	held := r.holds(following)
	// the run's last step tells its changes before its commit, where its
	// events go with the commit: none of them is left to a write of its
	// own (its commit is not timed)
	early := observe && len(following) == 0 && r.req.Attach != nil && (r.req.Durability == "" || r.req.Durability == Sync)
	if early {
		r.emit(r.stateUpdate(changed, cp, 0))
		if r.req.EndsWithCommit && last {
			// and its end, recorded with that commit too
			r.ended = true
			r.emit(Event{Type: RunEnd, Step: r.step, State: r.state(), Duration: time.Since(r.started)})
		}
	}
	var before []*store.Checkpoint
	if held {
		r.hold(cp)
	} else {
		before = r.takeChain()
		cp.Before = before
		if err := r.commit(ctx, cp); err != nil {
			return nil, fmt.Errorf("commit step %d: %w", r.step, err)
		}
	}
	if last {
		r.lease.committed(cp)
	}
	var committed time.Duration
	if timed && !held {
		committed = time.Since(cp.Time)
	}
	r.seq = cp.Seq
	if r.e.reload {
		// the next step runs on the state as another process reads it
		if err := r.reloadState(ctx); err != nil {
			return nil, err
		}
	}
	if r.lease != nil && r.sinceClock == 0 && !held {
		r.lease.renewIfDue(ctx, cp.Time)
	}
	if observe && !early {
		r.emit(r.stateUpdate(changed, cp, committed))
	}
	if !held && r.reuses {
		// committed, and copied by the store: the run's next steps
		// fill these checkpoints again
		r.recycle(before)
		*cp = store.Checkpoint{}
		r.spare = append(r.spare, cp)
	}
	return following, nil
}

// stateUpdate is the state_update of a step that changed fields changed
// and committed cp: every changed field's name, and the new values its
// node events did not give (see Event.Update): a field whose reducer
// appends gives only the items the step appended.
func (r *run) stateUpdate(changed []*flow.Field, cp *store.Checkpoint, committed time.Duration) Event {
	ev := Event{Type: StateUpdate, Step: r.step, Checkpoint: cp.Seq, Next: cp.Next, Duration: committed}
	if len(changed) == 0 {
		return ev
	}
	ev.Fields = make([]string, len(changed))
	for i, f := range changed {
		ev.Fields[i] = f.Name
		switch {
		case f.Reducer.Appends:
			if ev.Appended == nil {
				ev.Appended = map[string]any{}
			}
			list, _ := r.cur[f.Index].([]any)
			ev.Appended[f.Name] = list[min(r.oldLen[f.Index], len(list)):len(list):len(list)]
		case slices.Contains(r.told, f):
		default:
			if ev.Update == nil {
				ev.Update = map[string]any{}
			}
			ev.Update[f.Name] = r.cur[f.Index]
		}
	}
	return ev
}
