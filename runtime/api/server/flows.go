package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sync"

	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/schema"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/versions"
)

// flowSet is the flows the server runs, loaded from a directory and
// replaced whole by a reload.
type flowSet struct {
	dir   string
	kinds kind.Registry
	// vs keeps every version loaded (nil: the store keeps none; see
	// versions.go), promos the version of each flow new threads start on
	// (nil: none; see promote.go)
	vs     *versions.Versions
	promos store.Promotions
	mu     sync.RWMutex
	set    map[string]*loaded
}

// loaded is one flow with its version: a hash of every file it was
// compiled from, so that a changed prompt or schema is a new version
// (versions.Flow.Version).
type loaded struct {
	flow    *compiled
	version string
}

// compiled is a flow the server compiled: its graph, the problems that
// did not stop it compiling, the text of every file it was compiled
// from, and the version they make.
type compiled = versions.Flow

// loadError is a flow that does not compile: every problem in its files.
type loadError struct{ diags []diag.Diagnostic }

func (e *loadError) Error() string { return (&diag.ListError{List: e.diags}).Error() }

// compile compiles the flow at path with the set's kinds: its text is
// src (nil: read from path), and the files it names are read from files
// (nil: the disk). A flow that does not compile is a *loadError.
func (fs *flowSet) compile(files *config.Files, path string, src []byte) (*compiled, error) {
	return fs.compileWith(fs.kinds, files, path, src)
}

// check compiles a flow a caller gave (posted, or edited): with the
// kinds reaching nothing while it loads (kind.OfflineOf), so that a
// caller's flow does not have the server start a command or dial an
// address (an MCP server's tools come from its pinned copy).
func (fs *flowSet) check(files *config.Files, path string, src []byte) (*compiled, error) {
	return fs.compileWith(kind.OfflineOf(fs.kinds), files, path, src)
}

func (fs *flowSet) compileWith(kinds kind.Registry, files *config.Files, path string, src []byte) (*compiled, error) {
	f, dl := versions.Compile(files, path, src, kinds)
	if f == nil {
		return nil, &loadError{diags: dl}
	}
	return f, nil
}

// reloadError is a reload whose flows did not all load: the old set stays.
type reloadError struct{ diags []diag.Diagnostic }

func (e *reloadError) Error() string {
	return fmt.Sprintf("the flows do not load (%d problems); the loaded set is unchanged: %s", len(e.diags), (&diag.ListError{List: e.diags}).Error())
}

// reload loads every flow of the directory; only when all of them load is
// the set replaced. The versions loaded are kept in the store and, with
// promote, promoted (by by); otherwise only the flows the store has no
// promoted version for get theirs promoted.
func (fs *flowSet) reload(promote bool, by string) ([]*loaded, error) {
	files, _, err := flow.Find(fs.dir)
	if err != nil {
		return nil, fmt.Errorf("flows: %w", err)
	}
	defer flow.Prepare(fs.kinds)() // for every file
	next := map[string]*loaded{}
	var problems []diag.Diagnostic
	for _, file := range files {
		f, err := fs.compile(nil, file, nil)
		var le *loadError
		switch {
		case errors.As(err, &le):
			problems = append(problems, le.diags...)
			continue
		case err != nil:
			return nil, err
		}
		if other, dup := next[f.Name()]; dup {
			problems = append(problems, diag.Diagnostic{Severity: diag.Error, Code: diag.CodeDuplicate, Pos: diag.Pos{File: file, Line: 1, Col: 1},
				Summary: fmt.Sprintf("flow %q is also defined by %s", f.Name(), other.flow.Path())})
			continue
		}
		next[f.Name()] = &loaded{flow: f, version: f.Version().Version}
	}
	if len(problems) > 0 {
		return nil, &reloadError{diags: problems}
	}
	if err := fs.keepVersions(next); err != nil {
		return nil, err
	}
	if !promote {
		by = promoteBy
	}
	if err := fs.promote(next, !promote, by); err != nil {
		return nil, err
	}
	fs.mu.Lock()
	fs.set = next
	fs.mu.Unlock()
	return fs.list(), nil
}

func (fs *flowSet) get(name string) (*loaded, error) {
	fs.mu.RLock()
	defer fs.mu.RUnlock()
	l, ok := fs.set[name]
	if !ok {
		return nil, &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("no flow %q", name)}
	}
	return l, nil
}

func (fs *flowSet) list() []*loaded {
	fs.mu.RLock()
	defer fs.mu.RUnlock()
	out := make([]*loaded, 0, len(fs.set))
	for _, name := range slices.Sorted(maps.Keys(fs.set)) {
		out = append(out, fs.set[name])
	}
	return out
}

// flowInfo describes a flow; full adds its schemas and source.
func flowInfo(l *loaded, full bool) api.Flow {
	f := l.flow
	out := api.Flow{Name: f.Name(), Version: l.version, Description: f.Graph().Description, Path: f.Path(), Inputs: f.Graph().InputNames()}
	if out.Inputs == nil {
		out.Inputs = []string{}
	}
	if c := f.Graph().Conversation; c != nil {
		out.Conversation = &api.Conversation{Input: c.Input, Output: c.Output, Attachments: c.Attachments}
	}
	if full {
		g := f.Graph()
		props, inProps := map[string]any{}, map[string]any{}
		for _, fl := range g.Fields {
			props[fl.Name] = shapeSchema(fl.Shape)
			if fl.Input {
				inProps[fl.Name] = props[fl.Name]
			}
		}
		out.StateSchema, _ = json.Marshal(map[string]any{"type": "object", "properties": props, "additionalProperties": false})
		out.InputSchema, _ = json.Marshal(map[string]any{"type": "object", "properties": inProps, "additionalProperties": false})
		out.Source = string(f.Sources()[f.Path()])
	}
	return out
}

// shapeSchema writes a field's shape back as JSON Schema: the types and
// structure the runtime checks statically (the compiled validators check
// the rest on every commit).
func shapeSchema(s *schema.Shape) map[string]any {
	out := map[string]any{}
	if s == nil {
		return out
	}
	switch len(s.Types) {
	case 0:
	case 1:
		out["type"] = s.Types[0]
	default:
		out["type"] = s.Types
	}
	if s.Items != nil {
		out["items"] = shapeSchema(s.Items)
	}
	if len(s.Props) > 0 {
		props := map[string]any{}
		for k, v := range s.Props {
			props[k] = shapeSchema(v)
		}
		out["properties"] = props
	}
	if s.HasDefault {
		out["default"] = s.Default
	}
	return out
}

func (s *Server) listFlows(w http.ResponseWriter, r *http.Request, _ *caller) error {
	promoted, err := s.promotedVersions(r.Context())
	if err != nil {
		return err
	}
	out := api.FlowList{Flows: []api.Flow{}}
	for _, l := range s.flows.list() {
		info := flowInfo(l, false)
		info.Promoted = promoted[info.Name]
		out.Flows = append(out.Flows, info)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) getFlow(w http.ResponseWriter, r *http.Request, _ *caller) error {
	name := r.PathValue("name")
	l, err := s.flows.get(name)
	if version := r.URL.Query().Get("version"); version != "" {
		l, err = s.keptVersion(r.Context(), name, version)
	}
	if err != nil {
		return err
	}
	info := flowInfo(l, true)
	if s.flows.promos != nil {
		p, err := s.flows.promos.PromotedVersion(r.Context(), name)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if err == nil {
			info.Promoted = p.Version
		}
	}
	writeJSON(w, http.StatusOK, info)
	return nil
}

func (s *Server) flowGraph(w http.ResponseWriter, r *http.Request, _ *caller) error {
	l, err := s.flows.get(r.PathValue("name"))
	if err != nil {
		return err
	}
	g := l.flow.Graph()
	format, err := queryEnum(r, "format", "json", "mermaid", "dot")
	if err != nil {
		return err
	}
	expand, err := queryBool(r, "expand")
	if err != nil {
		return err
	}
	switch format {
	case "", "json":
		b, err := g.JSON()
		if err != nil {
			return err
		}
		w.Header().Set("Content-Type", "application/json")
		_, err = w.Write(append(b, '\n'))
		return err
	case "mermaid", "dot":
		o := flow.DrawOptions{Expand: expand}
		text := g.MermaidWith(o)
		if format == "dot" {
			text = g.DOTWith(o)
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, err := io.WriteString(w, text)
		return err
	}
	return nil
}

// validateFlow checks a posted flow file (YAML) as `trellis validate`
// does for it as the file `name` of the flow directory: the files it
// names are read relative to it, from the server's root and nothing
// outside it.
func (s *Server) validateFlow(w http.ResponseWriter, r *http.Request, _ *caller) error {
	src, err := io.ReadAll(r.Body)
	if err != nil {
		return err
	}
	root, flows, err := s.validateRoot()
	if err != nil {
		return err
	}
	dir, err := os.OpenRoot(root)
	if err != nil {
		return fmt.Errorf("validate: %w", err)
	}
	defer dir.Close()
	name := path.Clean("/" + r.URL.Query().Get("name"))[1:]
	if name == "" {
		name = "posted.yaml"
	}
	f, err := s.flows.check(config.FS(dir.FS()), path.Join(flows, name), src)
	var le *loadError
	switch {
	case errors.As(err, &le):
		return &api.Error{Code: api.CodeInvalidFlow, Message: le.Error(), Details: api.Validation{Valid: false, Diagnostics: le.diags}}
	case err != nil:
		return err
	}
	out := api.Validation{Valid: true, Diagnostics: f.Warnings()}
	if out.Diagnostics == nil {
		out.Diagnostics = []diag.Diagnostic{}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// validateRoot is the directory the validate route reads from (Config.Root,
// or the project's root: the closest directory holding the flow directory
// and every file its flows read), and the flow directory in it.
func (s *Server) validateRoot() (root, flows string, err error) {
	if s.cfg.Root == "" {
		p, err := s.project()
		if err != nil {
			return "", "", err
		}
		return p.root, p.flows, nil
	}
	root, err = filepath.Abs(s.cfg.Root)
	if err != nil {
		return "", "", fmt.Errorf("root: %w", err)
	}
	abs, err := filepath.Abs(s.cfg.FlowsDir)
	if err != nil {
		return "", "", fmt.Errorf("flows: %w", err)
	}
	if !within(root, abs) {
		return "", "", fmt.Errorf("the flow directory %s is outside the root %s", s.cfg.FlowsDir, s.cfg.Root)
	}
	flows, err = filepath.Rel(root, abs)
	return root, filepath.ToSlash(flows), err
}

func (s *Server) reloadFlows(w http.ResponseWriter, r *http.Request, c *caller) error {
	promote, err := queryBool(r, "promote")
	if err != nil {
		return err
	}
	loaded, err := s.flows.reload(promote || s.cfg.Promote, c.key.ID)
	var re *reloadError
	if errors.As(err, &re) {
		s.log.Warn("reload refused", "problems", len(re.diags))
		return &api.Error{Code: api.CodeInvalidFlow, Message: re.Error(), Details: api.Validation{Valid: false, Diagnostics: re.diags}}
	}
	if err != nil {
		return err
	}
	promoted, err := s.promotedVersions(r.Context())
	if err != nil {
		return err
	}
	out := api.Reload{Flows: []api.Flow{}}
	for _, l := range loaded {
		info := flowInfo(l, false)
		info.Promoted = promoted[info.Name]
		out.Flows = append(out.Flows, info)
	}
	s.log.Info("flows reloaded", "flows", len(out.Flows), "promoted", promote || s.cfg.Promote)
	writeJSON(w, http.StatusOK, out)
	return nil
}

// Reload reloads the flow directory (on SIGHUP); a directory that does not
// load keeps the old set.
func (s *Server) Reload() error {
	_, err := s.flows.reload(s.cfg.Promote, "reload")
	if err != nil {
		s.log.Warn("reload refused", "error", err.Error())
	} else {
		s.log.Info("flows reloaded")
	}
	return err
}
