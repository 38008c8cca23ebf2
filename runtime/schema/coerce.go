package schema

import (
	"reflect"
	"slices"
)

// Coerce brings numbers in line with the shape: an integral float64 where
// the shape says integer becomes int. Containers are copied only when a
// member changes.
func Coerce(s *Shape, v any) any {
	if s == nil {
		return v
	}
	switch x := v.(type) {
	case float64:
		if slices.Contains(s.Types, "integer") && fitsInt(x) {
			return int(x)
		}
	case []any:
		if s.Items == nil {
			return v
		}
		var out []any
		for i, e := range x {
			c := Coerce(s.Items, e)
			if out == nil && !same(c, e) {
				out = make([]any, len(x))
				copy(out, x)
			}
			if out != nil {
				out[i] = c
			}
		}
		if out != nil {
			return out
		}
	case map[string]any:
		if s.Props == nil {
			return v
		}
		var out map[string]any
		for k, e := range x {
			c := Coerce(s.Props[k], e)
			if out == nil && !same(c, e) {
				out = make(map[string]any, len(x))
				for k2, e2 := range x {
					out[k2] = e2
				}
			}
			if out != nil {
				out[k] = c
			}
		}
		if out != nil {
			return out
		}
	}
	return v
}

func same(a, b any) bool {
	switch a.(type) {
	case []any, map[string]any:
		return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
	}
	return a == b
}
