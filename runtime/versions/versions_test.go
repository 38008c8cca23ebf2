package versions_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/kind/kindtest"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/memory"
	"github.com/trellisflow/trellis/runtime/versions"
)

// counterV1 counts its runs; counterV2 keeps the count as text, which
// breaks the threads of version 1 unless a migration gives the value.
const counterV1 = `version: 1
name: counter
state:
	schema: {type: object, properties: {n: {type: integer, default: 0}}}
nodes:
	a: {kind: set, set: {n: "state.n + 1"}}
edges:
	- {from: START, to: a}
	- {from: a, to: END}
`

var counterV2 = strings.NewReplacer("n: {type: integer, default: 0}", `n: {type: string, default: ""}`,
	`n: "state.n + 1"`, `n: "state.n + '|'"`).Replace(counterV1)

// compile compiles src written as dir/flows/counter.yaml.
func compile(t *testing.T, dir, src string) *versions.Flow {
	t.Helper()
	path := filepath.Join(dir, "flows", "counter.yaml")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(src, "\t", "  ")), 0o644); err != nil {
		t.Fatal(err)
	}
	f, dl := versions.Compile(nil, path, nil, kindtest.Registry())
	if f == nil {
		t.Fatalf("flow does not compile:\n%v", dl)
	}
	return f
}

// A version is the hash of its files, the same wherever they lie, and it
// compiles again from its files alone; files that are not the version's
// are refused.
func TestAVersionCompilesFromItsFilesAlone(t *testing.T) {
	a, b := compile(t, t.TempDir(), counterV1), compile(t, t.TempDir(), counterV1)
	va := a.Version()
	if va.Version != b.Version().Version || va.Path != "counter.yaml" || va.Flow != "counter" {
		t.Fatalf("the same files in two places: %+v, %+v", va, b.Version())
	}
	if other := compile(t, t.TempDir(), counterV2).Version().Version; other == va.Version {
		t.Fatal("changed files kept their version")
	}
	again, err := versions.Load(va, kindtest.Registry())
	if err != nil || again.Version().Version != va.Version || again.Graph().Name != "counter" {
		t.Fatalf("compiled again: %v", err)
	}
	forged := &store.FlowVersion{Flow: va.Flow, Version: va.Version, Path: va.Path, Files: map[string][]byte{va.Path: []byte(strings.ReplaceAll(counterV2, "\t", "  "))}}
	if _, err := versions.Load(forged, kindtest.Registry()); err == nil || !strings.Contains(err.Error(), "its files compile as version") {
		t.Fatalf("files of another version: %v", err)
	}
	broken := &store.FlowVersion{Flow: va.Flow, Version: va.Version, Path: va.Path, Files: map[string][]byte{va.Path: []byte("version: 1\nname: counter\nnodes: {a: {kind: nope}}\n")}}
	var le *versions.LoadError
	if _, err := versions.Load(broken, kindtest.Registry()); !errors.As(err, &le) || len(le.Diagnostics) == 0 {
		t.Fatalf("files that do not compile: %v", err)
	}
}

// A thread runs the version it is pinned to; a move across a breaking
// change is refused without a migration, checked by a dry run, and made
// with one, recording the new version; a fork of a checkpoint made
// before the move runs the version it was made by.
func TestAThreadMovesOnlyWithAMigrationForABreakingChange(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	eng := engine.New(st)
	vs, err := versions.New(st, kindtest.Registry())
	if err != nil {
		t.Fatal(err)
	}
	v1, v2 := compile(t, t.TempDir(), counterV1), compile(t, t.TempDir(), counterV2)
	for _, f := range []*versions.Flow{v1, v2} {
		if err := vs.Keep(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := vs.ThreadFlow(ctx, "acme", "t"); !errors.Is(err, versions.ErrNoVersion) {
		t.Fatalf("a thread with no version: %v", err)
	}
	if err := vs.Pin(ctx, "acme", "t", v1); err != nil {
		t.Fatal(err)
	}
	if err := vs.Pin(ctx, "acme", "t", v2); !errors.Is(err, store.ErrPinChanged) {
		t.Fatalf("a second pin of a new thread: %v", err)
	}
	f, pin, err := vs.ThreadFlow(ctx, "acme", "t")
	if err != nil || f != v1 || pin.Version != v1.Version().Version {
		t.Fatalf("the thread's flow: %v %+v", err, pin)
	}
	res, err := eng.Run(ctx, f.Graph(), engine.Request{Thread: "t"})
	if err != nil {
		t.Fatal(err)
	}
	before := res.Checkpoint

	to := v2.Version().Version
	_, err = vs.MoveThread(ctx, eng, "acme", "t", to, versions.Migration{}, false)
	var me *versions.MoveError
	if !errors.As(err, &me) || len(me.Breaking) != 1 || me.Breaking[0].Name != "n" {
		t.Fatalf("a breaking move without a migration: %v", err)
	}
	m := versions.Migration{Set: map[string]string{"n": "string(state.n)"}}
	dry, err := vs.MoveThread(ctx, eng, "acme", "t", to, m, true)
	if err != nil || dry.Moved || len(dry.Effects) == 0 {
		t.Fatalf("a dry run: %+v %v", dry, err)
	}
	if _, err := vs.MoveThread(ctx, eng, "acme", "t", to, versions.Migration{Set: map[string]string{"n": "state.n"}}, false); !errors.As(err, &me) || len(me.Problems) != 1 {
		t.Fatalf("a migration whose value does not fit the field: %v", err)
	}
	moved, err := vs.MoveThread(ctx, eng, "acme", "t", to, m, false)
	if err != nil || !moved.Moved || moved.From != v1.Version().Version || moved.To != to {
		t.Fatalf("the move: %+v %v", moved, err)
	}
	head, err := st.Head(ctx, "t")
	if err != nil || head.Values["n"] != "1" || head.Seq != moved.Checkpoint {
		t.Fatalf("after the move: %+v %v", head, err)
	}
	if f, pin, err := vs.ThreadFlow(ctx, "acme", "t"); err != nil || f != v2 || pin.Version != to {
		t.Fatalf("the thread's flow after the move: %v %+v", err, pin)
	}

	if _, err := store.Fork(ctx, st, "t", before, "old"); err != nil {
		t.Fatal(err)
	}
	if err := vs.PinFork(ctx, eng, "acme", "t", before, "old"); err != nil {
		t.Fatal(err)
	}
	if _, pin, err := vs.ThreadFlow(ctx, "acme", "old"); err != nil || pin.Version != v1.Version().Version {
		t.Fatalf("a fork from before the move: %+v %v", pin, err)
	}
}
