package server

import (
	"maps"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/runtime/api"
)

// steps is the path a thread's history records from checkpoint after on
// (oldest first): each step checkpoint's nodes.
func steps(hist []api.Checkpoint, after uint64) [][]string {
	var out [][]string
	for i := len(hist) - 1; i >= 0; i-- {
		cp := hist[i]
		if cp.Seq <= after || cp.Source != "step" {
			continue
		}
		var names []string
		for _, w := range cp.Writers {
			names = append(names, w.Node)
		}
		slices.Sort(names)
		out = append(out, names)
	}
	return out
}

func fullHistory(t *testing.T, c *api.Client, thread string) []api.Checkpoint {
	t.Helper()
	h, err := c.History(ctx, thread, url.Values{"limit": {"1000"}})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// On each store, through the API: a fork at a checkpoint with nodes to
// run (a fan-out's, a join's, a map's) is unfinished, and resumed it
// takes the original's path from there to the same state; a replay of it
// is told the model's recorded replies (the model is not called); an
// update at an older checkpoint branches from it and resumes over the
// edit; and the thread makes a flow test that passes as made.
func TestForkReplayAndBranchThroughTheAPI(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			h := newHarness(t, b.addr, nil)
			if _, err := h.acme.CreateThread(ctx, api.CreateThread{ID: "rv", Flow: "resume_review", Values: values(t, flowsDir+"/examples/resume.yaml")}); err != nil {
				t.Fatal(err)
			}
			orig, err := h.acme.RunWait(ctx, "rv", api.StartRun{})
			if err != nil || orig.Status != api.RunSucceeded {
				t.Fatalf("the review: %v %+v", err, orig)
			}
			hist := fullHistory(t, h.acme, "rv")
			var pending []api.Checkpoint
			for _, cp := range hist {
				if len(cp.Next) > 0 {
					pending = append(pending, cp)
				}
			}
			if len(pending) < 4 {
				t.Fatalf("%d checkpoints with nodes to run", len(pending))
			}
			var fanOut, join api.Checkpoint
			for _, cp := range pending {
				switch {
				case len(cp.Next) == 3:
					fanOut = cp
				case slices.Equal(cp.Next, []string{"aggregator"}):
					join = cp
				}
			}
			if fanOut.Seq == 0 || join.Seq == 0 {
				t.Fatalf("no fan-out or join checkpoint in %+v", pending)
			}
			calls := len(h.model.Calls())
			for _, cp := range []api.Checkpoint{fanOut, join, pending[0]} {
				id := "rv-at-" + strconv.FormatUint(cp.Seq, 10)
				th, err := h.acme.Fork(ctx, "rv", api.Fork{At: cp.Seq, ID: id})
				if err != nil || th.Status != api.ThreadUnfinished {
					t.Fatalf("the fork at %d: %v %+v", cp.Seq, err, th)
				}
				fh := fullHistory(t, h.acme, id)
				if len(fh) != 1 || !slices.Equal(fh[0].Next, cp.Next) || fh[0].Source != "fork" || fh[0].Run != "rv@"+strconv.FormatUint(cp.Seq, 10) {
					t.Fatalf("the fork's history: %+v", fh)
				}
				run, err := h.acme.RunWait(ctx, id, api.StartRun{Resume: true})
				if err != nil || run.Status != api.RunSucceeded {
					t.Fatalf("resuming the fork at %d: %v %+v", cp.Seq, err, run)
				}
				if got, want := steps(fullHistory(t, h.acme, id), 1), steps(hist, cp.Seq); !reflect.DeepEqual(got, want) {
					t.Errorf("the fork at %d went\n%v\nthe original from there\n%v", cp.Seq, got, want)
				}
				if !reflect.DeepEqual(run.State, orig.State) {
					t.Errorf("the fork at %d ended otherwise:\n%v\n%v", cp.Seq, run.State, orig.State)
				}
			}
			if len(h.model.Calls()) == calls {
				t.Fatal("the forks did not call the model: a replay would prove nothing")
			}

			// a replay is told the recorded replies: no model call
			calls = len(h.model.Calls())
			rp, err := h.acme.Replay(ctx, "rv", api.Replay{At: fanOut.Seq, ID: "rv-replay"})
			if err != nil || rp.Run == nil || rp.Thread.ID != "rv-replay" {
				t.Fatalf("the replay: %v %+v", err, rp)
			}
			run, err := h.acme.Join(ctx, "rv-replay", rp.Run.ID)
			if err != nil || run.Status != api.RunSucceeded || !reflect.DeepEqual(run.State, orig.State) {
				t.Fatalf("the replay's run: %v %+v", err, run)
			}
			if n := len(h.model.Calls()); n != calls {
				t.Errorf("the replay called the model %d times", n-calls)
			}
			if _, err := h.acme.Replay(ctx, "rv", api.Replay{At: fanOut.Seq, Replies: "maybe"}); !api.IsCode(err, api.CodeInvalidInput) {
				t.Errorf("a replay with replies maybe: %v", err)
			}
			if _, err := h.globex.Replay(ctx, "rv", api.Replay{At: fanOut.Seq}); !api.IsCode(err, api.CodeNotFound) {
				t.Errorf("another tenant replayed the thread: %v", err)
			}

			// the join's checkpoint, edited: the recruiter's score is 1
			st, err := h.acme.State(ctx, "rv", join.Seq)
			if err != nil {
				t.Fatal(err)
			}
			fb := maps.Clone(st.Values["recruiter_feedback"].(map[string]any))
			fb["score"] = 1.0
			head := hist[0].Seq
			br, err := h.acme.Update(ctx, "rv", api.Update{At: join.Seq, As: "recruiter", Values: map[string]any{"recruiter_feedback": fb}})
			if err != nil || br.Checkpoint != head+1 {
				t.Fatalf("the branch: %v %+v", err, br)
			}
			top := fullHistory(t, h.acme, "rv")[0]
			if top.Base != join.Seq || top.Parent != head || !slices.Equal(top.Next, []string{"aggregator"}) || top.Source != "update" {
				t.Fatalf("the branch's checkpoint: %+v", top)
			}
			if th, _ := h.acme.Thread(ctx, "rv"); th.Status != api.ThreadUnfinished {
				t.Fatalf("the branched thread: %+v", th)
			}
			run, err = h.acme.RunWait(ctx, "rv", api.StartRun{Resume: true})
			if err != nil || run.Status != api.RunSucceeded {
				t.Fatalf("resuming the branch: %v %+v", err, run)
			}
			// the aggregator ran first, over the edit: the mean of 1, 0, 0
			// (to two places)
			var agg *api.Checkpoint
			bh := fullHistory(t, h.acme, "rv")
			for i := range bh {
				if bh[i].Seq == head+2 {
					agg = &bh[i]
				}
			}
			if agg == nil || len(agg.Writers) != 1 || agg.Writers[0].Node != "aggregator" {
				t.Fatalf("the step after the branch: %+v", agg)
			}
			for _, w := range agg.Writes {
				if w.Field == "integrated_score" && w.Value != 0.33 {
					t.Errorf("the aggregator scored %v over the edit", w.Value)
				}
			}
			if _, err := h.acme.Update(ctx, "rv", api.Update{At: 999999, As: "recruiter", Values: map[string]any{"recruiter_feedback": fb}}); !api.IsCode(err, api.CodeNotFound) {
				t.Errorf("an update at a checkpoint the thread does not have: %v", err)
			}

			// the thread, forks and branch followed back, as a flow test
			ft, err := h.acme.FlowTest(ctx, "rv", api.MakeFlowTest{})
			if err != nil {
				t.Fatal(err)
			}
			if !ft.Passed || ft.Saved || ft.Path != "flows/resume_review.rv.test.yaml" || !strings.Contains(ft.Text, "flow: resume_review.yaml") ||
				!strings.Contains(ft.Text, "update:") || ft.Cassette == "" {
				t.Errorf("the flow test: %+v", ft)
			}
			if _, err := h.acme.FlowTest(ctx, "rv", api.MakeFlowTest{Save: true}); !api.IsCode(err, api.CodeForbidden) {
				t.Errorf("an ordinary key saved a flow test beside the flows: %v", err)
			}
		})
	}
}

// An update as a node on a finished thread stands for a step that ran the
// node: the thread's state names what the node's edges trigger over the
// edited state as next, a new run is refused until that run is resumed,
// and resuming runs it. An update as a node whose edges lead to END
// leaves the thread finished.
func TestUpdateAsANodeOfAFinishedThread(t *testing.T) {
	src := `version: 1
name: checks
state:
  schema:
    type: object
    properties:
      i: {type: integer, default: 0}
      done: {type: string, default: ""}
nodes:
  check: {kind: assign, set: {i: "state.i + 1"}}
  finish: {kind: assign, set: {done: "'at ' + string(state.i)"}}
edges:
  - {from: START, to: check}
  - from: check
    branch:
      - {when: "state.i >= 5", to: finish}
      - else: END
  - {from: finish, to: END}
`
	s := serve(t, openRuntime(t, "memory"), flowsWith(t, map[string]string{"checks": src}), "")
	if _, err := s.acme.CreateThread(ctx, api.CreateThread{ID: "c", Flow: "checks"}); err != nil {
		t.Fatal(err)
	}
	if run, err := s.acme.RunWait(ctx, "c", api.StartRun{}); err != nil || run.State["i"] != 1.0 && run.State["i"] != 1 {
		t.Fatalf("the first run: %+v %v", run, err)
	}
	st, err := s.acme.Update(ctx, "c", api.Update{As: "check", Values: map[string]any{"i": 7}})
	if err != nil || !slices.Equal(st.Next, []string{"finish"}) {
		t.Fatalf("update as check: %+v %v", st, err)
	}
	if st, err := s.acme.State(ctx, "c", 0); err != nil || !slices.Equal(st.Next, []string{"finish"}) {
		t.Fatalf("the thread after the update: %+v %v", st, err)
	}
	if _, err := s.acme.RunWait(ctx, "c", api.StartRun{}); err == nil {
		t.Fatal("a new run over the update's unfinished run was accepted")
	}
	run, err := s.acme.RunWait(ctx, "c", api.StartRun{Resume: true})
	if err != nil || run.State["done"] != "at 7" {
		t.Fatalf("resumed after the update: %+v %v", run, err)
	}
	st, err = s.acme.Update(ctx, "c", api.Update{As: "finish", Values: map[string]any{"done": "edited"}})
	if err != nil || len(st.Next) != 0 {
		t.Fatalf("update as finish, whose edge leads to END: %+v %v", st, err)
	}
	if run, err := s.acme.RunWait(ctx, "c", api.StartRun{}); err != nil || run.State["i"] != 8.0 && run.State["i"] != 8 {
		t.Fatalf("a run after the update that left the thread finished: %+v %v", run, err)
	}
}
