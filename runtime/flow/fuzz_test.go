package flow_test

import (
	"testing"

	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind/kindtest"
)

const seedFlow = `version: 1
name: seed
state:
  schema:
    type: object
    properties:
      n: {type: integer, default: 0}
      log: {type: array, items: {type: string}, default: []}
  reducers: {log: append}
input: [n]
nodes:
  a: {kind: set, set: {n: "state.n + 1", log: "'a'"}}
  b: {kind: set, set: {log: "'b'"}}
  c: {kind: fail, times: 1, retry: {attempts: 2, backoff: 1ms}, on_error: {route: a}}
edges:
  - {from: START, to: a}
  - {from: a, to: [b, c]}
  - {from: [b, c], to: a, bound: 3}
  - from: a
    branch:
      - {when: "state.n > 2", to: END}
      - else: b
`

// FuzzLoad feeds arbitrary bytes to the loader: it must never panic, and a
// flow it accepts must carry no error diagnostics.
func FuzzLoad(f *testing.F) {
	f.Add([]byte(seedFlow))
	f.Add([]byte("version: 1\nname: x\nstate: {schema: {type: object, properties: {a: {}}}}\nnodes: {a: {kind: set}}\nedges: [{from: START, to: a}, {from: a, route: 'state.a', choices: [a, END]}]\n"))
	f.Add([]byte(seedFlow + "output: \"{{.state.n}} {{range .state.log}}{{.}}{{end}} {{.state.nn}} {{if\"\n"))
	f.Add([]byte("{"))
	f.Add([]byte("nodes: &x {a: *x}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		g, dl := flow.LoadSource("fuzz.yaml", data, kindtest.Registry())
		if g != nil && dl.HasErrors() {
			t.Fatalf("accepted a flow with errors: %v", dl)
		}
		if g == nil && !dl.HasErrors() {
			t.Fatalf("rejected a flow without saying why")
		}
		for _, d := range dl {
			if d.Code == "" || d.File == "" || d.Summary == "" {
				t.Fatalf("incomplete diagnostic %+v", d)
			}
		}
	})
}
