package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// openapiTools holds the third-party tools CI runs on the document, at
// the versions .ci/openapi/package-lock.json pins (make deps installs
// them).
const openapiTools = "../../../.ci/openapi/node_modules"

// casts finds what would make a TypeScript client's types say less than
// the document: an assertion (as T, <T>x, x!), any, or a silenced check.
var casts = regexp.MustCompile(`\bas\s+[A-Za-z{\[(]|\bany\b|\w[!](?:[.;,)\]\s]|$)|@ts-`)

// A TypeScript client generated from the served /openapi.yaml by
// openapi-typescript with its default flags, type-checked by tsc --strict
// and run with openapi-fetch against a real server: a whole interview,
// a streamed turn, a fork, the metadata filter in the document's
// deepObject style, an interrupt answered and a run sent twice with an
// idempotency key, all with no cast, so the document alone types what a
// client sends and reads.
func TestTypeScriptClient(t *testing.T) {
	if testing.Short() {
		t.Skip("generating and compiling a TypeScript client takes a while")
	}
	tools, err := filepath.Abs(openapiTools)
	if err != nil {
		t.Fatal(err)
	}
	bin := func(name string) string { return filepath.Join(tools, ".bin", name) }
	if _, err := os.Stat(bin("openapi-typescript")); err != nil {
		t.Skip("the TypeScript client's tools are not installed: make deps installs them with npm into .ci/openapi")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("no node to run the TypeScript client")
	}
	src, err := os.ReadFile("testdata/tsclient/interview.ts")
	if err != nil {
		t.Fatal(err)
	}
	for i, line := range strings.Split(string(src), "\n") {
		if code, _, _ := strings.Cut(line, "//"); casts.MatchString(code) {
			t.Errorf("interview.ts:%d: a cast: %s", i+1, line)
		}
	}

	h := newHarness(t, "sqlite", readRules(t, flowsDir+"/examples/interview.model.yaml"))
	dir := t.TempDir()
	resp, err := http.Get(h.base + "/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/openapi.yaml: %d %v", resp.StatusCode, err)
	}
	turns := make([]map[string]string, len(interviewTurns))
	for i, turn := range interviewTurns {
		turns[i] = map[string]string{"say": turn.say, "code": turn.code}
	}
	script, err := json.Marshal(map[string]any{"candidate": values(t, flowsDir+"/examples/candidate.yaml"), "turns": turns,
		"closing": "Thank you Ada! Overall you scored 4.5 out of 10. Good luck!"})
	if err != nil {
		t.Fatal(err)
	}
	_, key, err := CreateKey(ctx, h.srv.cat, "acme", "typescript", false)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"openapi.yaml":  string(doc),
		"interview.ts":  string(src),
		"env.ts":        fmt.Sprintf("export const base = %q;\nexport const key = %q;\nexport const script = %s;\n", h.base, key, script),
		"package.json":  `{"type": "module"}`,
		"tsconfig.json": `{"compilerOptions": {"strict": true, "target": "ES2022", "lib": ["ES2022", "DOM", "DOM.Iterable"], "module": "NodeNext", "moduleResolution": "NodeNext", "noEmitOnError": true, "outDir": "out"}, "files": ["interview.ts"]}`,
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(tools, filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run := func(what string, name string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(cctx, name, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", what, err, out)
		}
		return string(out)
	}
	run("openapi-typescript", bin("openapi-typescript"), "openapi.yaml", "-o", "schema.d.ts")
	run("tsc --strict", bin("tsc"), "-p", ".")
	if out := run("the client", node, "out/interview.js"); strings.TrimSpace(out) != "ok" {
		t.Fatalf("the client: %s", out)
	}
	for _, c := range h.model.Calls() {
		if !c.Authorized || c.Rule < 0 {
			t.Fatalf("model call unauthorised or unscripted: %+v", c)
		}
	}
}
