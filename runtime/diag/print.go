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
func WriteText(w io.Writer, l List, src Sources) error {
	var b strings.Builder
	for _, d := range l {
		b.WriteString(d.String())
		b.WriteByte('\n')
		if line, ok := sourceLine(src[d.File], d.Line); ok && d.Col > 0 {
			line = strings.ReplaceAll(line, "\t", " ")
			fmt.Fprintf(&b, "  %s\n  ", line)
			b.WriteString(strings.Repeat(" ", min(d.Col-1, len(line))))
			width := 1
			if d.EndCol > d.Col {
				width = d.EndCol - d.Col
			}
			b.WriteString(strings.Repeat("^", width))
			b.WriteByte('\n')
		}
		if d.Detail != "" {
			for _, l := range strings.Split(d.Detail, "\n") {
				fmt.Fprintf(&b, "  = %s\n", l)
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
