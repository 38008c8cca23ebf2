package config

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/value"
)

// File is one parsed YAML (or JSON) file with the position of every value.
type File struct {
	Path string
	Src  []byte
	root *yaml.Node
	// json is the file as state values.
	json any
	// at maps a JSON pointer to the YAML node holding the value; keys maps
	// it to the node of the mapping key that introduced it.
	at, keys map[string]*yaml.Node
	// ptrs maps a value's (or key's) node back to its JSON pointer.
	ptrs map[*yaml.Node]string
	// expanding holds the aliases being expanded (a cycle is an error);
	// budget caps the values indexed, so alias fan-out cannot explode.
	expanding map[*yaml.Node]bool
	budget    int
	opts      ParseOptions
	// text is set for a file that is not YAML (see Text).
	text bool
}

// ParseOptions adjust how Parse reports problems.
type ParseOptions struct {
	// Duplicate, when set, names the code and the word ("key", "node")
	// for a key repeated in the mapping at ptr.
	Duplicate func(ptr string) (code diag.Code, what string)
}

// maxValues bounds the values one file may expand to.
const maxValues = 200000

var yamlLine = diag.Pattern(`^yaml: line (\d+): (.*)$`)

// Parse reads YAML (or JSON) with positions. Syntax errors and duplicate
// keys are reported to dl; a nil file means nothing usable.
func Parse(path string, src []byte, dl *diag.List, opts ...ParseOptions) *File {
	var n yaml.Node
	if err := yaml.Unmarshal(src, &n); err != nil {
		pos := diag.Pos{File: path, Line: 1, Col: 1}
		line, msg := yamlError(err)
		if line > 0 {
			pos.Line = line
		}
		if at := problemLine(src, line, msg); at > 0 {
			pos.Line = at
		}
		pos.Col = firstColumn(src, pos.Line)
		dl.Errorf(diag.CodeYAML, pos, "", "invalid YAML: %s", diag.YAMLMessage(msg))
		return nil
	}
	f := &File{Path: path, Src: src, at: map[string]*yaml.Node{}, keys: map[string]*yaml.Node{},
		ptrs: map[*yaml.Node]string{}, expanding: map[*yaml.Node]bool{}, budget: maxValues}
	if len(opts) > 0 {
		f.opts = opts[0]
	}
	if n.Kind == 0 || len(n.Content) == 0 {
		dl.Errorf(diag.CodeYAML, diag.Pos{File: path, Line: 1, Col: 1}, "", "file is empty")
		return nil
	}
	f.root = n.Content[0]
	if err := ExpandMerges(f.root); err != nil {
		dl.Errorf(diag.CodeYAML, f.Root().Pos(), "", "%v", err)
		return nil
	}
	v, err := f.index(f.root, "", dl)
	if err != nil {
		dl.Errorf(diag.CodeYAML, f.Root().Pos(), "", "%v", err)
		return nil
	}
	f.json = v
	return f
}

// yamlError splits a yaml.v3 error into its line (0 when it gives none)
// and message.
func yamlError(err error) (int, string) {
	msg := err.Error()
	if m := yamlLine().FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return line, m[2]
	}
	return 0, strings.TrimPrefix(msg, "yaml: ")
}

// maxRescan bounds the files whose syntax errors problemLine places: each
// parse it makes reads the file again.
const maxRescan = 1 << 20

// problemLine finds the line a syntax error is on. yaml.v3 gives the line
// of the construct the parser was in (a mapping, a flow collection), which
// is often lines before the mistake: the mistake is on the first line
// whose addition makes the text fail the same way, in the same construct.
// Once that line is in, every longer prefix fails the same way, so a
// binary search finds it in a few parses. It returns 0 when the error
// cannot be placed so.
func problemLine(src []byte, line int, msg string) int {
	if len(src) > maxRescan {
		return 0
	}
	ends := []int{} // ends[k-1] is the offset after line k
	for off := 0; off < len(src); {
		i := bytes.IndexByte(src[off:], '\n')
		if i < 0 {
			off = len(src)
		} else {
			off += i + 1
		}
		ends = append(ends, off)
	}
	fails := func(k int) bool {
		var n yaml.Node
		err := yaml.Unmarshal(src[:ends[k-1]], &n)
		if err == nil {
			return false
		}
		at, m := yamlError(err)
		return m == msg && at == line
	}
	lo, hi := max(line-1, 1), len(ends)
	if hi < lo || !fails(hi) {
		return 0
	}
	for lo < hi {
		mid := (lo + hi) / 2
		if fails(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// firstColumn is the column of the first character of a line that is not
// a space (1 for a blank line or one out of range).
func firstColumn(src []byte, line int) int {
	lines := bytes.Split(src, []byte("\n"))
	if line < 1 || line > len(lines) {
		return 1
	}
	l := lines[line-1]
	return len(l) - len(bytes.TrimLeft(l, " ")) + 1
}

// Text returns a file that is read as text (a prompt's body), so that
// positions inside it can be given; it holds no YAML.
func Text(path string, src []byte) *File {
	return &File{Path: path, Src: src, text: true}
}

// index converts n to state values and records every value's position.
func (f *File) index(n *yaml.Node, ptr string, dl *diag.List) (any, error) {
	f.at[ptr] = n
	if _, ok := f.ptrs[n]; !ok {
		f.ptrs[n] = ptr
	}
	if f.budget--; f.budget < 0 {
		return nil, fmt.Errorf("line %d: the document expands to more than %d values", n.Line, maxValues)
	}
	switch n.Kind {
	case yaml.AliasNode:
		if f.expanding[n] {
			return nil, fmt.Errorf("line %d: alias *%s refers to itself", n.Line, n.Value)
		}
		f.expanding[n] = true
		defer delete(f.expanding, n)
		return f.index(n.Alias, ptr, dl)
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("line %d: mapping keys must be plain strings", k.Line)
			}
			child := ptr + "/" + Escape(k.Value)
			if _, dup := m[k.Value]; dup {
				code, what := diag.CodeDuplicate, "key"
				if f.opts.Duplicate != nil {
					code, what = f.opts.Duplicate(ptr)
				}
				first := f.keys[child]
				dl.Errorf(code, f.pos(k), f.YAMLPath(child), "duplicate %s %q", what, k.Value).
					Detail = fmt.Sprintf("first defined at %s", f.pos(first))
				continue
			}
			f.keys[child] = k
			f.ptrs[k] = child
			cv, err := f.index(v, child, dl)
			if err != nil {
				return nil, err
			}
			m[k.Value] = cv
		}
		return m, nil
	case yaml.SequenceNode:
		s := make([]any, len(n.Content))
		for i, c := range n.Content {
			cv, err := f.index(c, ptr+"/"+strconv.Itoa(i), dl)
			if err != nil {
				return nil, err
			}
			s[i] = cv
		}
		return s, nil
	default:
		return value.FromYAML(n)
	}
}

var (
	escaper   = strings.NewReplacer("~", "~0", "/", "~1")
	unescaper = strings.NewReplacer("~1", "/", "~0", "~")
)

// Escape escapes a key for a JSON pointer.
func Escape(s string) string {
	if !strings.ContainsAny(s, "~/") {
		return s
	}
	return escaper.Replace(s)
}

// Unescape undoes Escape.
func Unescape(s string) string {
	if !strings.Contains(s, "~") {
		return s
	}
	return unescaper.Replace(s)
}

// Root is the file's top-level value.
func (f *File) Root() Value { return Value{n: f.root, f: f} }

// JSON is the whole file as state values.
func (f *File) JSON() any { return f.json }

// At returns the value at a JSON pointer ("/nodes/a/kind"), or the zero
// Value.
func (f *File) At(ptr string) Value {
	if n, ok := f.at[ptr]; ok {
		return Value{n: n, f: f}
	}
	return Value{}
}

// KeyAt returns the mapping key that introduced the value at ptr, or the
// zero Value.
func (f *File) KeyAt(ptr string) Value {
	if n, ok := f.keys[ptr]; ok {
		return Value{n: n, f: f}
	}
	return Value{}
}

// Nearest returns the value at ptr or at its closest ancestor, with that
// ancestor's pointer.
func (f *File) Nearest(ptr string) (Value, string) {
	for {
		if n, ok := f.at[ptr]; ok {
			return Value{n: n, f: f}, ptr
		}
		i := strings.LastIndexByte(ptr, '/')
		if i < 0 {
			return f.Root(), ""
		}
		ptr = ptr[:i]
	}
}

// YAMLPath turns a JSON pointer into the dotted path used in diagnostics
// (nodes.a.set, edges[2].to).
func (f *File) YAMLPath(ptr string) string {
	if ptr == "" {
		return ""
	}
	parts := strings.Split(ptr[1:], "/")
	var b strings.Builder
	for i, p := range parts {
		p = Unescape(p)
		if _, err := strconv.Atoi(p); err == nil {
			b.WriteString("[" + p + "]")
			continue
		}
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(p)
	}
	return b.String()
}

// Offset is the position of a byte offset in the file.
func (f *File) Offset(off int) diag.Pos {
	line, col := textPos(string(f.Src), off)
	return diag.Pos{File: f.Path, Line: line, Col: col}
}

// pos is the position of a node in this file, spanning a one-line scalar.
func (f *File) pos(n *yaml.Node) diag.Pos {
	if n == nil {
		return diag.Pos{File: f.Path, Line: 1, Col: 1}
	}
	p := diag.Pos{File: f.Path, Line: n.Line, Col: n.Column}
	if n.Kind == yaml.ScalarNode && !strings.Contains(n.Value, "\n") && n.Style&(yaml.LiteralStyle|yaml.FoldedStyle) == 0 {
		w := len([]rune(n.Value))
		if n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 {
			w = f.quotedOffset(n, w) + 2 // as written, escapes and quotes
		}
		p.EndCol = n.Column + max(w, 1)
	}
	return p
}

// textPos maps a byte offset inside text to a 1-based line and column
// (in runes).
func textPos(text string, off int) (line, col int) {
	before := text[:min(max(off, 0), len(text))]
	line = strings.Count(before, "\n") + 1
	col = len([]rune(before[strings.LastIndexByte(before, '\n')+1:])) + 1
	return line, col
}

// lineOf returns the 1-based line of src.
func lineOf(src []byte, line int) (string, bool) {
	lines := strings.SplitN(string(src), "\n", line+1)
	if line < 1 || line > len(lines) {
		return "", false
	}
	return lines[line-1], true
}

// LineOffset returns the byte offset of 1-based line in text.
func LineOffset(text string, line int) int {
	off := 0
	for l := 1; l < line; l++ {
		i := strings.IndexByte(text[off:], '\n')
		if i < 0 {
			return off
		}
		off += i + 1
	}
	return off
}
