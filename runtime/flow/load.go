package flow

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/value"
)

// Diagnostic codes of the loader and the flow-format schema.
const (
	CodeYAML        = "Y001" // not valid YAML
	CodeDuplicate   = "Y002" // a mapping repeats a key
	CodeUnknownKey  = "S001" // a key the format does not have
	CodeMissingKey  = "S002" // a required key is missing
	CodeType        = "S003" // a value of the wrong type
	CodeNotAllowed  = "S004" // a value outside an enumeration
	CodeConstraint  = "S005" // any other format constraint
	CodeUnknownKind = "K001" // a node kind no one registered
	CodeKindSetting = "K002" // a kind rejected its settings
)

// document is one parsed YAML file with the positions of its values.
type document struct {
	path string
	src  []byte
	root *yaml.Node
	// value is the file as JSON-compatible values.
	value any
	// at maps a JSON pointer to the YAML node holding the value; keys maps
	// it to the node of the mapping key that introduced it.
	at, keys map[string]*yaml.Node
	// expanding holds the aliases being expanded (a cycle is an error);
	// budget caps the values indexed, so alias fan-out cannot explode.
	expanding map[*yaml.Node]bool
	budget    int
}

// maxValues bounds the values one flow file may expand to.
const maxValues = 200000

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// parseDocument reads YAML (or JSON) with positions. Syntax errors and
// duplicate keys are reported; a nil document means nothing usable.
func parseDocument(path string, src []byte, dl *diag.List) *document {
	var n yaml.Node
	if err := yaml.Unmarshal(src, &n); err != nil {
		pos := diag.Pos{File: path, Line: 1, Col: 1}
		msg := err.Error()
		if m := yamlLine.FindStringSubmatch(msg); m != nil {
			pos.Line, _ = strconv.Atoi(m[1])
			msg = m[2]
		} else {
			msg = strings.TrimPrefix(msg, "yaml: ")
		}
		dl.Errorf(CodeYAML, pos, "", "invalid YAML: %s", msg)
		return nil
	}
	d := &document{path: path, src: src, at: map[string]*yaml.Node{}, keys: map[string]*yaml.Node{},
		expanding: map[*yaml.Node]bool{}, budget: maxValues}
	if n.Kind == 0 || len(n.Content) == 0 {
		dl.Errorf(CodeYAML, diag.Pos{File: path, Line: 1, Col: 1}, "", "file is empty")
		return nil
	}
	d.root = n.Content[0]
	v, err := d.index(d.root, "", dl)
	if err != nil {
		dl.Errorf(CodeYAML, d.pos(d.root), "", "%v", err)
		return nil
	}
	d.value = v
	return d
}

// index converts n to JSON values and records every value's position.
func (d *document) index(n *yaml.Node, ptr string, dl *diag.List) (any, error) {
	d.at[ptr] = n
	if d.budget--; d.budget < 0 {
		return nil, fmt.Errorf("line %d: the document expands to more than %d values", n.Line, maxValues)
	}
	switch n.Kind {
	case yaml.AliasNode:
		if d.expanding[n] {
			return nil, fmt.Errorf("line %d: alias *%s refers to itself", n.Line, n.Value)
		}
		d.expanding[n] = true
		defer delete(d.expanding, n)
		return d.index(n.Alias, ptr, dl)
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("line %d: mapping keys must be plain strings", k.Line)
			}
			if _, dup := m[k.Value]; dup {
				code, what := CodeDuplicate, "key"
				if ptr == "/nodes" {
					code, what = CodeDuplicateNode, "node"
				}
				first := d.keys[ptr+"/"+escape(k.Value)]
				dl.Errorf(code, d.pos(k), d.yamlPath(ptr+"/"+escape(k.Value)), "duplicate %s %q", what, k.Value).
					Detail = fmt.Sprintf("first defined at %s", d.pos(first))
				continue
			}
			child := ptr + "/" + escape(k.Value)
			d.keys[child] = k
			cv, err := d.index(v, child, dl)
			if err != nil {
				return nil, err
			}
			m[k.Value] = cv
		}
		return m, nil
	case yaml.SequenceNode:
		s := make([]any, len(n.Content))
		for i, c := range n.Content {
			cv, err := d.index(c, ptr+"/"+strconv.Itoa(i), dl)
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

func escape(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}

func unescape(s string) string {
	return strings.NewReplacer("~1", "/", "~0", "~").Replace(s)
}

// pos is the position of a node in this document.
func (d *document) pos(n *yaml.Node) diag.Pos {
	if n == nil {
		return diag.Pos{File: d.path, Line: 1, Col: 1}
	}
	p := diag.Pos{File: d.path, Line: n.Line, Col: n.Column}
	if n.Kind == yaml.ScalarNode && !strings.Contains(n.Value, "\n") && n.Style&(yaml.LiteralStyle|yaml.FoldedStyle) == 0 {
		w := len([]rune(n.Value))
		if n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 {
			w += 2
		}
		p.EndCol = n.Column + max(w, 1)
	}
	return p
}

// path turns a JSON pointer into the dotted YAML path used in diagnostics.
func (d *document) yamlPath(ptr string) string {
	if ptr == "" {
		return ""
	}
	parts := strings.Split(ptr[1:], "/")
	var b strings.Builder
	for i, p := range parts {
		p = unescape(p)
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

// nearest returns the node for ptr or its closest indexed ancestor.
func (d *document) nearest(ptr string) (*yaml.Node, string) {
	for {
		if n, ok := d.at[ptr]; ok {
			return n, ptr
		}
		i := strings.LastIndexByte(ptr, '/')
		if i < 0 {
			return d.root, ""
		}
		ptr = ptr[:i]
	}
}

// exprPos maps a position inside an expression held by scalar n onto the
// file: line and col are 1-based within the expression text.
func (d *document) exprPos(n *yaml.Node, line, col, endCol int) diag.Pos {
	p := diag.Pos{File: d.path, Line: n.Line, Col: n.Column}
	switch {
	case n.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0:
		// content starts on the line after the indicator, indented
		p.Line = n.Line + line
		indent := 0
		if ln, ok := lineOf(d.src, p.Line); ok {
			indent = len(ln) - len(strings.TrimLeft(ln, " "))
		}
		p.Col = indent + col
	case line > 1:
		// a multi-line flow scalar: continuation lines keep their indent
		p.Line = n.Line + line - 1
		indent := 0
		if ln, ok := lineOf(d.src, p.Line); ok {
			indent = len(ln) - len(strings.TrimLeft(ln, " "))
		}
		p.Col = indent + col
	default:
		p.Col = n.Column + col - 1
		if n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 {
			p.Col++
		}
	}
	if endCol > col {
		p.EndCol = p.Col + (endCol - col)
	}
	return p
}

func lineOf(src []byte, line int) (string, bool) {
	lines := strings.SplitN(string(src), "\n", line+1)
	if line < 1 || line > len(lines) {
		return "", false
	}
	return lines[line-1], true
}

// readDocument loads and parses a file.
func readDocument(path string, dl *diag.List) *document {
	src, err := os.ReadFile(path)
	if err != nil {
		var pe *os.PathError
		msg := err.Error()
		if errors.As(err, &pe) {
			msg = pe.Err.Error()
		}
		dl.Errorf(CodeYAML, diag.Pos{File: path}, "", "cannot read file: %s", msg)
		return nil
	}
	return parseDocument(path, src, dl)
}
