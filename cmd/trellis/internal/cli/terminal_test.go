package cli

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// The terminal writer escapes control characters, a C1 control too when
// its two bytes arrive in two writes, and reports every byte of a write
// as written (io.Copy fails on less).
func TestTerminalWrites(t *testing.T) {
	var out bytes.Buffer
	term := &terminal{w: &out}
	for _, p := range []string{"a\x1b[2J\xc2", "\x9bb\xc2", "\xa9\x7f\n"} {
		if n, err := term.Write([]byte(p)); n != len(p) || err != nil {
			t.Errorf("Write(%q) = %d, %v", p, n, err)
		}
	}
	if want := `a\x1b[2J\u009bb©\u007f` + "\n"; out.String() != want {
		t.Errorf("wrote %q, want %q", out.String(), want)
	}
	out.Reset()
	src := "reply \u009b31m red \x1b]0;title\x07 ok ©\n"
	if _, err := io.Copy(term, iotest.OneByteReader(strings.NewReader(src))); err != nil {
		t.Fatal(err)
	}
	if want := `reply \u009b31m red \x1b]0;title\x07 ok ©` + "\n"; out.String() != want {
		t.Errorf("copied %q, want %q", out.String(), want)
	}
}
