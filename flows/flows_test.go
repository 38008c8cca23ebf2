package flows_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/expression"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/schema"
	"github.com/trellisflow/trellis/runtime/store/memory"
	"github.com/trellisflow/trellis/runtime/testfile"
)

type turn struct {
	say, code string
	// want is the action node the turn must reach.
	want string
}

func interview(t *testing.T, turns []turn) (*engine.Engine, *flow.Graph, []*engine.Result) {
	t.Helper()
	g, dl := flow.Load("interview.yaml", all.Offline())
	if g == nil {
		t.Fatal(dl)
	}
	values, err := schema.ReadFile("examples/candidate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	eng := engine.New(memory.New())
	ctx := context.Background()
	if _, err := eng.Create(ctx, g, "i1", values.(map[string]any)); err != nil {
		t.Fatal(err)
	}
	var results []*engine.Result
	for i, tr := range turns {
		in := map[string]any{}
		if tr.say != "" || i > 0 {
			in["last_response"] = tr.say
		}
		if tr.code != "" {
			in["current_code"] = tr.code
		}
		res, err := eng.Run(ctx, g, engine.Request{Thread: "i1", Input: in, RecordPath: true})
		if err != nil {
			t.Fatalf("turn %d: %v", i+1, err)
		}
		if got := res.State["last_node"]; got != tr.want {
			t.Fatalf("turn %d (%q): reached %v, want %s; path %v", i+1, tr.say, got, tr.want, res.Path)
		}
		results = append(results, res)
	}
	return eng, g, results
}

func TestInterviewOffline(t *testing.T) {
	_, _, res := interview(t, []turn{
		{"", "", "greeting"},
		{"I build data pipelines in Go and PostgreSQL at Northwind.", "", "question"},
		{"Backpressure: Kafka consumers fell behind at peak, so I added bounded queues and scaled on lag, which kept ingest delay under 3 seconds.", "", "question"},
		{"ok", "", "followup"}, // a short answer to a question gets a follow-up
		{"Can we do a technical exercise instead?", "", "sandbox_guidance"}, // the active request wins
		{"Here it is.", "def top_k(words, k):\n    # count, then sort\n    return sorted(words)[:k]\n", "code_review"},
		{"It is O(n log n); I would test ties first.", "", "question"}, // the code was consumed
		{"Could you rephrase that?", "", "followup"},
		{"We measured a ten times drop in search latency after the change.", "", "question"},
		{"Let us wrap up here, please.", "", "closing"}, // stop: evaluation, then closing in one run
	})
	final := res[len(res)-1]
	st := final.State
	if st["phase"] != "done" || st["evaluation"] == nil {
		t.Fatalf("interview did not close with an evaluation: phase %v", st["phase"])
	}
	if got := fmt.Sprint(final.Path); got != "[[ingest_input] [read_answer] [detect_intent assess_answer] [decide_next_action] [evaluation] [closing] [finalize_turn]]" {
		t.Fatalf("last turn path %s", got)
	}
	if st["interview_id"] != "demo-001" || st["user_id"] != "ada" {
		t.Fatalf("identifiers changed: %v %v", st["interview_id"], st["user_id"])
	}
	if n := len(st["conversation_history"].([]any)); n != 19 {
		t.Fatalf("conversation has %d messages, want 19 (9 answers, 10 replies)", n)
	}
	// the three de-duplication layers hold over everything asked
	var asked []map[string]any
	for _, q := range st["questions_asked"].([]any) {
		if q := q.(map[string]any); q["source"] == "resume" {
			asked = append(asked, q)
		}
	}
	if len(asked) != 4 {
		t.Fatalf("%d resume questions", len(asked))
	}
	for i, a := range asked {
		for _, b := range asked[:i] {
			switch {
			case expression.NormalizeText(a["text"].(string)) == expression.NormalizeText(b["text"].(string)):
				t.Errorf("question repeated: %v", a["text"])
			case a["resume_anchor"] == b["resume_anchor"] && a["aspect"] == b["aspect"]:
				t.Errorf("anchor %v aspect %v asked twice", a["resume_anchor"], a["aspect"])
			case expression.WordOverlap(a["text"].(string), b["text"].(string)) > 0.8:
				t.Errorf("near-duplicate questions:\n%v\n%v", a["text"], b["text"])
			}
		}
	}
	if !strings.Contains(st["next_message"].(string), "Overall") {
		t.Fatalf("closing message lacks the evaluation: %v", st["next_message"])
	}
}

// TestInterviewCoverage: after max_questions resume questions the
// interview evaluates and closes by itself.
func TestInterviewCoverage(t *testing.T) {
	long := "We sharded PostgreSQL by tenant, I kept hot data in Redis and measured every change against a replayed day of traffic: p99 fell from 800 ms to 120 ms."
	_, _, res := interview(t, []turn{{"", "", "greeting"}, {long, "", "question"}, {long, "", "question"},
		{long, "", "question"}, {long, "", "question"}, {long, "", "closing"}})
	st := res[len(res)-1].State
	if len(st["questions_asked"].([]any)) != 4 || st["phase"] != "done" {
		t.Fatalf("questions %d phase %v", len(st["questions_asked"].([]any)), st["phase"])
	}
	if ev := st["evaluation"].(map[string]any); number(ev["communication"]) < 6 || len(ev["strengths"].([]any)) == 0 {
		t.Fatalf("detailed answers not reflected: %v", ev)
	}
}

// TestInterviewBlocksRepeats fills the history with questions the next
// candidates would repeat, by text, by anchor and aspect, and by wording,
// and the questions of the candidate's earlier interviews by text and by
// wording, and checks that each is skipped.
func TestInterviewBlocksRepeats(t *testing.T) {
	g, dl := flow.Load("interview.yaml", all.Offline())
	if g == nil {
		t.Fatal(dl)
	}
	n, _ := g.Node("plan_question")
	anchors := []any{
		map[string]any{"id": "project_1", "type": "project", "label": "the indexer"},
		map[string]any{"id": "project_2", "type": "project", "label": "the flag service"},
	}
	first := "What was the hardest technical challenge in the indexer, and how did you work through it?"
	cases := []struct {
		name            string
		asked, previous map[string]any
	}{
		{"same text", map[string]any{"text": "  WHAT was the hardest technical challenge in the indexer and how did you work through it", "resume_anchor": nil, "aspect": nil, "source": "followup"}, nil},
		{"same anchor and aspect", map[string]any{"text": "Tell me about obstacles.", "resume_anchor": "project_1", "aspect": "challenges", "source": "resume"}, nil},
		{"word overlap", map[string]any{"text": "What was the hardest technical challenge in the indexer, and how did you get through it?", "resume_anchor": nil, "aspect": nil, "source": "followup"}, nil},
		{"same text in an earlier interview", nil, map[string]any{"text": "What was the hardest technical challenge in the indexer, and how did you work through it?", "interview_id": "i-0"}},
		{"word overlap with an earlier interview", nil, map[string]any{"text": "what was the hardest technical challenge in the indexer and how did you get through it", "interview_id": "i-0"}},
	}
	for _, c := range cases {
		state := planState(anchors, []any{})
		if c.asked != nil {
			state["questions_asked"] = []any{c.asked}
		}
		if c.previous != nil {
			state["previous_questions"] = []any{c.previous}
		}
		upd, err := n.Impl.Run(context.Background(), kind.View("plan_question", g.Vars(state, nil)))
		if err != nil {
			t.Fatal(err)
		}
		q, _ := upd.Get("next_question")
		if text := q.(map[string]any)["text"]; text == first {
			t.Errorf("%s: the repeat was not blocked", c.name)
		}
	}
	// with nothing asked, the first candidate is the one blocked above; an
	// earlier interview's question on the same anchor and aspect in other
	// words does not block it (anchors are positions in this resume)
	other := map[string]any{"text": "Tell me about obstacles.", "resume_anchor": "project_1", "aspect": "challenges", "interview_id": "i-0"}
	for _, previous := range [][]any{{}, {other}} {
		upd, _ := n.Impl.Run(context.Background(), kind.View("plan_question", g.Vars(planState(anchors, previous), nil)))
		if q, _ := upd.Get("next_question"); q.(map[string]any)["text"] != first {
			t.Fatalf("first question after %v: %v", previous, q)
		}
	}
}

// planState is the state plan_question reads, as a thread's defaults
// have it, with these anchors and earlier interviews' questions.
func planState(anchors, previous []any) map[string]any {
	return map[string]any{"anchors": anchors, "questions_asked": []any{}, "previous_questions": previous, "bridge": "",
		"resume_exploration": map[string]any{}, "left_anchors": []any{}, "active_user_request": nil}
}

// TestFlowTests runs every flow test file (*.test.yaml) offline, each test
// also with its state read back between steps (trellis test --reload).
func TestFlowTests(t *testing.T) {
	files, err := filepath.Glob("*" + testfile.Suffix)
	examples, _ := filepath.Glob("examples/*" + testfile.Suffix)
	files = append(files, examples...)
	if err != nil || len(files) < 4 {
		t.Fatalf("flow test files: %v %v", files, err)
	}
	for _, path := range files {
		f, err := testfile.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		results, err := testfile.RunFileWith(context.Background(), f, all.Offline(), testfile.Options{Reload: true})
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for _, r := range results {
			t.Run(strings.TrimSuffix(path, testfile.Suffix)+"/"+r.Name, func(t *testing.T) {
				for _, m := range r.Failures {
					t.Error(m)
				}
			})
		}
	}
}
