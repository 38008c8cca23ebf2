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
	"github.com/trellisflow/trellis/runtime/diag"
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

// The allow-list is the webhooks' (runtime/egress): this machine's name is
// no entry, a host a template writes is judged at the call, and only an
// address entry opens this machine.
func TestAllowListIsCheckedOnTheAddress(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"ok": true}`))
	}))
	defer srv.Close()
	port := srv.URL[strings.LastIndexByte(srv.URL, ':')+1:]
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "prompts"), 0o755)
	os.WriteFile(filepath.Join(dir, "prompts", "p.prompt"), []byte("---\nfallback_calls: [{tool: fetch, arguments: {}}]\nfallback_expr: \"json(tool_calls[0].result)\"\n---\nGo.\n"), 0o644)
	flowWith := func(url, allow string) string {
		return `version: 1
name: f
config:
  host: {type: string, default: localhost}
state:
  schema:
    type: object
    properties:
      out: {type: string, default: ""}
tools:
  fetch:
    kind: http
    description: Fetch.
    parameters: {type: object}
    url: "` + url + `"
    allow: [` + allow + `]
nodes:
  n: {kind: llm, prompt: p, tools: [fetch], on_error: fail, writes: {out: output}}
edges:
  - {from: START, to: n}
  - {from: n, to: END}
`
	}
	load := func(src string) (*flow.Graph, diag.List) {
		os.WriteFile(filepath.Join(dir, "f.yaml"), []byte(src), 0o644)
		return flow.Load(filepath.Join(dir, "f.yaml"), all.Offline())
	}
	// a name that is this machine is no entry
	if _, dl := load(flowWith("http://localhost:"+port+"/", "localhost")); len(dl) != 1 || dl[0].Code != diag.CodeToolReach ||
		!strings.Contains(dl[0].Summary, "no host name opens") {
		t.Fatalf("localhost on the list: %v", dl)
	}
	// a host a template writes, not on the list: refused at the call
	g, dl := load(flowWith("http://{{.config.host}}:"+port+"/", "example.com"))
	if dl.HasErrors() {
		t.Fatal(dl)
	}
	_, err := engine.New(memory.New()).Run(context.Background(), g, engine.Request{Thread: "t"})
	if err == nil || !strings.Contains(err.Error(), `tool "fetch" (http)`) || !strings.Contains(err.Error(), "localhost is not on the allow-list") {
		t.Fatalf("localhost at the call: %v", err)
	}
	// an address entry opens it
	g, dl = load(flowWith("http://{{.config.host}}:"+port+"/", `127.0.0.1, "::1"`))
	if dl.HasErrors() {
		t.Fatal(dl)
	}
	res, err := engine.New(memory.New()).Run(context.Background(), g, engine.Request{Thread: "t"})
	if err != nil || res.State["out"] != `{"ok":true}` {
		t.Fatalf("with the address on the list: %v %v", res, err)
	}
}

// What an http tool's settings get wrong is reported where it is, all at
// once: a header name, the idempotency header's, a body on a GET.
func TestSettingsAreChecked(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "prompts"), 0o755)
	os.WriteFile(filepath.Join(dir, "prompts", "p.prompt"), []byte("---\nfallback: done\n---\nGo.\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "f.yaml"), []byte(`version: 1
name: f
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
    url: "https://api.example.com/v1?q={{urlquery .args.q}}"
    method: GET
    headers: {"X Key": "k"}
    body: "{{json .args}}"
    idempotency_header: "Idempotency Key"
    allow: [api.example.com]
nodes:
  n: {kind: llm, prompt: p, tools: [fetch], writes: {out: output}}
edges:
  - {from: START, to: n}
  - {from: n, to: END}
`), 0o644)
	_, dl := flow.Load(filepath.Join(dir, "f.yaml"), all.Offline())
	var got []string
	for _, d := range dl {
		got = append(got, d.String())
	}
	text := strings.Join(got, "\n")
	for _, want := range []string{
		`f.yaml:15:15: error[T002]: "X Key" is not an HTTP header name`,
		`f.yaml:16:11: error[T002]: a GET request has no body`,
		`f.yaml:17:25: error[T002]: "Idempotency Key" is not an HTTP header name`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("missing %q in:\n%s", want, text)
		}
	}
}
