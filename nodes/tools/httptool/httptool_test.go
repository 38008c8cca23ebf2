package httptool_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/store/memory"
)

// A secret of the run configuration that a request carries never shows
// in the errors of its calls: not the node's, not what the model is told.
func TestSecretsStayOutOfErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// a server that echoes the request's URL in its refusal
		http.Error(w, "bad key in "+r.URL.String(), http.StatusForbidden)
	}))
	defer srv.Close()
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "prompts"), 0o755)
	os.WriteFile(filepath.Join(dir, "prompts", "p.prompt"), []byte("---\nfallback_calls: [{tool: fetch, arguments: {q: \"'x'\"}}]\nfallback_expr: \"tool_calls[0].error ?? ''\"\n---\nGo.\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "f.yaml"), []byte(`version: 1
name: f
config:
  key: {type: string, secret: true}
state:
  schema:
    type: object
    properties:
      out: {type: string, default: ""}
tools:
  fetch:
    kind: http
    description: Fetch.
    parameters: {type: object, properties: {q: {type: string}}}
    url: "`+srv.URL+`/v1?q={{urlquery .args.q}}&key={{urlquery .config.key}}"
    allow: [127.0.0.1/32]
nodes:
  n: {kind: llm, prompt: p, tools: [fetch], writes: {out: output}}
edges:
  - {from: START, to: n}
  - {from: n, to: END}
`), 0o644)
	g, dl := flow.Load(filepath.Join(dir, "f.yaml"), all.Offline())
	if dl.HasErrors() {
		t.Fatal(dl)
	}
	res, err := engine.New(memory.New()).Run(context.Background(), g, engine.Request{Thread: "t", Config: map[string]any{"key": "s3cret+key/1"}})
	if err != nil {
		t.Fatal(err)
	}
	out := res.State["out"].(string)
	if !strings.Contains(out, "answered 403") || strings.Contains(out, "s3cret") || !strings.Contains(out, "[redacted]") {
		t.Fatalf("the error the model is told: %q", out)
	}
}
