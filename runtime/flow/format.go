package flow

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v5"
	"gopkg.in/yaml.v3"

	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/kind"
)

// Version is the flow format version this runtime reads.
const Version = 1

// common settings every node accepts, whatever its kind.
var commonSettings = map[string]any{
	"kind":        map[string]any{"description": "The node kind: one of the built-in Go kinds."},
	"description": map[string]any{"type": "string", "description": "What the node does, for people and graphs."},
	"retry": map[string]any{
		"type":                 "object",
		"description":          "Retry a failing node with exponential backoff.",
		"additionalProperties": false,
		"properties": map[string]any{
			"attempts":    map[string]any{"type": "integer", "minimum": 1, "description": "Total attempts, the first included."},
			"backoff":     map[string]any{"$ref": "#/$defs/duration", "description": "Wait before the second attempt (default 100ms)."},
			"max_backoff": map[string]any{"$ref": "#/$defs/duration", "description": "Upper bound of the wait (default 10s)."},
			"factor":      map[string]any{"type": "number", "minimum": 1, "description": "Growth of the wait per attempt (default 2)."},
		},
	},
	"timeout": map[string]any{"$ref": "#/$defs/duration", "description": "Cancel an attempt that runs longer than this."},
	"on_error": map[string]any{
		"description": "What a failure after all retries does: fail the run (default), write fallback values (set) and go on, or route to another node.",
		"anyOf": []any{
			map[string]any{"const": "fail"},
			map[string]any{
				"type":                 "object",
				"additionalProperties": false,
				"minProperties":        1,
				"properties": map[string]any{
					"set":   map[string]any{"type": "object", "description": "Fields to write instead: expressions over state, input and error."},
					"route": map[string]any{"type": "string", "description": "Node to run next instead of the node's own edges."},
				},
			},
		},
	},
}

// FormatSchema generates the JSON Schema of the flow file format from the
// registry: every kind's block is discriminated by its kind name.
func FormatSchema(reg kind.Registry) ([]byte, error) {
	specs := reg.Specs()
	names := make([]any, len(specs))
	var branches []any
	defs := map[string]any{
		"name": map[string]any{"type": "string", "pattern": `^[A-Za-z_][A-Za-z0-9_]*$`},
		"duration": map[string]any{
			"type": "string", "pattern": `^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`,
			"description": "A duration such as 250ms, 2s or 1m30s.",
		},
		"targets": map[string]any{
			"description": "A node name, END, or a list of node names (fan-out).",
			"anyOf": []any{
				map[string]any{"$ref": "#/$defs/name"},
				map[string]any{"type": "array", "items": map[string]any{"$ref": "#/$defs/name"}, "minItems": 1},
			},
		},
		"reducer": map[string]any{
			"description": "How updates to the field merge: replace (default), append, union, merge, add, max, min, {union: {key: id}} or {expr: 'current + update'}.",
			"anyOf": []any{
				map[string]any{"enum": []any{"replace", "append", "union", "merge", "add", "max", "min"}},
				map[string]any{"type": "object", "additionalProperties": false, "required": []any{"union"},
					"properties": map[string]any{"union": map[string]any{"type": "object", "additionalProperties": false,
						"properties": map[string]any{"key": map[string]any{"type": "string", "description": "Items with the same key value are the same item."}}}}},
				map[string]any{"type": "object", "additionalProperties": false, "required": []any{"expr"},
					"properties": map[string]any{"expr": map[string]any{"type": "string", "description": "An expression of current and update."}}},
			},
		},
		"node": nil, // filled below
		"edge": map[string]any{
			"type":                 "object",
			"additionalProperties": false,
			"required":             []any{"from"},
			"description":          "Static (to), fan-out (to: [..]), join (from: [..]), conditional (branch) or computed (route) edge.",
			"properties": map[string]any{
				"from": map[string]any{"description": "Source node, START, or a list of nodes to join (the target waits for all).",
					"anyOf": []any{map[string]any{"$ref": "#/$defs/name"}, map[string]any{"type": "array", "items": map[string]any{"$ref": "#/$defs/name"}, "minItems": 2}}},
				"to": map[string]any{"$ref": "#/$defs/targets"},
				"branch": map[string]any{"type": "array", "minItems": 1, "description": "Cases tried in order; the first whose condition holds is taken.",
					"items": map[string]any{"type": "object", "additionalProperties": false,
						"properties": map[string]any{
							"when": map[string]any{"type": "string", "description": "A boolean expression over state and input."},
							"to":   map[string]any{"$ref": "#/$defs/targets"},
							"else": map[string]any{"$ref": "#/$defs/targets", "description": "Taken when no case holds."},
						}}},
				"route":       map[string]any{"type": "string", "description": "An expression yielding the name of the next node."},
				"choices":     map[string]any{"type": "array", "items": map[string]any{"$ref": "#/$defs/name"}, "minItems": 1, "description": "Every node the route may yield."},
				"default":     map[string]any{"$ref": "#/$defs/name", "description": "Taken when the route yields a name not in choices."},
				"bound":       map[string]any{"type": "integer", "minimum": 1, "description": "How many times per run this edge may be taken; bounds the loops it closes."},
				"description": map[string]any{"type": "string"},
			},
		},
	}
	for i, sp := range specs {
		names[i] = sp.Name
		var settings struct {
			Properties map[string]any `json:"properties"`
			Required   []any          `json:"required"`
		}
		if err := json.Unmarshal([]byte(sp.Settings), &settings); err != nil {
			return nil, fmt.Errorf("kind %q: settings schema: %w", sp.Name, err)
		}
		props := map[string]any{}
		for k, v := range commonSettings {
			props[k] = v
		}
		for k, v := range settings.Properties {
			if _, clash := commonSettings[k]; clash {
				return nil, fmt.Errorf("kind %q: setting %q clashes with a common setting", sp.Name, k)
			}
			props[k] = v
		}
		props["kind"] = map[string]any{"const": sp.Name, "description": sp.Summary}
		def := map[string]any{
			"type":                 "object",
			"description":          sp.Summary,
			"additionalProperties": false,
			"properties":           props,
		}
		if len(settings.Required) > 0 {
			def["required"] = settings.Required
		}
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
	doc := map[string]any{
		"$schema":              "https://json-schema.org/draft/2020-12/schema",
		"title":                "Trellis flow",
		"description":          "A Trellis flow: state, nodes, edges and limits.",
		"type":                 "object",
		"additionalProperties": false,
		"required":             []any{"version", "name", "state", "nodes", "edges"},
		"properties": map[string]any{
			"version":     map[string]any{"const": Version, "description": "Flow format version."},
			"name":        map[string]any{"type": "string", "pattern": `^[a-z][a-z0-9_]*$`, "description": "The flow's name (snake_case)."},
			"description": map[string]any{"type": "string"},
			"state": map[string]any{
				"type":                 "object",
				"additionalProperties": false,
				"required":             []any{"schema"},
				"properties": map[string]any{
					"schema": map[string]any{
						"description": "The state's JSON Schema (draft 2020-12): inline, or a path relative to this file.",
						"type":        []any{"object", "string"},
					},
					"reducers": map[string]any{"type": "object", "additionalProperties": map[string]any{"$ref": "#/$defs/reducer"},
						"description": "A reducer per top-level field; fields without one use replace."},
					"readonly": map[string]any{"type": "array", "items": map[string]any{"type": "string"}, "uniqueItems": true,
						"description": "Fields set when a thread is created and never changed by a run."},
				},
			},
			"input": map[string]any{"type": "array", "items": map[string]any{"type": "string"}, "uniqueItems": true,
				"description": "State fields a caller may set when starting a run; anything else is refused."},
			"model": map[string]any{"type": "string", "minLength": 1,
				"description": "The model this flow's prompts use unless a prompt or node names another (default: $TRELLIS_MODEL)."},
			"conversation": map[string]any{
				"type":                 "object",
				"additionalProperties": false,
				"required":             []any{"input", "output"},
				"description":          "Declares the flow as a conversation, so a terminal or a voice agent can talk with it: one run per message.",
				"properties": map[string]any{
					"input":  map[string]any{"type": "string", "description": "The input field that receives a person's message."},
					"output": map[string]any{"type": "string", "description": "The state field holding the reply to show or speak."},
					"until":  map[string]any{"type": "string", "description": "A condition over state: the conversation is over when it holds."},
					"attachments": map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "string"},
						"description": "Named attachments (e.g. code: current_code): the input field that receives a file's content."},
				},
			},
			"limits": map[string]any{
				"type": "object", "additionalProperties": false,
				"properties": map[string]any{
					"max_steps": map[string]any{"type": "integer", "minimum": 1, "description": "Supersteps per run (default 500)."},
				},
			},
			"nodes": map[string]any{
				"type":          "object",
				"minProperties": 1,
				"propertyNames": map[string]any{"$ref": "#/$defs/name"},
				"additionalProperties": map[string]any{
					"$ref": "#/$defs/node",
				},
			},
			"edges": map[string]any{"type": "array", "minItems": 1, "items": map[string]any{"$ref": "#/$defs/edge"}},
		},
		"$defs": defs,
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// formatValidator is the compiled flow schema of one registry.
type formatValidator struct {
	schema *jsonschema.Schema
	raw    map[string]any
}

var formatCache sync.Map // kind.Registry -> *formatValidator

func formatFor(reg kind.Registry) (*formatValidator, error) {
	if v, ok := formatCache.Load(reg); ok {
		return v.(*formatValidator), nil
	}
	b, err := FormatSchema(reg)
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	const url = "file:///trellis/flow.schema.json"
	if err := c.AddResource(url, bytes.NewReader(b)); err != nil {
		return nil, err
	}
	s, err := c.Compile(url)
	if err != nil {
		return nil, err
	}
	fv := &formatValidator{schema: s}
	_ = json.Unmarshal(b, &fv.raw)
	formatCache.Store(reg, fv)
	return fv, nil
}

var quoted = regexp.MustCompile(`'([^']*)'`)

// check validates the document against the flow format and turns every
// violation into a positioned diagnostic.
func (fv *formatValidator) check(d *document, dl *diag.List) {
	err := fv.schema.Validate(d.value)
	if err == nil {
		return
	}
	ve, ok := err.(*jsonschema.ValidationError)
	if !ok {
		dl.Errorf(CodeConstraint, d.pos(d.root), "", "%v", err)
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
		n, ptr := d.nearest(e.InstanceLocation)
		path := d.yamlPath(ptr)
		key := ptr + "|" + keyword + "|" + e.Message
		if seen[key] {
			continue
		}
		seen[key] = true
		switch keyword {
		case "additionalProperties":
			allowed := fv.allowedKeys(e.AbsoluteKeywordLocation)
			for _, m := range quoted.FindAllStringSubmatch(e.Message, -1) {
				k := m[1]
				kn := d.keys[ptr+"/"+escape(k)]
				if kn == nil {
					kn = n
				}
				dl.Errorf(CodeUnknownKey, d.pos(kn), joinPath(path, k), "unknown key %q", k).Suggestion = diag.Suggest(k, allowed)
			}
		case "required":
			for _, m := range quoted.FindAllStringSubmatch(e.Message, -1) {
				where := "node"
				if path != "" {
					where = path
				}
				if path == "" {
					where = "flow"
				}
				dl.Errorf(CodeMissingKey, d.pos(keyOrValue(d, ptr)), path, "%s is missing required key %q", where, m[1])
			}
		case "type":
			dl.Errorf(CodeType, d.pos(n), path, "%s: %s", describeAt(path), e.Message)
		case "enum", "const":
			if strings.HasSuffix(ptr, "/kind") && strings.HasPrefix(ptr, "/nodes/") {
				got, _ := fv.stringAt(d, ptr)
				dl.Errorf(CodeUnknownKind, d.pos(n), path, "unknown node kind %q", got).Suggestion = diag.Suggest(got, fv.kindNames())
				continue
			}
			got, _ := fv.stringAt(d, ptr)
			dd := dl.Errorf(CodeNotAllowed, d.pos(n), path, "%s: %s", describeAt(path), e.Message)
			if got != "" && keyword == "enum" {
				var opts []string
				for _, m := range quoted.FindAllStringSubmatch(e.Message, -1) {
					opts = append(opts, m[1])
				}
				for _, m := range regexp.MustCompile(`"([^"]*)"`).FindAllStringSubmatch(e.Message, -1) {
					opts = append(opts, m[1])
				}
				dd.Suggestion = diag.Suggest(got, opts)
			}
		default:
			dl.Errorf(CodeConstraint, d.pos(n), path, "%s: %s", describeAt(path), e.Message)
		}
	}
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
		if len(o.InstanceLocation) == len(e.InstanceLocation) && o.KeywordLocation < e.KeywordLocation {
			// same depth: report only the first alternative's failure
			return true
		}
	}
	return false
}

func keyOrValue(d *document, ptr string) *yaml.Node {
	if k := d.keys[ptr]; k != nil {
		return k
	}
	return d.at[ptr]
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func describeAt(path string) string {
	if path == "" {
		return "flow"
	}
	return path
}

func (fv *formatValidator) stringAt(d *document, ptr string) (string, bool) {
	n := d.at[ptr]
	if n == nil {
		return "", false
	}
	return n.Value, true
}

func (fv *formatValidator) kindNames() []string {
	var names []string
	for k := range fv.raw["$defs"].(map[string]any) {
		if name, ok := strings.CutPrefix(k, "kind."); ok {
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
			cur = c[unescape(p)]
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
