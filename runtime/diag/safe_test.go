package diag

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestSafe(t *testing.T) {
	for in, want := range map[string]string{
		"plain text":           "plain text",
		"a\x1b[31mred\x1b[0m":  `a\x1b[31mred\x1b[0m`,
		"cr\rlf\nbell\a":       `cr\x0dlf\x0abell\x07`,
		"tab\there":            "tab\there",
		"bad \xff byte":        `bad \xff byte`,
		"c1 \u009b control":    `c1 \u009b control`,
		"bidi \u202e override": `bidi \u202e override`,
		"ünïcödé ok":           "ünïcödé ok",
	} {
		if got := Safe(in, 0); got != want {
			t.Errorf("Safe(%q) = %q, want %q", in, got, want)
		}
	}
	if got := Safe(strings.Repeat("x", 5000), 10); got != "xxxxxxxxxx… (4990 more bytes)" {
		t.Errorf("cut: %q", got)
	}
}

// A long line is shown around the column, the caret under the span.
func TestWindow(t *testing.T) {
	line := strings.Repeat("a", 1_000_000) + "TARGET" + strings.Repeat("b", 1_000_000)
	shown, caret, width := window(line, 1_000_001, 1_000_007)
	if n := utf8.RuneCountInString(shown); n > sourceWindow+2 {
		t.Fatalf("shown %d runes", n)
	}
	if got := string([]rune(shown)[caret : caret+width]); got != "TARGET" {
		t.Fatalf("caret at %d width %d points at %q in %q", caret, width, got, shown)
	}
	shown, caret, width = window("x: \"\x1b[2J\"", 5, 9)
	if shown != `x: "\x1b[2J"` || string([]rune(shown)[caret:caret+width]) != `\x1b[2J` {
		t.Fatalf("%q %d %d", shown, caret, width)
	}
	if shown, caret, _ := window("short", 3, 0); shown != "short" || caret != 2 {
		t.Fatalf("%q %d", shown, caret)
	}
}
