package server

import (
	"testing"

	"github.com/trellisflow/trellis/runtime/api"
)

// askFlow requires its input field, which has no default: the run that
// brings input brings it.
const askFlow = `version: 1
name: ask
state:
  schema:
    type: object
    required: [question, topic]
    properties:
      question: {type: string}
      topic: {type: string}
      answer: {type: string, default: ""}
input: [question]
nodes:
  answer: {kind: assign, set: {answer: "'About ' + state.topic + ': ' + state.question"}}
edges:
  - {from: START, to: answer}
  - {from: answer, to: END}
`

// A thread of a flow whose schema requires an input field is created
// through the API (its first run brings the field, as trellis run --with
// has it come from the values or the input); a run without it is
// refused naming it, and leaves the thread as it was; a field the schema
// requires that is not an input must still come with the thread.
func TestRequiredInputThroughTheAPI(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			s := serve(t, openRuntime(t, storeAddr(t, b.name)), flowsWith(t, map[string]string{"ask": askFlow}), "")
			_, err := s.acme.CreateThread(ctx, api.CreateThread{ID: "no-topic", Flow: "ask"})
			if e := asAPIError(err); e == nil || e.Code != api.CodeInvalidInput {
				t.Fatalf("a thread without the required topic, which is not an input: %v", err)
			}
			th, err := s.acme.CreateThread(ctx, api.CreateThread{ID: "t", Flow: "ask", Values: map[string]any{"topic": "Go"}})
			if err != nil {
				t.Fatal(err)
			}
			for _, in := range []map[string]any{nil, {}} {
				_, err := s.acme.RunWait(ctx, "t", api.StartRun{Input: in})
				if e := asAPIError(err); e == nil || e.Code != api.CodeInvalidInput || !containsAny(e.Message, "question") {
					t.Fatalf("a run without the required input: %v", err)
				}
			}
			if st, err := s.acme.State(ctx, "t", 0); err != nil || st.Checkpoint != th.Checkpoint {
				t.Fatalf("the refused runs changed the thread: %+v %v", st, err)
			}
			run, err := s.acme.RunWait(ctx, "t", api.StartRun{Input: map[string]any{"question": "why?"}})
			if err != nil || run.Status != api.RunSucceeded || run.State["answer"] != "About Go: why?" {
				t.Fatalf("the first run: %+v %v", run, err)
			}
			// from then on the thread has it: a run without input runs
			if run, err := s.acme.RunWait(ctx, "t", api.StartRun{}); err != nil || run.Status != api.RunSucceeded {
				t.Fatalf("a later run: %+v %v", run, err)
			}
		})
	}
}

func asAPIError(err error) *api.Error {
	var e *api.Error
	if errorAs(err, &e) {
		return e
	}
	return nil
}
