package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/runtime/store/storetest"
)

// An integer field takes exact 64-bit integers from --input, on every
// store: the ends of the range go in and come back (read by another
// invocation) unchanged; a number outside it, even one that float64
// rounds onto its end, is refused as input (exit 2) leaving no thread;
// an overflow fails the run naming the node and the field (exit 3) and
// writes nothing.
func TestIntegersOnTheCommandLine(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "num.yaml")
	if err := os.WriteFile(path, []byte(`version: 1
name: num
input: [n]
state:
  schema:
    type: object
    properties:
      n: {type: integer, default: 0}
      m: {type: integer, default: 0}
nodes:
  inc: {kind: assign, set: {m: "state.n + 1"}}
edges:
  - {from: START, to: inc}
  - {from: inc, to: END}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, addr := range map[string]string{
		"memory":   "memory",
		"sqlite":   "sqlite:" + filepath.Join(dir, "n.db"),
		"postgres": storetest.Postgres(t),
	} {
		t.Run(name, func(t *testing.T) {
			for _, n := range []string{"99999999999999999999999", "10000000000000000001", "9223372036854775808", "-9223372036854775809", "-9223372036854775900", "1e23"} {
				_, errs, code := trellis(t, "run", path, "--store", addr, "--thread", "wide", "--input", "n="+n)
				if code != 2 || !strings.Contains(errs, `input "n"`) || !strings.Contains(errs, "64-bit integer range") {
					t.Errorf("--input n=%s: exit %d\n%s", n, code, errs)
				}
			}
			if name == "memory" {
				return
			}
			if out, _, _ := trellis(t, "threads", "--store", addr); strings.Contains(out, "wide") {
				t.Errorf("a refused input left a thread:\n%s", out)
			}
			state := func(thread string) map[string]any {
				t.Helper()
				out, errs, code := trellis(t, "state", thread, "--store", addr)
				dec := json.NewDecoder(strings.NewReader(out))
				dec.UseNumber()
				var v map[string]any
				if err := dec.Decode(&v); code != 0 || err != nil {
					t.Fatalf("state %s: exit %d %v\n%s", thread, code, err, errs)
				}
				return v
			}
			for _, n := range []string{"9223372036854775806", "-9223372036854775808", "9007199254740993"} {
				if _, errs, code := trellis(t, "run", path, "--store", addr, "--thread", "t"+n, "--input", "n="+n); code != 0 {
					t.Fatalf("--input n=%s: exit %d\n%s", n, code, errs)
				}
				if v := state("t" + n); v["n"] != json.Number(n) {
					t.Errorf("--input n=%s came back as %v", n, v["n"])
				}
			}
			if v := state("t9223372036854775806"); v["m"] != json.Number("9223372036854775807") {
				t.Errorf("m = %v", v["m"])
			}
			_, errs, code := trellis(t, "run", path, "--store", addr, "--thread", "t9223372036854775806", "--input", "n=9223372036854775807")
			if code != 3 || !strings.Contains(errs, `node "inc"`) || !strings.Contains(errs, "set m") || !strings.Contains(errs, "integer overflow") {
				t.Errorf("overflow: exit %d\n%s", code, errs)
			}
			if v := state("t9223372036854775806"); v["m"] != json.Number("9223372036854775807") {
				t.Errorf("m after the overflow = %v", v["m"])
			}
		})
	}
}
