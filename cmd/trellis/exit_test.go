package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/store"
)

// Every way of reaching an error exits with its code from one table
// (`trellis --help` lists it).
func TestExitCodes(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	greet := "../../flows/examples/greet.yaml"
	broken := write("broken.yaml", "version: 1\nname: broken\nnodes: {a: {kind: nope}}\nedges: []\n")
	empty := filepath.Join(dir, "empty")
	os.Mkdir(empty, 0o755)
	write("empty/notes.yaml", "title: not a flow\n")
	inputFile := write("input.yaml", "nmae: Ann\n")
	list := write("list.yaml", "- Ann\n")
	failing := write("failing.yaml", `version: 1
name: failing
state: {schema: {type: object, properties: {n: {type: integer, default: 9223372036854775807}}}}
nodes: {inc: {kind: assign, set: {n: "state.n + 1"}}}
edges: [{from: START, to: inc}, {from: inc, to: END}]
`)
	db := "sqlite:" + filepath.Join(dir, "t.db")
	// a thread leased by another (live) process
	st, err := store.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, code := trellis(t, "run", greet, "--store", db, "--thread", "held", "--input", "name=a"); code != 0 {
		t.Fatal("greet does not run")
	}
	if err := st.Acquire(context.Background(), "held", "process 1 on elsewhere", time.Minute); err != nil {
		t.Fatal(err)
	}
	st.Close()
	for _, c := range []struct {
		name string
		args []string
		code int
		says string
	}{
		{"validate an invalid flow", []string{"validate", broken}, 1, "K001"},
		{"run an invalid flow", []string{"run", broken, "--store", "memory"}, 1, "K001"},
		{"graph an invalid flow", []string{"graph", broken}, 1, "K001"},
		{"unknown command", []string{"frobnicate"}, 2, "unknown command"},
		{"unknown flag", []string{"run", "--frob", greet}, 2, "frob"},
		{"bad input by flag", []string{"run", greet, "--store", "memory", "--input", "nmae=Ann"}, 2, `did you mean "name"`},
		{"bad input by file", []string{"run", greet, "--store", "memory", "--input-file", inputFile}, 2, `did you mean "name"`},
		{"bad thread id", []string{"run", greet, "--store", "memory", "--thread", "a b", "--input", "name=a"}, 2, "thread id"},
		{"nothing to validate", []string{"validate", empty}, 2, "nothing to check"},
		{"nothing to test", []string{"test", empty}, 2, "nothing to check"},
		{"a node fails", []string{"run", failing, "--store", "memory"}, 3, "overflow"},
		{"no such thread", []string{"history", "nope", "--store", db}, 3, "nope"},
		{"busy thread", []string{"run", greet, "--store", db, "--thread", "held", "--input", "name=b"}, 4, "process 1 on elsewhere holds it until"},
		{"store unavailable to run", []string{"run", greet, "--store", "sqlite:" + broken + "/x.db", "--input", "name=a"}, 5, "sqlite store"},
		{"store unavailable to list", []string{"threads", "--store", "sqlite:" + broken + "/x.db"}, 5, "sqlite store"},
		{"store unavailable to prune", []string{"prune", "t", "--keep", "1", "--store", "postgres://nobody@127.0.0.1:1/none?connect_timeout=2"}, 5, ""},
		{"store unavailable to update", []string{"update", greet, "held", "--as", "greet", "--set", "name=x", "--store", "sqlite:" + broken + "/x.db"}, 5, "sqlite store"},
		// a wrong command line, whichever command it is given to
		{"history without a thread", []string{"history", "--store", db}, 2, "want one THREAD"},
		{"state without a thread", []string{"state", "--store", db}, 2, "want one THREAD"},
		{"fork without a checkpoint", []string{"fork", "held", "--store", db}, 2, "want THREAD --at SEQ --to NEW"},
		{"delete without a thread", []string{"delete", "--store", db}, 2, "want THREAD"},
		{"abandon without a thread", []string{"abandon", "--store", db}, 2, "want one THREAD"},
		{"prune without --keep", []string{"prune", "held", "--store", db}, 2, "want THREAD --keep N"},
		{"prune with a negative --keep", []string{"prune", "held", "--keep", "-1", "--store", db}, 2, "want THREAD --keep N"},
		{"prune with a negative --batch", []string{"prune", "held", "--keep", "1", "--batch", "-5", "--store", db}, 2, "--batch -5"},
		{"history of an unknown source", []string{"history", "held", "--source", "bogus", "--store", db}, 2, `unknown --source "bogus"`},
		{"update without --as", []string{"update", greet, "held", "--set", "name=x", "--store", db}, 2, "want FLOW THREAD --as NODE"},
		{"update with a malformed --set", []string{"update", greet, "held", "--as", "greet", "--set", "novalue", "--store", db}, 2, `--set "novalue": want name=value`},
		{"keys without a tenant", []string{"keys", "create", "--store", db}, 2, "tenant"},
		{"keys revoke without an id", []string{"keys", "revoke", "--store", db}, 2, "want keys revoke ID"},
		{"run with a missing --with file", []string{"run", greet, "--store", "memory", "--with", filepath.Join(dir, "none.yaml")}, 2, "none.yaml"},
		{"run with --with not a mapping", []string{"run", greet, "--store", "memory", "--with", list}, 2, "want a mapping"},
		{"run with an unknown durability", []string{"run", greet, "--store", "sqlite:" + broken + "/x.db", "--durability", "bogus", "--input", "name=a"}, 2, "durability"},
		{"run a missing flow", []string{"run", filepath.Join(dir, "none.yaml"), "--store", "memory"}, 2, "none.yaml"},
		{"graph a missing flow", []string{"graph", filepath.Join(dir, "none.yaml")}, 2, "none.yaml"},
		{"validate a missing flow", []string{"validate", filepath.Join(dir, "none.yaml")}, 2, "none.yaml"},
		{"serve missing flows", []string{"serve", "--flows", filepath.Join(dir, "none"), "--store", "memory"}, 2, "none"},
		{"serve with localhost allowed for webhooks", []string{"serve", "--webhook-allow", "localhost", "--store", "memory"}, 2, "list the address (127.0.0.1 or ::1)"},
		{"serve with schedules finer than a second", []string{"serve", "--schedule-min-interval", "10ms", "--store", "memory"}, 2, "--schedule-min-interval"},
		{"sandbox run a missing file", []string{"sandbox", "run", filepath.Join(dir, "none.py")}, 2, "none.py"},
		// a thread another process runs is not deleted from under it
		{"delete a busy thread", []string{"delete", "held", "--store", db}, 4, "process 1 on elsewhere holds it until"},
	} {
		out, errs, code := trellis(t, c.args...)
		if code != c.code || !strings.Contains(out+errs, c.says) {
			t.Errorf("%s: exit %d, want %d saying %q:\n%s%s", c.name, code, c.code, c.says, out, errs)
		}
	}
	if out, errs, code := trellis(t, "state", "held", "--store", db); code != 0 {
		t.Errorf("the busy thread was deleted: exit %d\n%s%s", code, out, errs)
	}
	// a clean directory says what it checked; skipped YAML files are named
	write("empty/greet.yaml", "version: 1\nname: g\nstate: {schema: {type: object, properties: {n: {type: integer, default: 0}}}}\nnodes: {a: {kind: noop}}\nedges: [{from: START, to: a}, {from: a, to: END}]\n")
	out, errs, code := trellis(t, "validate", empty)
	if code != 0 || out != "" || !strings.Contains(errs, "1 flow checked: 0 errors; skipped 1 YAML file with no version, nodes or edges: "+filepath.Join(empty, "notes.yaml")) {
		t.Errorf("clean directory: exit %d\n%s%s", code, out, errs)
	}
}

// A conversation whose thread has an unfinished turn, held by a live
// process: a second process says only that it is busy, who holds it and
// how to take over, not that it is resuming.
func TestBusyConversationSaysOnlyWhy(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "chat.yaml")
	if err := os.WriteFile(path, []byte(`version: 1
name: chat
input: [said]
state:
  schema:
    type: object
    properties:
      said: {type: string, default: ""}
      reply: {type: string, default: ""}
conversation: {input: said, output: reply, until: "state.said == 'bye'"}
nodes:
  answer: {kind: assign, set: {reply: "'you said ' + state.said"}, interrupt_before: true}
edges:
  - {from: START, to: answer}
  - {from: answer, to: END}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	db := "sqlite:" + filepath.Join(dir, "c.db")
	if _, errs, code := trellis(t, "run", path, "--store", db, "--thread", "c"); code != 0 || !strings.Contains(errs, "paused before answer") {
		t.Fatalf("first turn: %d %s", code, errs)
	}
	st, err := store.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Acquire(context.Background(), "c", "process 7 on there", time.Minute); err != nil {
		t.Fatal(err)
	}
	st.Close()
	_, errs, code := trellis(t, "run", path, "--store", db, "--thread", "c")
	if code != 4 || strings.Contains(errs, "resum") && strings.Index(errs, "resum") < strings.Index(errs, "busy") ||
		!strings.Contains(errs, "process 7 on there holds it until") || !strings.Contains(errs, "--thread c --store "+db+" --resume") {
		t.Fatalf("busy conversation: exit %d\n%s", code, errs)
	}
}
