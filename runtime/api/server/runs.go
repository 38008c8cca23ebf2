package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/value"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
)

// plain brings decoded JSON (numbers as json.Number) to state values;
// field names the body's field they came in, for the error.
func plain(field string, m map[string]any) (map[string]any, error) {
	if m == nil {
		return nil, nil
	}
	v, err := value.Normalize(m)
	if err != nil {
		msg := err.Error()
		var ne *strconv.NumError
		if errors.As(err, &ne) {
			msg = numberOutOfRange(ne.Num)
		}
		return nil, &api.Error{Code: api.CodeInvalidInput, Message: field + ": " + msg, Details: map[string]string{"field": field}}
	}
	return v.(map[string]any), nil
}

// recordValues writes values to keep on a run record (its input, its
// answers, its configuration) as JSON that storedValues reads back as
// they were: an integral float keeps a fraction (2.0), since encoding/json
// would write it as an integer and it would come back an int, taken where
// an integer is due although, 2^53 or more, it may be a rounding of the
// integer meant.
func recordValues(m map[string]any) []byte {
	b, _ := json.Marshal(keepFloats(m))
	return b
}

func keepFloats(v any) any {
	switch x := v.(type) {
	case float64:
		// from 1e21 encoding/json writes an exponent, read back as a float
		if x == math.Trunc(x) && math.Abs(x) < 1e21 {
			return json.Number(strconv.FormatFloat(x, 'f', 1, 64))
		}
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = keepFloats(e)
		}
		return out
	case map[string]any:
		if x == nil {
			return x
		}
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = keepFloats(e)
		}
		return out
	}
	return v
}

// storedValues reads values kept on a run record as JSON (its input, its
// answers) into state values, integers exact (nil: none kept).
func storedValues(raw []byte) map[string]any {
	if len(raw) == 0 {
		return nil
	}
	v, err := value.Decode(raw)
	if err != nil {
		return nil
	}
	m, _ := v.(map[string]any)
	return m
}

func runInfo(rec store.RunRecord, state map[string]any) api.Run {
	out := api.Run{ID: rec.ID, Thread: publicID(rec.Thread), Flow: rec.Flow, FlowVersion: rec.FlowVersion, Status: string(rec.Status),
		Error: rec.Error, Checkpoint: rec.Checkpoint, Created: rec.Created, State: state}
	out.Input, out.Answers, out.Config = storedValues(rec.Input), storedValues(rec.Answers), storedValues(rec.Config)
	if !rec.Started.IsZero() {
		t := rec.Started
		out.Started = &t
	}
	if !rec.Finished.IsZero() {
		t := rec.Finished
		out.Finished = &t
	}
	return out
}

// begin starts a run on the path's thread as the body asks: it returns
// the run (running here, or queued) or the error that refused it.
func (s *Server) begin(r *http.Request, c *caller) (store.RunRecord, *liveRun, error) {
	rec, err := s.thread(r, c)
	if err != nil {
		return store.RunRecord{}, nil, err
	}
	var in api.StartRun
	if err := readJSON(r, &in); err != nil {
		return store.RunRecord{}, nil, err
	}
	l, err := s.threadFlow(r.Context(), rec.Tenant, rec.ID, rec.Flow)
	if err != nil {
		return store.RunRecord{}, nil, err
	}
	// a caller's trace context (W3C traceparent, when tracing is set up)
	// becomes the parent of the run's span when the run starts here
	ctx := otel.GetTextMapPropagator().Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	k := keyedOf(r)
	if k == nil {
		return s.runs.start(ctx, c, rec, l, in)
	}
	// with an idempotency key, the run is made under the key's ref: a
	// request sent again follows it, wherever and whenever it runs
	id := "run_" + k.ref
	if k.retry {
		if run, lr, ok := s.keyedRun(ctx, r, c, rec, id); ok {
			return run, lr, nil
		}
	}
	run, lr, err := s.runs.startAs(ctx, c, rec, l, in, id)
	if err != nil {
		// another request with the key started it first (here or on
		// another server): this one follows it
		if run, lr, ok := s.keyedRun(ctx, r, c, rec, id); ok {
			return run, lr, nil
		}
		if lr != nil {
			made(r, rec.ID) // the run started; its caller left
		}
		return run, lr, err
	}
	made(r, rec.ID)
	return run, lr, nil
}

// keyedRun finds the run an idempotency key's first request started on
// the thread: it is followed, not started again, and the answer says
// so.
func (s *Server) keyedRun(ctx context.Context, r *http.Request, c *caller, th *store.ThreadRecord, id string) (store.RunRecord, *liveRun, bool) {
	if lr := s.runs.get(id); lr != nil {
		if rec := lr.record(); rec.Thread == th.ID && rec.Tenant == c.tenant {
			followed(r, th.ID)
			return rec, lr, true
		}
	}
	rec, err := s.cat.Run(ctx, c.tenant, id)
	if err != nil || rec.Thread != th.ID {
		return store.RunRecord{}, nil, false
	}
	followed(r, th.ID)
	return *rec, s.runs.get(id), true
}

func (s *Server) startRun(w http.ResponseWriter, r *http.Request, c *caller) error {
	rec, _, err := s.begin(r, c)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, runInfo(rec, nil))
	return nil
}

func (s *Server) startRunWait(w http.ResponseWriter, r *http.Request, c *caller) error {
	rec, _, err := s.begin(r, c)
	if err != nil {
		return err
	}
	return s.wait(w, r, c, rec.ID)
}

// wait answers with a run once it has ended, with the thread's state
// after it. A run of this server is waited for directly; one queued or
// running elsewhere is followed through its record. When this server
// stops before the run ends, the waiter is answered at once (503) with
// where the run went, to wait for it again: run_requeued when the run is
// queued again (it resumes on another server, or on this one once it
// restarts), unavailable when it runs on another server.
func (s *Server) wait(w http.ResponseWriter, r *http.Request, c *caller, id string) error {
	_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
	ctx := r.Context()
	woken, release := s.notes.wait(id)
	defer func() { release() }()
	var gone *liveRun // a run of this server that another server took over
	for {
		if lr := s.runs.get(id); lr != nil && lr != gone {
			select {
			case <-lr.done:
			case <-s.runs.abandoned:
				return notEnded(lr.record())
			case <-ctx.Done():
				return ctx.Err()
			}
			rec, state := lr.result()
			if rec.Status.Done() {
				info := runInfo(rec, state)
				info.Output = s.runOutput(ctx, rec)
				writeJSON(w, http.StatusOK, info)
				return nil
			}
			if rec.Status == store.RunQueued && s.isStopping() {
				return notEnded(rec) // stopped by the shutdown, queued again
			}
			// taken over by another server, or queued again for the
			// store's outage (to run here or on another server once it is
			// back): followed through its record from now on
			gone = lr
		}
		rec, err := s.cat.Run(ctx, c.tenant, id)
		if err != nil {
			return err
		}
		if rec.Status.Done() {
			var state map[string]any
			if snap, err := s.eng().Store.StateAt(ctx, rec.Thread, rec.Checkpoint); err == nil && rec.Checkpoint > 0 {
				state = snap.Values
			}
			info := runInfo(*rec, state)
			info.Output = s.runOutput(ctx, *rec)
			writeJSON(w, http.StatusOK, info)
			return nil
		}
		select {
		case <-woken:
		case <-s.stopping:
			if lr := s.runs.get(id); lr != nil && lr != gone {
				continue // it came to this server: waited for as such
			}
			return notEnded(*rec)
		case <-ctx.Done():
			return ctx.Err()
		}
		release()
		woken, release = s.notes.wait(id)
	}
}

// notEnded is the answer to a client waiting on a run that has not
// ended when this server stops: where the run went, to wait for it again.
func notEnded(rec store.RunRecord) error {
	details := map[string]string{"run": rec.ID, "thread": publicID(rec.Thread), "status": string(rec.Status)}
	if rec.Status == store.RunQueued {
		return &api.Error{Code: api.CodeRunRequeued, Details: details,
			Message: "the server stopped before the run ended: it is queued again, and resumes on another server or on this one once it restarts; wait for it again"}
	}
	return &api.Error{Code: api.CodeUnavailable, Details: details,
		Message: "the server is stopping before the run ended: wait for it again on another server"}
}

func (s *Server) startRunStream(w http.ResponseWriter, r *http.Request, c *caller) error {
	rec, lr, err := s.begin(r, c)
	if err != nil {
		return err
	}
	w.Header().Set("Trellis-Run", rec.ID)
	if lr != nil {
		return s.streamLive(w, r, lr, 0)
	}
	return s.streamStored(w, r, c, &rec, 0)
}

// run returns the caller's run named in the path, on the path's thread.
func (s *Server) run(r *http.Request, c *caller) (*store.ThreadRecord, *store.RunRecord, error) {
	th, err := s.thread(r, c)
	if err != nil {
		return nil, nil, err
	}
	id := r.PathValue("run")
	if lr := s.runs.get(id); lr != nil {
		if rec := lr.record(); rec.Thread == th.ID && rec.Tenant == c.tenant {
			return th, &rec, nil
		}
	}
	rec, err := s.cat.Run(r.Context(), c.tenant, id)
	if errors.Is(err, store.ErrNotFound) || err == nil && rec.Thread != th.ID {
		return nil, nil, &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("no run %q on thread %q", id, publicID(th.ID))}
	}
	return th, rec, err
}

func (s *Server) getRun(w http.ResponseWriter, r *http.Request, c *caller) error {
	_, rec, err := s.run(r, c)
	if err != nil {
		return err
	}
	info := runInfo(*rec, nil)
	info.Output = s.runOutput(r.Context(), *rec)
	writeJSON(w, http.StatusOK, info)
	return nil
}

func (s *Server) listRuns(w http.ResponseWriter, r *http.Request, c *caller) error {
	th, err := s.thread(r, c)
	if err != nil {
		return err
	}
	limit, err := queryInt(r, "limit", 1, 500, 100)
	if err != nil {
		return err
	}
	q := store.RunQuery{Tenant: c.tenant, Thread: th.ID, Before: r.URL.Query().Get("before"), Limit: int(limit) + 1}
	// one more than asked tells whether there is a next page
	recs, err := s.cat.Runs(r.Context(), q)
	if errors.Is(err, store.ErrNotFound) && q.Before != "" {
		return badParam("before", "names no run of this thread")
	}
	if err != nil {
		return err
	}
	out := api.RunList{Runs: []api.Run{}}
	if len(recs) > int(limit) {
		recs = recs[:limit]
		out.Next = recs[len(recs)-1].ID
	}
	for _, rec := range recs {
		if lr := s.runs.get(rec.ID); lr != nil {
			*rec = lr.record()
		}
		out.Runs = append(out.Runs, runInfo(*rec, nil))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// joinRun waits for a run to end.
func (s *Server) joinRun(w http.ResponseWriter, r *http.Request, c *caller) error {
	_, rec, err := s.run(r, c)
	if err != nil {
		return err
	}
	return s.wait(w, r, c, rec.ID)
}

func (s *Server) cancelRun(w http.ResponseWriter, r *http.Request, c *caller) error {
	_, rec, err := s.run(r, c)
	if err != nil {
		return err
	}
	if rec.Status.Done() {
		writeJSON(w, http.StatusOK, runInfo(*rec, nil))
		return nil
	}
	if rec, err = s.runs.cancel(r.Context(), c.tenant, rec.ID); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, runInfo(*rec, nil))
	return nil
}

// joinStream streams a run's events after Last-Event-ID.
func (s *Server) joinStream(w http.ResponseWriter, r *http.Request, c *caller) error {
	_, rec, err := s.run(r, c)
	if err != nil {
		return err
	}
	after, err := intParam(r.Header.Get("Last-Event-ID"), "Last-Event-ID", 0, math.MaxInt64, 0)
	if err != nil {
		return err
	}
	w.Header().Set("Trellis-Run", rec.ID)
	lr := s.runs.get(rec.ID)
	if lr != nil {
		// a run whose end is recorded (its log closed) stays this
		// server's a moment longer: a client that has had its every
		// event is told to stop as for one no longer here
		if items, closed, _ := lr.events.since(after); !closed || len(items) > 0 || after < lr.events.first {
			return s.streamLive(w, r, lr, after)
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	if rec.Status.Done() {
		evs, err := s.cat.Events(r.Context(), rec.ID, after, 1)
		if err != nil {
			return err
		}
		if len(evs) == 0 {
			// the run has ended and the client has had every event: 204
			// tells an EventSource to stop reconnecting (an empty 200
			// has it reconnect every few seconds for ever)
			w.WriteHeader(http.StatusNoContent)
			return nil
		}
	}
	return s.streamStored(w, r, c, rec, after)
}

// sse writes Server-Sent Events.
type sse struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	buf []byte // an event's frame, reused
}

func startSSE(w http.ResponseWriter) *sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{})
	return &sse{w: w, rc: rc}
}

// event writes an event, to be sent at the next flush: a burst of
// events goes in one write to the client.
func (e *sse) event(seq int64, typ string, data []byte) error {
	b := strconv.AppendInt(append(e.buf[:0], "id: "...), seq, 10)
	b = append(append(append(b, "\nevent: "...), typ...), "\ndata: "...)
	b = append(append(b, data...), "\n\n"...)
	if cap(b) <= 64<<10 {
		e.buf = b
	}
	_, err := e.w.Write(b)
	return err
}

// flush sends the events written.
func (e *sse) flush() error { return e.rc.Flush() }

func (e *sse) ping() error {
	if _, err := fmt.Fprint(e.w, ": ping\n\n"); err != nil {
		return err
	}
	return e.rc.Flush()
}

const pingEvery = 15 * time.Second

// streamLive streams a run of this server from its event log (events an
// adopted run had before it came here are read from the store first).
func (s *Server) streamLive(w http.ResponseWriter, r *http.Request, lr *liveRun, after int64) error {
	return s.followLive(startSSE(w), r, lr, after)
}

func (s *Server) followLive(out *sse, r *http.Request, lr *liveRun, after int64) error {
	for after < lr.events.first {
		evs, err := s.cat.Events(r.Context(), lr.rec.ID, after, store.MaxPage)
		if err != nil || len(evs) == 0 {
			break
		}
		for _, ev := range evs {
			if ev.Seq > lr.events.first {
				break
			}
			typ, data := eventType(ev.Data), ev.Data
			if typ == string(engine.RunEnd) {
				rec, _ := lr.result()
				data = s.sendable(r.Context(), &rec, typ, data, nil)
			}
			if out.event(ev.Seq, typ, data) != nil {
				return nil
			}
			after = ev.Seq
		}
		if out.flush() != nil {
			return nil
		}
		if evs[len(evs)-1].Seq >= lr.events.first {
			break
		}
	}
	ping := time.NewTicker(pingEvery)
	defer ping.Stop()
	for {
		items, closed, more := lr.events.since(after)
		for _, it := range items {
			data := it.data
			if it.typ == string(engine.RunEnd) {
				if data = lr.events.sent(it.seq); data == nil {
					// one the server made (the run's record and final
					// state are set before its end is shown)
					rec, state := lr.result()
					data = s.sendable(r.Context(), &rec, it.typ, it.data, state)
				}
			}
			if err := out.event(it.seq, it.typ, data); err != nil {
				return nil // the client left
			}
			after = it.seq
		}
		if len(items) > 0 && out.flush() != nil {
			return nil
		}
		if closed {
			return nil // that was the last of it
		}
		select {
		case <-more:
		case <-ping.C:
			if out.ping() != nil {
				return nil
			}
		case <-r.Context().Done():
			return nil
		}
	}
}

// eventType reads a recorded event's type.
func eventType(data []byte) string {
	// an event this server encodes begins with its type (engine.Event's
	// first field): read without scanning the rest, a run_end's whole
	// state among it
	if rest, ok := bytes.CutPrefix(data, []byte(`{"type":"`)); ok {
		if i := bytes.IndexByte(rest, '"'); i >= 0 && bytes.IndexByte(rest[:i], '\\') < 0 {
			return string(rest[:i])
		}
	}
	var head struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(data, &head)
	return head.Type
}

// sendable is a recorded event as streams send it. A run's end is
// recorded without the run's final state: that is the state at the
// checkpoint the run's record names, kept there once (recorded in every
// run's end, it made each turn's writes grow with the thread). The end
// gets it back here: state when the caller has it (a live run's), else
// the state read at that checkpoint. An end recorded with its state (by
// an earlier version) goes as it is, and so does one whose checkpoint
// the store no longer has (its thread's history pruned).
func (s *Server) sendable(ctx context.Context, rec *store.RunRecord, typ string, data []byte, state map[string]any) []byte {
	if typ != string(engine.RunEnd) {
		return data
	}
	var ev engine.Event
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	if err := d.Decode(&ev); err != nil || ev.State != nil {
		return data
	}
	if state == nil && rec.Checkpoint != 0 {
		snap, err := s.eng().Store.StateAt(ctx, rec.Thread, rec.Checkpoint)
		if err != nil {
			return data
		}
		state = snap.Values
	}
	if len(state) == 0 {
		return data
	}
	ev.State = state
	out, err := ev.JSON()
	if err != nil {
		return data
	}
	return out
}

// streamStored streams a run's recorded events: all of them for a run
// that ended, and, for one still running on another server, those it
// records as it goes, until it ends.
func (s *Server) streamStored(w http.ResponseWriter, r *http.Request, c *caller, rec *store.RunRecord, after int64) error {
	out := startSSE(w)
	ctx := r.Context()
	lastPing := time.Now()
	// listen for the run's notifications before each read of it, so that
	// none is missed between the read and the wait
	woken, release := s.notes.wait(rec.ID)
	defer func() { release() }()
	rec, err := s.cat.Run(context.WithoutCancel(ctx), c.tenant, rec.ID)
	if err != nil {
		return nil
	}
	for {
		done := rec.Status.Done()
		evs, err := s.cat.Events(ctx, rec.ID, after, store.MaxPage)
		if err != nil {
			return nil
		}
		for _, ev := range evs {
			typ := eventType(ev.Data)
			if !done && (typ == string(engine.RunEnd) || typ == string(engine.RunError)) {
				break // told once the run is recorded as ended
			}
			if out.event(ev.Seq, typ, s.sendable(ctx, rec, typ, ev.Data, nil)) != nil {
				return nil
			}
			after = ev.Seq
		}
		if len(evs) > 0 && out.flush() != nil {
			return nil
		}
		if len(evs) == store.MaxPage && after == evs[len(evs)-1].Seq {
			continue // the next page
		}
		if done {
			return nil
		}
		if lr := s.runs.get(rec.ID); lr != nil {
			// the run came to this server: follow it live
			return s.followLive(out, r, lr, after)
		}
		if time.Since(lastPing) > pingEvery {
			if out.ping() != nil {
				return nil
			}
			lastPing = time.Now()
		}
		select {
		case <-woken:
		case <-ctx.Done():
			return nil
		case <-s.stopping:
			return nil // the client reconnects to another server, or this one restarted
		}
		release()
		woken, release = s.notes.wait(rec.ID)
		if rec, err = s.cat.Run(context.WithoutCancel(ctx), c.tenant, rec.ID); err != nil {
			return nil
		}
	}
}
