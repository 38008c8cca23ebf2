package flows

import (
	"testing"

	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/runtime/flow"
)

// BenchmarkValidateReferenceFlows loads and validates both reference
// flows, as `trellis validate flows/interview.yaml flows/resume_review.yaml`
// does once its process has started (the format's schema compiled once
// per process, as there).
func BenchmarkValidateReferenceFlows(b *testing.B) {
	reg := all.Registry()
	for b.Loop() {
		for _, f := range []string{"interview.yaml", "resume_review.yaml"} {
			if g, dl := flow.Load(f, reg); g == nil || len(dl) > 0 {
				b.Fatalf("%s: %v", f, dl)
			}
		}
	}
}
