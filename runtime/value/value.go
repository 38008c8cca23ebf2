package value

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"

	"gopkg.in/yaml.v3"
)

// FromYAML converts a YAML node into a JSON-compatible value. Aliases are
// expanded; a self-referencing alias, or expansion beyond a million values,
// is an error.
func FromYAML(n *yaml.Node) (any, error) {
	budget := 1_000_000
	return fromYAML(n, map[*yaml.Node]bool{}, &budget)
}

func fromYAML(n *yaml.Node, expanding map[*yaml.Node]bool, budget *int) (any, error) {
	if *budget--; *budget < 0 {
		return nil, fmt.Errorf("line %d: value expands to too many items", n.Line)
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil, nil
		}
		return fromYAML(n.Content[0], expanding, budget)
	case yaml.AliasNode:
		if expanding[n] {
			return nil, fmt.Errorf("line %d: alias *%s refers to itself", n.Line, n.Value)
		}
		expanding[n] = true
		defer delete(expanding, n)
		return fromYAML(n.Alias, expanding, budget)
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("line %d: mapping keys must be strings", k.Line)
			}
			v, err := fromYAML(n.Content[i+1], expanding, budget)
			if err != nil {
				return nil, err
			}
			m[k.Value] = v
		}
		return m, nil
	case yaml.SequenceNode:
		s := make([]any, len(n.Content))
		for i, c := range n.Content {
			v, err := fromYAML(c, expanding, budget)
			if err != nil {
				return nil, err
			}
			s[i] = v
		}
		return s, nil
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return nil, nil
		case "!!bool":
			var b bool
			err := n.Decode(&b)
			return b, err
		case "!!int":
			var i int
			if err := n.Decode(&i); err != nil {
				var f float64
				if err := n.Decode(&f); err != nil {
					return nil, err
				}
				return f, nil
			}
			return i, nil
		case "!!float":
			var f float64
			err := n.Decode(&f)
			return f, err
		default:
			return n.Value, nil
		}
	}
	return nil, fmt.Errorf("line %d: unsupported YAML node", n.Line)
}

// Normalize converts any Go value into the state value types. It returns the
// value unchanged (no allocation) when it already is one.
func Normalize(v any) (any, error) {
	switch x := v.(type) {
	case nil, bool, int, string:
		return v, nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, fmt.Errorf("%v is not a JSON number", x)
		}
		return v, nil
	case []any:
		var out []any
		for i, e := range x {
			n, err := Normalize(e)
			if err != nil {
				return nil, err
			}
			if out == nil && !same(n, e) {
				out = make([]any, len(x))
				copy(out, x[:i])
			}
			if out != nil {
				out[i] = n
			}
		}
		if out == nil {
			return v, nil
		}
		return out, nil
	case map[string]any:
		var out map[string]any
		for k, e := range x {
			n, err := Normalize(e)
			if err != nil {
				return nil, err
			}
			if out == nil && !same(n, e) {
				out = make(map[string]any, len(x))
				for k2, e2 := range x {
					out[k2] = e2
				}
			}
			if out != nil {
				out[k] = n
			}
		}
		if out == nil {
			return v, nil
		}
		return out, nil
	case json.Number:
		return number(x)
	case int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, uintptr:
		r := reflect.ValueOf(v)
		if r.CanInt() {
			return int(r.Int()), nil
		}
		u := r.Uint()
		if u > math.MaxInt {
			return float64(u), nil
		}
		return int(u), nil
	case float32:
		return float64(x), nil
	}
	r := reflect.ValueOf(v)
	switch r.Kind() {
	case reflect.Slice, reflect.Array:
		if r.Kind() == reflect.Slice && r.IsNil() {
			return nil, nil
		}
		out := make([]any, r.Len())
		for i := range out {
			n, err := Normalize(r.Index(i).Interface())
			if err != nil {
				return nil, err
			}
			out[i] = n
		}
		return out, nil
	case reflect.Map:
		// keyed by strings, or by interface values that are strings
		// (expr's fromPairs builds map[any]any)
		if k := r.Type().Key().Kind(); k == reflect.String || k == reflect.Interface {
			out := make(map[string]any, r.Len())
			it := r.MapRange()
			for it.Next() {
				key := it.Key()
				if key.Kind() == reflect.Interface {
					key = key.Elem()
				}
				if key.Kind() != reflect.String {
					return nil, fmt.Errorf("object key %v is not a string", it.Key().Interface())
				}
				n, err := Normalize(it.Value().Interface())
				if err != nil {
					return nil, err
				}
				out[key.String()] = n
			}
			return out, nil
		}
	case reflect.Pointer, reflect.Interface:
		if r.IsNil() {
			return nil, nil
		}
		return Normalize(r.Elem().Interface())
	}
	// structs and the rest: through their JSON form
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("value of type %T is not JSON: %w", v, err)
	}
	return Decode(b)
}

func same(a, b any) bool {
	switch a.(type) {
	case []any, map[string]any:
		return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
	}
	return a == b
}

// number is a JSON number as a state value: int when integral and in
// range, else float64.
func number(x json.Number) (any, error) {
	if i, err := strconv.Atoi(string(x)); err == nil {
		return i, nil
	}
	return x.Float64()
}

// TypeOf names the JSON type of a state value.
func TypeOf(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case int:
		return "integer"
	case float64:
		if x == math.Trunc(x) {
			return "integer"
		}
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return "unknown"
}
