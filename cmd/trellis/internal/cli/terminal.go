package cli

import (
	"fmt"
	"io"
	"sync"
)

// terminal writes to w what a terminal shows but does not act on: ASCII
// control bytes other than newline and tab are written as \xNN escapes,
// DEL and the C1 controls (U+0080 to U+009F, such as CSI) as \u escapes,
// wherever they come from (a flow file, a thread id, a model's reply, a
// program's output). The two bytes of a C1 control may arrive in two
// writes. JSON stays JSON through it, with the same values: its encoder
// escapes every control byte below 0x20 itself, and writes DEL and the
// C1 controls as they are, which \u escapes are in JSON too.
type terminal struct {
	mu      sync.Mutex
	w       io.Writer
	pending bool // the last write ended in 0xC2, the first byte of a C1 control
}

func (t *terminal) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p) // all of p is written, escaped or held back
	out := make([]byte, 0, len(p)+8)
	if t.pending {
		t.pending = false
		if len(p) > 0 && p[0] >= 0x80 && p[0] < 0xa0 {
			out = fmt.Appendf(out, `\u%04x`, p[0])
			p = p[1:]
			if _, err := t.w.Write(out); err != nil {
				return 0, err
			}
			out = out[:0]
		} else {
			out = append(out, 0xc2)
		}
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '\n' || c == '\t':
			out = append(out, c)
		case c < 0x20:
			out = fmt.Appendf(out, `\x%02x`, c)
		case c == 0x7f:
			out = append(out, `\u007f`...)
		case c == 0xc2 && i+1 == len(p):
			t.pending = true
		case c == 0xc2 && p[i+1] >= 0x80 && p[i+1] < 0xa0:
			out = fmt.Appendf(out, `\u%04x`, p[i+1])
			i++
		default:
			out = append(out, c)
		}
	}
	if _, err := t.w.Write(out); err != nil {
		return 0, err
	}
	return n, nil
}
