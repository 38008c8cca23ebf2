package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/flowdiff"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/versions"
)

// The versions of flows: every flow the server loads is kept in the
// store by its files' hash (versions.Versions), each thread runs the
// version it started on (its pin) until it is moved, and a version this
// server never loaded is compiled from the store. A store that keeps no
// versions runs every thread on the version loaded now.

// keepVersions keeps the versions of a flow set about to be loaded.
func (fs *flowSet) keepVersions(set map[string]*loaded) error {
	if fs.vs == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, l := range set {
		if err := fs.vs.Keep(ctx, l.flow); err != nil {
			return err
		}
	}
	return nil
}

// threadFlow is the version of its flow a thread runs: the version
// pinned to it, loaded here or compiled from the store. A thread with no
// version recorded (made before versions were kept) is pinned to the
// version loaded now.
func (s *Server) threadFlow(ctx context.Context, tenant, thread, name string) (*loaded, error) {
	vs := s.flows.vs
	cur, curErr := s.flows.get(name)
	if vs == nil {
		return cur, curErr
	}
	for {
		f, pin, err := vs.ThreadFlow(ctx, tenant, thread)
		if errors.Is(err, versions.ErrNoVersion) {
			// the version new threads start on
			if cur, curErr = s.newThreadFlow(ctx, name); curErr != nil {
				return nil, curErr
			}
			err := vs.Pin(ctx, tenant, thread, cur.flow)
			if errors.Is(err, store.ErrPinChanged) {
				continue // pinned by another just now
			}
			if err != nil {
				return nil, err
			}
			return cur, nil
		}
		if err != nil {
			return nil, err
		}
		if cur != nil && cur.version == pin.Version {
			return cur, nil
		}
		return &loaded{flow: f, version: pin.Version}, nil
	}
}

// errMoved: a run's thread moved to another version of its flow between
// the run reading the version and holding the thread.
var errMoved = errors.New("the thread moved to another version of its flow as its run began")

// onVersion refuses a run (errMoved) whose thread, once the run holds it,
// is no longer on the version *l: a move holds the thread too, so the
// version cannot change again before the run ends.
func (s *Server) onVersion(tenant, thread string, l **loaded) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		if s.flows.vs == nil {
			return nil
		}
		pin, err := s.flows.vs.Store().ThreadPin(ctx, tenant, thread)
		switch {
		case err != nil:
			return err
		case pin.Version != (*l).version:
			return errMoved
		}
		return nil
	}
}

// flowVersion is a version of a flow: the one loaded, or one the store
// keeps.
func (s *Server) flowVersion(ctx context.Context, name, version string) (*loaded, error) {
	cur, err := s.flows.get(name)
	if err == nil && cur.version == version || s.flows.vs == nil {
		return cur, err
	}
	f, err := s.flows.vs.Flow(ctx, name, version)
	if err != nil {
		return nil, err
	}
	return &loaded{flow: f, version: version}, nil
}

// keptVersion is a version of a flow the store keeps (or the one loaded,
// on a store that keeps none): not_found when there is no such version.
func (s *Server) keptVersion(ctx context.Context, name, version string) (*loaded, error) {
	l, err := s.flowVersion(ctx, name, version)
	if errors.Is(err, store.ErrNotFound) || err == nil && l.version != version {
		return nil, &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("flow %q has no version %q", name, version)}
	}
	return l, err
}

// pinNew records the version a new thread runs.
func (s *Server) pinNew(ctx context.Context, tenant, thread string, l *loaded) error {
	if s.flows.vs == nil {
		return nil
	}
	return s.flows.vs.Pin(ctx, tenant, thread, l.flow)
}

// pinFork records the version a fork runs (see versions.Versions.PinFork).
func (s *Server) pinFork(ctx context.Context, tenant, from string, at uint64, to string) error {
	if s.flows.vs == nil {
		return nil
	}
	return s.flows.vs.PinFork(ctx, s.eng(), tenant, from, at, to)
}

// versions is the server's kept versions, or an error saying the store
// keeps none.
func (s *Server) versions() (*versions.Versions, error) {
	if s.flows.vs == nil {
		return nil, &api.Error{Code: api.CodeUnavailable, Message: "this server's store keeps no flow versions"}
	}
	return s.flows.vs, nil
}

func (s *Server) listVersions(w http.ResponseWriter, r *http.Request, c *caller) error {
	vs, err := s.versions()
	if err != nil {
		return err
	}
	name := r.PathValue("name")
	list, err := vs.List(r.Context(), name)
	if err != nil {
		return err
	}
	cur, curErr := s.flows.get(name)
	if len(list) == 0 && curErr != nil {
		return curErr
	}
	counts, err := vs.Store().CountPins(r.Context(), c.tenant, name)
	if err != nil {
		return err
	}
	promoted, err := s.promotedVersions(r.Context())
	if err != nil {
		return err
	}
	out := api.FlowVersions{Flow: name, Versions: []api.FlowVersion{}}
	for _, v := range list {
		out.Versions = append(out.Versions, api.FlowVersion{Version: v.Version, Created: v.Created.UTC(),
			Loaded: curErr == nil && cur.version == v.Version, Promoted: promoted[name] == v.Version, Threads: counts[v.Version]})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) versionThreads(w http.ResponseWriter, r *http.Request, c *caller) error {
	vs, err := s.versions()
	if err != nil {
		return err
	}
	name, version := r.PathValue("name"), r.PathValue("version")
	limit, err := queryInt(r, "limit", 1, 500, 50)
	if err != nil {
		return err
	}
	q := store.PinQuery{Tenant: c.tenant, Flow: name, Version: version, Limit: int(limit) + 1}
	if after := r.URL.Query().Get("after"); after != "" {
		if checkThreadID(after) != nil {
			return badParam("after", "is a thread id, the last of the previous page")
		}
		q.After = threadKey(c, after)
	}
	if _, err := vs.Store().FlowVersion(r.Context(), name, version); errors.Is(err, store.ErrNotFound) {
		return &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("flow %q has no version %q", name, version)}
	} else if err != nil {
		return err
	}
	pins, err := vs.Store().ThreadPins(r.Context(), q)
	if err != nil {
		return err
	}
	out := api.ThreadVersions{Threads: []api.ThreadVersion{}}
	if len(pins) > int(limit) {
		pins = pins[:limit]
		out.Next = publicID(pins[limit-1].Thread)
	}
	for _, p := range pins {
		out.Threads = append(out.Threads, api.ThreadVersion{Thread: publicID(p.Thread), Version: p.Version, Since: p.Since.UTC()})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) moveThread(w http.ResponseWriter, r *http.Request, c *caller) error {
	rec, err := s.thread(r, c)
	if err != nil {
		return err
	}
	vs, err := s.versions()
	if err != nil {
		return err
	}
	var in api.MoveThread
	if err := readJSON(r, &in); err != nil {
		return err
	}
	if in.To == "" {
		return &api.Error{Code: api.CodeInvalidInput, Message: "to is required: the version to move the thread to (GET /v1/flows/{name}/versions lists them)"}
	}
	var m versions.Migration
	if in.Migration != nil {
		m = versions.Migration{Set: in.Migration.Set, Drop: in.Migration.Drop}
	}
	ctx := r.Context()
	// a thread with no version recorded is on the one loaded now
	if _, err := s.threadFlow(ctx, c.tenant, rec.ID, rec.Flow); err != nil {
		return err
	}
	if _, err := vs.Store().FlowVersion(ctx, rec.Flow, in.To); errors.Is(err, store.ErrNotFound) {
		return &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("flow %q has no version %q", rec.Flow, in.To)}
	} else if err != nil {
		return err
	}
	// refused while a run is queued or running on it (versions.ErrRunPending)
	res, err := vs.MoveThread(ctx, s.eng(), c.tenant, rec.ID, in.To, m, in.DryRun)
	if errors.Is(err, versions.ErrRunPending) {
		return &api.Error{Code: api.CodeThreadBusy, Message: "a run is queued or running on the thread: wait for it or cancel it first"}
	}
	var me *versions.MoveError
	if errors.As(err, &me) {
		d := api.MoveRefusal{From: me.From, To: me.To, Breaking: effects(me.Breaking), Problems: me.Problems}
		if d.Problems == nil {
			d.Problems = []string{}
		}
		return &api.Error{Code: api.CodeMoveRefused, Message: me.Error(), Details: d}
	}
	if errors.Is(err, store.ErrPinChanged) {
		return &api.Error{Code: api.CodeThreadBusy, Message: "the thread was moved by another at the same time: read its version again"}
	}
	if err != nil {
		return err
	}
	if res.Moved {
		s.log.Info("thread moved to another version of its flow", "thread", rec.ID, "flow", res.Flow, "from", res.From, "to", res.To)
	}
	writeJSON(w, http.StatusOK, api.Moved{Thread: publicID(rec.ID), Flow: res.Flow, From: res.From, To: res.To, Effects: effects(res.Effects),
		Moved: res.Moved, Checkpoint: res.Checkpoint})
	return nil
}

func effects(in []flowdiff.Effect) []api.Effect {
	out := make([]api.Effect, 0, len(in))
	for _, e := range in {
		out = append(out, api.Effect{Area: e.Area, Name: e.Name, Kind: e.Kind, Breaking: e.Breaking, Reason: e.Reason})
	}
	return out
}

// checkpointMove is the versions a move's checkpoint records (nil for
// any other checkpoint).
func checkpointMove(cp *store.Checkpoint) *api.CheckpointMove {
	if cp.Source != store.SourceMigrate {
		return nil
	}
	m := &api.CheckpointMove{}
	m.Flow, _ = cp.Config["flow"].(string)
	m.From, _ = cp.Config["from_version"].(string)
	m.To, _ = cp.Config["to_version"].(string)
	return m
}
