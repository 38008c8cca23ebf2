package schema

import (
	"maps"
	"path"
	"strings"
)

// Resolver resolves the $refs of a schema for ShapeOf and Bundle: local
// JSON pointers ("#/$defs/x") and relative files ("other.json#/$defs/x").
// base is the file URL of the root schema; read reads a file by its URL
// path (nil: from the disk). The refs inside a referenced file are
// rewritten to name that file (or the files it names) relative to the root
// schema's folder, so they resolve where their file meant them to.
func Resolver(root any, base string, read Reader) func(ref string) any {
	if read == nil {
		read = diskReader
	}
	var resolve func(ref string) any
	seen := map[string]any{}
	rootDir := path.Dir(strings.TrimPrefix(base, "file://"))
	resolve = func(ref string) any {
		file, frag, _ := strings.Cut(ref, "#")
		doc := root
		if file != "" {
			p := path.Join(rootDir, file)
			if v, ok := seen[p]; ok {
				doc = v
			} else {
				b, err := read(p)
				if err != nil {
					return nil
				}
				v, err := Parse(p, b)
				if err != nil {
					return nil
				}
				v = rebaseRefs(v, rootDir, path.Dir(p), file)
				seen[p] = v
				doc = v
			}
		}
		cur := doc
		for _, part := range strings.Split(strings.TrimPrefix(frag, "/"), "/") {
			if part == "" {
				continue
			}
			m, ok := cur.(map[string]any)
			if !ok {
				return nil
			}
			cur = m[strings.NewReplacer("~1", "/", "~0", "~").Replace(part)]
		}
		return cur
	}
	return resolve
}

// rebaseRefs copies a schema read from file (as named from rootDir; it
// lives in fileDir) with its refs made relative to rootDir: "#/x" becomes
// "file#/x", "other.json#/x" the path of other.json from rootDir.
func rebaseRefs(v any, rootDir, fileDir, file string) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			if ref, ok := e.(string); ok && k == "$ref" {
				target, frag, _ := strings.Cut(ref, "#")
				switch {
				case strings.Contains(target, "://"):
				case target == "":
					ref = file + "#" + frag
				default:
					if rel, ok := relPath(rootDir, path.Join(fileDir, target)); ok {
						ref = rel + "#" + frag
					}
				}
				out[k] = ref
				continue
			}
			out[k] = rebaseRefs(e, rootDir, fileDir, file)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = rebaseRefs(e, rootDir, fileDir, file)
		}
		return out
	}
	return v
}

// relPath is filepath.Rel for slash-separated paths.
func relPath(base, target string) (string, bool) {
	b := strings.Split(strings.Trim(path.Clean(base), "/"), "/")
	t := strings.Split(strings.Trim(path.Clean(target), "/"), "/")
	if b[0] == "." || b[0] == "" {
		b = nil
	}
	i := 0
	for i < len(b) && i < len(t) && b[i] == t[i] {
		i++
	}
	parts := make([]string, 0, len(b)-i+len(t)-i)
	for range b[i:] {
		parts = append(parts, "..")
	}
	parts = append(parts, t[i:]...)
	if len(parts) == 0 {
		return ".", true
	}
	return strings.Join(parts, "/"), true
}

// Bundle inlines every $ref of a schema, so the schema stands alone (as
// sent to a model). Recursive schemas are cut at a fixed depth.
// Annotations and definitions are dropped; property names, enum and const
// values are kept as written.
func Bundle(v any, resolve func(string) any) any { return bundle(v, resolve, 0) }

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
