// Package versions is the versions of flows: a flow's version is the hash
// of the files it was compiled from, kept in a store (store.Versions) so
// that any process sharing the store compiles it again from its files
// alone; each thread runs the version recorded for it (its pin) until it
// is moved onto another, which is refused when a change breaks its state
// and no type-checked migration gives the values.
package versions

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"maps"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing/fstest"
	"time"

	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/expression"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/flowdiff"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/store"
)

// Flow is a compiled flow with what names its version: the text of
// every file it was compiled from.
type Flow struct {
	graph    *flow.Graph
	warnings diag.List
	sources  diag.Sources
	// inFS: the sources are named in a file system, not on the disk
	inFS bool

	once    sync.Once
	version *store.FlowVersion
}

// NewFlow is the flow compiled as g, with the problems that did not stop
// it compiling and the text of its files, named on the disk or (inFS) in
// a file system.
func NewFlow(g *flow.Graph, warnings diag.List, sources diag.Sources, inFS bool) *Flow {
	return &Flow{graph: g, warnings: warnings, sources: sources, inFS: inFS}
}

// Compile compiles the flow at path with kinds: its text is src (nil:
// read from path), and the files it names are read from files (nil: the
// disk). A flow that does not compile is nil, with every problem.
func Compile(files *config.Files, path string, src []byte, kinds kind.Registry) (*Flow, diag.List) {
	g, dl, sources := flow.Compile(files, path, src, kinds)
	if g == nil {
		return nil, dl
	}
	return NewFlow(g, dl, sources, files != nil), dl
}

// Name is the flow's name.
func (f *Flow) Name() string { return f.graph.Name }

// Path is the flow's file.
func (f *Flow) Path() string { return f.graph.Path }

// Graph is the compiled flow.
func (f *Flow) Graph() *flow.Graph { return f.graph }

// Warnings are the problems that did not stop the flow compiling.
func (f *Flow) Warnings() diag.List { return f.warnings }

// Sources is the text of every file the flow was compiled from.
func (f *Flow) Sources() diag.Sources { return f.sources }

// Version returns the flow's version: the files it was compiled from and
// their hash. The same files make the same version wherever they lie on
// a disk.
func (f *Flow) Version() *store.FlowVersion {
	f.once.Do(func() { f.version = versionOf(f) })
	return f.version
}

func versionOf(f *Flow) *store.FlowVersion {
	src := f.sources
	names := make(map[string]string, len(src)) // slash name → source name
	for name := range src {
		n := name
		if !f.inFS {
			if abs, err := filepath.Abs(name); err == nil {
				n = abs
			}
		}
		names[filepath.ToSlash(n)] = name
	}
	root := commonDir(slices.Collect(maps.Keys(names)))
	files := make(map[string][]byte, len(names))
	flowFile := ""
	for n, name := range names {
		rel := strings.TrimPrefix(strings.TrimPrefix(n, root), "/")
		files[rel] = src[name]
		if name == f.graph.Path || n == filepath.ToSlash(f.graph.Path) {
			flowFile = rel
		}
	}
	if flowFile == "" && !f.inFS {
		if abs, err := filepath.Abs(f.graph.Path); err == nil {
			flowFile = strings.TrimPrefix(strings.TrimPrefix(filepath.ToSlash(abs), root), "/")
		}
	}
	return &store.FlowVersion{Flow: f.graph.Name, Version: store.VersionOf(flowFile, files), Path: flowFile, Files: files}
}

// commonDir is the directory above every one of names ("" for none in
// common).
func commonDir(names []string) string {
	if len(names) == 0 {
		return ""
	}
	dir := path.Dir(names[0])
	for _, n := range names[1:] {
		for dir != "." && dir != "/" && !strings.HasPrefix(n, dir+"/") {
			dir = path.Dir(dir)
		}
	}
	if dir == "." {
		return ""
	}
	return dir
}

// LoadError is a version whose files do not compile: every problem, and
// the text of the files.
type LoadError struct {
	Flow, Version string
	Diagnostics   diag.List
	Sources       diag.Sources
}

func (e *LoadError) Error() string {
	return fmt.Sprintf("flow %q version %s: %s", e.Flow, e.Version, (&diag.ListError{List: e.Diagnostics}).Error())
}

// Load compiles a version of a flow with kinds from its files alone
// (nothing on the disk is read): how a process runs a version it did not
// load itself. Files that do not compile are a *LoadError.
func Load(v *store.FlowVersion, kinds kind.Registry) (*Flow, error) {
	fsys := fstest.MapFS{}
	for name, data := range v.Files {
		fsys[name] = &fstest.MapFile{Data: data, Mode: 0o444}
	}
	g, dl, sources := flow.Compile(config.FS(fsys), v.Path, nil, kinds)
	if g == nil {
		return nil, &LoadError{Flow: v.Flow, Version: v.Version, Diagnostics: dl, Sources: sources}
	}
	f := NewFlow(g, dl, sources, true)
	if got := f.Version().Version; got != v.Version {
		return nil, fmt.Errorf("flow %q version %s: its files compile as version %s", v.Flow, v.Version, got)
	}
	return f, nil
}

// Versions keeps the versions of flows in a store, so that every process
// sharing it can run any of them, and compiles each version once while
// it is used (the DefaultCompiled used last stay compiled).
type Versions struct {
	st    store.Versions
	cat   store.Catalog // the runs of threads, nil when st keeps none
	kinds kind.Registry
	mu    sync.Mutex
	// flows are the versions compiled, by flow name and version, at most
	// limit of them: lru orders them, the most recently used first, and
	// the least recently used goes when one more comes. Every one is in
	// the store (Keep stores a version before it keeps it compiled), so a
	// version gone is compiled again when a thread needs it.
	flows map[[2]string]*list.Element
	lru   list.List // of *compiledVersion
	limit int
}

// compiledVersion is a version kept compiled, with its key.
type compiledVersion struct {
	key [2]string
	f   *Flow
}

// DefaultCompiled is how many compiled versions a Versions keeps: a
// server's loaded flows, and the versions its threads still run, each
// compiled once while it is used.
const DefaultCompiled = 64

// cached returns the version compiled, if kept, as the most recently
// used; vs.mu is held.
func (vs *Versions) cached(key [2]string) *Flow {
	e := vs.flows[key]
	if e == nil {
		return nil
	}
	vs.lru.MoveToFront(e)
	return e.Value.(*compiledVersion).f
}

// remember keeps f compiled as key, the most recently used, and lets go
// of the least recently used past the limit; vs.mu is held.
func (vs *Versions) remember(key [2]string, f *Flow) {
	if e := vs.flows[key]; e != nil {
		e.Value.(*compiledVersion).f = f
		vs.lru.MoveToFront(e)
		return
	}
	vs.flows[key] = vs.lru.PushFront(&compiledVersion{key: key, f: f})
	for vs.lru.Len() > vs.limit {
		delete(vs.flows, vs.lru.Remove(vs.lru.Back()).(*compiledVersion).key)
	}
}

// compiled counts the versions kept compiled.
func (vs *Versions) compiled() int {
	vs.mu.Lock()
	defer vs.mu.Unlock()
	return vs.lru.Len()
}

// has reports whether a version is kept compiled, without using it.
func (vs *Versions) has(name, version string) bool {
	vs.mu.Lock()
	defer vs.mu.Unlock()
	return vs.flows[[2]string{name, version}] != nil
}

var (
	// ErrNoVersions: the store keeps no flow versions.
	ErrNoVersions = errors.New("the store keeps no flow versions")
	// ErrNoVersion: a thread with no version recorded (see Versions.Pin).
	ErrNoVersion = errors.New("the thread has no flow version recorded")
)

// New keeps versions in st, compiling those it reads with kinds.
func New(st store.Store, kinds kind.Registry) (*Versions, error) {
	vs, ok := store.VersionsOf(st)
	if !ok {
		return nil, fmt.Errorf("%T: %w", st, ErrNoVersions)
	}
	if kinds == nil {
		return nil, errors.New("versions: no node kinds to compile the versions with")
	}
	cat, _ := store.CatalogOf(st)
	return &Versions{st: vs, cat: cat, kinds: kinds, flows: map[[2]string]*list.Element{}, limit: DefaultCompiled}, nil
}

// Keep stores f's version (its files once each) and remembers f as its
// compiled form.
func (vs *Versions) Keep(ctx context.Context, f *Flow) error {
	v := f.Version()
	if err := vs.st.PutFlowVersion(ctx, &store.FlowVersion{Flow: v.Flow, Version: v.Version, Path: v.Path, Files: v.Files, Created: time.Now()}); err != nil {
		return fmt.Errorf("keep flow %q version %s: %w", v.Flow, v.Version, err)
	}
	vs.mu.Lock()
	vs.remember([2]string{v.Flow, v.Version}, f)
	vs.mu.Unlock()
	return nil
}

// Flow returns a version of a flow compiled: the one kept or compiled
// before, else compiled from the files the store keeps of it.
func (vs *Versions) Flow(ctx context.Context, name, version string) (*Flow, error) {
	key := [2]string{name, version}
	vs.mu.Lock()
	f := vs.cached(key)
	vs.mu.Unlock()
	if f != nil {
		return f, nil
	}
	v, err := vs.st.FlowVersion(ctx, name, version)
	if err != nil {
		return nil, fmt.Errorf("flow %q version %s: %w", name, version, err)
	}
	f, err = Load(v, vs.kinds)
	if err != nil {
		return nil, err
	}
	vs.mu.Lock()
	if had := vs.cached(key); had != nil {
		f = had // compiled by another meanwhile
	} else {
		vs.remember(key, f)
	}
	vs.mu.Unlock()
	return f, nil
}

// List lists a flow's versions kept, the newest first, without files.
func (vs *Versions) List(ctx context.Context, name string) ([]*store.FlowVersion, error) {
	return vs.st.FlowVersions(ctx, name)
}

// Store is the store the versions are kept in.
func (vs *Versions) Store() store.Versions { return vs.st }

// Compat classifies the change from one version of a flow to another for
// the threads of the first.
func Compat(from, to *Flow) []flowdiff.Effect { return flowdiff.Compat(from.graph, to.graph) }

// Migration gives the values a thread's state takes as it moves to
// another version of its flow.
type Migration struct {
	// Set gives fields of the version moved to an expression each over
	// the thread's state as the old version has it (state.NAME), checked
	// against the old version's fields and the new field's type.
	Set map[string]string `json:"set,omitempty"`
	// Drop clears fields the version moved to no longer has.
	Drop []string `json:"drop,omitempty"`
}

// MoveError refuses a move: the breaking changes no migration covers, or
// a migration that does not type-check, each with its reason.
type MoveError struct {
	From, To string
	// Breaking are the breaking changes the migration leaves uncovered.
	Breaking []flowdiff.Effect
	// Problems are the migration's own: an expression that does not
	// compile or does not fit its field, a field that is not one.
	Problems []string
}

func (e *MoveError) Error() string {
	var why []string
	for _, b := range e.Breaking {
		why = append(why, b.Reason)
	}
	why = append(why, e.Problems...)
	return fmt.Sprintf("moving from version %s to %s is refused: %s", e.From, e.To, strings.Join(why, "; "))
}

// compiledMigration is a migration checked against the versions it
// moves between.
type compiledMigration struct {
	set  map[string]*expression.Program
	drop []string
}

// checkMove classifies the move and type-checks the migration: it
// returns the compiled migration, or a MoveError.
func checkMove(from, to *Flow, m Migration) (*compiledMigration, []flowdiff.Effect, error) {
	effects := Compat(from, to)
	me := &MoveError{From: from.Version().Version, To: to.Version().Version}
	cm := &compiledMigration{set: map[string]*expression.Program{}}
	for _, name := range slices.Sorted(maps.Keys(m.Set)) {
		f, ok := to.graph.Field(name)
		if !ok {
			me.Problems = append(me.Problems, fmt.Sprintf("migration of %q: not a state field of version %s", name, me.To))
			continue
		}
		p, probs := expression.Compile(m.Set[name], from.graph.Env(), false)
		if p == nil {
			for _, pr := range probs {
				if !pr.Warning {
					me.Problems = append(me.Problems, fmt.Sprintf("migration of %q: %s", name, pr.Message))
				}
			}
			continue
		}
		if why := flow.ExprFits(p, f.Shape); why != "" {
			me.Problems = append(me.Problems, fmt.Sprintf("migration of %q: the field %s", name, why))
			continue
		}
		cm.set[name] = p
	}
	for _, name := range m.Drop {
		if _, ok := to.graph.Field(name); ok {
			me.Problems = append(me.Problems, fmt.Sprintf("migration drops %q, which version %s still has: set it instead", name, me.To))
			continue
		}
		if _, ok := from.graph.Field(name); !ok {
			me.Problems = append(me.Problems, fmt.Sprintf("migration drops %q, which is not a state field of version %s", name, me.From))
			continue
		}
		cm.drop = append(cm.drop, name)
	}
	for _, e := range flowdiff.Breaking(effects) {
		covered := e.Area == "field" && (cm.set[e.Name] != nil || slices.Contains(cm.drop, e.Name))
		if !covered {
			me.Breaking = append(me.Breaking, e)
		}
	}
	if len(me.Breaking) > 0 || len(me.Problems) > 0 {
		return nil, effects, me
	}
	return cm, effects, nil
}

// CheckMove classifies the move of a flow's threads from one version to
// another and type-checks m against them, without moving anything: a
// *MoveError when a thread could not move.
func CheckMove(from, to *Flow, m Migration) ([]flowdiff.Effect, error) {
	_, effects, err := checkMove(from, to, m)
	return effects, err
}

// Move moves a thread, on eng, from version from of its flow onto
// version to: refused (a *MoveError) when a change breaks the thread's
// state and m gives no value for it, or m does not type-check; else m's
// values are computed over the thread's state and written as a
// checkpoint of their own, which records both versions in the thread's
// history. moved, when not nil, records the thread's new version while
// the thread is still held (see engine.Move).
func Move(ctx context.Context, eng *engine.Engine, from, to *Flow, thread string, m Migration, moved func(ctx context.Context) error) (*store.Snapshot, []flowdiff.Effect, error) {
	return move(ctx, eng, from, to, thread, m, nil, moved, false)
}

// move is Move, with held, when not nil, refusing the move once the
// thread is held and before anything is written (see engine.Move); a
// dry run makes every check and writes nothing.
func move(ctx context.Context, eng *engine.Engine, from, to *Flow, thread string, m Migration, held, moved func(ctx context.Context) error, dryRun bool) (*store.Snapshot, []flowdiff.Effect, error) {
	if from.Name() != to.Name() {
		return nil, nil, fmt.Errorf("thread %q: cannot move from flow %q to flow %q", thread, from.Name(), to.Name())
	}
	cm, effects, err := checkMove(from, to, m)
	if err != nil {
		return nil, effects, err
	}
	compute := func(state map[string]any) (map[string]any, error) {
		values := map[string]any{}
		vars := from.graph.Vars(state, nil)
		for name, p := range cm.set {
			v, err := p.Eval(vars)
			if err != nil {
				return nil, fmt.Errorf("thread %q: migration of %q: %w", thread, name, err)
			}
			values[name] = v
		}
		return values, nil
	}
	note := map[string]any{"flow": from.Name(), "from_version": from.Version().Version, "to_version": to.Version().Version}
	mv := engine.Move{Values: compute, Note: note, Drop: cm.drop, Held: held, DryRun: dryRun}
	if moved != nil && !dryRun {
		mv.Moved = func(ctx context.Context, _ *store.Snapshot) error { return moved(ctx) }
	}
	snap, err := eng.Migrate(ctx, to.graph, thread, mv)
	return snap, effects, err
}

// MoveResult is a thread's move onto another version of its flow.
type MoveResult struct {
	Thread, Flow string
	// From is the version the thread was on, To the one asked for.
	From, To string
	// Effects classify the change for the thread (see Compat).
	Effects []flowdiff.Effect
	// Moved is set when the thread moved (not for a dry run, nor for a
	// thread already on To); Checkpoint is then the move's checkpoint.
	Moved      bool
	Checkpoint uint64
}

// Pin records the version of its flow a new thread runs (tenant "" for
// a thread of no tenant): store.ErrPinChanged when it has one.
func (vs *Versions) Pin(ctx context.Context, tenant, thread string, f *Flow) error {
	return vs.st.PinThread(ctx, &store.ThreadPin{Tenant: tenant, Thread: thread, Flow: f.Name(), Version: f.Version().Version, Since: time.Now()}, "")
}

// ThreadFlow returns the version of its flow a thread runs, compiled;
// ErrNoVersion when none is recorded.
func (vs *Versions) ThreadFlow(ctx context.Context, tenant, thread string) (*Flow, *store.ThreadPin, error) {
	pin, err := vs.st.ThreadPin(ctx, tenant, thread)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil, fmt.Errorf("thread %q: %w", thread, ErrNoVersion)
	}
	if err != nil {
		return nil, nil, err
	}
	f, err := vs.Flow(ctx, pin.Flow, pin.Version)
	return f, pin, err
}

// MoveThread moves a thread of tenant, on eng, from the version it runs
// onto version to of its flow, as Move does, and records its new
// version; with dryRun it makes every check the move makes (the change
// classified, m type-checked, its values computed over the thread's
// state and validated) and moves nothing.
func (vs *Versions) MoveThread(ctx context.Context, eng *engine.Engine, tenant, thread, to string, m Migration, dryRun bool) (*MoveResult, error) {
	from, pin, err := vs.ThreadFlow(ctx, tenant, thread)
	if err != nil {
		return nil, err
	}
	out := &MoveResult{Thread: thread, Flow: pin.Flow, From: pin.Version, To: to}
	target, err := vs.Flow(ctx, pin.Flow, to)
	if err != nil {
		return nil, err
	}
	if to == pin.Version {
		out.Effects = []flowdiff.Effect{}
		return out, nil
	}
	// no run may be queued or running on it (a dry run says so too):
	// checked again once the thread is held, when no run can begin
	// before the move is recorded
	idle := func(ctx context.Context) error { return vs.idle(ctx, tenant, thread) }
	if err := idle(ctx); err != nil {
		return out, err
	}
	moved := func(ctx context.Context) error {
		return vs.st.PinThread(ctx, &store.ThreadPin{Tenant: tenant, Thread: thread, Flow: pin.Flow, Version: to, Since: time.Now()}, pin.Version)
	}
	// a dry run makes the move's every check, over the thread's state:
	// the values computed and validated as the move would write them
	snap, effects, err := move(ctx, eng, from, target, thread, m, idle, moved, dryRun)
	out.Effects = effects
	if err != nil || dryRun {
		return out, err
	}
	out.Moved, out.Checkpoint = true, snap.Seq
	return out, nil
}

// ErrRunPending refuses a thread's move while a run is queued or running
// on it: the run was started for the version the thread is on. It wraps
// store.ErrBusy.
var ErrRunPending = fmt.Errorf("a run is queued or running on the thread: wait for it or cancel it first: %w", store.ErrBusy)

// idle fails with ErrRunPending when a run of tenant's is queued or
// running on thread (a store that keeps no runs has none).
func (vs *Versions) idle(ctx context.Context, tenant, thread string) error {
	if vs.cat == nil {
		return nil
	}
	// every run of the thread: a cancelled queued run may be newer than
	// the one running
	q := store.RunQuery{Tenant: tenant, Thread: thread, Limit: store.MaxPage}
	for {
		runs, err := vs.cat.Runs(ctx, q)
		if err != nil {
			return fmt.Errorf("thread %q: reading its runs: %w", thread, err)
		}
		for _, r := range runs {
			if !r.Status.Done() {
				return fmt.Errorf("thread %q: run %s is %s: %w", thread, r.ID, r.Status, ErrRunPending)
			}
		}
		if len(runs) < q.Limit {
			return nil
		}
		q.Before = runs[len(runs)-1].ID
	}
}

// PinFork records the version of its flow a fork runs: the version its
// source thread was on at the checkpoint forked (the version a later
// move left, or the one the source runs now), read from the history eng
// keeps.
func (vs *Versions) PinFork(ctx context.Context, eng *engine.Engine, tenant, from string, at uint64, to string) error {
	pin, err := vs.st.ThreadPin(ctx, tenant, from)
	if errors.Is(err, store.ErrNotFound) {
		return nil // the source has no version: nor has the fork, until it runs
	}
	if err != nil {
		return err
	}
	version := pin.Version
	// newest first: the last one listed is the first move after at
	moves, err := eng.Store.History(ctx, from, store.HistoryOptions{After: at, Source: store.SourceMigrate})
	if err != nil {
		return err
	}
	if len(moves) > 0 {
		if v, ok := moves[len(moves)-1].Config["from_version"].(string); ok {
			version = v
		}
	}
	return vs.st.PinThread(ctx, &store.ThreadPin{Tenant: tenant, Thread: to, Flow: pin.Flow, Version: version, Since: time.Now()}, "")
}
