package flows_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/runtime/eval"
	"github.com/trellisflow/trellis/runtime/flow"
)

// The datasets shipped beside the flows run offline and pass: every
// expectation holds, or is a known failure that still fails (one that
// passes fails the eval until its mark is removed). The known failures
// are listed here too, so that one appearing or going away is seen.
func TestShippedDatasets(t *testing.T) {
	files, err := eval.Find(".")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(files, []string{"examples/greet.eval.yaml", "interview.eval.yaml", "resume_review.eval.yaml"}) {
		t.Fatalf("datasets %v", files)
	}
	known := map[string][]string{
		"interview.eval.yaml": {
			"a strong candidate: overall", "a strong candidate: technical",
			"a weak candidate: overall", "a weak candidate: technical",
			"a candidate who asks to change topic and for a hint: turn 3: helps with a rephrasing or an example",
			"a candidate who asks to change topic and for a hint: does not go back to the topic the candidate left",
			"a candidate who tries a prompt injection: overall", "a candidate who tries a prompt injection: technical",
		},
		"resume_review.eval.yaml": {
			"a resume for another profession: fails the LLM Engineer bar",
			"a resume for another profession: output contains \"below the 7.5 threshold\"",
			"a resume for another profession: final score", "a resume for another profession: recruiter",
			"ranking by final score: a strong match > a junior > a resume for another profession",
		},
		"examples/greet.eval.yaml": nil,
	}
	for _, file := range files {
		t.Run(file, func(t *testing.T) {
			ds, err := eval.Load(file)
			if err != nil {
				t.Fatal(err)
			}
			g, dl := flow.Load(filepath.Join(filepath.Dir(file), ds.Flow), all.Offline())
			if g == nil {
				t.Fatal(dl)
			}
			res, err := eval.Run(context.Background(), ds, []eval.Target{{Label: ds.Flow, Graph: g}}, eval.Options{})
			if err != nil {
				t.Fatal(err)
			}
			r := res.Report
			var got []string
			for _, c := range r.Cases {
				if c.Status != eval.Passed && c.Status != eval.XFail {
					t.Errorf("%s: %s: %s", c.Name, c.Status, c.Results[0].Reason)
				}
				for _, f := range c.Results[0].Failures {
					if f.XFail == "" {
						t.Errorf("%s: %s fails: %s", c.Name, f.Check, f.Reason)
						continue
					}
					got = append(got, c.Name+": "+f.Check)
				}
				if len(c.Results[0].Scores) == 0 && !strings.HasPrefix(file, "examples/") {
					t.Errorf("%s: no scores", c.Name)
				}
			}
			for _, rk := range r.Rankings {
				switch rk.Status {
				case eval.XFail:
					got = append(got, "ranking by "+rk.By+": "+strings.Join(rk.Order, " > "))
				case eval.Passed:
				default:
					t.Errorf("ranking by %s: %s: %s", rk.By, rk.Status, rk.Results[0].Reason)
				}
			}
			if !r.OK() {
				t.Errorf("the eval fails: %+v", r.Summary)
			}
			if want := known[file]; !slices.Equal(got, want) {
				t.Errorf("known failures:\n got  %q\n want %q", got, want)
			}
		})
	}
}
