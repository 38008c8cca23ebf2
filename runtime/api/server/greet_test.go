package server

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/runtime/api"
)

// A run that lacks an input the flow reads with nothing to fall back on
// (the README's greet flow reads input.name) is refused before anything
// runs, however it is started, with invalid_input naming the field; so
// is a schedule whose ticks would lack it. The thread is left as it was.
func TestRunWithoutAnInputTheFlowReads(t *testing.T) {
	greet, err := os.ReadFile(flowsDir + "/examples/greet.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := serve(t, openRuntime(t, "memory"), flowsWith(t, map[string]string{"greet": string(greet)}), "")
	th, err := s.acme.CreateThread(ctx, api.CreateThread{ID: "g", Flow: "greet"})
	if err != nil {
		t.Fatal(err)
	}
	refused := func(what string, err error) {
		t.Helper()
		e := asAPIError(err)
		if e == nil || e.Code != api.CodeInvalidInput || !strings.Contains(fmt.Sprint(e.Details), "field:name") ||
			!strings.Contains(e.Message, "reads input.name") {
			t.Fatalf("%s: %v", what, err)
		}
	}
	for _, in := range []map[string]any{nil, {}} {
		_, err := s.acme.RunWait(ctx, "g", api.StartRun{Input: in})
		refused(fmt.Sprintf("wait with %v", in), err)
		_, err = s.acme.StartRun(ctx, "g", api.StartRun{Input: in})
		refused(fmt.Sprintf("start with %v", in), err)
		for _, err := range s.acme.StreamRun(ctx, "g", api.StartRun{Input: in}) {
			refused(fmt.Sprintf("stream with %v", in), err)
			break
		}
	}
	if st, err := s.acme.State(ctx, "g", 0); err != nil || st.Checkpoint != th.Checkpoint {
		t.Fatalf("the refused runs changed the thread: %+v %v", st, err)
	}
	run, err := s.acme.RunWait(ctx, "g", api.StartRun{Input: map[string]any{"name": "Ada"}})
	if err != nil || run.State["greeting"] != "Hello, Ada!" {
		t.Fatalf("a run with the name: %+v %v", run, err)
	}
	for _, sc := range []api.CreateSchedule{{Flow: "greet", Cron: "0 3 * * *"}, {Thread: "g", Cron: "0 3 * * *", Input: map[string]any{}}} {
		_, err := s.acme.CreateSchedule(ctx, sc)
		if e := asAPIError(err); e == nil || e.Code != api.CodeInvalidInput || !strings.Contains(fmt.Sprint(e.Details), "field:input") ||
			!strings.Contains(e.Message, `input "name": required`) {
			t.Fatalf("schedule %+v: %v", sc, err)
		}
	}
	if _, err := s.acme.CreateSchedule(ctx, api.CreateSchedule{Flow: "greet", Cron: "0 3 * * *", Input: map[string]any{"name": "Ada"}}); err != nil {
		t.Fatal(err)
	}
}

// An input the API refuses for its value (a name longer than the schema
// allows) is named by its field, in the message and the details, with no
// empty JSON pointer ("/:") in the message.
func TestRunInputTooLong(t *testing.T) {
	src := `version: 1
name: short
input: [name]
state:
  schema:
    type: object
    properties:
      name: {type: string, maxLength: 3}
      greeting: {type: string, default: ""}
nodes:
  greet: {kind: assign, set: {greeting: "'Hello, ' + (state.name ?? '')"}}
edges:
  - {from: START, to: greet}
  - {from: greet, to: END}
`
	s := serve(t, openRuntime(t, "memory"), flowsWith(t, map[string]string{"short": src}), "")
	if _, err := s.acme.CreateThread(ctx, api.CreateThread{ID: "s", Flow: "short"}); err != nil {
		t.Fatal(err)
	}
	_, err := s.acme.RunWait(ctx, "s", api.StartRun{Input: map[string]any{"name": "Adalbert"}})
	e := asAPIError(err)
	if e == nil || e.Code != api.CodeInvalidInput || !strings.Contains(fmt.Sprint(e.Details), "field:name") {
		t.Fatalf("a name too long: %v", err)
	}
	if want := `input "name": length must be <= 3, but got 8`; !strings.Contains(e.Message, want) || strings.Contains(e.Message, "/:") {
		t.Fatalf("message %q, want %q", e.Message, want)
	}
}
