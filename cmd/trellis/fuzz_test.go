package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// exitTable holds the codes a command may exit with (cli/exit.go).
var exitTable = []int{0, 1, 2, 3, 4, 5}

// checkOutput fails on a panic's trace, a code outside the table or a raw
// control byte on the terminal.
func checkOutput(t *testing.T, what string, out, errs string, code int) {
	t.Helper()
	if !slices.Contains(exitTable, code) {
		t.Fatalf("%s: exit %d is not in the table\n%s%s", what, code, out, errs)
	}
	if c, ok := rawControl(out + errs); ok {
		t.Fatalf("%s: raw control byte %#x:\n%q", what, c, out+errs)
	}
	if strings.Contains(errs, "goroutine ") && strings.Contains(errs, "panic") {
		t.Fatalf("%s: panic:\n%s", what, errs)
	}
}

// Input values and store addresses as a user may type them: the run
// succeeds, or refuses the input (2), or cannot open the store (5);
// nothing else, and nothing unsafe printed.
func FuzzInputsAndStores(f *testing.F) {
	f.Setenv("TRELLIS_SANDBOX", "none")
	for _, s := range [][3]string{
		{"name", "Ann", "memory"},
		{"name", "\x1b[2J", "memory"},
		{"nmae", "x", "memory"},
		{"name", "99999999999999999999999", "sqlite:a?b.db"},
		{"greetings", "9223372036854775807", "sqlite:"},
		{"log", "[1, {a: 2}]", "sqlite:d/e#f.db"},
		{"name", "&a [*a, *a]", "postgres://nobody@127.0.0.1:1/x?sslmode=disable&connect_timeout=1"},
		{"name=x", "", "postgres://%zz"},
		{"name", "\xff\xfe", "memory:"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, key, val, addr string) {
		want := []int{0, 2, 5}
		switch {
		case addr == "":
			return // the default store, in the working directory: the source tree
		case strings.HasPrefix(addr, "sqlite:"):
			name := strings.TrimPrefix(addr, "sqlite:")
			if strings.Contains(name, "..") || filepath.IsAbs(name) {
				return // only under the test's directory
			}
			if name != "" {
				addr = "sqlite:" + filepath.Join(dir, name)
			}
		case strings.HasPrefix(addr, "postgres"):
			if !strings.HasPrefix(addr, "postgres://nobody@127.0.0.1:1/") && !strings.HasPrefix(addr, "postgres://%") {
				return // nowhere but a closed port
			}
		}
		out, errs, code := trellis(t, "run", "../../flows/examples/greet.yaml", "--store", addr, "--thread", "fuzz", "--input", key+"="+val)
		checkOutput(t, "run", out, errs, code)
		if !slices.Contains(want, code) && !(code == 4 && strings.HasPrefix(addr, "sqlite:")) {
			t.Fatalf("exit %d for --input %q --store %q:\n%s%s", code, key+"="+val, addr, out, errs)
		}
		// a thread continued in the same store may be busy only if a run is unfinished (4)
	})
}

// Whole command lines over generated flows: validate exits 1 exactly when
// it reports an error, every command exits with a code of the table, and
// nothing unsafe reaches the terminal.
func FuzzCommandLine(f *testing.F) {
	f.Setenv("TRELLIS_SANDBOX", "none")
	for _, p := range []string{"../../flows/examples/greet.yaml", "../../flows/bench/w2_fanout.yaml", "../../runtime/diag/examples/G007.bad.yaml", "../../runtime/diag/examples/E004.bad.yaml"} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		for _, cmd := range []string{"validate", "graph", "run --input name=x", "diff"} {
			f.Add(string(b), cmd)
		}
	}
	f.Add("version: 1\nname: x\n\x1b[31m: 1\n", "validate --format json")
	f.Add("a: &a [*a, *a]\nversion: 1\n", "graph --format dot")
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, src, line string) {
		path := filepath.Join(dir, "flow.yaml")
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		args := strings.Fields(line)
		if len(args) == 0 || len(args) > 8 {
			return
		}
		switch args[0] {
		case "validate", "graph", "run", "diff", "explain", "schema":
		default:
			return // commands that touch no flow, or serve, or reach other stores
		}
		for _, a := range args {
			if strings.Contains(a, "store") {
				return // a run's store is the memory store, given below
			}
		}
		if args[0] == "run" {
			args = append(args, "--store", "memory")
		}
		args = append(args, path)
		if args[0] == "diff" {
			args = append(args, "../../flows/examples/greet.yaml")
		}
		out, errs, code := trellis(t, args...)
		checkOutput(t, line, out, errs, code)
		if args[0] == "validate" && len(args) == 2 {
			hasError := strings.Contains(out, ": error[")
			if hasError && code != 1 || !hasError && code == 1 {
				t.Fatalf("validate exit %d, errors reported %v:\n%s%s", code, hasError, out, errs)
			}
		}
	})
}
