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
	if !slices.Equal(files, []string{"examples/agent.eval.yaml", "examples/greet.eval.yaml", "interview.eval.yaml", "resume_review.eval.yaml"}) {
		t.Fatalf("datasets %v", files)
	}
	known := map[string][]string{
		// the judgement reads the answers and the fit for the role: no
		// known gap is left
		"interview.eval.yaml":      nil,
		"resume_review.eval.yaml":  nil,
		"examples/greet.eval.yaml": nil,
		"examples/agent.eval.yaml": nil,
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
