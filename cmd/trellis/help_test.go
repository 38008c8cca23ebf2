package main

import (
	"os"
	"strings"
	"testing"
)

// Every command answers --help and -h with its usage and exit 0, before
// it opens a store, reads a flow or starts anything (nothing is made in
// the working directory), whether the flag comes alone or after a
// subcommand.
func TestEveryCommandAnswersHelp(t *testing.T) {
	out, _, code := trellis(t, "--help")
	if code != 0 {
		t.Fatalf("trellis --help: exit %d", code)
	}
	var names []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); strings.HasPrefix(line, "  trellis ") && len(f) > 1 {
			names = append(names, f[1])
		}
	}
	if len(names) < 20 {
		t.Fatalf("the usage lists %d commands: %s", len(names), out)
	}
	t.Chdir(t.TempDir())
	for _, name := range names {
		for _, args := range [][]string{{name, "--help"}, {name, "-h"}} {
			out, errs, code := trellis(t, args...)
			if code != 0 || !strings.Contains(out+errs, "Usage: trellis "+name) {
				t.Errorf("trellis %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errs)
			}
		}
	}
	for _, args := range [][]string{{"keys", "create", "--help"}, {"keys", "list", "-h"}, {"keys", "revoke", "--help"}} {
		if out, errs, code := trellis(t, args...); code != 0 || !strings.Contains(out+errs, "Usage: trellis keys") {
			t.Errorf("trellis %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errs)
		}
	}
	if out, errs, code := trellis(t, "keys", "frob"); code != 2 || !strings.Contains(errs, `unknown keys command "frob"`) {
		t.Errorf("an unknown keys command: exit %d\n%s%s", code, out, errs)
	}
	left, _ := os.ReadDir(".")
	for _, e := range left {
		t.Errorf("asking for help left %s in the working directory", e.Name())
	}
}
