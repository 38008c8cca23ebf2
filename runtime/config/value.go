package config

import (
	"errors"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/value"
)

// Value is one value of a file as written: a scalar, a mapping or a
// sequence, with its position. The zero Value stands for a value that is
// absent; its accessors return zero results. An alias reads as the value
// it refers to.
type Value struct {
	n *yaml.Node
	f *File
	// region is set for a Value made by TextAt: text at byte offset
	// off-1 of a text file.
	off int
}

// Kind is the YAML shape of a Value.
type Kind int

// The kinds of values.
const (
	Absent Kind = iota
	Scalar
	Mapping
	Sequence
)

// TextAt returns the text at byte offset off of a text file as a scalar
// Value, so that positions inside it (a template's parse error, say) map
// onto the file.
func TextAt(f *File, off int) Value {
	return Value{n: &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: string(f.Src[off:])}, f: f, off: off + 1}
}

func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	return n
}

func (v Value) child(n *yaml.Node) Value { return Value{n: resolve(n), f: v.f} }

// Exists reports whether the value is present.
func (v Value) Exists() bool { return v.n != nil }

// File is the file the value was read from (nil for the zero Value).
func (v Value) File() *File { return v.f }

// Kind is the value's YAML shape.
func (v Value) Kind() Kind {
	if v.n == nil {
		return Absent
	}
	switch v.n.Kind {
	case yaml.ScalarNode:
		return Scalar
	case yaml.MappingNode:
		return Mapping
	case yaml.SequenceNode:
		return Sequence
	}
	return Absent
}

// IsScalar, IsMapping and IsSequence test the kind.
func (v Value) IsScalar() bool   { return v.Kind() == Scalar }
func (v Value) IsMapping() bool  { return v.Kind() == Mapping }
func (v Value) IsSequence() bool { return v.Kind() == Sequence }

// IsString reports whether the value is a scalar YAML reads as a string
// (not a number, boolean or null).
func (v Value) IsString() bool { return v.IsScalar() && v.n.ShortTag() == "!!str" }

// Text is a scalar's text as written, "" for anything else.
func (v Value) Text() string {
	if !v.IsScalar() {
		return ""
	}
	return v.n.Value
}

// Get returns the value of key in a mapping. A repeated key (which the
// loader reports) keeps its first value.
func (v Value) Get(key string) Value {
	if !v.IsMapping() {
		return Value{}
	}
	for i := 0; i+1 < len(v.n.Content); i += 2 {
		if v.n.Content[i].Value == key {
			return v.child(v.n.Content[i+1])
		}
	}
	return Value{}
}

// KeyOf returns the key node of key in a mapping, for positions.
func (v Value) KeyOf(key string) Value {
	if !v.IsMapping() {
		return Value{}
	}
	for i := 0; i+1 < len(v.n.Content); i += 2 {
		if v.n.Content[i].Value == key {
			return Value{n: v.n.Content[i], f: v.f}
		}
	}
	return Value{}
}

// Entry is one key and value of a mapping.
type Entry struct {
	// Name is the key's text; Key is the key itself, for positions.
	Name  string
	Key   Value
	Value Value
}

// Entries returns a mapping's entries in order. A repeated key (which the
// loader reports) keeps its first value.
func (v Value) Entries() []Entry {
	if !v.IsMapping() {
		return nil
	}
	var out []Entry
	seen := map[string]bool{}
	for i := 0; i+1 < len(v.n.Content); i += 2 {
		k := v.n.Content[i]
		if seen[k.Value] {
			continue
		}
		seen[k.Value] = true
		out = append(out, Entry{Name: k.Value, Key: Value{n: k, f: v.f}, Value: v.child(v.n.Content[i+1])})
	}
	return out
}

// Items returns a sequence's items.
func (v Value) Items() []Value {
	if !v.IsSequence() {
		return nil
	}
	out := make([]Value, len(v.n.Content))
	for i, c := range v.n.Content {
		out[i] = v.child(c)
	}
	return out
}

// Decode decodes the value into dst as yaml.v3 would.
func (v Value) Decode(dst any) error {
	if v.n == nil {
		return nil
	}
	err := v.n.Decode(dst)
	if err != nil {
		return decodeError(err)
	}
	return nil
}

type decodeErr struct{ msg string }

func (e decodeErr) Error() string { return e.msg }

// decodeError says what yaml.v3 could not decode, in its words but without
// the heading it puts before a list of them.
func decodeError(err error) error {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		return decodeErr{strings.Join(te.Errors, "\n  ")}
	}
	return err
}

// JSON converts the value into state values (see package value).
func (v Value) JSON() (any, error) {
	if v.n == nil {
		return nil, nil
	}
	return value.FromYAML(v.n)
}

// Pos is the value's position; a one-line scalar spans its text.
func (v Value) Pos() diag.Pos {
	if v.f == nil {
		return diag.Pos{}
	}
	if v.off > 0 {
		return v.f.Offset(v.off - 1)
	}
	return v.f.pos(v.n)
}

// PosIn maps a position inside a scalar's text (1-based line and column
// in runes, as expression and template errors give them) onto the file.
// endCol, when larger than col, spans to that column.
func (v Value) PosIn(line, col, endCol int) diag.Pos {
	if v.f == nil {
		return diag.Pos{}
	}
	if v.off > 0 {
		text := v.n.Value
		start := LineOffset(text, line)
		rest := []rune(text[start:])
		p := v.f.Offset(v.off - 1 + start + len(string(rest[:min(max(col-1, 0), len(rest))])))
		if endCol > col {
			p.EndCol = p.Col + (endCol - col)
		}
		return p
	}
	n := v.n
	p := diag.Pos{File: v.f.Path, Line: n.Line, Col: n.Column}
	if q, ok := v.foldedPos(line, col); ok {
		p = q
		if endCol > col {
			p.EndCol = p.Col + (endCol - col)
		}
		return p
	}
	switch {
	case n.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0:
		// content starts on the line after the indicator, indented
		p.Line = n.Line + line
		indent := 0
		if ln, ok := lineOf(v.f.Src, p.Line); ok {
			indent = len(ln) - len(strings.TrimLeft(ln, " "))
		}
		p.Col = indent + col
	case line > 1:
		// a multi-line flow scalar: continuation lines keep their indent
		p.Line = n.Line + line - 1
		indent := 0
		if ln, ok := lineOf(v.f.Src, p.Line); ok {
			indent = len(ln) - len(strings.TrimLeft(ln, " "))
		}
		p.Col = indent + col
	default:
		p.Col = n.Column + col - 1
		if n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 {
			// the text as written: escapes (\" and '') are longer
			// than the characters they stand for
			p.Col = n.Column + 1 + v.f.quotedOffset(n, col-1)
			if endCol > col {
				p.EndCol = n.Column + 1 + v.f.quotedOffset(n, endCol-1)
			}
			return p
		}
	}
	if endCol > col {
		p.EndCol = p.Col + (endCol - col)
	}
	return p
}

// quotedOffset maps an offset in the text of a one-line quoted scalar
// (in runes) to the offset in the file's line after its opening quote:
// an escape (\", \n, \u00e9, a doubled single quote) is written with more characters than
// it stands for.
func (f *File) quotedOffset(n *yaml.Node, at int) int {
	line, ok := lineOf(f.Src, n.Line)
	if !ok {
		return at
	}
	r := []rune(line)
	if n.Column > len(r) {
		return at
	}
	src := r[n.Column:] // after the opening quote
	double := n.Style&yaml.DoubleQuotedStyle != 0
	i := 0
	for k := 0; k < at && i < len(src); k++ {
		switch {
		case double && src[i] == '\\' && i+1 < len(src):
			switch src[i+1] {
			case 'x':
				i += 4
			case 'u':
				i += 6
			case 'U':
				i += 10
			default:
				i += 2
			}
		case !double && src[i] == '\'' && i+1 < len(src) && src[i+1] == '\'':
			i += 2
		default:
			i++
		}
	}
	return min(i, len(src))
}

// foldedPos maps a position inside a folded scalar (a > block, or a
// plain or quoted scalar written over several lines, whose lines YAML
// joins with spaces) onto the source line that holds it: each source
// line's text is found in turn in the value.
func (v Value) foldedPos(line, col int) (diag.Pos, bool) {
	n := v.n
	block := n.Style&yaml.FoldedStyle != 0
	flow := n.Style&(yaml.LiteralStyle|yaml.FoldedStyle) == 0 && n.Kind == yaml.ScalarNode
	if !block && !flow {
		return diag.Pos{}, false
	}
	text := n.Value
	start := LineOffset(text, line)
	rest := []rune(text[start:])
	off := start + len(string(rest[:min(max(col-1, 0), len(rest))]))
	lines := strings.Split(string(v.f.Src), "\n")
	type seg struct {
		line, col int // where the segment's text starts in the source
		text      string
	}
	var segs []seg
	if block {
		indent := -1
		for l := n.Line + 1; l <= len(lines); l++ {
			src := lines[l-1]
			body := strings.TrimLeft(src, " ")
			if strings.TrimSpace(src) == "" {
				continue
			}
			in := len(src) - len(body)
			if indent < 0 {
				indent = in
			}
			if in < indent {
				break
			}
			segs = append(segs, seg{l, indent + 1, strings.TrimRight(src[indent:], " ")})
		}
	} else {
		if n.Line < 1 || n.Line > len(lines) {
			return diag.Pos{}, false
		}
		first := lines[n.Line-1]
		c := n.Column
		if n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 {
			c++
		}
		if len([]rune(first)) < c {
			return diag.Pos{}, false
		}
		firstText := string([]rune(first)[c-1:])
		if len(firstText) >= len(text) {
			return diag.Pos{}, false // a one-line scalar: the usual mapping holds
		}
		segs = append(segs, seg{n.Line, c, strings.TrimRight(firstText, " ")})
		for l := n.Line + 1; l <= len(lines) && l <= n.Line+200; l++ {
			body := strings.TrimLeft(lines[l-1], " ")
			segs = append(segs, seg{l, len(lines[l-1]) - len(body) + 1, strings.TrimRight(body, " ")})
		}
	}
	pos := 0
	for _, sg := range segs {
		t := sg.text
		if t == "" {
			continue
		}
		i := strings.Index(text[pos:], t)
		if i < 0 {
			// the segment ends the scalar (a closing quote and more)
			for len(t) > 0 && i < 0 {
				t = t[:len(t)-1]
				i = strings.Index(text[pos:], t)
			}
			if i < 0 || len(t) == 0 {
				break
			}
		}
		segStart := pos + i
		if off >= segStart && off <= segStart+len(t) {
			return diag.Pos{File: v.f.Path, Line: sg.line, Col: sg.col + len([]rune(text[segStart:off]))}, true
		}
		pos = segStart + len(t)
		if pos >= len(text) {
			break
		}
	}
	return diag.Pos{}, false
}

// Span maps a byte offset inside a scalar's text, and a length in runes,
// onto the file.
func (v Value) Span(off, runes int) diag.Pos {
	line, col := textPos(v.Text(), off)
	return v.PosIn(line, col, col+runes)
}

// Path is the dotted YAML path of the value in its file (nodes.a.set.x,
// edges[2].to), "" when unknown; a key's path is its value's.
func (v Value) Path() string {
	ptr, ok := v.Pointer()
	if !ok {
		return ""
	}
	return v.f.YAMLPath(ptr)
}

// Pointer is the JSON pointer of the value in its file (File.At finds it
// again); false when unknown.
func (v Value) Pointer() (string, bool) {
	if v.f == nil || v.f.ptrs == nil {
		return "", false
	}
	ptr, ok := v.f.ptrs[v.n]
	return ptr, ok
}

// Same reports whether a and b are the same value of the same file.
func Same(a, b Value) bool { return a.n == b.n && a.f == b.f }
