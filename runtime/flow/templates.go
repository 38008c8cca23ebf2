package flow

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/template"

	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/tmpl"
)

// Template implements kind.Builder: it parses the template v holds,
// reporting a parse error at its line and column, then checks every field
// chain it reads against state, input and vars. A read through a value
// that may be null is judged with the graph, once it is known (a template
// shared by several nodes may run after the field is set by one, not by
// another).
func (b *builder) Template(v config.Value, name string, vars kind.Vars) *template.Template {
	c := b.c
	if !v.IsScalar() {
		return nil
	}
	path := v.Path()
	t, err := tmpl.Parse(name, v.Text())
	if err != nil {
		c.templateError(v, err, path)
		return nil
	}
	if c.stateShape == nil {
		return t // the state schema is broken; reported where it is
	}
	an := tmpl.Analyze(t, tmpl.Root(c.stateShape, c.inShape, b.templateVars(vars)))
	for _, pr := range an.Problems {
		pos := v.Span(pr.Offset, pr.Len)
		if pr.Compare {
			c.dl.Errorf(diag.CodeTemplateCompare, pos, path, "%s", pr.Message)
			continue
		}
		if pr.Call {
			d := diag.Diagnostic{Severity: diag.Error, Code: diag.CodeTemplateCall, Pos: pos, Path: path, Summary: pr.Message}
			switch {
			case pr.MayBeNull:
				d.Severity = diag.Warning
				c.noteNullRead(pr.Path, d)
				continue
			case pr.Warning:
				d.Severity = diag.Warning
			}
			c.dl.Add(d)
			continue
		}
		if pr.MayBeNull {
			c.noteNullRead(pr.Path, diag.Diagnostic{Severity: diag.Warning, Code: diag.CodeTemplateNull, Pos: pos, Path: path, Summary: pr.Message})
			continue
		}
		if pr.Open {
			c.dl.Add(diag.Diagnostic{Severity: diag.Warning, Code: diag.CodeTemplateField, Pos: pos, Path: path, Summary: pr.Message, Suggestion: pr.Suggestion})
			continue
		}
		msg := pr.Message
		if pr.Root == "vars" && v.File() != c.doc {
			// a prompt shared by nodes: each node gives it its own vars
			msg = fmt.Sprintf("%s for node %q, whose vars do not set it", msg, b.name)
		}
		c.dl.Errorf(diag.CodeTemplateField, pos, path, "%s", msg).Suggestion = pr.Suggestion
	}
	if c.reader != nil && !c.readerRan {
		c.noteRefs(c.reader, an.Refs)
	}
	if c.reader != nil {
		for _, r := range an.Reads {
			c.fieldReads = append(c.fieldReads, fieldRead{node: c.reader, ran: c.readerRan, field: r.Field,
				at: v, off: r.Offset, end: r.Len, path: path, template: true})
		}
	}
	for _, r := range an.InputReads {
		c.inputRead(r.Field, func() diag.Pos { return v.Span(r.Offset, r.Len) })
	}
	return t
}

// lineAt is the line of text holding byte offset off.
func lineAt(text string, off int) string {
	off = min(max(off, 0), len(text))
	start := strings.LastIndexByte(text[:off], '\n') + 1
	end := strings.IndexByte(text[off:], '\n')
	if end < 0 {
		return text[start:]
	}
	return text[start : off+end]
}

var templateLine = diag.Pattern(`^template: [^:]*:(\d+):(?:(\d+):)? ?(.*)$`)

// templateError reports a template parse error at its line; text/template
// gives no column, so it is found from what the message names.
func (c *compiler) templateError(v config.Value, err error, path string) {
	msg := err.Error()
	line, col := 1, 1
	if m := templateLine().FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		if m[2] != "" {
			col, _ = strconv.Atoi(m[2])
		}
		msg = m[3]
	}
	text := v.Text()
	lineText, _, _ := strings.Cut(text[config.LineOffset(text, line):], "\n")
	if col == 1 {
		col = templateColumn(lineText, msg)
	}
	msg, suggest := templateWords(msg, lineText)
	c.dl.Errorf(diag.CodeResource, v.PosIn(line, col, 0), path, "template: %s", msg).Suggestion = suggest
}

var (
	undefinedFunc = diag.Pattern(`^function "([^"]+)" not defined$`)
	badChar       = diag.Pattern(`^bad character U\+[0-9A-F]+ '(.+)'$`)
	dashedField   = diag.Pattern(`((?:\$|\.)[\pL_][\pL\pN_]*(?:\.[\pL_][\pL\pN_]*)*)\.([\pL_][\pL\pN_]*(?:-[\pL\pN_]+)+)`)
)

// templateWords rephrases text/template's message about a line of a
// template in the flow's words, with a name it most likely meant.
func templateWords(msg, line string) (string, string) {
	if m := undefinedFunc().FindStringSubmatch(msg); m != nil {
		names := slices.Sorted(maps.Keys(tmpl.Funcs))
		names = append(names, "and", "or", "not", "len", "index", "slice", "print", "printf", "println", "html", "js", "urlquery")
		return fmt.Sprintf("%q is not a function templates can call (they call %s); a field is read as .state.NAME, and a text is written outside {{ }}",
			m[1], strings.Join(names, ", ")), diag.Suggest(m[1], names)
	}
	if m := badChar().FindStringSubmatch(msg); m != nil {
		if f := dashedField().FindStringSubmatch(line); f != nil {
			return fmt.Sprintf("a field whose name holds %q is read with index: {{index %s %q}}", m[1], f[1], f[2]), ""
		}
		if m[1] == "}" {
			return "a single } does not close an action: close it with }}", ""
		}
		return fmt.Sprintf("the character %q has no meaning inside {{ }}: text to print goes outside them, or in quotes", m[1]), ""
	}
	return msg, ""
}

var (
	quotedToken = diag.Pattern(`"([^"]+)"|'(.)'`)
	actionToken = diag.Pattern(`\{\{(\w+)\}\}|for (\w+)$`)
)

// templateColumn finds the 1-based column (in runes) of what a template
// parse error names on its line, since text/template reports only the
// line: a quoted name, a keyword, or for an unclosed action its "{{". It
// is 1 when nothing fits.
func templateColumn(line, msg string) int {
	at := -1
	if m := quotedToken().FindStringSubmatch(msg); m != nil && m[1] != "" {
		at = strings.Index(line, m[1])
	} else if m != nil {
		at = strings.LastIndex(line, m[2]) // a bad character: the lexer stopped at the last one
	} else if m := actionToken().FindStringSubmatch(msg); m != nil {
		if loc := regexp.MustCompile(`\{\{-?\s*` + m[1] + m[2] + `\b`).FindStringIndex(line); loc != nil {
			at = loc[0]
		}
	} else if strings.Contains(msg, "unclosed action") {
		at = strings.LastIndex(line, "{{")
	}
	if at < 0 {
		return 1
	}
	return len([]rune(line[:at])) + 1
}
