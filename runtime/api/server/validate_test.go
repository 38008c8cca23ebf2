package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/runtime/api"
)

// The validate route reads the files a posted flow names as `trellis
// validate` reads them for the flow as the file `name` in the flow
// directory: relative to it, up to the server's root (by default the
// directory holding the flow directory and every file its flows read),
// never beyond it, even through a symbolic link.
func TestValidateResolvesFilesAsTheCommandDoes(t *testing.T) {
	h := newHarness(t, "memory", nil)
	for _, name := range []string{"interview.yaml", "resume_review.yaml", "examples/approval.yaml"} {
		src := readFile(t, flowsDir+"/"+name)
		v, err := h.acme.Validate(ctx, name, []byte(src))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if !v.Valid {
			t.Errorf("%s: %+v", name, v.Diagnostics)
		}
	}

	// a project with a file beside the root and a link to it inside
	dir := t.TempDir()
	root := filepath.Join(dir, "project")
	for _, d := range []string{"flows", "schemas"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	schema := `{"type": "object", "properties": {"n": {"type": "integer", "default": 0}}}`
	for path, text := range map[string]string{
		"project/schemas/state.json": schema,
		"outside.json":               schema,
		"project/flows/one.yaml":     strings.ReplaceAll(countFlow, "SCHEMA", "../schemas/state.json"),
	} {
		if err := os.WriteFile(filepath.Join(dir, path), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(dir, "outside.json"), filepath.Join(root, "schemas", "link.json")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		root, schema string
		ok           bool
	}{
		{"", "../schemas/state.json", true},   // the default root: the project
		{root, "../schemas/state.json", true}, // given
		{"", "../../outside.json", false},
		{"", "../schemas/link.json", false},
		{"", "/" + filepath.ToSlash(filepath.Join(dir, "outside.json")), false},
		{filepath.Join(root, "flows"), "../schemas/state.json", false},
	} {
		h := newHarness(t, "memory", nil, func(cfg *Config) { cfg.FlowsDir, cfg.Root = filepath.Join(root, "flows"), c.root })
		for _, name := range []string{"posted.yaml", "../../posted.yaml", "sub/../posted.yaml"} {
			v, err := h.acme.Validate(ctx, name, []byte(strings.ReplaceAll(countFlow, "SCHEMA", c.schema)))
			switch {
			case c.ok && (err != nil || !v.Valid):
				t.Errorf("root %q, schema %s, name %s: %v %+v", c.root, c.schema, name, err, v)
			case !c.ok && !api.IsCode(err, api.CodeInvalidFlow):
				t.Errorf("root %q, schema %s, name %s: read beyond the root: %v %+v", c.root, c.schema, name, err, v)
			}
		}
	}
}

// countFlow is a flow whose state schema is the file SCHEMA.
const countFlow = `version: 1
name: count
state:
  schema: SCHEMA
nodes:
  add: {kind: assign, set: {n: "state.n + 1"}}
edges:
  - {from: START, to: add}
  - {from: add, to: END}
`
