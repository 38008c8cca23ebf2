package llm_test

import (
	"context"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/nodes/llm"
	"github.com/trellisflow/trellis/nodes/llm/llmtest"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/store/memory"
)

// An llm node that sets on_error handles a model that fails with it: the
// route, the set values (error is the model's failure) or fail, instead
// of the prompt's fallback; with no model configured, the fallback still
// stands in, marked degraded. A node without on_error writes the fallback.
func TestOnErrorHandlesAModelFailure(t *testing.T) {
	routed := strings.Replace(reviewFlow, "    writes:\n      feedback: output\n", "    writes:\n      feedback: output\n    on_error: {route: summarise, set: {summary: \"'by hand: ' + error\"}}\n", 1)
	failing := strings.Replace(reviewFlow, "    writes:\n      feedback: output\n", "    writes:\n      feedback: output\n    on_error: fail\n", 1)

	// the model fails: on_error's route and values, no fallback
	srv := llmtest.New(llmtest.Rule{Replies: []llmtest.Reply{{Status: 500}}})
	g := setupFlow(t, serve(t, srv), routed)
	rec := &recorder{}
	res, err := engine.New(memory.New()).Run(context.Background(), g, engine.Request{Thread: "t", Observe: rec.observe, RecordPath: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.State["feedback"] != nil {
		t.Fatalf("the fallback was written: %v", res.State["feedback"])
	}
	handled := false
	for _, ev := range rec.events {
		if ev.Type == engine.NodeFailed && ev.Node == "review" && ev.Handled && strings.Contains(ev.Error, "500") && !strings.Contains(ev.Error, "fallback") {
			handled = true
		}
	}
	if !handled {
		t.Fatalf("no handled node_error for review: %+v", rec.events)
	}
	// summarise ran (routed), and overwrote summary with its own fallback
	if v := res.Visits(); v["summarise"] != 1 {
		t.Fatalf("visits %v", v)
	}

	// on_error: fail: the run fails with the model's error
	g = setupFlow(t, serve(t, llmtest.New(llmtest.Rule{Replies: []llmtest.Reply{{Status: 500}}})), failing)
	if _, err := engine.New(memory.New()).Run(context.Background(), g, engine.Request{Thread: "t"}); err == nil || !strings.Contains(err.Error(), "500") {
		t.Fatalf("on_error: fail, model failing: %v", err)
	}

	// no model configured: the fallback, degraded, whatever on_error says
	for _, src := range []string{routed, failing} {
		g = setupFlow(t, nil, src)
		rec = &recorder{}
		state := runFlow(t, g, memory.New(), rec.observe)
		fb, _ := state["feedback"].(map[string]any)
		if fb["notes"] != "review failed: "+llm.ErrNoModel.Error() {
			t.Fatalf("feedback with no model = %v", state["feedback"])
		}
		if ev := rec.nodeEnd("review"); ev.Degraded != llm.ErrNoModel.Error() {
			t.Fatalf("end event = %+v", ev)
		}
	}
}
