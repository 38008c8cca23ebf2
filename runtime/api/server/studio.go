package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/store"
)

// The studio's routes: the page itself, signing in with the one-time
// token `trellis studio` prints, and what editing a flow needs that the
// rest of the API does not give — the files a flow is compiled from,
// checking edits to them as the server would load them, saving them (and
// reloading the flows), and a node's prompt rendered over a thread's
// state. Everything else the page does goes through the routes every
// client uses, with the key it signed in with.

// studioState is the server's one-time sign-in tokens and the keys they
// were exchanged for. Its zero value is ready.
type studioState struct {
	mu     sync.Mutex
	tokens map[string]studioToken // by the token's hash
	minted []string               // ids of the keys handed out
}

type studioToken struct {
	tenant  string
	expires time.Time
	spent   chan struct{} // closed when the token is tried
}

// StudioKeyTTL is how long the key a studio's page signs in with works
// unless the page renews it, which it does while it is open: a page
// closed (or a studio killed) leaves a key that lapses this long after.
const StudioKeyTTL = 5 * time.Minute

// StudioToken issues a one-time token that the studio page exchanges
// (POST /studio/signin from a form, or POST /v1/studio/session) for a new
// key of tenant: the token is good for one exchange within ttl. It is
// what `trellis studio` puts in the sign-in file it writes, a form that
// posts it, so that no address the browser opens carries it. The key is the page's alone: of the studio scope (its
// tenant's threads, runs and memory, and editing the flows; no key
// management), lapsing StudioKeyTTL after the page last renewed it, and
// with this server: revoked by RevokeStudioKeys when it stops, and by the
// sweep of any server sharing the store once it stops beating (killed).
func (s *Server) StudioToken(tenant string, ttl time.Duration) (string, error) {
	if !validTenant(tenant) {
		return "", &api.Error{Code: api.CodeInvalidInput, Message: "a tenant is 1 to 64 letters, digits, '-', '_' or '.'"}
	}
	token := "trs_" + randomText(32)
	st := &s.studio
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.tokens == nil {
		st.tokens = map[string]studioToken{}
	}
	st.tokens[HashKey(token)] = studioToken{tenant: tenant, expires: time.Now().Add(ttl), spent: make(chan struct{})}
	return token, nil
}

// StudioTokenSpent is closed once token has been tried (a token is good
// for one exchange, whatever its outcome) or the studio's tokens are
// dropped, so that what carried it (the sign-in file `trellis studio`
// writes) can go at once. A token the server does not hold is spent.
func (s *Server) StudioTokenSpent(token string) <-chan struct{} {
	st := &s.studio
	st.mu.Lock()
	defer st.mu.Unlock()
	if tok, ok := st.tokens[HashKey(token)]; ok {
		return tok.spent
	}
	done := make(chan struct{})
	close(done)
	return done
}

// RevokeStudioKeys revokes the keys the studio's tokens were exchanged
// for, so that they do not outlive the `trellis studio` that handed
// them out.
func (s *Server) RevokeStudioKeys(ctx context.Context) error {
	st := &s.studio
	st.mu.Lock()
	ids := st.minted
	for _, tok := range st.tokens {
		close(tok.spent)
	}
	st.minted, st.tokens = nil, nil
	st.mu.Unlock()
	var errs []error
	for _, id := range ids {
		if err := s.cat.RevokeKey(ctx, id, time.Now().UTC()); err != nil && !errors.Is(err, store.ErrNotFound) {
			errs = append(errs, fmt.Errorf("revoke studio key %s: %w", id, err))
		}
	}
	return errors.Join(errs...)
}

// SweepKeys revokes the keys that lapse with a server (a studio's) whose
// server has stopped beating for the server's DeadAfter, or that expired:
// a studio killed before it could revoke its keys leaves none working
// once another server sharing the store (its next start) has swept. The
// servers sweep by themselves, with their heartbeat.
func (s *Server) SweepKeys(ctx context.Context) (int, error) {
	return s.cat.SweepKeys(ctx, s.cfg.DeadAfter)
}

var errStudioToken = &api.Error{Code: api.CodeUnauthorized,
	Message: "this sign-in token is not valid: it was used already or has expired (start trellis studio again for another, or sign in with an API key)"}

func (s *Server) studioSignIn(w http.ResponseWriter, r *http.Request, _ *caller) error {
	var in api.StudioSignIn
	if err := readJSON(r, &in); err != nil {
		return err
	}
	out, err := s.exchangeStudioToken(r.Context(), in.Token)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// exchangeStudioToken spends a one-time token on a new key of the studio
// scope.
func (s *Server) exchangeStudioToken(ctx context.Context, token string) (*api.StudioSession, error) {
	st := &s.studio
	st.mu.Lock()
	h := HashKey(token)
	tok, ok := st.tokens[h]
	delete(st.tokens, h) // one exchange, whatever its outcome
	st.mu.Unlock()
	if ok && tok.spent != nil {
		close(tok.spent)
	}
	if !ok || time.Now().After(tok.expires) {
		return nil, errStudioToken
	}
	id := randomText(12)
	secret := "trk_" + id + "_" + randomText(32)
	now := time.Now().UTC()
	k := &store.KeyRecord{ID: id, Hash: HashKey(secret), Tenant: tok.tenant, Name: "studio session", Created: now,
		Scope: store.ScopeStudio, Expires: now.Add(StudioKeyTTL), Owner: s.runs.id}
	if err := s.cat.CreateKey(ctx, k); err != nil {
		return nil, err
	}
	st.mu.Lock()
	st.minted = append(st.minted, k.ID)
	st.mu.Unlock()
	out := studioSession(&caller{key: k, tenant: k.Tenant})
	out.Key = secret
	return &out, nil
}

func studioSession(c *caller) api.StudioSession {
	out := api.StudioSession{KeyID: c.key.ID, Tenant: c.tenant, Admin: c.admin(), Scope: c.key.Scope, Edits: c.edits()}
	if !c.key.Expires.IsZero() {
		t := c.key.Expires
		out.Expires = &t
	}
	return out
}

// studioWhoAmI says who the caller's key is and what it may do, so that a
// page shows what it cannot do (save the flows) before it is tried.
func (s *Server) studioWhoAmI(w http.ResponseWriter, _ *http.Request, c *caller) error {
	writeJSON(w, http.StatusOK, studioSession(c))
	return nil
}

// studioRenew keeps the caller's lapsing key working for StudioKeyTTL
// more; a key that does not lapse is as it was.
func (s *Server) studioRenew(w http.ResponseWriter, r *http.Request, c *caller) error {
	if c.session == "" && !c.key.Expires.IsZero() {
		until := time.Now().UTC().Add(StudioKeyTTL)
		if err := s.cat.RenewKey(r.Context(), c.key.ID, until); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return &api.Error{Code: api.CodeUnauthorized, Message: "this key was revoked"}
			}
			return err
		}
		c.key.Expires = until
	}
	writeJSON(w, http.StatusOK, studioSession(c))
	return nil
}

// studioPage serves the page and its files.
func (s *Server) studioPage(w http.ResponseWriter, r *http.Request, _ *caller) error {
	if s.cfg.Studio == nil {
		return &api.Error{Code: api.CodeNotFound, Message: "this server serves no studio page"}
	}
	s.cfg.Studio.ServeHTTP(w, r)
	return nil
}

// project is where the flows' files live: root is the closest directory
// holding the flow directory and every file a loaded flow was compiled
// from (the flows' prompts and schemas may sit beside the flow
// directory), and paths are named relative to it. dirs are the
// directories (relative to root) that hold those files: a check reads
// nothing outside them and the flow directory.
type project struct {
	root  string
	flows string
	dirs  map[string]bool
}

func (s *Server) project() (*project, error) {
	flowsAbs, err := filepath.Abs(s.flows.dir)
	if err != nil {
		return nil, fmt.Errorf("flows: %w", err)
	}
	var files []string
	for _, l := range s.flows.list() {
		for name := range l.flow.Sources() {
			abs, err := filepath.Abs(name)
			if err != nil {
				return nil, fmt.Errorf("flows: %w", err)
			}
			files = append(files, abs)
		}
	}
	root := flowsAbs
	for _, f := range files {
		for !within(root, f) {
			root = filepath.Dir(root)
		}
	}
	p := &project{root: root, dirs: map[string]bool{}}
	p.flows, _ = p.rel(flowsAbs)
	for _, f := range files {
		rel, _ := p.rel(f)
		p.dirs[path.Dir(rel)] = true
	}
	return p, nil
}

// within reports whether path is dir or below it.
func within(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// rel names a file of the disk relative to the root, slash separated.
func (p *project) rel(name string) (string, error) {
	abs, err := filepath.Abs(name)
	if err != nil {
		return "", err
	}
	if !within(p.root, abs) {
		return "", fmt.Errorf("%s is outside %s", name, p.root)
	}
	rel, err := filepath.Rel(p.root, abs)
	return filepath.ToSlash(rel), err
}

// disk is the file on the disk of a path relative to the root.
func (p *project) disk(rel string) string { return filepath.Join(p.root, filepath.FromSlash(rel)) }

// readable reports whether a check may read a path: one under the flow
// directory or in a directory a loaded flow reads from.
func (p *project) readable(rel string) bool {
	return p.dirs[path.Dir(rel)] || p.flows == "." || rel == p.flows || strings.HasPrefix(rel, p.flows+"/")
}

func hashText(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func fileRole(name string) string {
	switch path.Ext(name) {
	case ".yaml", ".yml":
		return "flow"
	case ".prompt":
		return "prompt"
	case ".json":
		return "schema"
	}
	return "other"
}

// files lists the files a flow was compiled from, the flow file first,
// then its subflows, prompts and schemas, each in name order.
func (p *project) files(l *loaded) ([]api.FlowFile, error) {
	main, err := p.rel(l.flow.Path())
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []api.FlowFile
	for name, text := range l.flow.Sources() {
		rel, err := p.rel(name)
		if err != nil {
			return nil, err
		}
		if seen[rel] {
			continue
		}
		seen[rel] = true
		out = append(out, api.FlowFile{Path: rel, Role: fileRole(rel), Text: string(text), Hash: hashText(text)})
	}
	order := map[string]int{"flow": 1, "prompt": 2, "schema": 3, "other": 4}
	slices.SortFunc(out, func(a, b api.FlowFile) int {
		switch {
		case a.Path == main:
			return -1
		case b.Path == main:
			return 1
		case order[a.Role] != order[b.Role]:
			return order[a.Role] - order[b.Role]
		}
		return strings.Compare(a.Path, b.Path)
	})
	return out, nil
}

// readOnly says why the files in dirs cannot be written ("" when they can).
func (p *project) readOnly(files []api.FlowFile) string {
	dirs := map[string]bool{}
	for _, f := range files {
		dirs[path.Dir(f.Path)] = true
	}
	for _, d := range slices.Sorted(maps.Keys(dirs)) {
		if err := writable(p.disk(d)); err != nil {
			return fmt.Sprintf("the flows' files cannot be saved: %s is read-only (%v); edits can be checked here, not written", d, errors.Unwrap(err))
		}
	}
	return ""
}

func (s *Server) flowFiles(w http.ResponseWriter, r *http.Request, _ *caller) error {
	l, err := s.flows.get(r.PathValue("name"))
	if err != nil {
		return err
	}
	p, err := s.project()
	if err != nil {
		return err
	}
	files, err := p.files(l)
	if err != nil {
		return err
	}
	// the root's name, not where it is on the server's disk
	out := api.FlowFiles{Flow: l.flow.Name(), Root: filepath.Base(p.root), Files: files, ReadOnly: p.readOnly(files)}
	out.Writable = out.ReadOnly == ""
	writeJSON(w, http.StatusOK, out)
	return nil
}

// edits checks a request's edits against a flow's files: each names one
// of them, once.
func edits(in api.FileEdits, files []api.FlowFile, flow string) (map[string]api.FileEdit, error) {
	known := map[string]bool{}
	for _, f := range files {
		known[f.Path] = true
	}
	out := map[string]api.FileEdit{}
	for _, e := range in.Files {
		if !known[e.Path] {
			return nil, &api.Error{Code: api.CodeInvalidInput, Message: fmt.Sprintf("%q is not a file of flow %q (GET /v1/flows/%s/files lists them)", e.Path, flow, flow)}
		}
		if _, dup := out[e.Path]; dup {
			return nil, &api.Error{Code: api.CodeInvalidInput, Message: fmt.Sprintf("%q is edited twice", e.Path)}
		}
		out[e.Path] = e
	}
	return out, nil
}

// check compiles a flow as the server would load it with edits to its
// files: the flow file and every file it names are read from the
// project, the edited ones from the edits, nothing from outside the
// directories the flows read.
func (s *Server) check(l *loaded, p *project, ed map[string]api.FileEdit) (*compiled, []diag.Diagnostic, error) {
	main, err := p.rel(l.flow.Path())
	if err != nil {
		return nil, nil, err
	}
	fsys := &overlayFS{p: p, edits: ed}
	src, err := fs.ReadFile(fsys, main)
	if err != nil {
		return nil, nil, err
	}
	f, err := s.flows.check(config.FS(fsys), main, src)
	var le *loadError
	switch {
	case errors.As(err, &le):
		return nil, le.diags, nil
	case err != nil:
		return nil, nil, err
	}
	if f.Name() != l.flow.Name() {
		return nil, []diag.Diagnostic{{Severity: diag.Error, Code: diag.CodeDuplicate, Pos: diag.Pos{File: main, Line: 1, Col: 1},
			Summary: fmt.Sprintf("the flow is named %q here: a studio edit may not rename flow %q", f.Name(), l.flow.Name())}}, nil
	}
	return f, f.Warnings(), nil
}

func (s *Server) checkFlow(w http.ResponseWriter, r *http.Request, _ *caller) error {
	l, err := s.flows.get(r.PathValue("name"))
	if err != nil {
		return err
	}
	var in api.FileEdits
	if err := readJSON(r, &in); err != nil {
		return err
	}
	p, err := s.project()
	if err != nil {
		return err
	}
	files, err := p.files(l)
	if err != nil {
		return err
	}
	ed, err := edits(in, files, l.flow.Name())
	if err != nil {
		return err
	}
	f, dl, err := s.check(l, p, ed)
	if err != nil {
		return err
	}
	out := api.FlowCheck{Valid: f != nil, Diagnostics: dl}
	if out.Diagnostics == nil {
		out.Diagnostics = []diag.Diagnostic{}
	}
	if f != nil {
		if out.Graph, err = f.Graph().JSON(); err != nil {
			return err
		}
		for _, c := range f.Graph().Config {
			sch, _ := json.Marshal(shapeSchema(c.Shape))
			e := api.ConfigEntry{Name: c.Name, Schema: sch, Secret: c.Secret}
			if c.HasDefault {
				e.Default = c.Default
			}
			out.Config = append(out.Config, e)
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// saveMu makes saves one at a time: each checks the disk, writes and
// reloads before the next begins.
var saveMu sync.Mutex

func (s *Server) saveFlow(w http.ResponseWriter, r *http.Request, c *caller) error {
	l, err := s.flows.get(r.PathValue("name"))
	if err != nil {
		return err
	}
	var in api.FileEdits
	if err := readJSON(r, &in); err != nil {
		return err
	}
	if len(in.Files) == 0 {
		return &api.Error{Code: api.CodeInvalidInput, Message: "no files to save: files lists each edited file's path, text and base"}
	}
	p, err := s.project()
	if err != nil {
		return err
	}
	files, err := p.files(l)
	if err != nil {
		return err
	}
	ed, err := edits(in, files, l.flow.Name())
	if err != nil {
		return err
	}
	f, dl, err := s.check(l, p, ed)
	if err != nil {
		return err
	}
	if f == nil {
		return &api.Error{Code: api.CodeInvalidFlow, Message: "the flow has errors; nothing was saved: " + (&diag.ListError{List: dl}).Error(),
			Details: api.Validation{Valid: false, Diagnostics: dl}}
	}
	var edited []api.FlowFile
	for _, ff := range files {
		if _, ok := ed[ff.Path]; ok {
			edited = append(edited, ff)
		}
	}
	if why := p.readOnly(edited); why != "" {
		return &api.Error{Code: api.CodeReadOnly, Message: why}
	}
	saveMu.Lock()
	defer saveMu.Unlock()
	// what is on the disk now: an edit writes over the text it began from
	// and nothing else
	old := map[string][]byte{}
	for _, ff := range edited {
		e := ed[ff.Path]
		b, err := os.ReadFile(p.disk(ff.Path))
		if err != nil {
			return fmt.Errorf("save %s: %w", ff.Path, err)
		}
		if e.Base == "" {
			return &api.Error{Code: api.CodeInvalidInput, Message: fmt.Sprintf("%s: base is the hash of the text the edit began from (as GET /v1/flows/%s/files gave it)", ff.Path, l.flow.Name())}
		}
		if hashText(b) != e.Base {
			return &api.Error{Code: api.CodeFileChanged, Message: fmt.Sprintf("%s changed on the disk since the edit began: read it again (nothing was saved)", ff.Path)}
		}
		if !bytes.Equal(b, []byte(e.Text)) {
			old[ff.Path] = b
		}
	}
	var written []string
	restore := func() {
		for _, name := range written {
			_ = writeFile(p.disk(name), old[name])
		}
	}
	for _, name := range slices.Sorted(maps.Keys(old)) {
		if err := writeFile(p.disk(name), []byte(ed[name].Text)); err != nil {
			restore()
			if errors.Is(err, errReadOnlyFS) {
				return &api.Error{Code: api.CodeReadOnly, Message: fmt.Sprintf("the flows' files cannot be saved: %s is read-only (%v); nothing was saved", path.Dir(name), errors.Unwrap(err))}
			}
			return fmt.Errorf("save %s: %w", name, err)
		}
		written = append(written, name)
	}
	// a designer's save is what new threads start on: the saved flow's
	// version is promoted
	set, err := s.flows.reload(s.cfg.Promote, c.key.ID)
	var re *reloadError
	if errors.As(err, &re) {
		restore()
		return &api.Error{Code: api.CodeInvalidFlow, Message: "the flows do not load with this edit; it was undone: " + (&diag.ListError{List: re.diags}).Error(),
			Details: api.Validation{Valid: false, Diagnostics: re.diags}}
	}
	if err != nil {
		restore()
		return err
	}
	for _, nl := range set {
		if nl.flow.Name() == l.flow.Name() {
			if err := s.flows.promote(map[string]*loaded{nl.flow.Name(): nl}, false, c.key.ID); err != nil {
				return err
			}
		}
	}
	s.log.Info("flow saved and flows reloaded", "flow", l.flow.Name(), "files", written)
	promoted, err := s.promotedVersions(r.Context())
	if err != nil {
		return err
	}
	out := api.FlowSaved{Reload: true, Flows: []api.Flow{}}
	for _, nl := range set {
		info := flowInfo(nl, false)
		info.Promoted = promoted[info.Name]
		out.Flows = append(out.Flows, info)
		if nl.flow.Name() == l.flow.Name() {
			if out.Files, err = p.files(nl); err != nil {
				return err
			}
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

var errReadOnlyFS = errors.New("read-only")

// writeFile replaces a file's content through a file beside it renamed
// over it, so that a reader never sees half of it; the file keeps its
// mode.
func writeFile(name string, b []byte) error {
	info, err := os.Stat(name)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".*")
	if err != nil {
		if isReadOnly(err) {
			return fmt.Errorf("%w: %w", errReadOnlyFS, err)
		}
		return err
	}
	_, err = tmp.Write(b)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), info.Mode().Perm())
	}
	if err == nil {
		err = os.Rename(tmp.Name(), name)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

func (s *Server) previewPrompt(w http.ResponseWriter, r *http.Request, c *caller) error {
	l, err := s.flows.get(r.PathValue("name"))
	if err != nil {
		return err
	}
	g := l.flow.Graph()
	name := r.PathValue("node")
	n, ok := g.Node(name)
	if !ok {
		return &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("flow %q has no node %q", l.flow.Name(), name)}
	}
	pv, ok := n.Impl.(kind.Previewer)
	if !ok {
		return &api.Error{Code: api.CodeInvalidInput, Message: fmt.Sprintf("node %q (%s) sends no prompt", n.Name, n.Kind)}
	}
	q := r.URL.Query()
	at, err := queryCheckpoint(r, "at")
	if err != nil {
		return err
	}
	out := api.PromptPreview{Node: n.Name, Sections: []api.PromptSection{}}
	var state map[string]any
	if id := q.Get("thread"); id != "" {
		if checkThreadID(id) != nil {
			return &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("no thread %q", id)}
		}
		rec, err := s.cat.Thread(r.Context(), c.tenant, threadKey(c, id))
		if errors.Is(err, store.ErrNotFound) {
			return &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("no thread %q", id)}
		}
		if err != nil {
			return err
		}
		if rec.Flow != l.flow.Name() {
			return &api.Error{Code: api.CodeInvalidInput, Message: fmt.Sprintf("thread %q runs flow %q, not %q", id, rec.Flow, l.flow.Name())}
		}
		var snap *store.Snapshot
		if seq := at; seq > 0 {
			snap, err = s.eng().Store.StateAt(r.Context(), rec.ID, seq)
			if errors.Is(err, store.ErrNotFound) {
				return &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("thread %q has no checkpoint %d", id, seq)}
			}
		} else {
			snap, err = s.eng().Store.Head(r.Context(), rec.ID)
		}
		if err != nil {
			return err
		}
		state, out.Thread, out.Checkpoint = snap.Values, id, snap.Seq
	} else {
		// the schema's defaults, as a new thread starts (fields with none
		// read as null)
		state = map[string]any{}
		for _, f := range g.Fields {
			if f.HasDefault {
				state[f.Name] = f.Default
			}
		}
	}
	pr, err := pv.Preview(kind.View(n.Name, g.Vars(state, nil)))
	if err != nil {
		return &api.Error{Code: api.CodeInvalidInput, Message: fmt.Sprintf("node %q: %v", n.Name, err)}
	}
	out.Title = pr.Title
	for _, sec := range pr.Sections {
		out.Sections = append(out.Sections, api.PromptSection{Name: sec.Name, Text: sec.Text})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// overlayFS is the project's files as a check reads them: the edited
// ones from the edits, the others from the disk, and none outside the
// directories the flows read (those are not found).
type overlayFS struct {
	p     *project
	edits map[string]api.FileEdit
}

func (o *overlayFS) ReadFile(name string) ([]byte, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "read", Path: name, Err: fs.ErrInvalid}
	}
	if e, ok := o.edits[name]; ok {
		return []byte(e.Text), nil
	}
	if !o.p.readable(name) {
		return nil, &fs.PathError{Op: "read", Path: name, Err: fs.ErrNotExist}
	}
	return os.ReadFile(o.p.disk(name))
}

func (o *overlayFS) Stat(name string) (fs.FileInfo, error) {
	f, err := o.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Stat()
}

func (o *overlayFS) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	if e, ok := o.edits[name]; ok {
		return &memFile{name: path.Base(name), r: strings.NewReader(e.Text), size: int64(len(e.Text))}, nil
	}
	if !o.p.readable(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return os.Open(o.p.disk(name))
}

// memFile is an edited file's text as an fs.File.
type memFile struct {
	name string
	r    *strings.Reader
	size int64
}

func (f *memFile) Stat() (fs.FileInfo, error) { return f, nil }
func (f *memFile) Read(b []byte) (int, error) { return f.r.Read(b) }
func (f *memFile) Close() error               { return nil }
func (f *memFile) Name() string               { return f.name }
func (f *memFile) Size() int64                { return f.size }
func (f *memFile) Mode() fs.FileMode          { return 0o444 }
func (f *memFile) ModTime() time.Time         { return time.Time{} }
func (f *memFile) IsDir() bool                { return false }
func (f *memFile) Sys() any                   { return nil }

var (
	_ fs.ReadFileFS = (*overlayFS)(nil)
	_ fs.StatFS     = (*overlayFS)(nil)
	_ fs.File       = (*memFile)(nil)
	_ fs.FileInfo   = (*memFile)(nil)
)
