package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// hostile is text a terminal would act on, or that JSON encoders treat
// specially: DEL, a C1 control (CSI), an escape sequence, a bell, a line
// separator, markup, and a byte that is not UTF-8.
const hostile = "a\x7fb\u009bc\x1b[31md\x07e\u2028f<g>&h\xffi"

// hostileRead is hostile as the state holds it: the invalid byte is
// U+FFFD.
const hostileRead = "a\x7fb\u009bc\x1b[31md\x07e\u2028f<g>&h\uFFFDi"

const echoFlow = `version: 1
name: echo
description: "Echoes a name \u007f\u009b back."
state:
  schema:
    type: object
    properties:
      name: {type: string, default: ""}
      said: {type: string, default: ""}
input: [name]
nodes:
  say:
    kind: assign
    description: "Says \u007f\u009b\u001b[31m it."
    set: {said: "'Hello, ' + (input.name ?? '') + '!'"}
edges:
  - {from: START, to: say}
  - {from: say, to: END}
`

// parsed reads out, what a command printed, as one JSON text with a
// strict parser other than encoding/json (valid UTF-8, no duplicate
// names, nothing after the value).
func parsed(t *testing.T, what, out string) any {
	t.Helper()
	if !jsontext.Value(out).IsValid() {
		t.Fatalf("%s printed what is not JSON:\n%s", what, out)
	}
	var v any
	if err := jsonv2.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("%s: %v\n%s", what, err, out)
	}
	return v
}

// Every JSON the command prints is JSON, whatever the text it carries: a
// state's values (run --json, state, update), a flow's descriptions
// (graph), names in diagnostics (validate), changes (diff). Control
// characters reach the terminal escaped, as JSON escapes, and read back
// as the characters they stand for.
func TestPrintedJSONIsJSON(t *testing.T) {
	dir := t.TempDir()
	flowPath := filepath.Join(dir, "echo.yaml")
	if err := os.WriteFile(flowPath, []byte(echoFlow), 0o644); err != nil {
		t.Fatal(err)
	}
	db := "sqlite:" + filepath.Join(dir, "e.db")
	out, stderr, code := trellis(t, "run", flowPath, "--store", db, "--thread", "e", "--input", "name="+hostile, "--json")
	if code != 0 {
		t.Fatalf("run: exit %d %s", code, stderr)
	}
	for _, c := range []byte(out) {
		if c == 0x7f || c < 0x20 && c != '\n' {
			t.Fatalf("run --json printed control byte %#x raw:\n%q", c, out)
		}
	}
	st := parsed(t, "run --json", out).(map[string]any)
	if st["name"] != hostileRead || st["said"] != "Hello, "+hostileRead+"!" {
		t.Fatalf("run --json read back %q", st)
	}
	out, stderr, code = trellis(t, "state", "e", "--store", db)
	if code != 0 {
		t.Fatalf("state: exit %d %s", code, stderr)
	}
	if back := parsed(t, "state", out).(map[string]any); back["said"] != st["said"] || back["name"] != st["name"] {
		t.Fatalf("state read back %q, the run printed %q", back, st)
	}
	out, stderr, code = trellis(t, "update", flowPath, "e", "--store", db, "--as", "say", "--set", "said="+hostile)
	if code != 0 {
		t.Fatalf("update: exit %d %s", code, stderr)
	}
	if back := parsed(t, "update", out).(map[string]any); back["said"] != hostileRead {
		t.Fatalf("update read back %q", back)
	}
	out, stderr, code = trellis(t, "graph", flowPath, "--format", "json")
	if code != 0 || !strings.Contains(jsonText(parsed(t, "graph", out)), "Says \x7f\u009b\x1b[31m it.") {
		t.Fatalf("graph: exit %d %s\n%s", code, stderr, out)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte(strings.Replace(echoFlow, "{from: say, to: END}", "{from: say, to: \"s\\x7fa\\u009by\"}", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{"json", "sarif"} {
		out, _, code = trellis(t, "validate", "--format", format, bad)
		// the name is quoted in the message as Go quotes it
		if code != 1 || !strings.Contains(jsonText(parsed(t, "validate --format "+format, out)), `"s\x7fa\u009by"`) {
			t.Fatalf("validate --format %s: exit %d\n%s", format, code, out)
		}
	}
	changed := filepath.Join(dir, "changed.yaml")
	if err := os.WriteFile(changed, []byte(strings.Replace(echoFlow, "'Hello, '", `'Bye \u007f\u009b, '`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, code = trellis(t, "diff", flowPath, changed, "--format", "json")
	if code != 1 || !strings.Contains(jsonText(parsed(t, "diff", out)), "Bye \x7f\u009b, ") {
		t.Fatalf("diff: exit %d\n%s", code, out)
	}
}

// jsonText is every string in v, joined: where a test looks for text a
// command carried.
func jsonText(v any) string {
	var b strings.Builder
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case string:
			b.WriteString(x)
			b.WriteByte('\n')
		case []any:
			for _, e := range x {
				walk(e)
			}
		case map[string]any:
			for k, e := range x {
				b.WriteString(k)
				b.WriteByte('\n')
				walk(e)
			}
		}
	}
	walk(v)
	return b.String()
}
