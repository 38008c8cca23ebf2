package config

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/runtime/diag"
)

// Merge keys set the keys of the mappings merged in where they stand,
// unless the mapping sets them; of several, the first that sets a key
// gives it; a merged value keeps its anchor's position.
func TestMergeKeys(t *testing.T) {
	src := `x-base: &base {kind: assign, retry: {attempts: 2}}
x-late: &late {kind: noop, timeout: 1s}
nodes:
  a:
    <<: *base
    set: {n: "1"}
  b:
    retry: {attempts: 5}
    <<: [*base, *late]
  c: {<<: {kind: inline}}
`
	var dl diag.List
	f := Parse("m.yaml", []byte(src), &dl)
	if f == nil || len(dl) > 0 {
		t.Fatal(dl)
	}
	got, _ := json.Marshal(f.JSON().(map[string]any)["nodes"])
	want := `{"a":{"kind":"assign","retry":{"attempts":2},"set":{"n":"1"}},"b":{"kind":"assign","retry":{"attempts":5},"timeout":"1s"},"c":{"kind":"inline"}}`
	if string(got) != want {
		t.Errorf("got %s\nwant %s", got, want)
	}
	if k := f.At("/nodes/a/kind"); k.Pos().Line != 1 {
		t.Errorf("a merged value is at %v, want its anchor's line 1", k.Pos())
	}
	if keys := f.Root().Get("nodes").Get("b").Entries(); len(keys) != 3 || keys[0].Name != "retry" {
		t.Errorf("b's keys: %v", keys)
	}
	for _, bad := range []string{"a:\n  <<: 3\n", "a:\n  <<: [*x]\n"} {
		var dl diag.List
		if f := Parse("bad.yaml", []byte(bad), &dl); f != nil || len(dl) != 1 || !strings.Contains(dl[0].Summary, "merge key") && !strings.Contains(dl[0].Summary, "names no anchor") {
			t.Errorf("%q: %v", bad, dl)
		}
	}
	// a quoted << is a key like any other
	var dl2 diag.List
	f = Parse("q.yaml", []byte(`a: {"<<": 1}`), &dl2)
	if f == nil || f.JSON().(map[string]any)["a"].(map[string]any)["<<"] != 1 {
		t.Errorf("quoted: %v %v", f, dl2)
	}
}
