package prompt

import (
	"bytes"
	"errors"
	"regexp"
	"strconv"
	"strings"

	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/schema"
)

// Ext is the extension of prompt files.
const Ext = ".prompt"

// Folder holds prompt files named without a path: NAME is looked up as
// prompts/NAME.prompt beside the flow and in each directory above it.
const Folder = "prompts"

var frontKeys = []string{"description", "model", "temperature", "max_tokens", "system", "output", "fallback", "fallback_expr", "fallback_calls"}

// file is a prompt file as read once per flow load, shared by the nodes
// that use it; each node then compiles its templates against its own vars.
type file struct {
	name, path string
	front      *config.File // nil without front matter
	body       config.Value
	hasBody    bool
	model      string
	temp       *float32
	maxTokens  int
	system     config.Value
	output     *Output
	// fallback is the fallback value as written (templates as text);
	// fbExpr the fallback expression.
	fallback    any
	hasFallback bool
	fbExpr      config.Value
	// calls is the fallback_calls list as written
	calls config.Value
	ok    bool
}

var identRE = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// Load reads the prompt named by at (a string scalar: a name under
// prompts/, or a path ending in .prompt relative to the flow) for the node
// b builds, checks its templates against the state, the input and vars
// (the node's variables, as .vars) and compiles its fallback. It returns
// nil after reporting a problem.
func Load(b kind.Builder, at config.Value, vars kind.Vars) *Prompt {
	if !at.IsScalar() {
		return nil
	}
	name := at.Text()
	var res *kind.Resource
	found := false
	if strings.HasSuffix(name, Ext) {
		var err error
		res, err = b.File(name)
		found = err == nil
	} else {
		res, found = b.Find(Folder, name+Ext)
	}
	if !found {
		b.Report(diag.CodeResource, at.Pos(), at.Path(), "prompt %q not found (looked for %s/%s%s beside and above the flow)", name, Folder, name, Ext).
			Suggestion = diag.Suggest(name, b.Names(Folder, Ext))
		return nil
	}
	f := b.Shared("prompt:"+res.Path, func() any { return read(b, name, res) }).(*file)
	if !f.hasBody {
		return nil
	}
	vs := schema.Object(vars)
	withVars := kind.Vars{"vars": vs}
	withError := kind.Vars{"vars": vs, "error": &schema.Shape{Types: []string{"string"}}, "no_model": &schema.Shape{Types: []string{"boolean"}},
		"tool_calls": ToolCallsShape}
	p := &Prompt{Name: f.name, Path: f.path, Model: f.model, Temperature: f.temp, MaxTokens: f.maxTokens,
		Output: f.output, HasFallback: f.hasFallback}
	ok := f.ok
	if p.User = b.Template(f.body, f.name, withVars); p.User == nil {
		ok = false
	}
	if f.system.Exists() {
		if p.System = b.Template(f.system, f.name+".system", withVars); p.System == nil {
			ok = false
		}
	}
	if f.fbExpr.Exists() {
		if p.FallbackExpr = b.Expr(f.fbExpr, withError); p.FallbackExpr == nil {
			ok = false
		}
	} else if f.front != nil && f.fallback != nil {
		var fok bool
		p.FallbackValue, fok = fallbackValue(b, f, f.fallback, "/fallback", "fallback", withError)
		ok = ok && fok
	}
	if f.calls.Exists() {
		var cok bool
		p.FallbackCalls, cok = fallbackCalls(b, f.calls, withVars)
		ok = ok && cok
	}
	if !ok {
		return nil
	}
	return p
}

// fallbackCalls compiles the fallback_calls list for one node: each
// call's arguments and condition over state, input and vars.
func fallbackCalls(b kind.Builder, v config.Value, vars kind.Vars) ([]FallbackCall, bool) {
	ok := true
	var out []FallbackCall
	for _, it := range v.Items() {
		c := FallbackCall{Tool: it.Get("tool").Text(), At: it.Get("tool")}
		if w := it.Get("when"); w.Exists() {
			if c.When = b.Condition(w, vars); c.When == nil {
				ok = false
			}
		}
		switch a := it.Get("arguments"); {
		case a.IsMapping():
			for _, e := range a.Entries() {
				p := b.Expr(e.Value, vars)
				if p == nil {
					ok = false
					continue
				}
				c.ArgNames, c.Args, c.ArgsAt = append(c.ArgNames, e.Name), append(c.Args, p), append(c.ArgsAt, e.Value)
			}
		case a.Exists():
			if c.ArgsExpr = b.Expr(a, vars); c.ArgsExpr == nil {
				ok = false
			}
		}
		out = append(out, c)
	}
	return out, ok
}

// read parses a prompt file: its front matter's settings, output schema
// and fallback, and where its body starts. Problems are reported once,
// whichever node reads the file first.
func read(b kind.Builder, name string, res *kind.Resource) *file {
	f := &file{name: strings.TrimSuffix(name, Ext), path: res.Path}
	src := res.Data
	text := config.Text(res.Path, src)
	report := func(pos diag.Pos, path, format string, args ...any) *diag.Diagnostic {
		f.ok = false
		return b.Report(diag.CodeResource, pos, path, format, args...)
	}
	f.ok = true
	bodyOff := 0
	if hasFront(src) {
		end := closingFence(src)
		if end < 0 {
			report(diag.Pos{File: res.Path, Line: 1, Col: 1}, "", "front matter opened with --- is never closed")
			return f
		}
		f.front = b.ParseYAML(res.Path, src[:end])
		if f.front == nil {
			f.ok = false
		}
		bodyOff = end + bytes.IndexByte(src[end:], '\n') + 1
		if bodyOff <= end {
			bodyOff = len(src)
		}
		if f.front != nil {
			f.readFront(b, report)
		}
	}
	if strings.TrimSpace(string(src[bodyOff:])) == "" {
		report(text.Offset(bodyOff), "", "the prompt has no body: write the message after the front matter")
	} else {
		f.body, f.hasBody = config.TextAt(text, bodyOff), true
	}
	switch {
	case f.hasFallback:
	case f.front != nil:
		report(f.front.Root().Pos(), "", "the prompt needs a fallback (or fallback_expr): the reply used when no model is configured or the model fails")
	case hasFront(src):
		// front matter that does not parse is reported as such: whether
		// it holds a fallback cannot be told
	default:
		report(diag.Pos{File: res.Path, Line: 1, Col: 1}, "", "the prompt needs front matter with a fallback: the reply used when no model is configured or the model fails")
	}
	return f
}

// hasFront reports whether a prompt file opens with front matter.
func hasFront(src []byte) bool {
	return bytes.HasPrefix(src, []byte("---\n")) || bytes.HasPrefix(src, []byte("---\r\n"))
}

// closingFence returns the offset of the line "---" that ends front matter.
func closingFence(src []byte) int {
	off := bytes.IndexByte(src, '\n') + 1
	for off < len(src) {
		end := bytes.IndexByte(src[off:], '\n')
		line := src[off:]
		if end >= 0 {
			line = src[off : off+end]
		}
		if strings.TrimRight(string(line), "\r ") == "---" {
			return off
		}
		if end < 0 {
			break
		}
		off += end + 1
	}
	return -1
}

type reporter func(pos diag.Pos, path, format string, args ...any) *diag.Diagnostic

func (f *file) readFront(b kind.Builder, report reporter) {
	root := f.front.Root()
	if !root.IsMapping() {
		if root.Exists() {
			report(root.Pos(), "", "front matter must be a mapping")
		}
		return
	}
	var rawFallback any
	for _, e := range root.Entries() {
		v := e.Value
		bad := func(format string, args ...any) { report(v.Pos(), e.Name, format, args...) }
		switch e.Name {
		case "description":
		case "model":
			if !v.IsScalar() || v.Text() == "" {
				bad("model must be a model name")
			}
			f.model = v.Text()
		case "temperature":
			x, err := strconv.ParseFloat(v.Text(), 32)
			if !v.IsScalar() || err != nil || x < 0 || x > 2 {
				bad("temperature must be a number from 0 to 2")
				continue
			}
			t := float32(x)
			f.temp = &t
		case "max_tokens":
			n, err := strconv.Atoi(v.Text())
			if !v.IsScalar() || err != nil || n < 1 {
				bad("max_tokens must be a positive integer")
				continue
			}
			f.maxTokens = n
		case "system":
			if !v.IsScalar() {
				bad("system must be a string (a template)")
				continue
			}
			f.system = v
		case "output":
			f.readOutput(b, v, report)
		case "fallback":
			f.hasFallback = true
			rawFallback, _ = v.JSON()
			f.fallback = rawFallback
		case "fallback_expr":
			if !v.IsScalar() {
				bad("fallback_expr must be an expression")
				continue
			}
			f.hasFallback = true
			f.fbExpr = v
		case "fallback_calls":
			if f.checkCalls(v, report) {
				f.calls = v
			}
		default:
			report(e.Key.Pos(), e.Name, "unknown front matter key %q", e.Name).Suggestion = diag.Suggest(e.Name, frontKeys)
		}
	}
	if root.Get("fallback").Exists() && f.fbExpr.Exists() {
		report(f.fbExpr.Pos(), "fallback_expr", "give fallback or fallback_expr, not both")
	}
	if f.output != nil && rawFallback != nil {
		if err := checkFallback(f.output.Validator, rawFallback); err != nil {
			report(root.Get("fallback").Pos(), "fallback", "the fallback does not match the output schema: %v", err)
		}
	}
}

func (f *file) readOutput(b kind.Builder, v config.Value, report reporter) {
	sn := v.Get("schema")
	if !v.IsMapping() || !sn.Exists() {
		report(v.Pos(), "output", "output must be a mapping with a schema (inline, or a path relative to the prompt file)")
		return
	}
	s, err := b.Schema(sn, "output")
	switch {
	case err != nil && err.Unreadable:
		report(sn.Pos(), "output.schema", "cannot read output schema %q (a schema, or a path relative to the prompt file)", sn.Text())
		return
	case err != nil:
		report(err.Pos, "output.schema", "invalid output schema: %s", err.Message)
		return
	}
	name := identRE.ReplaceAllString(f.name, "_")
	if n := v.Get("name"); n.Exists() {
		name = n.Text()
	}
	f.output = &Output{Name: name, Schema: s.Raw, Validator: s.Validator}
}

// checkCalls checks the form of fallback_calls: a list of calls, each a
// tool's name, its arguments (a mapping of expressions, or one
// expression) and an optional when.
func (f *file) checkCalls(v config.Value, report reporter) bool {
	if !v.IsSequence() {
		report(v.Pos(), "fallback_calls", "fallback_calls must be a list of calls: {tool: NAME, arguments: {ARG: EXPRESSION}, when: CONDITION}")
		return false
	}
	ok := true
	for i, it := range v.Items() {
		path := "fallback_calls[" + strconv.Itoa(i) + "]"
		if !it.IsMapping() {
			report(it.Pos(), path, "a fallback call must be a mapping: {tool: NAME, arguments: {ARG: EXPRESSION}, when: CONDITION}")
			ok = false
			continue
		}
		for _, e := range it.Entries() {
			switch e.Name {
			case "tool", "when":
				if !e.Value.IsScalar() || e.Value.Text() == "" {
					report(e.Value.Pos(), path+"."+e.Name, "%s must be a string", e.Name)
					ok = false
				}
			case "arguments":
				if !e.Value.IsMapping() && !e.Value.IsScalar() {
					report(e.Value.Pos(), path+".arguments", "arguments must be a mapping of argument to expression, or one expression giving them")
					ok = false
				}
			default:
				report(e.Key.Pos(), path+"."+e.Name, "unknown key %q of a fallback call", e.Name).Suggestion = diag.Suggest(e.Name, []string{"tool", "arguments", "when"})
				ok = false
			}
		}
		if !it.Get("tool").Exists() {
			report(it.Pos(), path, "a fallback call needs the tool it calls (tool: NAME)")
			ok = false
		}
	}
	return ok
}

// checkFallback validates a fallback value, as written, against the
// output schema. A template always renders to a string, so a failure at a
// template's place counts only when it is about the type (a string where
// the schema wants something else): whether the rendered text meets a
// pattern, an enum or a length is known only when it is rendered.
func checkFallback(v *schema.Validator, raw any) error {
	err := v.Validate(raw)
	var se *schema.Error
	if err == nil || !errors.As(err, &se) {
		return err
	}
	templated := map[string]bool{}
	templateStrings(raw, "", templated)
	// per templated place: whether every failure there is about the type
	onlyType := map[string]bool{}
	for _, c := range se.Causes {
		if templated[c.Pointer] {
			prev, seen := onlyType[c.Pointer]
			onlyType[c.Pointer] = (prev || !seen) && c.Keyword == "type"
		}
	}
	kept := &schema.Error{}
	for _, c := range se.Causes {
		if !templated[c.Pointer] || onlyType[c.Pointer] {
			kept.Causes = append(kept.Causes, c)
		}
	}
	if len(kept.Causes) == 0 {
		return nil
	}
	return kept
}

// templateStrings notes the JSON pointer of every string in v that holds
// template actions.
func templateStrings(v any, ptr string, into map[string]bool) {
	switch x := v.(type) {
	case string:
		if strings.Contains(x, "{{") {
			into[ptr] = true
		}
	case map[string]any:
		for k, e := range x {
			templateStrings(e, ptr+"/"+config.Escape(k), into)
		}
	case []any:
		for i, e := range x {
			templateStrings(e, ptr+"/"+strconv.Itoa(i), into)
		}
	}
}

// fallbackValue compiles the strings of a fallback value that hold
// template actions, for one node.
func fallbackValue(b kind.Builder, f *file, v any, ptr, path string, vars kind.Vars) (any, bool) {
	switch x := v.(type) {
	case string:
		if !strings.Contains(x, "{{") {
			return x, true
		}
		t := b.Template(f.front.At(ptr), f.name+"."+path, vars)
		if t == nil {
			return x, false
		}
		return t, true
	case map[string]any:
		out := make(map[string]any, len(x))
		ok := true
		for k, e := range x {
			var eok bool
			out[k], eok = fallbackValue(b, f, e, ptr+"/"+config.Escape(k), path+"."+k, vars)
			ok = ok && eok
		}
		return out, ok
	case []any:
		out := make([]any, len(x))
		ok := true
		for i, e := range x {
			var eok bool
			out[i], eok = fallbackValue(b, f, e, ptr+"/"+strconv.Itoa(i), path+"["+strconv.Itoa(i)+"]", vars)
			ok = ok && eok
		}
		return out, ok
	}
	return v, true
}
