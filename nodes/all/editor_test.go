package all_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// yamlLanguageServer finds the yaml-language-server executable: $TRELLIS_YAML_LS,
// the copy make deps installs, or PATH.
func yamlLanguageServer() string {
	if p := os.Getenv("TRELLIS_YAML_LS"); p != "" {
		return p
	}
	if p, err := filepath.Abs("../../.ci/.yls/node_modules/.bin/yaml-language-server"); err == nil {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	p, _ := exec.LookPath("yaml-language-server")
	return p
}

// lsp is a minimal Language Server Protocol client over stdio.
type lsp struct {
	in  io.Writer
	out *bufio.Reader
	id  int
}

func (c *lsp) send(msg map[string]any) error {
	msg["jsonrpc"] = "2.0"
	b, _ := json.Marshal(msg)
	_, err := fmt.Fprintf(c.in, "Content-Length: %d\r\n\r\n%s", len(b), b)
	return err
}

func (c *lsp) recv() (map[string]any, error) {
	n := 0
	for {
		line, err := c.out.ReadString('\n')
		if err != nil {
			return nil, err
		}
		line = strings.TrimSpace(line)
		if line == "" {
			break
		}
		if v, ok := strings.CutPrefix(strings.ToLower(line), "content-length:"); ok {
			n, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(c.out, b); err != nil {
		return nil, err
	}
	var m map[string]any
	return m, json.Unmarshal(b, &m)
}

func (c *lsp) call(method string, params any) (any, error) {
	c.id++
	id := c.id
	if err := c.send(map[string]any{"id": id, "method": method, "params": params}); err != nil {
		return nil, err
	}
	for {
		m, err := c.recv()
		if err != nil {
			return nil, err
		}
		if _, isReq := m["method"]; isReq {
			if rid, ok := m["id"]; ok { // a request from the server
				var result any
				if m["method"] == "workspace/configuration" {
					result = []any{map[string]any{}}
				}
				c.send(map[string]any{"id": rid, "result": result})
			}
			continue
		}
		if f, ok := m["id"].(float64); ok && int(f) == id {
			return m["result"], nil
		}
	}
}

// TestEditorCompletion opens a flow that names the published schema in its
// first line in the real yaml-language-server and asks for completions.
func TestEditorCompletion(t *testing.T) {
	server := yamlLanguageServer()
	if server == "" {
		missing(t, "yaml-language-server")
	}
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "flows"), 0o755)
	os.MkdirAll(filepath.Join(dir, "schemas"), 0o755)
	schema, err := os.ReadFile(published)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "schemas", "flow.schema.json"), schema, 0o644)
	doc := `# yaml-language-server: $schema=../schemas/flow.schema.json
version: 1
name: probe
state:
  schema: {type: object, properties: {a: {type: integer}}}
nodes:
  first:
    kind: assign
    
  second:
    kind: 
edges:
  - {from: START, to: first}
  - 
`
	path := filepath.Join(dir, "flows", "probe.yaml")
	os.WriteFile(path, []byte(doc), 0o644)

	cmd := exec.Command(server, "--stdio")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	timer := time.AfterFunc(60*time.Second, func() { cmd.Process.Kill() })
	defer timer.Stop()
	c := &lsp{in: stdin, out: bufio.NewReader(stdout)}
	uri := "file://" + filepath.ToSlash(path)
	if _, err := c.call("initialize", map[string]any{"processId": nil, "rootUri": "file://" + dir,
		"capabilities": map[string]any{"textDocument": map[string]any{"completion": map[string]any{}}}}); err != nil {
		t.Fatal(err)
	}
	c.send(map[string]any{"method": "initialized", "params": map[string]any{}})
	c.send(map[string]any{"method": "textDocument/didOpen", "params": map[string]any{
		"textDocument": map[string]any{"uri": uri, "languageId": "yaml", "version": 1, "text": doc}}})
	complete := func(line, col int) []string {
		res, err := c.call("textDocument/completion", map[string]any{
			"textDocument": map[string]any{"uri": uri}, "position": map[string]any{"line": line, "character": col}})
		if err != nil {
			t.Fatal(err)
		}
		var items []any
		switch r := res.(type) {
		case map[string]any:
			items, _ = r["items"].([]any)
		case []any:
			items = r
		}
		var labels []string
		for _, it := range items {
			labels = append(labels, it.(map[string]any)["label"].(string))
		}
		return labels
	}
	for _, c := range []struct {
		line, col int
		want      []string
	}{
		{8, 4, []string{"set", "retry", "timeout", "on_error", "description"}}, // inside an assign node
		{10, 10, []string{"assign", "noop"}},                                   // a node's kind
		{13, 4, []string{"from", "to", "branch", "route", "choices", "bound"}}, // an edge
	} {
		got := complete(c.line, c.col)
		for _, w := range c.want {
			if !slices.Contains(got, w) {
				t.Errorf("completion at %d:%d lacks %q: %v", c.line, c.col, w, got)
			}
		}
	}
}
