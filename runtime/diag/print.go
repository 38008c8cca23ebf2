package diag

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// Sources maps a file name to its content, for printing source lines.
type Sources map[string][]byte

// WriteText prints each diagnostic as `file:line:col: severity[CODE]: message`
// followed by the source line with a caret under the span, and any detail.
// What it prints is safe for a terminal and bounded: control characters
// are escaped, a long line is cut around the column, a long message cut.
func WriteText(w io.Writer, l List, src Sources) error {
	var b strings.Builder
	for _, d := range l {
		b.WriteString(Safe(d.String(), MaxMessage))
		b.WriteByte('\n')
		if line, ok := sourceLine(src[d.File], d.Line); ok && d.Col > 0 {
			shown, caret, width := window(line, d.Col, d.EndCol)
			fmt.Fprintf(&b, "  %s\n  %s%s\n", shown, strings.Repeat(" ", caret), strings.Repeat("^", width))
		}
		if d.Detail != "" {
			for _, l := range strings.Split(d.Detail, "\n") {
				fmt.Fprintf(&b, "  = %s\n", Safe(l, MaxMessage))
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON prints the list as a JSON array (an empty array when clean).
func WriteJSON(w io.Writer, l List) error {
	if l == nil {
		l = List{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(l)
}

// WriteGitHub prints GitHub Actions workflow commands, which the Actions
// runner turns into annotations on the pull request's files.
func WriteGitHub(w io.Writer, l List) error {
	var b strings.Builder
	for _, d := range l {
		fmt.Fprintf(&b, "::%s file=%s,line=%d,col=%d,title=%s::%s\n",
			d.Severity, escapeProperty(d.File), max(d.Line, 1), max(d.Col, 1),
			escapeProperty("trellis "+string(d.Code)), escapeData(d.Message()))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func escapeData(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A").Replace(s)
}

func escapeProperty(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A", ":", "%3A", ",", "%2C").Replace(s)
}

func sourceLine(src []byte, line int) (string, bool) {
	if line < 1 || src == nil {
		return "", false
	}
	for i := 1; i < line; i++ {
		j := bytes.IndexByte(src, '\n')
		if j < 0 {
			return "", false
		}
		src = src[j+1:]
	}
	if j := bytes.IndexByte(src, '\n'); j >= 0 {
		src = src[:j]
	}
	return strings.TrimRight(string(src), "\r"), true
}
