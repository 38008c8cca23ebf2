package schema

import (
	"reflect"
	"strings"
	"testing"
)

// The optional-value idiom, anyOf [X, {type: null}], reads as X that may
// also be null; other combinations stay unknown.
func TestShapeOfOptional(t *testing.T) {
	defs := map[string]any{"P": map[string]any{"type": "object", "properties": map[string]any{"h": map[string]any{"type": "string"}}}}
	resolve := func(ref string) any { return defs[strings.TrimPrefix(ref, "#/$defs/")] }
	s := ShapeOf(map[string]any{"anyOf": []any{map[string]any{"$ref": "#/$defs/P"}, map[string]any{"type": "null"}}, "default": nil}, resolve)
	if !reflect.DeepEqual(s.Types, []string{"object", "null"}) || s.Props["h"] == nil || !s.HasDefault || s.simple {
		t.Fatalf("optional object: %+v", s)
	}
	s = ShapeOf(map[string]any{"oneOf": []any{map[string]any{"type": "null"}, map[string]any{"type": "string"}}}, nil)
	if !reflect.DeepEqual(s.Types, []string{"string", "null"}) {
		t.Fatalf("optional string: %+v", s)
	}
	for _, raw := range []any{
		map[string]any{"anyOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "integer"}}},
		map[string]any{"anyOf": []any{map[string]any{"type": "null"}, map[string]any{"minLength": 1}}},
		map[string]any{"anyOf": []any{map[string]any{"type": "null"}}},
	} {
		if s := ShapeOf(raw, nil); len(s.Types) != 0 || s.simple {
			t.Fatalf("%v read as %+v", raw, s)
		}
	}
}
