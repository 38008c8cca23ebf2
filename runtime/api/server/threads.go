package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/schema"
	"github.com/trellisflow/trellis/runtime/store"
)

// Thread ids are what a caller names a thread by. In the store a thread
// is keyed by its tenant and its id, so two tenants may use the same id
// and neither can learn of the other's threads.
var threadIDFormat = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

func threadKey(c *caller, id string) string { return c.tenant + "/" + id }

func publicID(key string) string {
	_, id, _ := strings.Cut(key, "/")
	return id
}

func checkThreadID(id string) error {
	if !threadIDFormat.MatchString(id) {
		return &api.Error{Code: api.CodeInvalidInput, Message: "a thread id is 1 to 128 letters, digits, '.', '_', ':' or '-'"}
	}
	return nil
}

// thread returns the caller's thread named in the path: another tenant's
// thread is not found, like one that does not exist.
func (s *Server) thread(r *http.Request, c *caller) (*store.ThreadRecord, error) {
	id := r.PathValue("id")
	if checkThreadID(id) != nil {
		return nil, &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("no thread %q", id)}
	}
	rec, err := s.cat.Thread(r.Context(), c.tenant, threadKey(c, id))
	if errors.Is(err, store.ErrNotFound) || err == nil && rec.Deleting {
		return nil, &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("no thread %q", id)}
	}
	return rec, err
}

func (s *Server) threadInfo(r *http.Request, rec *store.ThreadRecord) (api.Thread, error) {
	out := api.Thread{ID: publicID(rec.ID), Flow: rec.Flow, Metadata: rec.Metadata, Created: rec.Created, Status: api.ThreadIdle}
	if out.Metadata == nil {
		out.Metadata = map[string]string{}
	}
	head, err := s.eng().Store.Head(r.Context(), rec.ID)
	if err != nil {
		return out, err
	}
	out.Checkpoint = head.Seq
	if len(head.Next) > 0 {
		out.Status = api.ThreadUnfinished
	}
	if vs := s.flows.vs; vs != nil {
		pin, err := vs.Store().ThreadPin(r.Context(), rec.Tenant, rec.ID)
		switch {
		case err == nil:
			out.Version = pin.Version
		case !errors.Is(err, store.ErrNotFound):
			return out, err
		}
	}
	return out, nil
}

// valuesError turns a state the schema refuses into invalid_input.
func valuesError(err error) error {
	var se *schema.Error
	if errors.As(err, &se) {
		return &api.Error{Code: api.CodeInvalidInput, Message: err.Error()}
	}
	return err
}

func (s *Server) createThread(w http.ResponseWriter, r *http.Request, c *caller) error {
	var in api.CreateThread
	if err := readJSON(r, &in); err != nil {
		return err
	}
	if in.ID == "" {
		in.ID = newRef(r, "thread")
	}
	if err := checkThreadID(in.ID); err != nil {
		return err
	}
	// the version promoted for every server: the same wherever the
	// thread is made
	l, err := s.newThreadFlow(r.Context(), in.Flow)
	if err != nil {
		return err
	}
	values, err := plain("values", in.Values)
	if err != nil {
		return err
	}
	key := threadKey(c, in.ID)
	if _, err := s.cat.Thread(r.Context(), c.tenant, key); err == nil {
		return &api.Error{Code: api.CodeThreadExists, Message: fmt.Sprintf("thread %q exists", in.ID)}
	}
	if _, err := s.eng().Create(r.Context(), l.flow.Graph(), key, values); err != nil {
		if errors.Is(err, store.ErrExists) {
			return &api.Error{Code: api.CodeThreadExists, Message: fmt.Sprintf("thread %q exists", in.ID)}
		}
		if ae, ok := valuesError(err).(*api.Error); ok {
			ae.Message = strings.ReplaceAll(ae.Message, strconv.Quote(key), strconv.Quote(in.ID))
			return ae
		}
		return err
	}
	rec := &store.ThreadRecord{ID: key, Tenant: c.tenant, Flow: l.flow.Name(), Metadata: in.Metadata, Created: time.Now().UTC()}
	err = s.cat.CreateThread(r.Context(), rec)
	if err == nil {
		// the thread runs this version until it is moved
		err = s.pinNew(r.Context(), c.tenant, key, l)
	}
	if err != nil {
		// nothing half-made stays behind
		_ = s.eng().Delete(r.Context(), key)
		if errors.Is(err, store.ErrExists) {
			return &api.Error{Code: api.CodeThreadExists, Message: fmt.Sprintf("thread %q exists", in.ID)}
		}
		return err
	}
	made(r, key)
	out, err := s.threadInfo(r, rec)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

func (s *Server) listThreads(w http.ResponseWriter, r *http.Request, c *caller) error {
	q := r.URL.Query()
	limit, err := queryInt(r, "limit", 1, 500, 50)
	if err != nil {
		return err
	}
	query := store.ThreadQuery{Tenant: c.tenant, Flow: q.Get("flow"), Limit: int(limit)}
	if after := q.Get("after"); after != "" {
		if checkThreadID(after) != nil {
			return badParam("after", "is a thread id, the next of a list of threads")
		}
		query.After = threadKey(c, after)
	}
	query.Metadata = deepObject(r, "metadata")
	// one more than asked tells whether there is a next page
	want := query.Limit
	query.Limit++
	recs, err := s.cat.ListThreads(r.Context(), query)
	if errors.Is(err, store.ErrNotFound) {
		return badParam("after", "names no thread of yours")
	}
	if err != nil {
		return err
	}
	out := api.ThreadList{Threads: []api.Thread{}}
	if len(recs) > want {
		recs = recs[:want]
		out.Next = publicID(recs[want-1].ID)
	}
	for _, rec := range recs {
		t, err := s.threadInfo(r, rec)
		if err != nil {
			return err
		}
		out.Threads = append(out.Threads, t)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) getThread(w http.ResponseWriter, r *http.Request, c *caller) error {
	rec, err := s.thread(r, c)
	if err != nil {
		return err
	}
	out, err := s.threadInfo(r, rec)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// deleteThread deletes a thread with everything of it: its checkpoints
// and its child flows' threads, its record, its runs and their events,
// its voice sessions. The thread is first marked as being deleted (which
// refuses it while a run is queued or running, and makes it take no run
// and leave the listings), then all of it is deleted in one transaction,
// under its lease, which a run outside the queue would hold (then the
// mark is taken back). A deletion that fails leaves the thread marked,
// and deleting it again finishes it.
func (s *Server) deleteThread(w http.ResponseWriter, r *http.Request, c *caller) error {
	id := r.PathValue("id")
	if checkThreadID(id) != nil {
		return &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("no thread %q", id)}
	}
	ctx, key := r.Context(), threadKey(c, id)
	if err := s.cat.MarkThreadDeleting(ctx, c.tenant, key, true); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("no thread %q", id)}
		}
		if errors.Is(err, store.ErrBusy) {
			if held := s.runs.heldBy(ctx, c.tenant, key, "cancel it first"); !errors.Is(held, engine.ErrBusy) {
				return held
			}
		}
		return err
	}
	if err := s.eng().Delete(ctx, key); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			// another deletion finished it first
			return &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("no thread %q", id)}
		}
		if errors.Is(err, engine.ErrBusy) || errors.Is(err, store.ErrBusy) {
			// a run holds it: the deletion is given up
			_ = s.cat.MarkThreadDeleting(context.WithoutCancel(ctx), c.tenant, key, false)
		}
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func stateInfo(snap *store.Snapshot) api.State {
	values := snap.Values
	if values == nil {
		values = map[string]any{}
	}
	return api.State{Thread: publicID(snap.Thread), Checkpoint: snap.Seq, Values: values, Next: snap.Next, Run: snap.Run, Step: snap.Step}
}

// inNamespace is the store key of the thread a request reads: the
// thread's own, or with ?ns= that of a child flow it ran (a subflow's
// thread, NODE:SEQ from its events), which belongs to the same tenant.
func inNamespace(r *http.Request, rec *store.ThreadRecord) (key string, err error) {
	ns := r.URL.Query().Get("ns")
	if ns == "" {
		return rec.ID, nil
	}
	if !engine.IsNamespace(ns) {
		return "", badParam("ns", "is a child flow's namespace, NODE:SEQ (levels joined by |), as its events name it")
	}
	return engine.ChildThread(rec.ID, ns), nil
}

func (s *Server) threadState(w http.ResponseWriter, r *http.Request, c *caller) error {
	rec, err := s.thread(r, c)
	if err != nil {
		return err
	}
	key, err := inNamespace(r, rec)
	if err != nil {
		return err
	}
	at, err := queryCheckpoint(r, "at")
	if err != nil {
		return err
	}
	var snap *store.Snapshot
	if seq := at; seq > 0 {
		snap, err = s.eng().Store.StateAt(r.Context(), key, seq)
		if errors.Is(err, store.ErrNotFound) {
			return &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("thread %q has no checkpoint %d", publicID(key), seq)}
		}
	} else {
		snap, err = s.eng().Store.Head(r.Context(), key)
	}
	if errors.Is(err, store.ErrNotFound) && key != rec.ID {
		return &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("thread %q ran no child flow %q", publicID(rec.ID), r.URL.Query().Get("ns"))}
	}
	if err != nil {
		return err
	}
	out := stateInfo(snap)
	if key != rec.ID {
		writeJSON(w, http.StatusOK, out)
		return nil
	}
	// the version of its flow the thread runs judges it
	l, lerr := s.threadFlow(r.Context(), rec.Tenant, rec.ID, rec.Flow)
	out.Finished = lerr == nil && finished(l, snap.Values)
	if len(snap.Next) > 0 && at == 0 && lerr == nil {
		asks, err := s.eng().Asks(r.Context(), l.flow.Graph(), rec.ID)
		if err != nil {
			return err
		}
		for _, a := range asks {
			out.Interrupts = append(out.Interrupts, api.Interrupt{ID: a.ID, Payload: a.Payload})
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) threadHistory(w http.ResponseWriter, r *http.Request, c *caller) error {
	rec, err := s.thread(r, c)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	limit, err := queryInt(r, "limit", 1, 1000, 50)
	if err != nil {
		return err
	}
	source, err := queryEnum(r, "source", sources...)
	if err != nil {
		return err
	}
	before, err := queryCheckpoint(r, "before")
	if err != nil {
		return err
	}
	opts := store.HistoryOptions{Limit: int(limit), Source: store.Source(source), Run: q.Get("run"), Node: q.Get("node"), Before: before}
	key, err := inNamespace(r, rec)
	if err != nil {
		return err
	}
	cps, err := s.eng().Store.History(r.Context(), key, opts)
	if err == nil && len(cps) == 0 && key != rec.ID {
		if _, serr := s.eng().Store.Head(r.Context(), key); errors.Is(serr, store.ErrNotFound) {
			return &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("thread %q ran no child flow %q", publicID(rec.ID), r.URL.Query().Get("ns"))}
		}
	}
	if err != nil {
		return err
	}
	out := api.History{Checkpoints: []api.Checkpoint{}}
	for _, cp := range cps {
		x := api.Checkpoint{Seq: cp.Seq, Parent: cp.Parent, Run: cp.Run, Step: cp.Step, Source: string(cp.Source), Time: cp.Time,
			Writes: []api.Write{}, Next: cp.Next, Base: cp.Base, Answers: cp.Answers}
		if cp.Source == store.SourceFork {
			// the thread it was forked from, by its public id
			if from, seq, ok := store.ForkedFrom(cp); ok {
				x.Run = publicID(from) + "@" + strconv.FormatUint(seq, 10)
			}
		} else {
			for _, rp := range cp.Replies {
				x.Replies = append(x.Replies, api.Reply{Node: rp.Node, Key: rp.Key, Text: rp.Text})
			}
		}
		for _, wr := range cp.Writes {
			x.Writes = append(x.Writes, api.Write{Field: wr.Field, Version: wr.Version, Value: wr.Value, Items: wr.Items, Append: wr.Append, Removed: wr.Removed})
		}
		x.Move = checkpointMove(cp)
		for _, nw := range cp.Writers {
			x.Writers = append(x.Writers, api.Writer{Node: nw.Node, Fields: nw.Fields})
		}
		out.Checkpoints = append(out.Checkpoints, x)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) forkThread(w http.ResponseWriter, r *http.Request, c *caller) error {
	rec, err := s.thread(r, c)
	if err != nil {
		return err
	}
	var in api.Fork
	if err := readJSON(r, &in); err != nil {
		return err
	}
	fork, _, err := s.fork(r, c, rec, in.At, in.ID, in.Metadata, false)
	if err != nil {
		return err
	}
	made(r, fork.ID)
	out, err := s.threadInfo(r, fork)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// fork starts thread id (a new id when empty) of c's tenant from
// checkpoint at of rec, with metadata (rec's when nil); replay makes it
// a replay's fork (store.ForkReplaying).
func (s *Server) fork(r *http.Request, c *caller, rec *store.ThreadRecord, at uint64, id string, md map[string]string, replay bool) (*store.ThreadRecord, *store.Snapshot, error) {
	if id == "" {
		id = newRef(r, "thread")
	}
	if err := checkThreadID(id); err != nil {
		return nil, nil, err
	}
	if at == 0 || at > maxCheckpoint {
		return nil, nil, &api.Error{Code: api.CodeInvalidInput, Message: fmt.Sprintf("at names the checkpoint to fork from, an integer from 1 to %d", int64(maxCheckpoint)),
			Details: map[string]string{"field": "at"}}
	}
	key := threadKey(c, id)
	forkAt := store.Fork
	if replay {
		forkAt = store.ForkReplaying
	}
	snap, err := forkAt(r.Context(), s.eng().Store, rec.ID, at, key)
	if err != nil {
		switch {
		case errors.Is(err, store.ErrNotFound):
			return nil, nil, &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("thread %q has no checkpoint %d", publicID(rec.ID), at)}
		case errors.Is(err, store.ErrExists):
			return nil, nil, &api.Error{Code: api.CodeThreadExists, Message: fmt.Sprintf("thread %q exists", id)}
		}
		return nil, nil, err
	}
	if md == nil {
		md = rec.Metadata
	}
	fork := &store.ThreadRecord{ID: key, Tenant: c.tenant, Flow: rec.Flow, Metadata: md, Created: time.Now().UTC()}
	err = s.cat.CreateThread(r.Context(), fork)
	if err == nil {
		// the fork runs the version its checkpoint was made by
		err = s.pinFork(r.Context(), c.tenant, rec.ID, at, key)
	}
	if err != nil {
		_ = s.eng().Delete(r.Context(), key)
		return nil, nil, err
	}
	return fork, snap, nil
}

func (s *Server) updateThread(w http.ResponseWriter, r *http.Request, c *caller) error {
	rec, err := s.thread(r, c)
	if err != nil {
		return err
	}
	var in api.Update
	if err := readJSON(r, &in); err != nil {
		return err
	}
	l, err := s.threadFlow(r.Context(), rec.Tenant, rec.ID, rec.Flow)
	if err != nil {
		return err
	}
	values, err := plain("values", in.Values)
	if err != nil {
		return err
	}
	if in.At > maxCheckpoint {
		return &api.Error{Code: api.CodeInvalidInput, Message: fmt.Sprintf("at names the checkpoint to update at, an integer from 1 to %d", int64(maxCheckpoint)),
			Details: map[string]string{"field": "at"}}
	}
	snap, err := s.eng().UpdateAt(r.Context(), l.flow.Graph(), rec.ID, in.At, in.As, values)
	if errors.Is(err, store.ErrNotFound) && in.At > 0 {
		return &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("thread %q has no checkpoint %d", publicID(rec.ID), in.At)}
	}
	if err != nil {
		return valuesError(err)
	}
	made(r, "")
	writeJSON(w, http.StatusOK, stateInfo(snap))
	return nil
}
