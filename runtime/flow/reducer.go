package flow

import (
	"fmt"
	"reflect"

	"github.com/trellisflow/trellis/runtime/expression"
)

// Reducer merges a node's update into a field's current value.
type Reducer struct {
	// Name is the reducer as written: replace, append, union, merge, add,
	// max, min or expr.
	Name string
	// Key is union's identity key ("" compares whole items).
	Key string
	// Concurrent is false for replace: two writes in one superstep are an
	// error. Every other reducer folds writes in declaration order.
	Concurrent bool
	// Appends is set for append: the update's items are what was added.
	Appends bool
	expr    *expression.Program
}

// Reduce returns the merged value. cur is nil when the field is unset.
func (r *Reducer) Reduce(cur, upd any) (any, error) {
	switch r.Name {
	case "replace":
		return upd, nil
	case "append":
		cl, err := orEmptyList(cur)
		if err != nil {
			return nil, err
		}
		switch u := upd.(type) {
		case nil:
			return cl, nil
		case []any:
			out := make([]any, len(cl), len(cl)+len(u))
			copy(out, cl)
			return append(out, u...), nil
		default:
			out := make([]any, len(cl)+1)
			copy(out, cl)
			out[len(cl)] = upd
			return out, nil
		}
	case "union":
		cl, err := orEmptyList(cur)
		if err != nil {
			return nil, err
		}
		out := cl
		for _, it := range AsItems(upd) {
			if r.contains(out, it) {
				continue
			}
			if len(out) == len(cl) {
				out = append(make([]any, 0, len(cl)+1), cl...)
			}
			out = append(out, it)
		}
		return out, nil
	case "merge":
		if upd == nil {
			return cur, nil
		}
		um, ok := upd.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("merge needs an object, got %s", typeName(upd))
		}
		cm, _ := cur.(map[string]any)
		if cur != nil && cm == nil {
			return nil, fmt.Errorf("merge into %s: not an object", typeName(cur))
		}
		out := make(map[string]any, len(cm)+len(um))
		for k, v := range cm {
			out[k] = v
		}
		for k, v := range um {
			out[k] = v
		}
		return out, nil
	case "add", "max", "min":
		if cur == nil {
			return upd, nil
		}
		return arith(r.Name, cur, upd)
	case "expr":
		return r.expr.Eval(map[string]any{"current": cur, "update": upd})
	}
	return nil, fmt.Errorf("unknown reducer %q", r.Name)
}

// AsItems turns an append update into items: a list contributes its items,
// any other value is one item.
func AsItems(upd any) []any {
	switch u := upd.(type) {
	case nil:
		return nil
	case []any:
		return u
	}
	return []any{upd}
}

func orEmptyList(cur any) ([]any, error) {
	switch c := cur.(type) {
	case nil:
		return []any{}, nil
	case []any:
		return c, nil
	}
	return nil, fmt.Errorf("cannot append to %s", typeName(cur))
}

func (r *Reducer) contains(list []any, item any) bool {
	if r.Key != "" {
		im, ok := item.(map[string]any)
		if !ok {
			return false
		}
		k := im[r.Key]
		for _, e := range list {
			if em, ok := e.(map[string]any); ok && reflect.DeepEqual(em[r.Key], k) {
				return true
			}
		}
		return false
	}
	for _, e := range list {
		if reflect.DeepEqual(e, item) {
			return true
		}
	}
	return false
}

func arith(op string, a, b any) (any, error) {
	ai, aInt := a.(int)
	bi, bInt := b.(int)
	if aInt && bInt {
		switch op {
		case "add":
			return ai + bi, nil
		case "max":
			return max(ai, bi), nil
		default:
			return min(ai, bi), nil
		}
	}
	af, ok1 := toFloat(a)
	bf, ok2 := toFloat(b)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("%s needs numbers, got %s and %s", op, typeName(a), typeName(b))
	}
	switch op {
	case "add":
		return af + bf, nil
	case "max":
		return max(af, bf), nil
	default:
		return min(af, bf), nil
	}
}

func toFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case int:
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}

func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case int, float64:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}
