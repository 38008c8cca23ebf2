package eval_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"testing"

	"github.com/trellisflow/trellis/runtime/eval"
	"github.com/trellisflow/trellis/runtime/schema"
)

var update = flag.Bool("update", false, "rewrite schemas/eval.schema.json")

const published = "../../schemas/eval.schema.json"

// The published schema of the dataset format (for editors) is the one the
// loader checks datasets with.
func TestFormatSchemaUpToDate(t *testing.T) {
	want, err := json.MarshalIndent(eval.FormatSchema(), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, '\n')
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
		t.Fatalf("%s is out of date with the dataset format; run `make schema`", published)
	}
	// it is a schema, and the shipped datasets fit it
	var raw any
	if err := json.Unmarshal(got, &raw); err != nil {
		t.Fatal(err)
	}
	sc, err := schema.NewCompiler(nil).Compile("file:///trellis/eval.schema.json", raw)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"../../flows/interview.eval.yaml", "../../flows/resume_review.eval.yaml"} {
		doc, err := schema.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := sc.Validate(doc); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}
