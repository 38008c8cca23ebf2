package flow

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"weak"

	"github.com/santhosh-tekuri/jsonschema/v5"

	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/schema"
)

// Version is the flow format version this runtime reads.
const Version = 1

// The flow format, declared once: FormatSchema generates the published
// JSON Schema from it, the compiler reads files through it.

// name is a node's name; START and END are reserved.
var name = config.String("", "").Match(`^[A-Za-z_][A-Za-z0-9_]*$`)

// definitions are the shared parts of the format, referred to by name.
var definitions = map[string]config.Field{
	"name": name,
	"duration": config.String("", "A duration such as 250ms, 2s or 1m30s.").
		Match(`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`),
	"targets": config.OneOf("", "A node name, END, or a list of node names (fan-out).",
		ref("name"), config.List("", "", config.Elem(ref("name"))).NonEmpty(1).Distinct()),
	"edge": config.Object("", "Static (to), fan-out (to: [..]), join (from: [..]), conditional (branch) or computed (route) edge.",
		config.OneOf("from", "Source node, START, or a list of nodes to join (the target waits for all).",
			ref("name"), config.List("", "", config.Elem(ref("name"))).NonEmpty(2).Distinct()).Require(),
		config.Ref("to", "", "targets"),
		config.List("branch", "Cases tried in order; the first whose condition holds is taken.", config.Elem(config.Object("", "",
			config.Condition("when", "A boolean expression over state and input."),
			config.Ref("to", "", "targets"),
			config.Ref("else", "Taken when no case holds.", "targets"),
		))).NonEmpty(1),
		config.Expression("route", "An expression yielding the name of the next node."),
		config.List("choices", "Every node the route may yield.", config.Elem(ref("name"))).NonEmpty(1).Distinct(),
		config.Ref("default", "Taken when the route yields a name not in choices.", "name"),
		config.Integer("bound", "How many times per run this edge may be taken; bounds the loops it closes.").Min(1),
		config.String("description", ""),
	).OnlyOneOf("to", "branch", "route"),
}

func ref(def string) config.Field { return config.Ref("", "", def) }

// CommonFields are the settings every node accepts, whatever its kind.
var CommonFields = []config.Field{
	config.String("description", "What the node does, for people and graphs."),
	config.Object("retry", "Retry a failing node with exponential backoff.",
		config.Integer("attempts", "Total attempts, the first included.").Min(1),
		config.Duration("backoff", "Wait before the second attempt (default 100ms)."),
		config.Duration("max_backoff", "Upper bound of the wait (default 10s)."),
		config.Number("factor", "Growth of the wait per attempt (default 2).").Min(1),
	),
	config.Duration("timeout", "Cancel an attempt that runs longer than this. One that does not stop is waited for a grace (1s by default), then left behind: nothing it does afterwards reaches the run."),
	config.Bool("interrupt_before", "Pause the run before the node runs (for a person to look, or change the state): the run ends interrupted with the node next, and resuming the thread runs it."),
	config.Bool("interrupt_after", "Pause the run after the node's step: the run ends interrupted with the next nodes pending, and resuming the thread goes on."),
	config.Object("cache", "Keep the node's writes in the store under a key: a later run with the same key (in any thread, after a restart too) replays them instead of running the node.",
		config.Expression("key", "What the writes depend on: an expression over state and input (the flow and node are part of the key).").Require(),
		config.Duration("ttl", "How long a kept result serves (default: until the cache's bound drops it)."),
	),
	config.OneOf("on_error", "What a failure after all retries does: fail the run (default), write fallback values (set) and go on, or route to another node.",
		config.Const("fail"),
		config.Object("", "",
			config.Map("set", "Fields to write instead: expressions over state, input and error.", nil),
			config.String("route", "Node to run next instead of the node's own edges."),
		).NonEmpty(1),
	),
}

// flowFields are the top-level keys of a flow file; the keys kinds declare
// (kind.Spec.FlowFields) go after them.
func flowFields(kinds []config.Field) []config.Field {
	fields := []config.Field{
		config.Any("version", "Flow format version.").Is(Version).Require(),
		config.String("name", "The flow's name (snake_case).").Match(`^[a-z][a-z0-9_]*$`).Require(),
		config.String("description", ""),
		config.Bool("interactive", "Whether a person answers this flow's runs (default true). false declares that nobody does (a flow run by a schedule, or as a batch): a place where a run may pause (an interrupt, interrupt_before or interrupt_after, in the flow, in a map's items or in a subflow at any depth) is then a warning, C006, naming its path."),
		config.Object("state", "",
			config.Any("schema", "The state's JSON Schema (draft 2020-12): inline, or a path relative to this file.").
				AlsoTypes("object", "string").Require(),
			config.Map("reducers", "A reducer per top-level field; fields without one use replace.", config.Elem(ref("reducer"))),
			config.List("readonly", "Fields set when a thread is created and never changed by a run.",
				config.Elem(config.String("", ""))).Distinct(),
		).Require(),
		config.List("input", "State fields a caller may set when starting a run; anything else is refused.",
			config.Elem(config.String("", ""))).Distinct(),
		config.Object("conversation", "Declares the flow as a conversation, so a terminal or a voice agent can talk with it: one run per message.",
			config.String("input", "The input field that receives a person's message.").Require(),
			config.String("output", "The state field holding the reply to show or speak.").Require(),
			config.Condition("until", "A condition over state: the conversation is over when it holds."),
			config.Map("attachments", "Named attachments (e.g. code: current_code): the input field that receives a file's content.",
				config.Elem(config.String("", ""))),
		),
		config.String("output", "The flow's result: a text template over the state a run ends with ({{.state.NAME}}), checked like every template. `trellis run` prints it instead of the state (for a flow without a conversation), and the API returns it with a finished run."),
		config.Map("config", "Values each run may set (run configuration): name to the JSON Schema of the value, with its default. Expressions read config.NAME, templates .config.NAME; secret: true keeps a value out of every checkpoint (a resumed run is given it again).",
			config.Elem(config.Object("", "The JSON Schema (draft 2020-12) of the value.",
				config.Bool("secret", "Never written to a checkpoint (a key, a token).")).OpenKeys())),
		config.Object("limits", "",
			config.Integer("max_steps", "Supersteps per run (default 500): a number, or an expression over config that each run evaluates (a stricter limit per run).").Min(1).AlsoTypes("string"),
		),
		config.Object("lint", "How validation reports on this flow.",
			config.List("ignore", "Warning codes this flow accepts deliberately, not reported (errors cannot be ignored); see trellis explain CODE.",
				config.Elem(config.String("", "").Match(`^[A-Z][0-9]{3}$`))).Distinct(),
		),
		toolsField,
		config.Map("nodes", "", config.Elem(ref("node"))).NonEmpty(1).KeysAre(ref("name")).Require(),
		config.List("edges", "", config.Elem(ref("edge"))).NonEmpty(1).Require(),
	}
	return append(fields, kinds...)
}

// kindFlowFields gathers the top-level keys the kinds declare; a key two
// kinds declare differently is a programmer error.
func kindFlowFields(reg kind.Registry) ([]config.Field, error) {
	var out []config.Field
	owner := map[string]string{}
	for _, sp := range reg.Specs() {
		for _, f := range sp.FlowFields {
			if i := slices.IndexFunc(out, func(o config.Field) bool { return o.Name == f.Name }); i >= 0 {
				if !reflect.DeepEqual(out[i], f) {
					return nil, fmt.Errorf("kinds %q and %q declare flow key %q differently", owner[f.Name], sp.Name, f.Name)
				}
				continue
			}
			owner[f.Name] = sp.Name
			out = append(out, f)
		}
	}
	return out, nil
}

// FormatSchema generates the JSON Schema of the flow file format from the
// declarations and the registry: every kind's block is discriminated by
// its kind name.
func FormatSchema(reg kind.Registry) ([]byte, error) {
	doc, err := formatDoc(reg)
	if err != nil {
		return nil, err
	}
	doc["$schema"] = "https://json-schema.org/draft/2020-12/schema"
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// formatDoc is the flow format's JSON Schema as a document of maps and
// lists, without its $schema (draft 2020-12).
func formatDoc(reg kind.Registry) (map[string]any, error) {
	kindKeys, err := kindFlowFields(reg)
	if err != nil {
		return nil, err
	}
	defs := map[string]any{"reducer": reducerSchema()}
	for name, f := range definitions {
		defs[name] = f.Schema()
	}
	for _, f := range flowFields(nil) {
		if slices.ContainsFunc(kindKeys, func(k config.Field) bool { return k.Name == f.Name }) {
			return nil, fmt.Errorf("a kind declares flow key %q, which the format has", f.Name)
		}
	}
	specs := reg.Specs()
	names := make([]any, len(specs))
	var branches []any
	for i, sp := range specs {
		names[i] = sp.Name
		for _, f := range sp.Fields {
			if _, clash := config.Lookup(CommonFields, f.Name); clash || f.Name == "kind" {
				return nil, fmt.Errorf("kind %q: setting %q clashes with a common setting", sp.Name, f.Name)
			}
		}
		block := config.Object("", sp.Summary, append(slices.Clone(CommonFields), sp.Fields...)...)
		def := block.Schema()
		props := def["properties"].(map[string]any)
		props["kind"] = map[string]any{"const": sp.Name, "description": sp.Summary}
		defs["kind."+sp.Name] = def
		branches = append(branches, map[string]any{
			"if":   map[string]any{"required": []any{"kind"}, "properties": map[string]any{"kind": map[string]any{"const": sp.Name}}},
			"then": map[string]any{"$ref": "#/$defs/kind." + sp.Name},
		})
	}
	node := map[string]any{
		"type":        "object",
		"required":    []any{"kind"},
		"description": "A node: a built-in kind and its settings.",
		"properties":  map[string]any{"kind": map[string]any{"enum": names, "description": "The node kind."}},
	}
	if len(branches) > 0 {
		node["allOf"] = branches
	}
	defs["node"] = node
	toolKindDefs(reg, defs)
	doc := config.Object("", "A Trellis flow: state, nodes, edges and limits.", flowFields(kindKeys)...).Schema()
	// max_steps may be an expression only over a config block
	doc["if"] = map[string]any{"not": map[string]any{"type": "object", "properties": map[string]any{"config": true}, "required": []any{"config"}}}
	doc["then"] = map[string]any{"type": "object", "properties": map[string]any{"limits": map[string]any{"type": "object",
		"properties": map[string]any{"max_steps": map[string]any{"type": "integer"}}}}}
	// x- keys are the designer's (anchors to reuse with aliases and
	// merge keys); the runtime reads none of them
	doc["patternProperties"] = map[string]any{"^x-": map[string]any{
		"description": "An extension key, for the designer: values to reuse with YAML anchors, aliases and merge keys (<<: *name). Trellis reads nothing under it."}}
	doc["title"] = "Trellis flow"
	doc["$defs"] = defs
	return doc, nil
}

// Reference renders the node-kind reference in Markdown from the
// declarations: the settings every node shares, then each kind's summary
// and settings.
func Reference(reg kind.Registry) []byte {
	var b strings.Builder
	b.WriteString("# Node kinds\n\n")
	b.WriteString("<!-- Generated from the node-kind registry by `make schema`; do not edit. -->\n\n")
	b.WriteString("Every node has a `kind` and may set these common settings:\n\n")
	b.WriteString(config.Table(CommonFields))
	b.WriteString("\nExpressions in `on_error.set` may read `error`, the failure's message.\n")
	for _, sp := range reg.Specs() {
		fmt.Fprintf(&b, "\n## `%s`\n\n%s\n", sp.Name, sp.Summary)
		if sp.Inline {
			b.WriteString("\nRuns inline: it never blocks, so the engine runs it without a goroutine of its own.\n")
		}
		if len(sp.Fields) == 0 {
			b.WriteString("\nNo settings of its own.\n")
		} else {
			b.WriteString("\n" + config.Table(sp.Fields))
		}
		if len(sp.FlowFields) > 0 {
			b.WriteString("\nIt also reads these top-level keys of the flow file:\n\n" + config.Table(sp.FlowFields))
		}
	}
	b.WriteString(ToolReference(reg))
	b.WriteString("\n## Reducers\n\nEach state field has a reducer (`state.reducers`) that says how a node's write merges with the field's value:\n\n")
	b.WriteString("| reducer | field type | writes in one superstep | what it does |\n| --- | --- | --- | --- |\n")
	for _, r := range Reducers {
		typ, writes := r.Type, "fold in node order"
		if typ == "" {
			typ = "any"
		}
		if !r.Concurrent {
			writes = "one writer only"
		}
		form := "`" + r.Name + "`"
		if r.Form != "" {
			if r.Bare {
				form += " or "
			} else {
				form = ""
			}
			form += "`" + r.Form + "`"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", form, typ, writes, r.Doc)
	}
	return []byte(b.String())
}

// formatValidator is the compiled schema of a file format: the flow
// format of one registry, or another (see Format).
type formatValidator struct {
	schema *jsonschema.Schema
	raw    map[string]any
	// top lists the top-level keys a registry's kinds declare.
	top []config.Field
	// what names a document of the format in messages ("flow").
	what string
}

// Format checks YAML documents against a file format declared, as the
// flow format is, with config fields: every problem at its position, in
// the file's terms, with a suggestion for a misspelt key.
type Format struct{ fv *formatValidator }

// NewFormat compiles the format whose documents are root (an object),
// with defs its shared definitions (config.Ref's targets); what names a
// document in messages ("test file").
func NewFormat(what string, root config.Field, defs map[string]config.Field) (*Format, error) {
	doc := root.Schema()
	d := map[string]any{}
	for name, f := range defs {
		d[name] = f.Schema()
	}
	doc["$defs"] = d
	doc["$schema"] = "https://json-schema.org/draft/2020-12/schema"
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	sch, err := schema.CompileTrusted("file:///trellis/"+strings.ReplaceAll(what, " ", "_")+".schema.json", b)
	if err != nil {
		return nil, err
	}
	fv := &formatValidator{schema: sch, what: what}
	if err := json.Unmarshal(b, &fv.raw); err != nil {
		return nil, err
	}
	return &Format{fv: fv}, nil
}

// Check reports every way d breaks the format to dl.
func (f *Format) Check(d *config.File, dl *diag.List) { f.fv.check(d, dl) }

// The compiled flow format of a registry (the JSON Schema of every kind's
// config, most of a megabyte) is kept while something holds it: a load
// while it loads, a program about to load many flows by Prepare. Held by
// nothing, it stays for the loads that follow until the collector next
// runs, and then goes, so that a program that has loaded its flows and now
// runs them does not have the collector mark it in every cycle; a load
// after that compiles it again (a few milliseconds).
var (
	formatMu sync.Mutex // guards formats; one compile at a time: flows loading at once wait for it
	formats  = map[kind.Registry]weak.Pointer[formatValidator]{}
)

// Prepare compiles the flow format of a registry ahead of the flows a
// program is about to load, and keeps it for them until release is
// called. It may be called in the background while the files are read.
func Prepare(reg kind.Registry) (release func()) {
	held := new(*formatValidator)
	*held, _ = formatFor(reg)
	return func() { *held = nil }
}

func formatFor(reg kind.Registry) (*formatValidator, error) {
	formatMu.Lock()
	defer formatMu.Unlock()
	if fv := formats[reg].Value(); fv != nil {
		return fv, nil
	}
	doc, err := formatDoc(reg)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	// generated here and tested valid: no metaschema check
	s, err := schema.CompileTrusted("file:///trellis/flow.schema.json", b)
	if err != nil {
		return nil, err
	}
	fv := &formatValidator{schema: s, what: "flow", raw: doc}
	fv.top, _ = kindFlowFields(reg)
	formats[reg] = weak.Make(fv)
	runtime.AddCleanup(fv, forgetFormat, reg)
	return fv, nil
}

// forgetFormat drops a registry's entry once its format is collected,
// unless a format compiled since took its place.
func forgetFormat(reg kind.Registry) {
	formatMu.Lock()
	defer formatMu.Unlock()
	if formats[reg].Value() == nil {
		delete(formats, reg)
	}
}

var (
	quoted       = diag.Pattern(`'([^']*)'`)
	doubleQuoted = diag.Pattern(`"([^"]*)"`)
)

// check validates the document against the flow format and turns every
// violation into a positioned diagnostic.
func (fv *formatValidator) check(d *config.File, dl *diag.List) {
	err := fv.schema.Validate(d.JSON())
	if err == nil {
		return
	}
	ve, ok := err.(*jsonschema.ValidationError)
	if !ok {
		dl.Errorf(diag.CodeConstraint, d.Root().Pos(), "", "%v", err)
		return
	}
	var leaves []*jsonschema.ValidationError
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			leaves = append(leaves, e)
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	// anyOf failures report one leaf per alternative; keep the alternative
	// that got furthest (deepest instance location), once per location.
	seen := map[string]bool{}
	for _, e := range leaves {
		keyword := e.KeywordLocation[strings.LastIndexByte(e.KeywordLocation, '/')+1:]
		if strings.Contains(e.KeywordLocation, "/anyOf/") && fv.anyOfSibling(leaves, e) {
			continue
		}
		if keyword == "not" {
			continue // settings given together (an edge's to, branch, route): the graph's checks say which (G007)
		}
		n, ptr := d.Nearest(e.InstanceLocation)
		path := d.YAMLPath(ptr)
		key := ptr + "|" + keyword + "|" + e.Message
		if seen[key] {
			continue
		}
		seen[key] = true
		switch keyword {
		case "additionalProperties":
			allowed := fv.allowedKeys(e.AbsoluteKeywordLocation)
			for _, m := range quoted().FindAllStringSubmatch(e.Message, -1) {
				k := m[1]
				kn := d.KeyAt(ptr + "/" + config.Escape(k))
				if !kn.Exists() {
					kn = n
				}
				d := dl.Errorf(diag.CodeUnknownKey, kn.Pos(), joinPath(path, k), "unknown key %q", k)
				d.Suggestion = diag.Suggest(k, allowed)
				if where := belongs(k, path); where != "" && d.Suggestion == "" {
					d.Summary += ": " + where
				}
			}
		case "required":
			for _, m := range quoted().FindAllStringSubmatch(e.Message, -1) {
				where := path
				if path == "" {
					where = fv.what
				}
				at := d.KeyAt(ptr)
				if !at.Exists() {
					at = d.At(ptr)
				}
				dl.Errorf(diag.CodeMissingKey, at.Pos(), path, "%s is missing required key %q", where, m[1])
			}
		case "type":
			dl.Errorf(diag.CodeType, n.Pos(), path, "%s: %s", fv.describeAt(path), e.Message)
		case "enum", "const":
			if strings.HasSuffix(ptr, "/kind") && strings.HasPrefix(ptr, "/nodes/") {
				got := d.At(ptr).Text()
				dl.Errorf(diag.CodeUnknownKind, n.Pos(), path, "unknown node kind %q", got).Suggestion = diag.Suggest(got, fv.kindNames())
				continue
			}
			if strings.HasSuffix(ptr, "/kind") && strings.HasPrefix(ptr, "/tools/") && strings.Count(ptr, "/") == 3 {
				got := d.At(ptr).Text()
				dl.Errorf(diag.CodeToolSetting, n.Pos(), path, "unknown tool kind %q", got).Suggestion = diag.Suggest(got, fv.defNames("tool."))
				continue
			}
			got := d.At(ptr).Text()
			dd := dl.Errorf(diag.CodeNotAllowed, n.Pos(), path, "%s: %s", fv.describeAt(path), e.Message)
			if got != "" && keyword == "enum" {
				var opts []string
				for _, m := range quoted().FindAllStringSubmatch(e.Message, -1) {
					opts = append(opts, m[1])
				}
				for _, m := range doubleQuoted().FindAllStringSubmatch(e.Message, -1) {
					opts = append(opts, m[1])
				}
				dd.Suggestion = diag.Suggest(got, opts)
			}
		case "pattern":
			at, text := n, d.At(ptr).Text()
			if strings.Contains(e.KeywordLocation, "/propertyNames/") {
				// a key breaks it: name the key
				at, text = d.KeyAt(ptr), config.Unescape(ptr[strings.LastIndexByte(ptr, '/')+1:])
				if !at.Exists() {
					at = n
				}
			}
			dl.Errorf(diag.CodeConstraint, at.Pos(), path, "%s: %q is not %s", fv.describeAt(path), text, fv.patternWords(e.AbsoluteKeywordLocation))
		default:
			dl.Errorf(diag.CodeConstraint, n.Pos(), path, "%s: %s", fv.describeAt(path), e.Message)
		}
	}
}

var (
	branchCase = diag.Pattern(`^edges\[\d+\]\.branch\[\d+\]$`)
	edgePath   = diag.Pattern(`^edges\[\d+\]$`)
	nodePath   = diag.Pattern(`^nodes\.[A-Za-z_][A-Za-z0-9_]*$`)
)

// belongs says where a key found in the wrong place (at path) belongs,
// "" when it is not a key of the format elsewhere.
func belongs(key, path string) string {
	switch {
	case key == "bound" && branchCase().MatchString(path):
		return "bound belongs on the edge, beside branch: it counts the traversals of any case that re-enter the loop"
	case (key == "choices" || key == "default") && branchCase().MatchString(path):
		return key + " belongs to a route edge (route, choices, default), not to a branch case"
	case key == "bound" && nodePath().MatchString(path):
		return "bound belongs on an edge that closes a loop, not on a node"
	case (key == "retry" || key == "timeout" || key == "cache" || key == "on_error" || key == "interrupt_before" || key == "interrupt_after") && edgePath().MatchString(path):
		return key + " belongs on a node, not on an edge"
	case (key == "when" || key == "else") && edgePath().MatchString(path):
		return key + " belongs in a case of a branch: branch: [{when: ..., to: ...}, {else: ...}]"
	case key == "reducers" && path == "":
		return "reducers belong under state: state: {schema: ..., reducers: {...}}"
	case key == "max_steps" && path == "":
		return "max_steps belongs under limits: limits: {max_steps: N}"
	}
	return ""
}

// anyOfSibling reports whether e failed inside one alternative of an anyOf
// while another alternative of the same anyOf got further into the value;
// then e is noise.
func (fv *formatValidator) anyOfSibling(leaves []*jsonschema.ValidationError, e *jsonschema.ValidationError) bool {
	i := strings.LastIndex(e.KeywordLocation, "/anyOf/")
	prefix := e.KeywordLocation[:i+len("/anyOf/")]
	for _, o := range leaves {
		if o == e || !strings.HasPrefix(o.KeywordLocation, prefix) {
			continue
		}
		if len(o.InstanceLocation) > len(e.InstanceLocation) {
			return true
		}
		if len(o.InstanceLocation) == len(e.InstanceLocation) {
			// same depth: the alternative of the value's type that failed
			// a constraint (a list with a repeated item) says more than
			// another of a type the value is not; else the first one
			et, ot := strings.HasSuffix(e.KeywordLocation, "/type"), strings.HasSuffix(o.KeywordLocation, "/type")
			switch {
			case et && !ot:
				return true
			case !et && ot:
				continue
			case o.KeywordLocation < e.KeywordLocation:
				return true
			}
		}
	}
	return false
}

// patternWords are the format's patterns said in words.
var patternWords = map[string]string{
	definitions["duration"].Pattern: "a duration such as 250ms, 2s or 1m30s",
	name.Pattern:                    "a name of letters, digits and underscores that does not start with a digit",
	`^[a-z][a-z0-9_]*$`:             "in snake_case: lowercase letters, digits and underscores, starting with a letter",
	`^[A-Z][0-9]{3}$`:               "a diagnostic code such as E006",
}

// patternWords says what the pattern at a keyword location (absolute,
// ending in /pattern) asks for: in words when it is one of the format's,
// else what the field is for, else the pattern itself.
func (fv *formatValidator) patternWords(absLoc string) string {
	frag := strings.TrimSuffix(absLoc[strings.IndexByte(absLoc, '#')+1:], "/pattern")
	var cur any = fv.raw
	for _, p := range strings.Split(strings.TrimPrefix(frag, "/"), "/") {
		switch c := cur.(type) {
		case map[string]any:
			cur = c[config.Unescape(p)]
		case []any:
			var i int
			fmt.Sscan(p, &i)
			if i < len(c) {
				cur = c[i]
			}
		}
	}
	m, _ := cur.(map[string]any)
	pattern, _ := m["pattern"].(string)
	if w, ok := patternWords[pattern]; ok {
		return w
	}
	if desc, _ := m["description"].(string); desc != "" {
		return "valid here: " + strings.TrimSuffix(desc, ".")
	}
	return "matched by the pattern " + pattern
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func (fv *formatValidator) describeAt(path string) string {
	if path == "" {
		return fv.what
	}
	return path
}

func (fv *formatValidator) kindNames() []string { return fv.defNames("kind.") }

// defNames lists the definitions' names that start with prefix, without
// it (the node kinds, kind., or the tool kinds, tool.).
func (fv *formatValidator) defNames(prefix string) []string {
	var names []string
	for k := range fv.raw["$defs"].(map[string]any) {
		if name, ok := strings.CutPrefix(k, prefix); ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// allowedKeys returns the declared properties of the schema object that an
// additionalProperties keyword belongs to.
func (fv *formatValidator) allowedKeys(absLoc string) []string {
	frag := absLoc[strings.IndexByte(absLoc, '#')+1:]
	frag = strings.TrimSuffix(frag, "/additionalProperties")
	var cur any = fv.raw
	for _, p := range strings.Split(strings.TrimPrefix(frag, "/"), "/") {
		if p == "" {
			continue
		}
		switch c := cur.(type) {
		case map[string]any:
			cur = c[config.Unescape(p)]
		case []any:
			var i int
			fmt.Sscan(p, &i)
			if i < len(c) {
				cur = c[i]
			}
		}
	}
	m, _ := cur.(map[string]any)
	props, _ := m["properties"].(map[string]any)
	keys := make([]string, 0, len(props))
	for k := range props {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Read parses src (the text of the file at path) and checks it against
// the format format makes; a document that fits is handed to decode. Any
// problem, the format's or decode's, makes a *diag.ListError with every
// problem at its line and column.
func Read[T any](path string, src []byte, what string, format func() (*Format, error), decode func(*config.File, *diag.List) T) (T, error) {
	var dl diag.List
	var out T
	doc := config.Parse(path, src, &dl)
	if doc != nil {
		fm, err := format()
		if err != nil {
			return out, fmt.Errorf("%s format: %w", what, err)
		}
		fm.Check(doc, &dl)
	}
	if !dl.HasErrors() {
		out = decode(doc, &dl)
	}
	if dl.HasErrors() {
		var zero T
		return zero, &diag.ListError{List: dl.Sort(), Sources: diag.Sources{path: src}}
	}
	return out, nil
}
