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
	"github.com/trellisflow/trellis/runtime/flow"
)

// Every drawing of every flow the repository holds (the reference flows,
// the examples, the validator's passing fixtures), collapsed and
// expanded, is a flowchart Mermaid's own parser accepts: node shapes for
// subflows, maps and nodes that ask, subgraphs, labels with operators
// and quotes.
func TestMermaidDrawingsParse(t *testing.T) {
	pkgs, _ := filepath.Abs("../../.ci/.yls/node_modules")
	node, err := exec.LookPath("node")
	if _, serr := os.Stat(filepath.Join(pkgs, "mermaid", "dist", "mermaid.core.mjs")); serr != nil || err != nil {
		missing(t, "mermaid")
	}
	if _, err := os.Stat(filepath.Join(pkgs, "jsdom")); err != nil {
		missing(t, "jsdom")
	}
	var files []string
	for _, pattern := range []string{"../../flows/*.yaml", "../../flows/examples/*.yaml", "../../runtime/diag/examples/*.ok.yaml"} {
		m, _ := filepath.Glob(pattern)
		files = append(files, m...)
	}
	type drawing struct {
		Name string `json:"name"`
		Text string `json:"text"`
	}
	var drawings []drawing
	composite := 0
	for _, f := range files {
		if strings.HasSuffix(f, ".test.yaml") {
			continue
		}
		g, _ := flow.Load(f, all.Registry())
		if g == nil {
			continue // not a flow (an example's values)
		}
		for _, expand := range []bool{false, true} {
			text := g.MermaidWith(flow.DrawOptions{Expand: expand})
			if expand && strings.Contains(text, "subgraph") {
				composite++
			}
			drawings = append(drawings, drawing{Name: f + map[bool]string{false: "", true: " --expand"}[expand], Text: text})
		}
	}
	if len(drawings) < 60 || composite < 3 {
		t.Fatalf("only %d drawings, %d with composite nodes expanded", len(drawings), composite)
	}
	in, _ := json.Marshal(drawings)
	cmd := exec.Command(node, "mermaid.js")
	cmd.Env = append(os.Environ(), "MERMAID_DIR="+filepath.Join(pkgs, "mermaid"), "JSDOM_DIR="+filepath.Join(pkgs, "jsdom"))
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("mermaid: %v\n%s", err, stderr.String())
	}
	var results []struct {
		Name  string `json:"name"`
		OK    bool   `json:"ok"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(out, &results); err != nil || len(results) != len(drawings) {
		t.Fatalf("mermaid's answer: %v (%d results for %d drawings)", err, len(results), len(drawings))
	}
	for i, r := range results {
		if !r.OK {
			t.Errorf("%s: Mermaid refuses it: %s\n%s", r.Name, r.Error, drawings[i].Text)
		}
	}
}
