package flow_test

import (
	"strings"
	"testing"
	"testing/fstest"

	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind/kindtest"
)

// A flow read from an fs.FS reads the files it names from there too: a
// state schema in another folder, and the files that schema refers to.
func TestLoadFS(t *testing.T) {
	fsys := fstest.MapFS{
		"app/flows/count.yaml": {Data: []byte(`version: 1
name: count
state:
  schema: ../schemas/count.json
input: [n]
nodes:
  inc: {kind: set, set: {n: "state.n + 1", note: "state.note"}}
edges:
  - {from: START, to: inc}
  - {from: inc, to: END}
`)},
		"app/schemas/count.json":     {Data: []byte(`{"type": "object", "properties": {"n": {"$ref": "parts/num.json"}, "note": {"$ref": "parts/num.json#/$defs/text"}}}`)},
		"app/schemas/parts/num.json": {Data: []byte(`{"type": "integer", "default": 0, "$defs": {"text": {"type": "string", "default": "x"}}}`)},
	}
	g, dl := flow.LoadFS(fsys, "app/flows/count.yaml", kindtest.Registry())
	if g == nil {
		t.Fatalf("does not load from the file system:\n%v", dl)
	}
	n, _ := g.Field("n")
	note, _ := g.Field("note")
	if !n.Shape.Is("integer") || !note.Shape.Is("string") || n.Default != 0 {
		t.Fatalf("shapes from referenced files: n %v, note %v", n.Shape.Describe(), note.Shape.Describe())
	}
	// a misspelt field is reported at its place in the file system's file
	fsys["app/flows/count.yaml"].Data = []byte(strings.Replace(string(fsys["app/flows/count.yaml"].Data), "state.n + 1", "state.nn + 1", 1))
	_, dl = flow.LoadFS(fsys, "app/flows/count.yaml", kindtest.Registry())
	if len(dl) != 1 || dl[0].File != "app/flows/count.yaml" || dl[0].Line != 7 || dl[0].Suggestion != "n" {
		t.Fatalf("want one error at app/flows/count.yaml:7, got %v", dl)
	}
	// nothing outside the file system is read
	_, dl = flow.LoadFS(fstest.MapFS{"f.yaml": {Data: []byte("version: 1\nname: f\nstate: {schema: ../../etc/passwd}\nnodes: {a: {kind: set}}\nedges: [{from: START, to: a}, {from: a, to: END}]\n")}},
		"f.yaml", kindtest.Registry())
	if !dl.HasErrors() || !strings.Contains(dl.Err().Error(), "cannot read state schema") {
		t.Fatalf("want an unreadable schema, got %v", dl)
	}
}
