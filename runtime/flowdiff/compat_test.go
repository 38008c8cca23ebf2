package flowdiff_test

import (
	"strings"
	"testing"

	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/flowdiff"
	"github.com/trellisflow/trellis/runtime/kind/kindtest"
)

// compatFlow has a state of properties and required names, and one node
// per name in nodes.
func compatFlow(t *testing.T, props, required string, reducers string, nodes ...string) *flow.Graph {
	t.Helper()
	src := "version: 1\nname: f\nstate:\n  schema:\n    type: object\n    properties: {" + props + "}\n"
	if required != "" {
		src += "    required: [" + required + "]\n"
	}
	if reducers != "" {
		src += "  reducers: {" + reducers + "}\n"
	}
	src += "nodes:\n"
	for _, n := range nodes {
		src += "  " + n + ": {kind: set, set: {}}\n"
	}
	src += "edges:\n  - {from: START, to: " + nodes[0] + "}\n"
	for i := 1; i < len(nodes); i++ {
		src += "  - {from: " + nodes[i-1] + ", to: " + nodes[i] + "}\n"
	}
	src += "  - {from: " + nodes[len(nodes)-1] + ", to: END}\n"
	g, dl, _ := flow.Compile(nil, "f.yaml", []byte(src), kindtest.Registry())
	if g == nil {
		t.Fatalf("%s\n%v", src, dl)
	}
	return g
}

func TestCompat(t *testing.T) {
	base := `n: {type: integer, default: 0}, s: {type: string, default: ""}, log: {type: array, items: {type: string}, default: []}`
	old := compatFlow(t, base, "", "", "a")
	for _, tc := range []struct {
		name     string
		new      *flow.Graph
		breaking []string // the fields of the breaking effects
		reason   string   // in one effect's reason
	}{
		{"same", compatFlow(t, base, "", "", "a"), nil, ""},
		{"field removed", compatFlow(t, `n: {type: integer, default: 0}, log: {type: array, items: {type: string}, default: []}`, "", "", "a"), []string{"s"}, `field "s" is removed`},
		{"field retyped", compatFlow(t, strings.Replace(base, `s: {type: string, default: ""}`, `s: {type: integer, default: 0}`, 1), "", "", "a"), []string{"s"}, `field "s" is retyped from string to integer`},
		{"items retyped", compatFlow(t, strings.Replace(base, `items: {type: string}`, `items: {type: integer}`, 1), "", "", "a"), []string{"log"}, `field "log" is retyped`},
		{"field widened", compatFlow(t, strings.Replace(base, `n: {type: integer, default: 0}`, `n: {type: number, default: 0}`, 1), "", "", "a"), nil, `field "n" is widened`},
		{"new with default", compatFlow(t, base+`, m: {type: integer, default: 1}`, "", "", "a"), nil, `field "m" is new and has a default`},
		{"new optional", compatFlow(t, base+`, m: {type: integer}`, "", "", "a"), nil, `field "m" is new and optional`},
		{"new required", compatFlow(t, base+`, m: {type: integer}`, "m", "", "a"), []string{"m"}, `field "m" is new, required and has no default`},
		{"node added and removed", compatFlow(t, base, "", "", "b", "c"), nil, `node "a" is removed`},
		{"reducer changed", compatFlow(t, base, "", "log: append", "a"), nil, `field "log" merges updates by append instead of replace`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			effects := flowdiff.Compat(old, tc.new)
			var breaking []string
			found := tc.reason == ""
			for _, e := range effects {
				if e.Breaking {
					breaking = append(breaking, e.Name)
				}
				if strings.Contains(e.Reason, tc.reason) {
					found = true
				}
			}
			if strings.Join(breaking, ",") != strings.Join(tc.breaking, ",") || !found {
				t.Fatalf("effects %+v: want breaking %v and a reason with %q", effects, tc.breaking, tc.reason)
			}
			if tc.name == "same" && len(effects) != 0 {
				t.Fatalf("no change has effects %+v", effects)
			}
		})
	}
	// a field made required with no default breaks only threads that may
	// lack it: one that had a default has a value in every thread
	optional := compatFlow(t, `n: {type: integer}`, "", "", "a")
	required := compatFlow(t, `n: {type: integer}`, "n", "", "a")
	if b := flowdiff.Breaking(flowdiff.Compat(optional, required)); len(b) != 1 || !strings.Contains(b[0].Reason, "now required") {
		t.Fatalf("a field made required: %+v", b)
	}
	defaulted := compatFlow(t, `n: {type: integer, default: 0}`, "", "", "a")
	if b := flowdiff.Breaking(flowdiff.Compat(defaulted, required)); len(b) != 0 {
		t.Fatalf("a field with a default made required: %+v", b)
	}
}
