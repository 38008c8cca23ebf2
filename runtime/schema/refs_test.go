package schema_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/runtime/schema"
)

// A ref inside a referenced file means that file (or a file next to it),
// not the schema that referenced it.
func TestRefsInsideReferencedFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("parts/resume.json", `{"$defs": {
		"Resume": {"type": "object", "properties": {"jobs": {"type": "array", "items": {"$ref": "#/$defs/Job"}}, "contact": {"$ref": "more/contact.json"}}},
		"Job": {"type": "object", "title": "A job", "properties": {"title": {"type": "string"}, "default": {"type": "boolean", "default": false}}}}}`)
	write("parts/more/contact.json", `{"type": "object", "properties": {"email": {"$ref": "#/$defs/Email"}}, "$defs": {"Email": {"type": "string"}}}`)
	root := map[string]any{"type": "object", "properties": map[string]any{"resume": map[string]any{"$ref": "parts/resume.json#/$defs/Resume"}},
		"$defs": map[string]any{"Job": map[string]any{"type": "integer"}}} // a Job of the root that must not be used
	resolve := schema.Resolver(root, "file://"+filepath.ToSlash(filepath.Join(dir, "root.json")), nil)
	s := schema.ShapeOf(root, resolve)
	job := s.Props["resume"].Props["jobs"].Items
	if !job.Is("object") || job.Props["title"] == nil {
		t.Fatalf("job shape %+v", job)
	}
	if email := s.Props["resume"].Props["contact"].Props["email"]; !email.Is("string") {
		t.Fatalf("email shape %+v", email)
	}
	b, _ := json.Marshal(schema.Bundle(root, resolve))
	for _, want := range []string{`"title":{"type":"string"}`, `"default":{"type":"boolean"}`, `"email":{"type":"string"}`} {
		if !strings.Contains(string(b), want) {
			t.Fatalf("bundled schema lacks %s: %s", want, b)
		}
	}
	if strings.Contains(string(b), "A job") || strings.Contains(string(b), "$defs") {
		t.Fatalf("bundled schema keeps annotations or definitions: %s", b)
	}
}
