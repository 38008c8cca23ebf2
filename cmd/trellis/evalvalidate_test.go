package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// trellis validate checks eval datasets beside the flows, as trellis eval
// reads them but without running a case: in a directory, and named
// alone (not as a flow); every problem at its line and column, a
// misspelt field a warning with the name meant, which trellis eval shows
// too.
func TestValidateChecksEvalDatasets(t *testing.T) {
	root := repoCopy(t)
	flows := filepath.Join(root, "flows")
	_, errs, code := trellis(t, "validate", flows)
	if code != 0 || !strings.Contains(errs, "flows and 4 eval datasets checked: 0 errors;") || strings.Contains(errs, ".eval.yaml,") {
		t.Fatalf("exit %d: %s", code, errs)
	}
	dataset := filepath.Join(flows, "interview.eval.yaml")
	out, errs, code := trellis(t, "validate", dataset)
	if code != 0 || out != "" || !strings.Contains(errs, "0 flows and 1 eval dataset checked: 0 errors") {
		t.Fatalf("a dataset named alone: exit %d\n%s%s", code, out, errs)
	}
	// a field the state's schema leaves open, misspelt: a warning
	editFile(t, dataset, "value: state.evaluation.technical, min: 7", "value: state.evaluation.tecnical, min: 7")
	line := lineOf(t, dataset, "state.evaluation.tecnical")
	out, errs, code = trellis(t, "validate", dataset)
	if code != 0 || !strings.Contains(out, dataset+":"+line+":51: warning[E003]: state.evaluation declares no field \"tecnical\"") || !strings.Contains(out, `did you mean "technical"?`) ||
		!strings.Contains(errs, "1 warning") {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	if _, _, code = trellis(t, "validate", "--strict", dataset); code != 1 {
		t.Errorf("--strict on a warning: exit %d", code)
	}
	_, errs, _ = trellis(t, "eval", "--run", "strong", dataset)
	if !strings.Contains(errs, dataset+":"+line+":51: warning[E003]") {
		t.Errorf("trellis eval does not warn:\n%s", errs)
	}
	// a key the format does not have, and a flow that does not load:
	// errors, each where it is written
	review := filepath.Join(flows, "resume_review.eval.yaml")
	editFile(t, review, "flow: resume_review.yaml", "flow: nothere.yaml")
	editFile(t, dataset, "flow: interview.yaml", "flow: interview.yaml\nbogus: 1")
	out, errs, code = trellis(t, "validate", "--format", "github", flows)
	if code != 1 || !strings.Contains(out, "file="+review+",line=9,col=7") || !strings.Contains(out, "flow: nothere.yaml does not load") ||
		!strings.Contains(out, "file="+dataset+",line=10,col=1") || !strings.Contains(out, `unknown key "bogus"`) {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
}
