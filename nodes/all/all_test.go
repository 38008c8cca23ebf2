package all_test

import (
	"bytes"
	"flag"
	"os"
	"testing"

	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/runtime/flow"
)

var update = flag.Bool("update", false, "rewrite schemas/flow.schema.json")

const (
	published = "../../schemas/flow.schema.json"
	reference = "../README.md"
)

// TestFlowSchemaUpToDate fails when the published flow schema no longer
// matches the registry; `make schema` (go test -update) rewrites it.
func TestFlowSchemaUpToDate(t *testing.T) {
	want, err := flow.FormatSchema(all.Registry())
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(published, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(published)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is out of date with the node kinds; run `make schema`", published)
	}
}

// TestNodeReferenceUpToDate checks nodes/README.md against the registry.
func TestNodeReferenceUpToDate(t *testing.T) {
	want := all.Reference()
	if *update {
		if err := os.WriteFile(reference, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(reference)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is out of date with the node kinds; run `make schema`", reference)
	}
}

func TestRegistry(t *testing.T) {
	for _, name := range []string{"assign", "llm", "noop", "render"} {
		if _, ok := all.Registry().Lookup(name); !ok {
			t.Errorf("kind %q is not registered", name)
		}
	}
}
