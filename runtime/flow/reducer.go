package flow

import (
	"fmt"
	"strings"

	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/expression"
	"github.com/trellisflow/trellis/runtime/value"
)

// ReducerSpec declares a reducer: how a node's write to a field merges
// with the field's value. Reducers is the one table of them; the
// compiler checks fields against it, FormatSchema and Reference describe
// it, and the engine follows what it says about concurrency and appends.
type ReducerSpec struct {
	Name string
	// Doc says what it does, for the reference.
	Doc string
	// Type is the JSON type of the fields it applies to ("": any).
	Type string
	// Concurrent: several writes in one superstep fold in node declaration
	// order. Otherwise a second write in one superstep is an error.
	Concurrent bool
	// Appends: an update's items are what was added, so a checkpoint
	// stores only them and a step validates only them.
	Appends bool
	// Bare: it may be written as its name alone.
	Bare bool
	// Option, when set, is the setting of its mapping form, {NAME: option}
	// (union's key, expr's expression); Form shows that form.
	Option *config.Field
	Form   string
	reduce func(r *Reducer, cur, upd any) (any, error)
}

// Reducers lists every reducer; replace is the default.
var Reducers = []*ReducerSpec{
	{Name: "replace", Bare: true, Doc: "the update replaces the value (the default)",
		reduce: func(_ *Reducer, _, upd any) (any, error) { return upd, nil }},
	{Name: "append", Type: "array", Bare: true, Concurrent: true, Appends: true,
		Doc: "a list update adds its items, any other value is one item", reduce: reduceAppend},
	{Name: "union", Type: "array", Bare: true, Concurrent: true, Form: "{union: {key: id}}",
		Option: config.Elem(config.Object("union", "", config.String("key", "Items with the same key value are the same item."))),
		Doc:    "adds the items not already in the list (compared whole, or by key)", reduce: reduceUnion},
	{Name: "merge", Type: "object", Bare: true, Concurrent: true,
		Doc: "sets the update's keys in the object (shallow: a nested object is replaced whole)", reduce: reduceMerge},
	{Name: "deep_merge", Type: "object", Bare: true, Concurrent: true,
		Doc: "sets the update's keys in the object, merging nested objects key by key", reduce: reduceDeepMerge},
	{Name: "add", Type: "number", Bare: true, Concurrent: true, Doc: "adds the update to the number",
		reduce: func(r *Reducer, cur, upd any) (any, error) { return arith("add", cur, upd) }},
	{Name: "max", Type: "number", Bare: true, Concurrent: true, Doc: "keeps the larger number",
		reduce: func(r *Reducer, cur, upd any) (any, error) { return arith("max", cur, upd) }},
	{Name: "min", Type: "number", Bare: true, Concurrent: true, Doc: "keeps the smaller number",
		reduce: func(r *Reducer, cur, upd any) (any, error) { return arith("min", cur, upd) }},
	{Name: "expr", Concurrent: true, Form: "{expr: 'current + update'}",
		Option: config.Elem(config.Expression("expr", "An expression of current and update.")),
		Doc:    "an expression of `current` and `update` computes the new value",
		reduce: func(r *Reducer, cur, upd any) (any, error) {
			return r.expr.Eval(map[string]any{"current": cur, "update": upd})
		}},
}

// LookupReducer returns the reducer called name.
func LookupReducer(name string) (*ReducerSpec, bool) {
	for _, r := range Reducers {
		if r.Name == name {
			return r, true
		}
	}
	return nil, false
}

// reducerSchema is the JSON Schema of a reducer setting: a bare name, or
// the mapping form of a reducer with an option.
func reducerSchema() map[string]any {
	var bare []any
	var parts []string
	alts := []any{nil}
	for _, r := range Reducers {
		if r.Bare {
			bare = append(bare, r.Name)
			if r.Name == "replace" {
				parts = append(parts, r.Name+" (default)")
			} else {
				parts = append(parts, r.Name)
			}
		}
	}
	for _, r := range Reducers {
		if r.Option != nil {
			opt := *r.Option
			opt.Name = r.Name
			alts = append(alts, config.Object("", "", opt.Require()).Schema())
			parts = append(parts, r.Form)
		}
	}
	alts[0] = map[string]any{"enum": bare}
	last := len(parts) - 1
	desc := "How updates to the field merge: " + strings.Join(parts[:last], ", ") + " or " + parts[last] + "."
	return map[string]any{"description": desc, "anyOf": alts}
}

// Reducer is a field's compiled reducer.
type Reducer struct {
	Spec *ReducerSpec
	// Name is the reducer as written.
	Name string
	// Key is union's identity key ("" compares whole items).
	Key string
	// Concurrent and Appends are the spec's, at hand for the engine.
	Concurrent, Appends bool
	expr                *expression.Program
}

// NewReducer returns a field's reducer of the given spec, with no options.
func NewReducer(spec *ReducerSpec) *Reducer {
	return &Reducer{Spec: spec, Name: spec.Name, Concurrent: spec.Concurrent, Appends: spec.Appends}
}

// Reduce returns the merged value. cur is nil when the field is unset.
func (r *Reducer) Reduce(cur, upd any) (any, error) { return r.Spec.reduce(r, cur, upd) }

func reduceAppend(_ *Reducer, cur, upd any) (any, error) {
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
}

func reduceUnion(r *Reducer, cur, upd any) (any, error) {
	cl, err := orEmptyList(cur)
	if err != nil {
		return nil, err
	}
	out := cl
	for i, it := range AsItems(upd) {
		if r.Key != "" {
			// an item without its key has no identity to compare:
			// refused, rather than taken for a copy of another
			if im, ok := it.(map[string]any); !ok {
				return nil, fmt.Errorf("union by %q: item %d is %s, not an object", r.Key, i+1, typeName(it))
			} else if _, ok := im[r.Key]; !ok {
				return nil, fmt.Errorf("union by %q: item %d has no %q", r.Key, i+1, r.Key)
			}
		}
		if r.contains(out, it) {
			continue
		}
		if len(out) == len(cl) {
			out = append(make([]any, 0, len(cl)+1), cl...)
		}
		out = append(out, it)
	}
	return out, nil
}

func reduceMerge(_ *Reducer, cur, upd any) (any, error) {
	cm, um, err := objects("merge", cur, upd)
	if um == nil || err != nil {
		return cur, err
	}
	out := make(map[string]any, len(cm)+len(um))
	for k, v := range cm {
		out[k] = v
	}
	for k, v := range um {
		out[k] = v
	}
	return out, nil
}

func reduceDeepMerge(_ *Reducer, cur, upd any) (any, error) {
	cm, um, err := objects("deep_merge", cur, upd)
	if um == nil || err != nil {
		return cur, err
	}
	return deepMerge(cm, um), nil
}

// objects checks the operands of a merge: objects, or nil (an unset field,
// an update that changes nothing).
func objects(op string, cur, upd any) (cm, um map[string]any, err error) {
	if upd == nil {
		return nil, nil, nil
	}
	um, ok := upd.(map[string]any)
	if !ok {
		return nil, nil, fmt.Errorf("%s needs an object, got %s", op, typeName(upd))
	}
	cm, _ = cur.(map[string]any)
	if cur != nil && cm == nil {
		return nil, nil, fmt.Errorf("%s into %s: not an object", op, typeName(cur))
	}
	return cm, um, nil
}

// deepMerge returns a copy of cur with upd's keys set; where both hold an
// object, they are merged the same way.
func deepMerge(cur, upd map[string]any) map[string]any {
	out := make(map[string]any, len(cur)+len(upd))
	for k, v := range cur {
		out[k] = v
	}
	for k, v := range upd {
		um, uok := v.(map[string]any)
		cm, cok := out[k].(map[string]any)
		if uok && cok {
			out[k] = deepMerge(cm, um)
			continue
		}
		out[k] = v
	}
	return out
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
			if em, ok := e.(map[string]any); ok && value.Equal(em[r.Key], k) {
				return true
			}
		}
		return false
	}
	for _, e := range list {
		if value.Equal(e, item) {
			return true
		}
	}
	return false
}

func arith(op string, a, b any) (any, error) {
	if a == nil {
		return b, nil
	}
	ai, aInt := a.(int)
	bi, bInt := b.(int)
	if aInt && bInt {
		switch op {
		case "add":
			// exact or an error, as + is in expressions: a sum that
			// leaves the 64-bit range must not wrap around
			c := ai + bi
			if (c > ai) != (bi > 0) {
				return nil, fmt.Errorf("integer overflow: %d + %d is outside the 64-bit integer range", ai, bi)
			}
			return c, nil
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
