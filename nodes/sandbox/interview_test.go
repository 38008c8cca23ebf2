package sandbox_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/nodes/llm"
	"github.com/trellisflow/trellis/nodes/sandbox"
	"github.com/trellisflow/trellis/nodes/sandbox/sandboxtest"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/store/memory"
)

const mergeIntervals = `def merge_intervals(intervals):
    out = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return out
`

// A real submission goes through the interview on each backend: the
// exercise's tests run in the sandbox, and the review and the signals
// come from what they found.
func TestInterviewRunsTheSubmission(t *testing.T) {
	for name, pool := range sandboxtest.Backends(t, 2) {
		t.Run(name, func(t *testing.T) {
			reg := all.With(func() *llm.Provider { return nil }, func() *sandbox.Pool { return pool })
			g, dl := flow.Load("../../flows/interview.yaml", reg)
			if g == nil || len(dl) > 0 {
				t.Fatal(dl)
			}
			eng := engine.New(memory.New())
			if _, err := eng.Create(ctx, g, "i", map[string]any{"interview_id": "i", "user_id": "ada",
				"resume_structured": map[string]any{"name": "Ada", "target_role": "Backend Engineer", "skills": []any{"Go"}, "projects": []any{}, "experiences": []any{}}}); err != nil {
				t.Fatal(err)
			}
			var state map[string]any
			for _, in := range []map[string]any{
				{},
				{"last_response": "Could we do a coding exercise instead?"},
				{"last_response": "here you go", "current_code": mergeIntervals},
				{"last_response": "and a broken one", "current_code": "def merge_intervals(intervals):\n    return intervals\n"},
			} {
				res, err := eng.Run(ctx, g, engine.Request{Thread: "i", Input: in})
				if err != nil {
					t.Fatal(err)
				}
				state = res.State
			}
			subs := state["code_submissions"].([]any)
			first, second := subs[0].(map[string]any), subs[1].(map[string]any)
			if first["executed"] != true || first["status"] != "passed" || fmt.Sprint(first["tests_passed"]) != "5" {
				t.Errorf("the good submission: %v", first)
			}
			if r := first["result"].(map[string]any); r["backend"] != name {
				t.Errorf("ran on %v", r["backend"])
			}
			if second["status"] != "failed" {
				t.Errorf("the broken submission: %v", second)
			}
			msg := state["next_message"].(string)
			// the example's expected value is told, the hidden tests' never
			if !strings.HasPrefix(msg, "1 of 5 tests pass;") || !strings.Contains(msg, "2 hidden tests fail") || strings.Contains(msg, "[5, 6]") || strings.Contains(msg, "[1,2],[5,6]") {
				t.Errorf("review %q", msg)
			}
			signals := state["sandbox"].(map[string]any)["signals"].([]any)
			if len(signals) != 1 || signals[0] != "rapid_iterations" {
				t.Errorf("signals %v", signals)
			}
		})
	}
}
