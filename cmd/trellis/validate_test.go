package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/cmd/trellis/internal/cli"
	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/store/memory"
)

// The validator's cases beyond one fixture per code (each a flow and the
// golden output of validating it), and the patterns the README and the
// node reference teach, which must stay clean.
const (
	cases    = "../../runtime/diag/testdata/cases"
	patterns = "../../runtime/diag/testdata/patterns"
)

// inDir names a folder's files relative to it in validate's output.
func inDir(dir, out string) string {
	abs, _ := filepath.Abs(dir)
	return strings.ReplaceAll(strings.ReplaceAll(out, abs+"/", ""), dir+"/", "")
}

// TestValidateCases checks every case against its golden output
// (-update rewrites them).
func TestValidateCases(t *testing.T) {
	files, _ := filepath.Glob(cases + "/*.yaml")
	if len(files) == 0 {
		t.Fatal("no cases")
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		t.Run(name, func(t *testing.T) {
			out, stderr, exit := trellis(t, "validate", f)
			out = inDir(cases, out)
			if want := map[bool]int{true: 1, false: 0}[strings.Contains(out, ": error[")]; exit != want {
				t.Errorf("exit %d, want %d: %s", exit, want, stderr)
			}
			golden := strings.TrimSuffix(f, ".yaml") + ".diags"
			if *update {
				if err := os.WriteFile(golden, []byte(out), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if out != string(want) {
				t.Errorf("output differs from %s:\n--- got\n%s--- want\n%s", golden, out, want)
			}
		})
	}
}

// TestPatternsAreClean validates every pattern the docs teach with no
// diagnostic at all, and runs each once, offline, to its end (or to the
// question it asks): a clean flow runs.
func TestPatternsAreClean(t *testing.T) {
	files, _ := filepath.Glob(patterns + "/*.yaml")
	if len(files) == 0 {
		t.Fatal("no patterns")
	}
	for _, f := range files {
		if strings.HasSuffix(f, ".test.yaml") {
			continue
		}
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		t.Run(name, func(t *testing.T) {
			out, stderr, exit := trellis(t, "validate", f)
			if exit != 0 || out != "" {
				t.Fatalf("exit %d:\n%s%s", exit, out, stderr)
			}
			g, dl := flow.Load(f, all.Offline())
			if g == nil {
				t.Fatal(dl)
			}
			eng := engine.New(memory.New())
			defer eng.Store.Close()
			if _, err := eng.Run(context.Background(), g, engine.Request{Thread: "t"}); err != nil {
				t.Fatalf("a clean flow fails: %v", err)
			}
		})
	}
}

// CI mode: --strict reports every warning as an error and fails on any;
// --max-warnings N fails on more than N warnings and keeps them
// warnings; the SARIF log names the tool's version.
func TestValidateCIMode(t *testing.T) {
	warns := examples + "/E006.bad.yaml" // one warning, no error
	for _, c := range []struct {
		args    []string
		exit    int
		out     string
		summary string
	}{
		{[]string{"validate", warns}, 0, "warning[E006]", "1 flow checked: 0 errors, 1 warning\n"},
		{[]string{"validate", "--strict", warns}, 1, "error[E006]", "1 flow checked: 1 error (1 warning made errors by --strict)\n"},
		{[]string{"validate", "--max-warnings", "0", warns}, 1, "warning[E006]", "1 flow checked: 0 errors, 1 warning, more than the 0 --max-warnings allows\n"},
		{[]string{"validate", "--max-warnings", "1", warns}, 0, "warning[E006]", "1 flow checked: 0 errors, 1 warning\n"},
		{[]string{"validate", "--max-warnings", "-2", warns}, 2, "", "trellis validate: --max-warnings -2: give a count, or -1 for no limit\n"},
	} {
		out, stderr, exit := trellis(t, c.args...)
		if exit != c.exit || !strings.Contains(out, c.out) || stderr != c.summary {
			t.Errorf("%v: exit %d\n%s%s", c.args, exit, out, stderr)
		}
	}
	out, stderr, exit := trellis(t, "validate", "--format", "json", "--max-warnings", "0", warns)
	if exit != 1 || !strings.Contains(out, `"severity": "warning"`) || !strings.Contains(stderr, "1 warning, more than the 0 --max-warnings allows") {
		t.Errorf("json with --max-warnings 0: exit %d\n%s%s", exit, out, stderr)
	}
	out, _, exit = trellis(t, "validate", "--format", "sarif", "--strict", warns)
	if exit != 1 || !strings.Contains(out, `"level": "error"`) || !strings.Contains(out, `"version": "`+cli.Version()+`"`) || cli.Version() == "" {
		t.Errorf("sarif: exit %d\n%.600s", exit, out)
	}
}

// Validating files together shares the compilation of a flow one runs as
// a subflow and another is (or runs too): what is reported is what
// validating each alone reports.
func TestValidateTogetherAsAlone(t *testing.T) {
	var files []string
	for _, dir := range []string{"../../flows", examples, cases, patterns} {
		fs, _ := filepath.Glob(dir + "/*.yaml")
		for _, f := range fs {
			if !strings.HasSuffix(f, ".test.yaml") && !strings.Contains(f, "/candidate") && !strings.HasSuffix(f, ".model.yaml") && !strings.HasSuffix(f, "/resume.yaml") {
				files = append(files, f)
			}
		}
	}
	together, _, _ := trellis(t, append([]string{"validate"}, files...)...)
	var alone strings.Builder
	for _, f := range files {
		out, _, _ := trellis(t, "validate", f)
		alone.WriteString(out)
	}
	lines := func(s string) []string {
		var out []string
		for _, l := range strings.Split(s, "\n") {
			if strings.Contains(l, "error[") || strings.Contains(l, "warning[") {
				out = append(out, l)
			}
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	a, b := lines(together), lines(alone.String())
	if len(a) == 0 || !slices.Equal(a, b) {
		t.Fatalf("together %d diagnostics, alone %d:\n%s\n---\n%s", len(a), len(b), strings.Join(a, "\n"), strings.Join(b, "\n"))
	}
}

// validate lists the inputs a run of a flow must give, in text and in
// JSON, by the rules the runtime refuses runs by: an input read with
// nothing to fall back on (every run), one the state schema requires with
// no default (a new thread's first run); one read behind ?? is not
// listed. A run given none is refused for exactly those listed.
func TestValidateListsNeededInputs(t *testing.T) {
	f := filepath.Join(t.TempDir(), "needs.yaml")
	if err := os.WriteFile(f, []byte(`version: 1
name: needs
state:
  schema:
    type: object
    required: [topic]
    properties:
      who: {type: string, default: ""}
      topic: {type: string}
      mood: {type: string, default: ""}
      said: {type: string, default: ""}
input: [who, topic, mood]
nodes:
  say:
    kind: assign
    set:
      said: "input.who + ' on ' + (input.mood ?? 'anything')"
edges:
  - {from: START, to: say}
  - {from: say, to: END}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, stderr, exit := trellis(t, "validate", f)
	if exit != 0 || out != "" {
		t.Fatalf("exit %d\n%s%s", exit, out, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	if len(lines) != 3 ||
		lines[0] != f+": flow needs needs input who: every run gives it: the flow reads input.who at "+f+":17:20 with nothing to fall back on" ||
		lines[1] != f+": flow needs needs input topic: a new thread's first run gives it, unless the thread is created with a value for it: the state schema requires it and has no default" ||
		lines[2] != "1 flow checked: 0 errors" {
		t.Fatalf("text:\n%s", stderr)
	}
	out, _, exit = trellis(t, "validate", "--format", "json", f)
	var v struct {
		Valid bool `json:"valid"`
		Flows []struct {
			File, Name string
			Inputs     []flow.NeededInput `json:"inputs"`
		} `json:"flows"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil || exit != 0 || !v.Valid || len(v.Flows) != 1 || v.Flows[0].Name != "needs" {
		t.Fatalf("json: %d %v\n%s", exit, err, out)
	}
	got := v.Flows[0].Inputs
	if len(got) != 2 || got[0].Name != "who" || !got[0].EveryRun || got[0].FirstRun || got[0].ReadAt == nil || got[0].ReadAt.Line != 17 ||
		got[1].Name != "topic" || got[1].EveryRun || !got[1].FirstRun || got[1].ReadAt != nil {
		t.Fatalf("json inputs: %s", out)
	}
	// the runtime refuses a run given nothing for exactly those
	g, dl := flow.Load(f, all.Offline())
	if g == nil {
		t.Fatal(dl)
	}
	eng := engine.New(memory.New())
	defer eng.Store.Close()
	_, err := eng.Run(context.Background(), g, engine.Request{Thread: "t"})
	var refused []string
	var ie *engine.InputError
	if errors.As(err, &ie) {
		refused = append(refused, ie.Field)
		for _, m := range ie.More {
			refused = append(refused, m.Field)
		}
	}
	slices.Sort(refused)
	if !slices.Equal(refused, []string{"topic", "who"}) {
		t.Fatalf("a run given nothing: refused for %v (%v)", refused, err)
	}
	if _, err := eng.Run(context.Background(), g, engine.Request{Thread: "t2", Input: map[string]any{"who": "ada", "topic": "graphs"}}); err != nil {
		t.Fatalf("a run given what validate lists: %v", err)
	}
}
