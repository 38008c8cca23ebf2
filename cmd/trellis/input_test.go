package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/runtime/store/storetest"
)

// A new thread's initial values (--with) and its input are checked
// together, on every store: a required field may come from either, every
// problem of both is reported at once (not "initial state ... missing
// properties"), and a refusal leaves no thread.
func TestInitialValuesCheckedWithTheInput(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	flow := write("req.yaml", `version: 1
name: req
input: [name, age]
state:
  schema:
    type: object
    required: [name, age]
    properties:
      name: {type: string, minLength: 2}
      age: {type: integer, minimum: 0}
      greeting: {type: string, default: ""}
nodes:
  greet: {kind: assign, set: {greeting: "'Hello, ' + state.name"}}
edges:
  - {from: START, to: greet}
  - {from: greet, to: END}
`)
	age := write("age.yaml", "age: 5\n")
	negative := write("negative.yaml", "age: -5\n")
	both := write("both.yaml", "{name: Ann, age: 5}\n")
	for name, addr := range map[string]string{
		"memory":   "memory",
		"sqlite":   "sqlite:" + filepath.Join(dir, "t.db"),
		"postgres": storetest.Postgres(t),
	} {
		t.Run(name, func(t *testing.T) {
			out, errs, code := trellis(t, "run", flow, "--store", addr, "--thread", "ok", "--with", age, "--input", "name=Ann")
			if code != 0 || !strings.Contains(out, `"greeting": "Hello, Ann"`) || !strings.Contains(out, `"age": 5`) {
				t.Fatalf("a required input with the other field from --with: exit %d\n%s%s", code, out, errs)
			}
			for _, c := range []struct {
				with  string
				input []string
				says  []string
			}{
				{negative, []string{"--input", "name=A"}, []string{`input "name"`, "length must be >= 2", `input "age"`, ">= 0"}},
				{both, []string{"--input", "age=-1"}, []string{`input "age"`, ">= 0"}},
				{age, nil, []string{`input "name": required`}},
			} {
				args := append([]string{"run", flow, "--store", addr, "--thread", "refused", "--with", c.with}, c.input...)
				_, errs, code := trellis(t, args...)
				if code != 2 || strings.Contains(errs, "missing properties") {
					t.Errorf("--with %s %v: exit %d\n%s", filepath.Base(c.with), c.input, code, errs)
				}
				for _, s := range c.says {
					if !strings.Contains(errs, s) {
						t.Errorf("--with %s %v: no %q in\n%s", filepath.Base(c.with), c.input, s, errs)
					}
				}
			}
			if name == "memory" {
				return
			}
			if out, _, _ := trellis(t, "threads", "--store", addr); strings.Contains(out, "refused") {
				t.Errorf("a refused input left a thread:\n%s", out)
			}
		})
	}
}

// The README's smallest flow, run without the name its greeting reads:
// refused before anything runs (exit 2), naming the field and the read;
// with it, greeted.
func TestGreetWithoutAName(t *testing.T) {
	db := "sqlite:" + filepath.Join(t.TempDir(), "g.db")
	out, stderr, code := trellis(t, "run", "../../flows/examples/greet.yaml", "--store", db, "--thread", "g")
	if code != 2 || out != "" || !strings.Contains(stderr, `input "name": required: the flow reads input.name at ../../flows/examples/greet.yaml:21:`) {
		t.Fatalf("without a name: exit %d\n%s%s", code, out, stderr)
	}
	if _, stderr, code := trellis(t, "state", "g", "--store", db); code != 3 {
		t.Fatalf("a refused run left a thread: exit %d %s", code, stderr)
	}
	out, stderr, code = trellis(t, "run", "../../flows/examples/greet.yaml", "--store", db, "--thread", "g", "--input", "name=Ada")
	if code != 0 || !strings.Contains(out, `"greeting": "Hello, Ada!"`) {
		t.Fatalf("with a name: exit %d\n%s%s", code, out, stderr)
	}
}
