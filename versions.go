package trellis

import (
	"context"
	"errors"

	"github.com/trellisflow/trellis/runtime/flowdiff"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/versions"
)

// FlowVersion is one version of a flow: the files it was compiled from,
// named relative to the directory above all of them, and the hash of
// them that names the version (see store.Versions).
type FlowVersion = store.FlowVersion

// ThreadPin is the version of its flow a thread runs.
type ThreadPin = store.ThreadPin

// Effect is what one change between two versions of a flow means for the
// threads of the older one (see flowdiff.Compat).
type Effect = flowdiff.Effect

// SourceMigrate marks the checkpoint of a thread's move onto another
// version of its flow.
const SourceMigrate = store.SourceMigrate

// Migration gives the values a thread's state takes as it moves to
// another version of its flow (see versions.Migration).
type Migration = versions.Migration

// MoveError refuses a move: the breaking changes no migration covers, or
// a migration that does not type-check, each with its reason.
type MoveError = versions.MoveError

// MoveResult is a thread's move onto another version of its flow.
type MoveResult = versions.MoveResult

var (
	// ErrNoVersions: the store keeps no flow versions.
	ErrNoVersions = versions.ErrNoVersions
	// ErrNoVersion: a thread with no version recorded (see Versions.Pin).
	ErrNoVersion = versions.ErrNoVersion
)

// versioned is the flow as the versions package knows it.
func (f *Flow) versioned() *versions.Flow {
	f.vOnce.Do(func() { f.vf = versions.NewFlow(f.graph, f.warnings, f.sources, f.inFS) })
	return f.vf
}

// fromVersioned is a flow the versions package compiled.
func fromVersioned(vf *versions.Flow) *Flow {
	f := &Flow{graph: vf.Graph(), warnings: vf.Warnings(), sources: vf.Sources(), inFS: true}
	f.vOnce.Do(func() { f.vf = vf })
	return f
}

// Version returns the flow's version: the files it was compiled from and
// their hash. The same files make the same version wherever they lie on
// a disk.
func (f *Flow) Version() *FlowVersion { return f.versioned().Version() }

// LoadVersion compiles a version of a flow from its files alone (nothing
// on the disk is read): how a server runs a version it did not load
// itself.
func LoadVersion(v *FlowVersion, opts ...Option) (*Flow, error) {
	vf, err := versions.Load(v, resolve(opts).kinds)
	var le *versions.LoadError
	if errors.As(err, &le) {
		return nil, &LoadError{Diagnostics: le.Diagnostics, Sources: le.Sources}
	}
	if err != nil {
		return nil, err
	}
	return fromVersioned(vf), nil
}

// Versions keeps the versions of flows in a store, so that every server
// sharing it can run any of them, and compiles each version once while
// it is used (versions.DefaultCompiled of them stay compiled; one used
// again after is compiled again from the store).
type Versions struct{ vs *versions.Versions }

// NewVersions keeps versions in st, compiling those it reads with opts.
func NewVersions(st Store, opts ...Option) (*Versions, error) {
	vs, err := versions.New(st, resolve(opts).kinds)
	if err != nil {
		return nil, err
	}
	return &Versions{vs: vs}, nil
}

// Keep stores f's version (its files once each) and remembers f as its
// compiled form.
func (vs *Versions) Keep(ctx context.Context, f *Flow) error { return vs.vs.Keep(ctx, f.versioned()) }

// Flow returns a version of a flow compiled: the one kept or compiled
// before, else compiled from the files the store keeps of it.
func (vs *Versions) Flow(ctx context.Context, name, version string) (*Flow, error) {
	vf, err := vs.vs.Flow(ctx, name, version)
	if err != nil {
		return nil, err
	}
	return fromVersioned(vf), nil
}

// List lists a flow's versions kept, the newest first, without files.
func (vs *Versions) List(ctx context.Context, name string) ([]*FlowVersion, error) {
	return vs.vs.List(ctx, name)
}

// Store is the store the versions are kept in.
func (vs *Versions) Store() store.Versions { return vs.vs.Store() }

// Compat classifies the change from one version of a flow to another for
// the threads of the first.
func Compat(from, to *Flow) []Effect { return flowdiff.Compat(from.graph, to.graph) }

// CheckMove classifies the move of a flow's threads from one version to
// another and type-checks m against them, without moving anything: a
// *MoveError when a thread could not move.
func CheckMove(from, to *Flow, m Migration) ([]Effect, error) {
	return versions.CheckMove(from.versioned(), to.versioned(), m)
}

// Move moves a thread from version from of its flow onto version to:
// refused (a *MoveError) when a change breaks the thread's state and m
// gives no value for it, or m does not type-check; else m's values are
// computed over the thread's state and written as a checkpoint of their
// own, which records both versions in the thread's history. moved, when
// not nil, records the thread's new version while the thread is still
// held (see engine.Move).
func (rt *Runtime) Move(ctx context.Context, from, to *Flow, thread string, m Migration, moved func(ctx context.Context) error) (*Snapshot, []Effect, error) {
	return versions.Move(ctx, rt.eng, from.versioned(), to.versioned(), thread, m, moved)
}

// Pin records the version of its flow a new thread runs (tenant "" for
// a thread of no tenant): store.ErrPinChanged when it has one.
func (vs *Versions) Pin(ctx context.Context, tenant, thread string, f *Flow) error {
	return vs.vs.Pin(ctx, tenant, thread, f.versioned())
}

// ThreadFlow returns the version of its flow a thread runs, compiled;
// ErrNoVersion when none is recorded.
func (vs *Versions) ThreadFlow(ctx context.Context, tenant, thread string) (*Flow, *ThreadPin, error) {
	vf, pin, err := vs.vs.ThreadFlow(ctx, tenant, thread)
	if err != nil {
		return nil, pin, err
	}
	return fromVersioned(vf), pin, nil
}

// MoveThread moves a thread of tenant from the version it runs onto
// version to of its flow, as Runtime.Move does, and records its new
// version; with dryRun it only classifies the change and checks m.
func (vs *Versions) MoveThread(ctx context.Context, rt *Runtime, tenant, thread, to string, m Migration, dryRun bool) (*MoveResult, error) {
	return vs.vs.MoveThread(ctx, rt.eng, tenant, thread, to, m, dryRun)
}

// PinFork records the version of its flow a fork runs: the version its
// source thread was on at the checkpoint forked (the version a later
// move left, or the one the source runs now).
func (vs *Versions) PinFork(ctx context.Context, rt *Runtime, tenant, from string, at uint64, to string) error {
	return vs.vs.PinFork(ctx, rt.eng, tenant, from, at, to)
}
