package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/versions"
)

// Promoted versions: which version of a flow new threads start on is
// recorded in the store (store.Promotions), one for every server sharing
// it, not read from each server's flow directory. A server's first load
// of a flow the store has no promotion for promotes the version it
// loaded; after that a load (a start, a reload, SIGHUP) keeps its
// versions without promoting them, unless asked (Config.Promote, the
// reload route's promote=true, a studio save), and POST
// /v1/flows/{name}/versions/{version}/promote promotes any version the
// store keeps. A server that never loaded the promoted version compiles
// it from the files the store keeps.

// promoteBy names who promoted a version on a server's first load of its
// flow.
const promoteBy = "first load"

// promote records the versions of a set just loaded as their flows'
// promoted ones: each only when its flow has none yet (first), or all of
// them (a load asked to promote), by by.
func (fs *flowSet) promote(set map[string]*loaded, first bool, by string) error {
	if fs.promos == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for name, l := range set {
		p := &store.Promotion{Flow: name, Version: l.version, Since: time.Now().UTC(), By: by}
		if _, err := fs.promos.PromoteVersion(ctx, p, first); err != nil {
			return fmt.Errorf("promote flow %q version %s: %w", name, l.version, err)
		}
	}
	return nil
}

// newThreadFlow is the version of a flow a new thread starts on: the one
// promoted for every server sharing the store (loaded here, or compiled
// from the store), or the one loaded here on a store that keeps none.
func (s *Server) newThreadFlow(ctx context.Context, name string) (*loaded, error) {
	cur, curErr := s.flows.get(name)
	if s.flows.promos == nil || s.flows.vs == nil {
		return cur, curErr
	}
	p, err := s.flows.promos.PromotedVersion(ctx, name)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return cur, curErr
	case err != nil:
		return nil, err
	case curErr == nil && cur.version == p.Version:
		return cur, nil
	}
	f, err := s.flows.vs.Flow(ctx, name, p.Version)
	if err != nil {
		return nil, fmt.Errorf("flow %q: its promoted version %s: %w", name, p.Version, err)
	}
	return &loaded{flow: f, version: p.Version}, nil
}

// promotedVersions is every flow's promoted version, by flow (empty on a
// store that keeps none).
func (s *Server) promotedVersions(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	if s.flows.promos == nil {
		return out, nil
	}
	ps, err := s.flows.promos.PromotedVersions(ctx)
	if err != nil {
		return nil, err
	}
	for _, p := range ps {
		out[p.Flow] = p.Version
	}
	return out, nil
}

// promoteVersion promotes a version of a flow the store keeps, once
// this server has compiled it (a version no server here can run is not
// promoted).
func (s *Server) promoteVersion(w http.ResponseWriter, r *http.Request, c *caller) error {
	vs, err := s.versions()
	if err != nil {
		return err
	}
	if s.flows.promos == nil {
		return &api.Error{Code: api.CodeUnavailable, Message: "this server's store keeps no promoted versions"}
	}
	name, version := r.PathValue("name"), r.PathValue("version")
	ctx := r.Context()
	if _, err := vs.Store().FlowVersion(ctx, name, version); errors.Is(err, store.ErrNotFound) {
		return &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("flow %q has no version %q (GET /v1/flows/%s/versions lists them)", name, version, name)}
	} else if err != nil {
		return err
	}
	if _, err := vs.Flow(ctx, name, version); err != nil {
		var le *versions.LoadError
		if errors.As(err, &le) {
			return &api.Error{Code: api.CodeInvalidFlow, Message: fmt.Sprintf("flow %q version %s does not compile on this server: %v", name, version, err),
				Details: api.Validation{Valid: false, Diagnostics: le.Diagnostics}}
		}
		return err
	}
	out := api.Promoted{Flow: name, Version: version, Since: time.Now().UTC(), By: c.key.ID}
	if prev, err := s.flows.promos.PromotedVersion(ctx, name); err == nil {
		out.Previous = prev.Version
	} else if !errors.Is(err, store.ErrNotFound) {
		return err
	}
	if _, err := s.flows.promos.PromoteVersion(ctx, &store.Promotion{Flow: name, Version: version, Since: out.Since, By: out.By}, false); err != nil {
		return err
	}
	s.log.Info("flow version promoted: new threads start on it", "flow", name, "version", version, "previous", out.Previous, "by", out.By)
	writeJSON(w, http.StatusOK, out)
	return nil
}
