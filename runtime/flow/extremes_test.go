package flow_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind/kindtest"
)

// Through max, an update is kept when it is the larger: a number above
// the field's maximum that the checker cannot rule out is said, not
// passed; one below its minimum loses to the value the field has (its
// default at least). min is the mirror; a field with no value yet takes
// the update as it is, so both bounds count.
func TestExtremeReducersKeepWhatWins(t *testing.T) {
	for _, tc := range []struct {
		reducer, def, expr string
		warn               string // "" when clean
	}{
		{"max", "default: 0", "6 + state.f", "is at most 10"},
		{"max", "default: 0", "state.f - 20", ""},
		{"max", "default: 0", "min(state.f + 1, 10)", ""},
		{"max", "default: 0", "state.f", ""},
		{"min", "default: 10", "state.f - 20", "is at least 0"},
		{"min", "default: 10", "6 + state.f", ""},
		{"max", "", "6 + state.f", "is at least 0 and at most 10"},
		{"max", "default: 0", "7", ""},
	} {
		src := `
version: 1
name: extremes
state:
  schema:
    type: object
    properties:
      f: {type: integer, minimum: 0, maximum: 10, DEF}
      g: {type: integer, minimum: 0, maximum: 10, default: 0}
  reducers:
    f: RED
nodes:
  n: {kind: set, set: {f: "EXPR"}}
edges:
  - {from: START, to: n}
  - {from: n, to: END}
`
		src = strings.NewReplacer("RED", tc.reducer, "DEF", tc.def, "EXPR", tc.expr).Replace(src)
		if tc.def == "" {
			src = strings.Replace(src, ", }", "}", 1)
			src = strings.Replace(src, "state.f", "(state.f ?? 0)", 1)
		}
		path := filepath.Join(t.TempDir(), "flow.yaml")
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		g, dl := flow.Load(path, kindtest.Registry())
		if g == nil {
			t.Fatalf("%s %q: does not compile:\n%v", tc.reducer, tc.expr, dl)
		}
		got := ""
		for _, d := range dl {
			got += d.String() + "\n"
		}
		switch {
		case tc.warn == "" && got != "":
			t.Errorf("%s %q (%s): a false warning:\n%s", tc.reducer, tc.expr, tc.def, got)
		case tc.warn != "" && (!strings.Contains(got, "W004") || !strings.Contains(got, tc.warn)):
			t.Errorf("%s %q (%s): want W004 saying %q, got:\n%s", tc.reducer, tc.expr, tc.def, tc.warn, got)
		}
	}
}
