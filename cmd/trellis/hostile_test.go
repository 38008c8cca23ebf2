package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// rawControl reports the first byte a terminal would act on.
func rawControl(s string) (byte, bool) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 && c != '\n' && c != '\t' || c == 0x7f || c == 0xc2 && i+1 < len(s) && s[i+1] >= 0x80 && s[i+1] < 0xa0 {
			return c, true
		}
	}
	return 0, false
}

// What the command prints is safe for a terminal and bounded, whatever
// the flow file or the arguments hold: escape sequences are shown
// escaped, a 20 MB line is cut around the column, a thread id with
// control characters is refused.
func TestHostileInputPrintsSafely(t *testing.T) {
	dir := t.TempDir()
	huge := strings.Repeat("x", 20<<20)
	files := map[string]string{
		"escape.yaml": "version: 1\nname: esc\n\x1b[2J\x1b]0;owned\x07: 1\nstate: {schema: {type: object}}\nnodes: {}\nedges: []\n",
		"c1.yaml":     "version: 1\nname: c1\nnodes:\n  a: {kind: \"as\u009bsign\"}\nedges: []\n",
		"long.yaml":   "version: 1\nname: long\nnodes:\n  a: {kind: assign, set: {n: \"" + huge + " +\"}}\nedges: []\n",
	}
	for name, src := range files {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		out, errs, code := trellis(t, "validate", path)
		if code != 1 {
			t.Errorf("%s: exit %d", name, code)
		}
		if c, ok := rawControl(out + errs); ok {
			t.Errorf("%s: a raw control byte %#x in:\n%s", name, c, out+errs)
		}
		if len(out)+len(errs) > 64<<10 {
			t.Errorf("%s: %d bytes printed", name, len(out)+len(errs))
		}
	}
	out, errs, code := trellis(t, "run", "../../flows/examples/greet.yaml", "--store", "memory", "--thread", "a\x1b[31mred", "--input", "name=x")
	if code == 0 || !strings.Contains(errs, "thread id") {
		t.Errorf("a thread id with an escape sequence: exit %d\n%s%s", code, out, errs)
	}
	if c, ok := rawControl(out + errs); ok {
		t.Errorf("a raw control byte %#x in:\n%s", c, errs)
	}
}
