package diag

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Text printed to a terminal is made safe and bounded: a flow file, a
// thread id or a value may hold bytes a terminal acts on (escape
// sequences, carriage returns, bidirectional overrides) or a line of
// megabytes.

// MaxMessage is the most runes of one message Safe keeps.
const MaxMessage = 1000

// sourceWindow is the most runes of a source line shown around a column.
const sourceWindow = 120

// Safe escapes what a terminal would act on in s (control characters,
// invalid UTF-8, bidirectional controls) as \xNN or \uNNNN, and cuts it
// after max runes (0: no limit), saying how much was left out.
func Safe(s string, max int) string {
	clean := true
	for i, r := range s {
		if max > 0 && i >= max || escaped(r) {
			clean = false
			break
		}
	}
	if clean && (max == 0 || len(s) <= max) {
		return s
	}
	var b strings.Builder
	n := 0
	for i := 0; i < len(s); {
		if max > 0 && n == max {
			fmt.Fprintf(&b, "… (%d more bytes)", len(s)-i)
			break
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		b.WriteString(visible(s[i:i+size], r))
		i += size
		n++
	}
	return b.String()
}

// escaped reports whether a rune is shown escaped.
func escaped(r rune) bool {
	switch {
	case r < 0x20 && r != '\t', r == 0x7f, r >= 0x80 && r < 0xa0, r == utf8.RuneError:
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x200e, r == 0x200f, r == 0x061c:
		return true
	}
	return false
}

// visible is how one rune (its bytes raw) is shown.
func visible(raw string, r rune) string {
	switch {
	case r == utf8.RuneError && len(raw) == 1:
		return fmt.Sprintf(`\x%02x`, raw[0])
	case r == '\t':
		return " "
	case escaped(r) && r < 0x80:
		return fmt.Sprintf(`\x%02x`, r)
	case escaped(r):
		return fmt.Sprintf(`\u%04x`, r)
	}
	return raw
}

// window returns the part of a source line around rune column col
// (1-based) and endCol, made safe, and where the caret goes under it: its
// offset and width in runes of the shown text.
func window(line string, col, endCol int) (shown string, caret, width int) {
	if endCol <= col {
		endCol = col + 1
	}
	from := 0
	if total := utf8.RuneCountInString(line); total > sourceWindow {
		from = max(min(col-1-sourceWindow/2, total-sourceWindow), 0)
	}
	var b strings.Builder
	if from > 0 {
		b.WriteString("…")
	}
	shownRunes := utf8.RuneCountInString(b.String())
	caret, width = -1, 0
	n := 0 // rune index in line
	for i := 0; i < len(line); n++ {
		r, size := utf8.DecodeRuneInString(line[i:])
		if n >= from {
			if n-from == sourceWindow {
				b.WriteString("…")
				break
			}
			v := visible(line[i:i+size], r)
			w := utf8.RuneCountInString(v)
			if n == col-1 {
				caret = shownRunes
			}
			if n >= col-1 && n < endCol-1 {
				width += w
			}
			b.WriteString(v)
			shownRunes += w
		}
		i += size
	}
	if caret < 0 { // the column is past the line's end
		caret = shownRunes
	}
	return b.String(), caret, max(width, 1)
}
