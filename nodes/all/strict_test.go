package all_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/schema"
)

// missing skips a test whose Node.js package is not installed when there
// is no npm to install it with; with npm it fails: `make deps` installs
// the packages into .ci/.yls.
func missing(t *testing.T, what string) {
	t.Helper()
	if _, err := exec.LookPath("npm"); err == nil {
		t.Fatalf("%s is not installed: `make deps` installs it with npm into .ci/.yls", what)
	}
	t.Skipf("%s is not installed, nor npm to install it with (`make deps` does with npm)", what)
}

// ajvDir finds Ajv: $TRELLIS_AJV, or the copy make deps installs.
func ajvDir() string {
	if p := os.Getenv("TRELLIS_AJV"); p != "" {
		return p
	}
	p, _ := filepath.Abs("../../.ci/.yls/node_modules/ajv")
	if _, err := os.Stat(filepath.Join(p, "dist", "2020.js")); err != nil {
		return ""
	}
	return p
}

// The published schema compiles under a strict third-party validator
// (Ajv, draft 2020-12, strict mode), and it agrees with the validator on
// the same files: every flow the validator accepts, the schema accepts;
// every flow the validator rejects for its format (S codes) or for an
// edge that mixes to, branch and route (G007), the schema rejects.
func TestSchemaUnderAStrictValidator(t *testing.T) {
	dir := ajvDir()
	node, err := exec.LookPath("node")
	if dir == "" || err != nil {
		missing(t, "Ajv")
	}
	var files []string
	for _, pattern := range []string{"../../runtime/diag/examples/*.yaml", "../../flows/*.yaml", "../../flows/examples/*.yaml", "../../flows/bench/*.yaml"} {
		m, _ := filepath.Glob(pattern)
		files = append(files, m...)
	}
	type doc struct {
		Name string `json:"name"`
		Doc  any    `json:"doc"`
	}
	var docs []doc
	verdict := map[string]diag.List{}
	for _, f := range files {
		if strings.HasSuffix(f, ".test.yaml") {
			continue
		}
		v, err := schema.ReadFile(f)
		top, isMap := v.(map[string]any)
		if err != nil || !isMap || top["nodes"] == nil && top["version"] == nil {
			continue // broken YAML, or not a flow
		}
		_, dl := flow.Load(f, all.Registry())
		verdict[f] = dl
		docs = append(docs, doc{f, v})
	}
	in, _ := json.Marshal(docs)
	cmd := exec.Command(node, "strict.js", "../../schemas/flow.schema.json")
	cmd.Env = append(os.Environ(), "AJV_DIR="+dir)
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("Ajv: %v\n%s", err, stderr.String())
	}
	var results []struct {
		Name   string   `json:"name"`
		Valid  bool     `json:"valid"`
		Errors []string `json:"errors"`
	}
	if err := json.Unmarshal(out, &results); err != nil {
		t.Fatal(err)
	}
	if len(results) < 80 {
		t.Fatalf("only %d flows checked", len(results))
	}
	for _, r := range results {
		dl := verdict[r.Name]
		formatError := false
		for _, d := range dl {
			if d.Severity == diag.Error && (strings.HasPrefix(string(d.Code), "S") || d.Code == "G007") {
				formatError = true
			}
		}
		switch {
		case !dl.HasErrors() && !r.Valid:
			t.Errorf("%s: valid for the validator, not for the schema: %v", r.Name, r.Errors)
		case formatError && r.Valid:
			t.Errorf("%s: the validator rejects its format, the schema accepts it:\n%v", r.Name, dl)
		}
	}
}
