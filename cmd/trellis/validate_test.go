package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
