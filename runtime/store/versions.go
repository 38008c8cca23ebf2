package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Versions keeps the versions of the flows a served runtime runs, and
// which version each thread runs. A version is the set of files a flow
// was compiled from (the flow file, its prompts, schemas and subflows),
// kept by content hash, so that every server sharing the store can
// compile any version a thread needs, whatever its own flow directory
// holds now. A thread runs the version it was pinned to until it is
// moved. The built-in stores implement it, and storetest.RunVersions is
// its conformance suite.
type Versions interface {
	// PutFlowVersion keeps a version of a flow: each file once by the
	// hash of its content (files shared by versions are kept once), and
	// the version's manifest. Its Version must be VersionOf its files
	// (ErrVersionHash otherwise); putting a version kept before changes
	// nothing.
	PutFlowVersion(ctx context.Context, v *FlowVersion) error
	// FlowVersion returns a version of a flow with its files; ErrNotFound
	// when the store has none.
	FlowVersion(ctx context.Context, flow, version string) (*FlowVersion, error)
	// FlowVersions lists a flow's versions, the most recently kept first,
	// without their files.
	FlowVersions(ctx context.Context, flow string) ([]*FlowVersion, error)

	// PinThread records the version a thread runs: the thread moves to
	// p's version if it is on expect ("" for a thread with no version
	// recorded); ErrPinChanged when it is not (another moved it first).
	PinThread(ctx context.Context, p *ThreadPin, expect string) error
	// ThreadPin returns the version a thread runs; ErrNotFound when none
	// is recorded.
	ThreadPin(ctx context.Context, tenant, thread string) (*ThreadPin, error)
	// ThreadPins lists a tenant's threads of a flow with their versions,
	// by thread id, a page at a time (see PinQuery).
	ThreadPins(ctx context.Context, q PinQuery) ([]*ThreadPin, error)
	// CountPins counts a tenant's threads of a flow on each version.
	CountPins(ctx context.Context, tenant, flow string) (map[string]int, error)
}

// FlowVersion is one version of a flow.
type FlowVersion struct {
	Flow string
	// Version is VersionOf(Path, Files).
	Version string
	// Path is the flow file's name among Files (slash-separated,
	// relative to the files' root).
	Path string
	// Files are the files the flow was compiled from, by their names
	// relative to a root above all of them.
	Files map[string][]byte
	// Created is when the store first kept it.
	Created time.Time
}

// ThreadPin is the version of its flow a thread runs.
type ThreadPin struct {
	Tenant, Thread string
	Flow, Version  string
	// Since is when the thread was put on the version.
	Since time.Time
}

// PinQuery pages ThreadPins.
type PinQuery struct {
	Tenant, Flow string
	// Version keeps only the threads on that version.
	Version string
	// After continues a listing after this thread id.
	After string
	// Limit bounds the page (see MaxPage).
	Limit int
}

// Errors of versions.
var (
	// ErrPinChanged: PinThread found the thread on another version than
	// the caller expected.
	ErrPinChanged = errors.New("the thread's version was changed by another")
	// ErrVersionHash: a version whose name is not the hash of its files.
	ErrVersionHash = errors.New("a flow version is not the hash of its files")
)

// FileHash is the content hash a file of a version is kept by.
func FileHash(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// VersionOf names the version made of files, path being the flow file
// among them: a hash of the path and each file's name and content hash,
// so that a change to any file (or to where the flow file is) is a new
// version, and the same files are the same version on every server.
func VersionOf(path string, files map[string][]byte) string {
	h := sha256.New()
	fmt.Fprintf(h, "flow\x00%s\x00", path)
	for _, name := range slices.Sorted(maps.Keys(files)) {
		fmt.Fprintf(h, "%s\x00%s\x00", name, FileHash(files[name]))
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// CheckFlowVersion checks a version about to be kept: a flow name, its
// flow file among its files, and its name the hash of its files.
func CheckFlowVersion(v *FlowVersion) error {
	switch {
	case v.Flow == "":
		return errors.New("a flow version names its flow")
	case v.Files[v.Path] == nil:
		return fmt.Errorf("flow %q version %s: its flow file %q is not among its files", v.Flow, v.Version, v.Path)
	case VersionOf(v.Path, v.Files) != v.Version:
		return fmt.Errorf("%w: flow %q version %s", ErrVersionHash, v.Flow, v.Version)
	}
	for name := range v.Files {
		if name == "" || strings.HasPrefix(name, "/") || slices.Contains(strings.Split(name, "/"), "..") {
			return fmt.Errorf("flow %q version %s: file name %q is not relative to the version's root", v.Flow, v.Version, name)
		}
	}
	return nil
}

// VersionsOf returns st's Versions.
func VersionsOf(st Store) (Versions, bool) {
	v, ok := st.(Versions)
	return v, ok
}

// Promotions keeps the version of each flow that new threads start on,
// for every process sharing the store: promoting a version moves every
// server's new threads onto it at once, whatever its own flow directory
// holds (a server compiles a promoted version it never loaded from the
// files the store keeps). Threads under way stay on their versions. The
// built-in stores implement it, and storetest.RunVersions checks it.
type Promotions interface {
	// PromoteVersion makes p's version, one the store keeps (ErrNotFound
	// otherwise), the one its flow's new threads start on. With
	// onlyIfNone it does so only when the flow has no version promoted
	// yet (a flow's first load), and reports whether it did.
	PromoteVersion(ctx context.Context, p *Promotion, onlyIfNone bool) (bool, error)
	// PromotedVersion returns a flow's promoted version; ErrNotFound
	// when it has none.
	PromotedVersion(ctx context.Context, flow string) (*Promotion, error)
	// PromotedVersions lists every flow's promoted version, by flow.
	PromotedVersions(ctx context.Context) ([]*Promotion, error)
}

// Promotion is the version of a flow its new threads start on.
type Promotion struct {
	Flow, Version string
	// Since is when it was promoted; By says by whom or what (a server's
	// first load of the flow, a key's id).
	Since time.Time
	By    string
}

// PromotionsOf returns st's Promotions.
func PromotionsOf(st Store) (Promotions, bool) {
	p, ok := st.(Promotions)
	return p, ok
}
