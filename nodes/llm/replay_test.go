package llm_test

import (
	"context"
	"reflect"
	"testing"

	"github.com/trellisflow/trellis/nodes/llm/llmtest"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/memory"
)

// A model's replies are recorded with the checkpoint of the step that
// asked (a repair turn's too), and a run replaying them with no model
// configured is told the same and ends in the same state; a request the
// thread did not send is not answered from them.
func TestRepliesRecordedAndReplayed(t *testing.T) {
	ctx := context.Background()
	srv := llmtest.New(
		llmtest.Rule{Match: "Review this resume", Replies: []llmtest.Reply{
			{Content: `{"score": 12, "notes": "too generous"}`},
			{Content: `{"score": 9, "notes": "fixed"}`},
		}},
		llmtest.Rule{Match: "Summarise", Replies: []llmtest.Reply{{Content: "a fine resume"}}},
	)
	st := memory.New()
	g := setup(t, serve(t, srv))
	want := runFlow(t, g, st, nil)
	hist, err := st.History(ctx, "t", store.HistoryOptions{Source: store.SourceStep})
	if err != nil {
		t.Fatal(err)
	}
	var replies []store.Reply
	for i := len(hist) - 1; i >= 0; i-- {
		replies = append(replies, hist[i].Replies...)
	}
	if len(replies) != 3 || replies[0].Node != "review" || replies[1].Text != `{"score": 9, "notes": "fixed"}` || replies[2].Node != "summarise" {
		t.Fatalf("recorded replies: %+v", replies)
	}

	offline := setup(t, nil)
	rs := engine.NewReplies(replies)
	res, err := engine.New(memory.New()).Run(ctx, offline, engine.Request{Thread: "t", Replies: rs, Observe: func(engine.Event) {}})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(res.State, want) || rs.Misses() != 0 {
		t.Errorf("replayed to %v (%d misses), the run ended with %v", res.State, rs.Misses(), want)
	}
	if len(srv.Calls()) != 3 {
		t.Errorf("the replay called the model: %d calls", len(srv.Calls()))
	}
	// another resume renders another request: no recorded reply, no
	// model, the fallback
	res, err = engine.New(memory.New()).Run(ctx, offline, engine.Request{Thread: "t", Values: map[string]any{"resume": "SRE"}, Replies: engine.NewReplies(replies)})
	if err != nil {
		t.Fatal(err)
	}
	if fb, _ := res.State["feedback"].(map[string]any); fb["score"] != 5 { // a whole number is an int, as a store hands it back
		t.Errorf("a request not recorded was answered: %v", res.State)
	}
}
