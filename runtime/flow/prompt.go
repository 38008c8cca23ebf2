package flow

import (
	"bytes"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"text/template"

	"gopkg.in/yaml.v3"

	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/prompt"
	"github.com/trellisflow/trellis/runtime/schema"
)

// Prompt diagnostics.
const (
	CodePrompt      = "P001" // a prompt that cannot be found, parsed or compiled
	CodePromptField = "P002" // a prompt template reads a field that does not exist
	CodePromptNull  = "P003" // a prompt template reads through a value that may be null, unguarded
)

// PromptExt is the extension of prompt files.
const PromptExt = ".prompt"

var promptKeys = []string{"description", "model", "temperature", "max_tokens", "system", "output", "fallback", "fallback_expr"}

// promptFile is a parsed prompt file, shared by the nodes that use it.
type promptFile struct {
	p       *prompt.Prompt
	src     []byte
	front   *document // nil without front matter
	bodyOff int       // byte offset of the body in src
	// templates are the front matter's template strings: system and the
	// strings of a fallback value.
	templates []frontTemplate
	fbExpr    *yaml.Node
	ok        bool
}

type frontTemplate struct {
	t         *template.Template
	at        *yaml.Node
	path      string
	withError bool
}

var identRE = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// resolvePrompt finds a prompt by name: a path ending in .prompt is
// relative to the flow file; otherwise NAME is looked up as
// prompts/NAME.prompt in the flow's directory and each directory above it.
func (c *compiler) resolvePrompt(name string) (string, bool) {
	if strings.HasSuffix(name, PromptExt) {
		p := name
		if !filepath.IsAbs(p) {
			p = filepath.Join(c.dir, p)
		}
		_, err := os.Stat(p)
		return p, err == nil
	}
	dir, err := filepath.Abs(c.dir)
	if err != nil {
		dir = c.dir
	}
	for {
		p := filepath.Join(dir, "prompts", filepath.FromSlash(name)+PromptExt)
		if _, err := os.Stat(p); err == nil {
			if rel, err := filepath.Rel(mustAbs("."), p); err == nil && !strings.HasPrefix(rel, "..") {
				p = rel
			}
			return p, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

func mustAbs(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	return a
}

// loadPrompt reads and parses a prompt file once per compile.
func (c *compiler) loadPrompt(name, path string) *promptFile {
	if pf, ok := c.prompts[path]; ok {
		return pf
	}
	pf := &promptFile{p: &prompt.Prompt{Name: strings.TrimSuffix(name, PromptExt), Path: path}}
	c.prompts[path] = pf
	src, err := os.ReadFile(path)
	if err != nil {
		c.dl.Errorf(CodePrompt, diag.Pos{File: path}, "", "cannot read prompt: %v", err)
		return pf
	}
	pf.src = src
	c.sources[path] = src
	before := len(c.dl)
	body := string(src)
	if bytes.HasPrefix(src, []byte("---\n")) || bytes.HasPrefix(src, []byte("---\r\n")) {
		end := closingFence(src)
		if end < 0 {
			c.dl.Errorf(CodePrompt, diag.Pos{File: path, Line: 1, Col: 1}, "", "front matter opened with --- is never closed")
			return pf
		}
		pf.front = parseDocument(path, src[:end], &c.dl)
		pf.bodyOff = end + bytes.IndexByte(src[end:], '\n') + 1
		if pf.bodyOff <= end {
			pf.bodyOff = len(src)
		}
		body = string(src[pf.bodyOff:])
		if pf.front != nil {
			c.promptFront(pf)
		}
	}
	if strings.TrimSpace(body) == "" {
		c.dl.Errorf(CodePrompt, c.promptPos(pf, pf.bodyOff), "", "the prompt has no body: write the message after the front matter")
	} else if t, err := prompt.Parse(pf.p.Name, body); err != nil {
		c.templateError(pf, err, nil, "")
	} else {
		pf.p.User = t
	}
	if !pf.p.HasFallback && pf.front != nil {
		c.dl.Errorf(CodePrompt, pf.front.pos(pf.front.root), "", "the prompt needs a fallback (or fallback_expr): the reply used when no model is configured or the model fails")
	} else if !pf.p.HasFallback {
		c.dl.Errorf(CodePrompt, diag.Pos{File: path, Line: 1, Col: 1}, "", "the prompt needs front matter with a fallback: the reply used when no model is configured or the model fails")
	}
	pf.ok = len(c.dl) == before
	return pf
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

func (c *compiler) promptFront(pf *promptFile) {
	d, p := pf.front, pf.p
	root := d.root
	var rawFallback any // the fallback as written, templates as text
	if root.Kind != yaml.MappingNode {
		if root.Kind != 0 {
			c.dl.Errorf(CodePrompt, d.pos(root), "", "front matter must be a mapping")
		}
		return
	}
	for _, kv := range kind.Pairs(root) {
		k, v := kv[0], kv[1]
		bad := func(format string, args ...any) {
			c.dl.Errorf(CodePrompt, d.pos(v), k.Value, format, args...)
		}
		switch k.Value {
		case "description":
		case "model":
			if v.Kind != yaml.ScalarNode || v.Value == "" {
				bad("model must be a model name")
			}
			p.Model = v.Value
		case "temperature":
			f, err := strconv.ParseFloat(v.Value, 32)
			if v.Kind != yaml.ScalarNode || err != nil || f < 0 || f > 2 {
				bad("temperature must be a number from 0 to 2")
				continue
			}
			t := float32(f)
			p.Temperature = &t
		case "max_tokens":
			n, err := strconv.Atoi(v.Value)
			if v.Kind != yaml.ScalarNode || err != nil || n < 1 {
				bad("max_tokens must be a positive integer")
				continue
			}
			p.MaxTokens = n
		case "system":
			if v.Kind != yaml.ScalarNode {
				bad("system must be a string (a template)")
				continue
			}
			if t, err := prompt.Parse(p.Name+".system", v.Value); err != nil {
				c.templateError(pf, err, v, "system")
			} else {
				p.System = t
				pf.templates = append(pf.templates, frontTemplate{t: t, at: v, path: "system"})
			}
		case "output":
			c.promptOutput(pf, v)
		case "fallback":
			p.HasFallback = true
			raw := d.value.(map[string]any)["fallback"]
			p.FallbackValue = c.fallbackValue(pf, raw, "/fallback", "fallback")
			rawFallback = raw
		case "fallback_expr":
			if v.Kind != yaml.ScalarNode {
				bad("fallback_expr must be an expression")
				continue
			}
			p.HasFallback = true
			pf.fbExpr = v
		default:
			c.dl.Errorf(CodePrompt, d.pos(k), k.Value, "unknown front matter key %q", k.Value).
				Suggestion = diag.Suggest(k.Value, promptKeys)
		}
	}
	if mapGet(root, "fallback") != nil && pf.fbExpr != nil {
		c.dl.Errorf(CodePrompt, d.pos(pf.fbExpr), "fallback_expr", "give fallback or fallback_expr, not both")
	}
	if p.Output != nil && p.FallbackValue != nil {
		if err := checkFallback(p.Output.Validator, rawFallback); err != nil {
			c.dl.Errorf(CodePrompt, d.pos(mapGet(root, "fallback")), "fallback", "the fallback does not match the output schema: %v", err)
		}
	}
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
			templateStrings(e, ptr+"/"+escape(k), into)
		}
	case []any:
		for i, e := range x {
			templateStrings(e, ptr+"/"+strconv.Itoa(i), into)
		}
	}
}

// fallbackValue turns the strings of a fallback value that hold template
// actions into templates.
func (c *compiler) fallbackValue(pf *promptFile, v any, ptr, path string) any {
	switch x := v.(type) {
	case string:
		if !strings.Contains(x, "{{") {
			return x
		}
		at := pf.front.at[ptr]
		t, err := prompt.Parse(pf.p.Name+"."+path, x)
		if err != nil {
			c.templateError(pf, err, at, path)
			return x
		}
		pf.templates = append(pf.templates, frontTemplate{t: t, at: at, path: path, withError: true})
		return t
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = c.fallbackValue(pf, e, ptr+"/"+escape(k), path+"."+k)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = c.fallbackValue(pf, e, ptr+"/"+strconv.Itoa(i), path+"["+strconv.Itoa(i)+"]")
		}
		return out
	}
	return v
}

func (c *compiler) promptOutput(pf *promptFile, v *yaml.Node) {
	d := pf.front
	if v.Kind != yaml.MappingNode || mapGet(v, "schema") == nil {
		c.dl.Errorf(CodePrompt, d.pos(v), "output", "output must be a mapping with a schema (inline, or a path relative to the prompt file)")
		return
	}
	sn := mapGet(v, "schema")
	raw, url, sdoc, ok := c.schemaSource(sn, filepath.Dir(pf.p.Path), func() any {
		return d.value.(map[string]any)["output"].(map[string]any)["schema"]
	}, pf.p.Path+".output.json")
	if !ok {
		c.dl.Errorf(CodePrompt, d.pos(sn), "output.schema", "cannot read output schema %q (a schema, or a path relative to the prompt file)", sn.Value)
		return
	}
	compiled, err := schema.NewCompiler().Compile(url, raw)
	if err != nil {
		ptr, msg := schemaProblem(err)
		at := d.pos(sn)
		if sdoc != nil {
			n, _ := sdoc.nearest(ptr)
			at = sdoc.pos(n)
		}
		c.dl.Errorf(CodePrompt, at, "output.schema", "invalid output schema: %s", msg)
		return
	}
	m, ok := raw.(map[string]any)
	if !ok {
		c.dl.Errorf(CodePrompt, d.pos(sn), "output.schema", "the output schema must be an object schema")
		return
	}
	name := identRE.ReplaceAllString(pf.p.Name, "_")
	if n := mapGet(v, "name"); n != nil {
		name = n.Value
	}
	resolve := refResolver(raw, url)
	bundled, _ := bundle(m, resolve, 0).(map[string]any)
	pf.p.Output = &prompt.Output{Name: name, Schema: bundled,
		Validator: schema.NewValidator(compiled, schema.ShapeOf(raw, resolve))}
}

var templateLine = regexp.MustCompile(`^template: [^:]*:(\d+):(?:(\d+):)? ?(.*)$`)

// templateError reports a template parse error at its line; at is the
// front matter scalar holding the template, or nil for the body.
func (c *compiler) templateError(pf *promptFile, err error, at *yaml.Node, path string) {
	msg := err.Error()
	line, col := 1, 1
	if m := templateLine.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		if m[2] != "" {
			col, _ = strconv.Atoi(m[2])
		}
		msg = m[3]
	}
	text := string(pf.src[pf.bodyOff:])
	if at != nil {
		text = at.Value
	}
	lineStart := lineOffset([]byte(text), line)
	if col == 1 {
		lineText, _, _ := strings.Cut(text[lineStart:], "\n")
		col = templateColumn(lineText, msg)
	}
	var pos diag.Pos
	if at == nil {
		rest := []rune(text[lineStart:])
		pos = c.promptPos(pf, pf.bodyOff+lineStart+len(string(rest[:min(col-1, len(rest))])))
	} else {
		pos = pf.front.exprPos(at, line, col, 0)
	}
	c.dl.Errorf(CodePrompt, pos, path, "template: %s", msg)
}

var (
	quotedToken = regexp.MustCompile(`"([^"]+)"|'(.)'`)
	actionToken = regexp.MustCompile(`\{\{(\w+)\}\}|for (\w+)$`)
)

// templateColumn finds the 1-based column (in runes) of what a template
// parse error names on its line, since text/template reports only the
// line: a quoted name, a keyword, or for an unclosed action its "{{". It
// is 1 when nothing fits.
func templateColumn(line, msg string) int {
	at := -1
	if m := quotedToken.FindStringSubmatch(msg); m != nil && m[1] != "" {
		at = strings.Index(line, m[1])
	} else if m != nil {
		at = strings.LastIndex(line, m[2]) // a bad character: the lexer stopped at the last one
	} else if m := actionToken.FindStringSubmatch(msg); m != nil {
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

// lineOffset returns the byte offset of 1-based line in b.
func lineOffset(b []byte, line int) int {
	off := 0
	for l := 1; l < line; l++ {
		i := bytes.IndexByte(b[off:], '\n')
		if i < 0 {
			return off
		}
		off += i + 1
	}
	return off
}

// promptPos turns a byte offset in the prompt file into a position.
func (c *compiler) promptPos(pf *promptFile, off int) diag.Pos {
	line, col := textPos(string(pf.src), off)
	return diag.Pos{File: pf.p.Path, Line: line, Col: col}
}

// textPos maps an offset inside a template's text to line and column.
func textPos(text string, off int) (line, col int) {
	before := text[:min(off, len(text))]
	line = strings.Count(before, "\n") + 1
	col = len([]rune(before[strings.LastIndexByte(before, '\n')+1:])) + 1
	return line, col
}

// Prompt implements kind.Builder: it loads the named prompt, checks every
// template against the state, the input and the node's vars, and compiles
// the fallback expression for this node.
func (b *builder) Prompt(at *yaml.Node, vars map[string]*schema.Shape) *prompt.Prompt {
	c := b.c
	if at == nil || at.Kind != yaml.ScalarNode {
		return nil
	}
	path, found := c.resolvePrompt(at.Value)
	if !found {
		c.dl.Errorf(CodePrompt, c.pos(at), b.path+".prompt", "prompt %q not found (looked for prompts/%s%s beside and above the flow)", at.Value, at.Value, PromptExt).
			Suggestion = diag.Suggest(at.Value, c.promptNames())
		return nil
	}
	pf := c.loadPrompt(at.Value, path)
	if pf.p.User == nil {
		return nil
	}
	if c.stateShape == nil {
		return nil // the state schema is broken; reported where it is
	}
	vs := schema.Object(vars)
	inShape := c.inShape
	report := func(pos diag.Pos, path string, pr prompt.Problem) {
		if pr.MayBeNull {
			// judged per node once the graph is known (a shared prompt
			// may be read after the field is set by one node, not another)
			c.noteNullRead(pr.Path, diag.Diagnostic{Severity: diag.Warning, Code: CodePromptNull, Pos: pos, Path: path, Summary: pr.Message})
			return
		}
		key := pos.String() + pr.Message
		if c.reported[key] {
			return
		}
		c.reported[key] = true
		c.dl.Errorf(CodePromptField, pos, path, "%s", pr.Message).Suggestion = pr.Suggestion
	}
	for _, pr := range prompt.Check(pf.p.User, prompt.Root(c.stateShape, inShape, vs, false)) {
		pos := c.promptPos(pf, pf.bodyOff+pr.Offset)
		pos.EndCol = pos.Col + pr.Len
		report(pos, "", pr)
	}
	for _, ft := range pf.templates {
		for _, pr := range prompt.Check(ft.t, prompt.Root(c.stateShape, inShape, vs, ft.withError)) {
			line, col := textPos(ft.at.Value, pr.Offset)
			report(pf.front.exprPos(ft.at, line, col, col+pr.Len), ft.path, pr)
		}
	}
	p := *pf.p
	if pf.fbExpr != nil {
		env := c.env.With("error", &schema.Shape{Types: []string{"string"}}).With("vars", vs)
		p.FallbackExpr = c.compileExprIn(pf.front, pf.fbExpr, env, false, "fallback_expr")
		if p.FallbackExpr == nil {
			return nil
		}
	}
	if !pf.ok {
		return nil
	}
	return &p
}

// promptNames lists the prompts found beside and above the flow, for
// suggestions.
func (c *compiler) promptNames() []string {
	var names []string
	dir := mustAbs(c.dir)
	for {
		root := filepath.Join(dir, "prompts")
		_ = filepath.WalkDir(root, func(p string, e os.DirEntry, err error) error {
			if err == nil && !e.IsDir() && strings.HasSuffix(p, PromptExt) {
				rel, _ := filepath.Rel(root, p)
				names = append(names, strings.TrimSuffix(filepath.ToSlash(rel), PromptExt))
			}
			return nil
		})
		parent := filepath.Dir(dir)
		if parent == dir {
			return names
		}
		dir = parent
	}
}

// Model implements kind.Builder: the flow's model, or "".
func (b *builder) Model() string { return scalar(b.c.get("model")) }

// bundle inlines every $ref of a schema, so the schema sent to a model
// stands alone. Recursive schemas are cut at a fixed depth. Annotations
// and definitions are dropped; property names, enum and const values are
// kept as written.
func bundle(v any, resolve func(string) any, depth int) any {
	x, ok := v.(map[string]any)
	if !ok {
		return v // true, false
	}
	out := map[string]any{}
	if ref, ok := x["$ref"].(string); ok && depth < 12 {
		if t, ok := bundle(resolve(ref), resolve, depth+1).(map[string]any); ok {
			maps.Copy(out, t)
		}
	}
	for k, e := range x {
		switch k {
		case "$ref", "$defs", "definitions", "$schema", "$id", "$comment", "title", "default", "examples":
		case "properties", "patternProperties", "dependentSchemas":
			if m, ok := e.(map[string]any); ok {
				named := make(map[string]any, len(m))
				for name, sub := range m {
					named[name] = bundle(sub, resolve, depth)
				}
				out[k] = named
			}
		case "allOf", "anyOf", "oneOf", "prefixItems":
			if l, ok := e.([]any); ok {
				subs := make([]any, len(l))
				for i, sub := range l {
					subs[i] = bundle(sub, resolve, depth)
				}
				out[k] = subs
			}
		case "items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames",
			"unevaluatedItems", "unevaluatedProperties", "additionalItems":
			out[k] = bundle(e, resolve, depth)
		default:
			out[k] = e
		}
	}
	return out
}
