package flows_test

import (
	"testing"

	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/runtime/flow"
)

// Every field of the two flows' states is checked by the validator's
// fast path (a step's writes are validated without the JSON Schema
// library unless they break a rule), so their schemas keep to the
// keywords it decides.
func TestStateFieldsValidatedByTheFastPath(t *testing.T) {
	for _, file := range []string{"interview.yaml", "resume_review.yaml"} {
		g, dl := flow.Load(file, all.Offline())
		if g == nil {
			t.Fatal(dl)
		}
		for _, f := range g.Fields {
			if f.Validator != nil && !f.Shape.Exact() {
				t.Errorf("%s: field %s: its schema has a keyword the fast path leaves to the library", file, f.Name)
			}
		}
	}
}
