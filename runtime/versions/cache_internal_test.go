package versions

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/kind/kindtest"
	"github.com/trellisflow/trellis/runtime/store/memory"
)

// counterAdding is a version of a flow that adds step to its count.
func counterAdding(t *testing.T, step int) *Flow {
	t.Helper()
	path := filepath.Join(t.TempDir(), "flows", "counter.yaml")
	src := fmt.Sprintf(`version: 1
name: counter
state:
  schema: {type: object, properties: {n: {type: integer, default: 0}}}
nodes:
  a: {kind: set, set: {n: "state.n + %d"}}
edges:
  - {from: START, to: a}
  - {from: a, to: END}
`, step)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	f, dl := Compile(nil, path, nil, kindtest.Registry())
	if f == nil {
		t.Fatalf("flow does not compile:\n%v", dl)
	}
	return f
}

// The compiled versions kept are bounded: past the bound the least
// recently used goes, and a version gone is compiled again from the
// store, and runs; a version used lately stays.
func TestCompiledVersionsBounded(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	vs, err := New(st, kindtest.Registry())
	if err != nil {
		t.Fatal(err)
	}
	if vs.limit != DefaultCompiled {
		t.Fatalf("limit %d, want %d", vs.limit, DefaultCompiled)
	}
	vs.limit = 3
	var kept []*Flow
	for step := 1; step <= 5; step++ {
		f := counterAdding(t, step)
		if err := vs.Keep(ctx, f); err != nil {
			t.Fatal(err)
		}
		kept = append(kept, f)
		if step == 3 {
			// the first version used again: the most recently used now
			if got, err := vs.Flow(ctx, "counter", kept[0].Version().Version); err != nil || got != kept[0] {
				t.Fatalf("version 1 read back: %v", err)
			}
		}
		if n := vs.compiled(); n > 3 {
			t.Fatalf("%d versions compiled kept after %d, want at most 3", n, step)
		}
	}
	// 4 and 5 went in last and 1 was used after 2 and 3: 2 and 3 went
	for i, want := range []bool{true, false, false, true, true} {
		if vs.has("counter", kept[i].Version().Version) != want {
			t.Errorf("version %d kept compiled: %v, want %v", i+1, !want, want)
		}
	}
	// the second version, gone, compiles again from the store and runs
	v := kept[1].Version().Version
	f, err := vs.Flow(ctx, "counter", v)
	if err != nil {
		t.Fatal(err)
	}
	if f == kept[1] || f.Version().Version != v {
		t.Fatalf("the second version was not compiled again: %s", f.Version().Version)
	}
	res, err := engine.New(st).Run(ctx, f.Graph(), engine.Request{Thread: "t"})
	if err != nil || res.State["n"] != 2 {
		t.Fatalf("the second version ran: %v %v", res, err)
	}
	if n := vs.compiled(); n != 3 || vs.has("counter", kept[0].Version().Version) {
		t.Fatalf("%d versions compiled kept (want 3), the first among them: %v", n, vs.has("counter", kept[0].Version().Version))
	}
}
