package eval_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/eval"
	"github.com/trellisflow/trellis/runtime/flow"
)

// agentCases run the agent example offline: its tools scripted, its
// assistant's fallback making the calls its prompt names.
const agentCases = `flow: FLOW
cases:
  - name: right city
    tools:
      get_weather: [{result: {city: Oslo, celsius: 12, sky: rain}}]
      word_count: [{result: {words: 5}}]
      delete_note: [{result: deleted}]
    turns:
      - input: {question: 'What should I pack?', city: Oslo, note: old plans}
        expect: {tools: {exact: []}}
      - answers: {assistant: approve}
        expect:
          tools:
            exact: [{name: get_weather, args: {city: Oslo}}, trip_note, word_count, {name: delete_note, args: {title: old plans}}]
    expect:
      tools:
        in_order: [{name: get_weather, args: {city: Oslo}}, {name: delete_note}]
        any_order: [word_count, trip_note]
        never: [{name: get_weather, args: {city: Bergen}}]
  - name: wrong city
    tools:
      get_weather: [{result: {city: Oslo, celsius: 12, sky: rain}}]
      word_count: [{result: {words: 3}}]
    turns:
      - input: {question: 'What should I pack?', city: Oslo}
    expect:
      tools: {in_order: [{name: get_weather, args: {city: Bergen}}, trip_note]}
  - name: a rejected deletion is not a call
    tools:
      get_weather: [{result: {city: Oslo, celsius: 12, sky: rain}}]
      word_count: [{result: {words: 3}}]
    turns:
      - input: {question: 'What should I pack?', city: Oslo, note: old plans}
      - answers: {assistant: reject}
    expect:
      tools: {never: [delete_note], any_order: [get_weather]}
  - name: never a call with these arguments
    tools:
      get_weather: [{result: {city: Oslo, celsius: 12, sky: rain}}]
      word_count: [{result: {words: 3}}]
    turns:
      - input: {question: 'What should I pack?', city: Oslo}
    expect:
      tools: {never: [{name: get_weather, args: {city: Oslo}}]}
`

func agentGraph(t *testing.T) (*flow.Graph, string) {
	t.Helper()
	path, err := filepath.Abs("../../flows/examples/agent.yaml")
	if err != nil {
		t.Fatal(err)
	}
	g, dl := flow.Load(path, all.Offline())
	if g == nil {
		t.Fatal(dl)
	}
	return g, path
}

func TestToolCallRules(t *testing.T) {
	g, path := agentGraph(t)
	ds := loadDataset(t, t.TempDir(), strings.Replace(agentCases, "FLOW", path, 1))
	res, err := eval.Run(context.Background(), ds, []eval.Target{{Label: "agent.yaml", Graph: g}}, eval.Options{})
	if err != nil {
		t.Fatal(err)
	}
	status := map[string]*eval.CaseReport{}
	for _, c := range res.Report.Cases {
		status[c.Name] = c
	}
	for name, want := range map[string]eval.Status{"right city": eval.Passed, "a rejected deletion is not a call": eval.Passed,
		"wrong city": eval.Failed, "never a call with these arguments": eval.Failed} {
		c := status[name]
		if c == nil || c.Status != want {
			t.Errorf("%s: %+v, want %s", name, c, want)
			if c != nil {
				t.Logf("%s", c.Results[0].Reason)
			}
		}
	}
	// the failure names the rule, what it wanted and the calls made
	wrong := status["wrong city"].Results[0]
	if len(wrong.Failures) != 1 {
		t.Fatalf("wrong city failures %+v", wrong.Failures)
	}
	f := wrong.Failures[0]
	for _, want := range []string{`no call get_weather{"city":"Bergen"}`, `the calls were [get_weather{"city":"Oslo"}, trip_note{"city":"Oslo"}, word_count{`} {
		if !strings.Contains(f.Reason, want) {
			t.Errorf("want %q in %q", want, f.Reason)
		}
	}
	if f.Check != `tools in order [get_weather{"city":"Bergen"}, trip_note]` || f.Line != 27 {
		t.Errorf("failure %q at line %d", f.Check, f.Line)
	}
	never := status["never a call with these arguments"].Results[0].Failures
	if len(never) != 1 || !strings.Contains(never[0].Reason, `get_weather{"city":"Oslo"} called, which must not be`) {
		t.Errorf("never: %+v", never)
	}
	// each turn's transcript holds its calls, with their arguments and
	// results, in the JSON report too
	var buf bytes.Buffer
	if err := eval.WriteJSON(&buf, []*eval.Report{res.Report}); err != nil {
		t.Fatal(err)
	}
	var docs []struct {
		Cases []struct {
			Name    string `json:"name"`
			Results []struct {
				Repeats []struct {
					Turns []struct {
						Tools []map[string]any `json:"tools"`
					} `json:"turns"`
				} `json:"repeats"`
			} `json:"results"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(buf.Bytes(), &docs); err != nil || len(docs) != 1 {
		t.Fatal(err, len(docs))
	}
	doc := docs[0]
	var turns [][]map[string]any
	for _, c := range doc.Cases {
		if c.Name == "right city" {
			for _, tr := range c.Results[0].Repeats[0].Turns {
				turns = append(turns, tr.Tools)
			}
		}
	}
	if len(turns) != 2 || len(turns[0]) != 0 || len(turns[1]) != 4 {
		t.Fatalf("turns' tools %v", turns)
	}
	first := turns[1][0]
	if first["name"] != "get_weather" || first["node"] != "assistant" || first["seq"] != float64(1) ||
		first["arguments"].(map[string]any)["city"] != "Oslo" || first["result"].(map[string]any)["sky"] != "rain" {
		t.Errorf("first call %v", first)
	}
	if last := turns[1][3]; last["name"] != "delete_note" || last["approval"] != "approved" {
		t.Errorf("last call %v", last)
	}
}

func TestToolRuleProblemsAtTheirPlaces(t *testing.T) {
	g, flowPath := agentGraph(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "bad.eval.yaml")
	text := `flow: FLOW
cases:
  - name: one
    tools:
      get_weather: {result: 1}
    expect:
      tools:
        in_order: [{nmae: get_weather}]
        any_order: [{name: word_count, args: 42}]
        never: []
`
	if err := os.WriteFile(path, []byte(strings.Replace(text, "FLOW", flowPath, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := eval.Load(path)
	var le *diag.ListError
	if !errors.As(err, &le) {
		t.Fatalf("load: %v", err)
	}
	got := diagText(le.List)
	for _, want := range []string{"bad.eval.yaml:5:20: error[S003]", `bad.eval.yaml:8:21: error[S001]: unknown key "nmae"; did you mean "name"?`,
		"bad.eval.yaml:9:46: error[S003]: cases[0].expect.tools.any_order[0].args: expected object", "bad.eval.yaml:10:16: error[S005]"} {
		if !strings.Contains(got, want) {
			t.Errorf("want %q in\n%s", want, got)
		}
	}
	// what fits the format is then checked against the flow
	text = `flow: FLOW
cases:
  - name: one
    tools:
      get_wether: [{result: 1}]
    turns:
      - input: {city: Oslo}
        expect:
          tools: {exact: [word_cont]}
    expect:
      tools: {never: [{name: delete_not, args: {title: x}}]}
`
	if err := os.WriteFile(path, []byte(strings.Replace(text, "FLOW", flowPath, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	ds, err := eval.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = eval.Run(context.Background(), ds, []eval.Target{{Label: "agent.yaml", Graph: g}}, eval.Options{})
	if !errors.As(err, &le) {
		t.Fatalf("run: %v", err)
	}
	got = diagText(le.List)
	for _, want := range []string{
		`bad.eval.yaml:5:7: error[G001]: tools: flow agent has no tool "get_wether"; did you mean "get_weather"?`,
		`bad.eval.yaml:9:27: error[G001]: tools: flow agent has no tool "word_cont"; did you mean "word_count"?`,
		`bad.eval.yaml:11:30: error[G001]: tools: flow agent has no tool "delete_not"; did you mean "delete_note"?`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("want %q in\n%s", want, got)
		}
	}
}
