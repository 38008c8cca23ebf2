package schema_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/trellisflow/trellis/runtime/schema"
)

// A schema found valid is remembered with the files it refers to; a new
// process compiling the same text trusts it (no metaschema check) and
// validates values the same way; a changed file it refers to, or an
// invalid schema, is checked in full.
func TestRememberedSchemasCompileTheSame(t *testing.T) {
	if !schema.CanTrust() {
		t.Fatal("the schema library no longer lets a known schema skip its metaschema check")
	}
	dir := t.TempDir()
	schema.RememberValid(filepath.Join(dir, "valid"))
	defer schema.RememberValid("")
	files := map[string]string{"/d/item.json": `{"type": "integer", "minimum": 0}`}
	read := func(p string) ([]byte, error) {
		if s, ok := files[p]; ok {
			return []byte(s), nil
		}
		return nil, os.ErrNotExist
	}
	raw := map[string]any{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "array", "items": map[string]any{"$ref": "item.json"}, "maxItems": 2}
	compile := func() (trusted bool) {
		t.Helper()
		schema.ForgetCompiled() // a new process
		before := schema.TrustedCompiles()
		s, err := schema.NewCompiler(read).Compile("file:///d/list.json", raw)
		if err != nil {
			t.Fatal(err)
		}
		if s.Validate([]any{1, 2}) != nil || s.Validate([]any{-1}) == nil || s.Validate([]any{1, 2, 3}) == nil || s.Validate([]any{"x"}) == nil {
			t.Fatal("the schema validates wrongly")
		}
		return schema.TrustedCompiles() > before
	}
	if compile() {
		t.Fatal("a schema never seen was trusted")
	}
	if !compile() {
		t.Fatal("a schema seen valid was checked again")
	}
	files["/d/item.json"] = `{"type": "integer", "minimum": 0, "maximum": 100}`
	if compile() {
		t.Fatal("a schema whose $ref target changed was trusted")
	}
	if !compile() {
		t.Fatal("the new note was not kept")
	}
	bad := map[string]any{"type": "array", "maxItems": "two"}
	for range 2 {
		schema.ForgetCompiled()
		if _, err := schema.NewCompiler(read).Compile("file:///d/bad.json", bad); err == nil {
			t.Fatal("an invalid schema compiled")
		}
	}
}

// A note that does not hold (a schema noted valid that is not) is not
// trusted: the schema is checked in full and refused.
func TestAFalseNoteIsNotTrusted(t *testing.T) {
	dir := t.TempDir()
	schema.RememberValid(dir)
	defer schema.RememberValid("")
	read := func(string) ([]byte, error) { return nil, os.ErrNotExist }
	bad := map[string]any{"type": 5, "properties": "none"}
	if err := os.WriteFile(filepath.Join(dir, schema.NoteName("file:///x/bad.json", bad)), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	schema.ForgetCompiled()
	if _, err := schema.NewCompiler(read).Compile("file:///x/bad.json", bad); err == nil {
		t.Fatal("an invalid schema with a note compiled")
	}
}
