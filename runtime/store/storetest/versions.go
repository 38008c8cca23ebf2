package storetest

import (
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/store"
)

// RunVersions runs the suite of store.Versions; open returns an empty
// store for each subtest.
func RunVersions(t *testing.T, open func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, v store.Versions)
	}{
		{"PutAndReadBack", testVersionsPut},
		{"FilesKeptOnce", testVersionsShared},
		{"RefusesAVersionNotItsHash", testVersionsHash},
		{"PinMovesOnlyFromTheVersionExpected", testVersionsPin},
		{"PinsListedAndCounted", testVersionsPins},
		{"ConcurrentFirstPins", testVersionsRace},
		{"PromotedVersion", testVersionsPromote},
	}
	t.Run("DeletedThreadLosesItsVersion", func(t *testing.T) {
		st := open(t)
		t.Cleanup(func() { st.Close() })
		v, _ := store.VersionsOf(st)
		create(t, st, "acme/t", map[string]any{"n": 0})
		if err := v.PinThread(ctx, &store.ThreadPin{Tenant: "acme", Thread: "acme/t", Flow: "f", Version: "v1", Since: time.Now()}, ""); err != nil {
			t.Fatal(err)
		}
		if err := st.Delete(ctx, "acme/t"); err != nil {
			t.Fatal(err)
		}
		if p, err := v.ThreadPin(ctx, "acme", "acme/t"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("a deleted thread's version: %+v %v", p, err)
		}
	})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := open(t)
			t.Cleanup(func() { st.Close() })
			v, ok := store.VersionsOf(st)
			if !ok {
				t.Fatalf("%T keeps no flow versions", st)
			}
			tc.fn(t, v)
		})
	}
}

func flowVersion(flow, path string, files map[string]string, created time.Time) *store.FlowVersion {
	fv := &store.FlowVersion{Flow: flow, Path: path, Files: map[string][]byte{}, Created: created}
	for name, data := range files {
		fv.Files[name] = []byte(data)
	}
	fv.Version = store.VersionOf(path, fv.Files)
	return fv
}

func testVersionsPut(t *testing.T, v store.Versions) {
	at := time.Unix(1700000000, 0)
	fv := flowVersion("f", "flows/f.yaml", map[string]string{"flows/f.yaml": "name: f", "prompts/p.prompt": "hello"}, at)
	if err := v.PutFlowVersion(ctx, fv); err != nil {
		t.Fatal(err)
	}
	// again: nothing changes
	if err := v.PutFlowVersion(ctx, fv); err != nil {
		t.Fatalf("putting a version again: %v", err)
	}
	got, err := v.FlowVersion(ctx, "f", fv.Version)
	if err != nil {
		t.Fatal(err)
	}
	if got.Path != fv.Path || !reflect.DeepEqual(got.Files, fv.Files) || !got.Created.Equal(at) || got.Version != fv.Version {
		t.Fatalf("read back %+v, put %+v", got, fv)
	}
	if _, err := v.FlowVersion(ctx, "f", "0000000000000000"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("an unknown version: %v", err)
	}
	if _, err := v.FlowVersion(ctx, "g", fv.Version); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("another flow's version: %v", err)
	}
}

func testVersionsShared(t *testing.T, v store.Versions) {
	at := time.Unix(1700000000, 0)
	a := flowVersion("f", "f.yaml", map[string]string{"f.yaml": "v1", "p.prompt": "same"}, at)
	b := flowVersion("f", "f.yaml", map[string]string{"f.yaml": "v2", "p.prompt": "same"}, at.Add(time.Second))
	if a.Version == b.Version {
		t.Fatal("two sets of files share a version")
	}
	for _, fv := range []*store.FlowVersion{a, b} {
		if err := v.PutFlowVersion(ctx, fv); err != nil {
			t.Fatal(err)
		}
	}
	list, err := v.FlowVersions(ctx, "f")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Version != b.Version || list[1].Version != a.Version || list[0].Files != nil {
		t.Fatalf("versions %+v: want the newest first, without files", list)
	}
	for _, fv := range []*store.FlowVersion{a, b} {
		got, err := v.FlowVersion(ctx, "f", fv.Version)
		if err != nil || !reflect.DeepEqual(got.Files, fv.Files) {
			t.Fatalf("version %s: %v %v", fv.Version, got, err)
		}
	}
}

func testVersionsHash(t *testing.T, v store.Versions) {
	fv := flowVersion("f", "f.yaml", map[string]string{"f.yaml": "v1"}, time.Now())
	fv.Files["f.yaml"] = []byte("changed")
	if err := v.PutFlowVersion(ctx, fv); !errors.Is(err, store.ErrVersionHash) {
		t.Fatalf("a version that is not its files' hash: %v", err)
	}
	bad := flowVersion("f", "f.yaml", map[string]string{"f.yaml": "v1", "../x": "out"}, time.Now())
	if err := v.PutFlowVersion(ctx, bad); err == nil {
		t.Fatal("a file outside the version's root was kept")
	}
	if _, err := v.FlowVersion(ctx, "f", fv.Version); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a refused version was kept: %v", err)
	}
}

func testVersionsPin(t *testing.T, v store.Versions) {
	at := time.Unix(1700000000, 0)
	p := &store.ThreadPin{Tenant: "acme", Thread: "t1", Flow: "f", Version: "v1", Since: at}
	if _, err := v.ThreadPin(ctx, "acme", "t1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("an unpinned thread: %v", err)
	}
	if err := v.PinThread(ctx, p, ""); err != nil {
		t.Fatal(err)
	}
	if err := v.PinThread(ctx, &store.ThreadPin{Tenant: "acme", Thread: "t1", Flow: "f", Version: "v9", Since: at}, ""); !errors.Is(err, store.ErrPinChanged) {
		t.Fatalf("a second first pin: %v", err)
	}
	got, err := v.ThreadPin(ctx, "acme", "t1")
	if err != nil || got.Version != "v1" || got.Flow != "f" || !got.Since.Equal(at) {
		t.Fatalf("pin %+v %v", got, err)
	}
	if _, err := v.ThreadPin(ctx, "globex", "t1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("another tenant's pin: %v", err)
	}
	moved := &store.ThreadPin{Tenant: "acme", Thread: "t1", Flow: "f", Version: "v2", Since: at.Add(time.Minute)}
	if err := v.PinThread(ctx, moved, "v0"); !errors.Is(err, store.ErrPinChanged) {
		t.Fatalf("a move from a version the thread is not on: %v", err)
	}
	if err := v.PinThread(ctx, moved, "v1"); err != nil {
		t.Fatal(err)
	}
	if got, _ := v.ThreadPin(ctx, "acme", "t1"); got == nil || got.Version != "v2" {
		t.Fatalf("after the move: %+v", got)
	}
}

func testVersionsPins(t *testing.T, v store.Versions) {
	at := time.Unix(1700000000, 0)
	for i, th := range []string{"a", "b", "c", "d"} {
		version := "v1"
		if i%2 == 1 {
			version = "v2"
		}
		if err := v.PinThread(ctx, &store.ThreadPin{Tenant: "acme", Thread: th, Flow: "f", Version: version, Since: at}, ""); err != nil {
			t.Fatal(err)
		}
	}
	if err := v.PinThread(ctx, &store.ThreadPin{Tenant: "globex", Thread: "z", Flow: "f", Version: "v1", Since: at}, ""); err != nil {
		t.Fatal(err)
	}
	counts, err := v.CountPins(ctx, "acme", "f")
	if err != nil || !reflect.DeepEqual(counts, map[string]int{"v1": 2, "v2": 2}) {
		t.Fatalf("counts %v %v", counts, err)
	}
	page, err := v.ThreadPins(ctx, store.PinQuery{Tenant: "acme", Flow: "f", Limit: 3})
	if err != nil || len(page) != 3 || page[0].Thread != "a" || page[2].Thread != "c" {
		t.Fatalf("first page %v %v", page, err)
	}
	rest, err := v.ThreadPins(ctx, store.PinQuery{Tenant: "acme", Flow: "f", After: "c"})
	if err != nil || len(rest) != 1 || rest[0].Thread != "d" {
		t.Fatalf("second page %v %v", rest, err)
	}
	on2, err := v.ThreadPins(ctx, store.PinQuery{Tenant: "acme", Flow: "f", Version: "v2"})
	if err != nil || len(on2) != 2 || on2[0].Thread != "b" || on2[1].Thread != "d" {
		t.Fatalf("threads on v2 %v %v", on2, err)
	}
}

func testVersionsRace(t *testing.T, v store.Versions) {
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = v.PinThread(ctx, &store.ThreadPin{Tenant: "acme", Thread: "t", Flow: "f", Version: string(rune('a' + i)), Since: time.Now()}, "")
		}()
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, store.ErrPinChanged):
			t.Fatalf("a concurrent first pin: %v", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d first pins won, want 1", won)
	}
}

// A flow's promoted version: only a version the store keeps; a first
// load's promotion never replaces one; a promotion does; every flow's is
// listed.
func testVersionsPromote(t *testing.T, v store.Versions) {
	p, ok := v.(store.Promotions)
	if !ok {
		t.Fatalf("%T keeps no promoted versions", v)
	}
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	v1 := flowVersion("f", "f.yaml", map[string]string{"f.yaml": "one"}, now)
	v2 := flowVersion("f", "f.yaml", map[string]string{"f.yaml": "two"}, now.Add(time.Second))
	g1 := flowVersion("g", "g.yaml", map[string]string{"g.yaml": "one"}, now)
	for _, fv := range []*store.FlowVersion{v1, v2, g1} {
		if err := v.PutFlowVersion(ctx, fv); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.PromotedVersion(ctx, "f"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a flow never promoted: %v, want ErrNotFound", err)
	}
	if _, err := p.PromoteVersion(ctx, &store.Promotion{Flow: "f", Version: "nope", Since: now}, false); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("promoting a version not kept: %v, want ErrNotFound", err)
	}
	if done, err := p.PromoteVersion(ctx, &store.Promotion{Flow: "f", Version: v1.Version, Since: now, By: "load"}, true); err != nil || !done {
		t.Fatalf("a first load's promotion: %v %v", done, err)
	}
	if done, err := p.PromoteVersion(ctx, &store.Promotion{Flow: "f", Version: v2.Version, Since: now, By: "load"}, true); err != nil || done {
		t.Fatalf("a second load's promotion replaced the first: %v %v", done, err)
	}
	if got, err := p.PromotedVersion(ctx, "f"); err != nil || got.Version != v1.Version || got.By != "load" || !got.Since.Equal(now) {
		t.Fatalf("promoted after two loads: %+v %v, want %s", got, err, v1.Version)
	}
	if done, err := p.PromoteVersion(ctx, &store.Promotion{Flow: "f", Version: v2.Version, Since: now.Add(time.Minute), By: "key_1"}, false); err != nil || !done {
		t.Fatalf("a promotion: %v %v", done, err)
	}
	if _, err := p.PromoteVersion(ctx, &store.Promotion{Flow: "g", Version: g1.Version, Since: now, By: "load"}, true); err != nil {
		t.Fatal(err)
	}
	all, err := p.PromotedVersions(ctx)
	if err != nil || len(all) != 2 || all[0].Flow != "f" || all[0].Version != v2.Version || all[0].By != "key_1" || all[1].Flow != "g" {
		t.Fatalf("every flow's promoted version: %+v %v", all, err)
	}
}
