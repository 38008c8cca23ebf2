package flow

import (
	"reflect"
	"testing"
)

func TestReducers(t *testing.T) {
	obj := func(kv ...any) map[string]any {
		m := map[string]any{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	for _, tc := range []struct {
		reducer        string
		cur, upd, want any
	}{
		{"replace", 1, 2, 2},
		{"append", []any{1}, []any{2, 3}, []any{1, 2, 3}},
		{"append", nil, 4, []any{4}},
		{"union", []any{1, 2}, []any{2, 3}, []any{1, 2, 3}},
		{"merge", obj("a", obj("x", 1), "b", 1), obj("a", obj("y", 2)), obj("a", obj("y", 2), "b", 1)},
		{"deep_merge", obj("a", obj("x", 1), "b", 1), obj("a", obj("y", 2)), obj("a", obj("x", 1, "y", 2), "b", 1)},
		{"deep_merge", obj("a", obj("x", 1)), obj("a", 5), obj("a", 5)},
		{"deep_merge", nil, obj("a", 1), obj("a", 1)},
		{"add", 1, 2, 3},
		{"add", 1.5, 2, 3.5},
		{"max", 1, 2, 2},
		{"min", 1, 2, 1},
	} {
		spec, ok := LookupReducer(tc.reducer)
		if !ok {
			t.Fatalf("no reducer %s", tc.reducer)
		}
		got, err := NewReducer(spec).Reduce(tc.cur, tc.upd)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s(%v, %v) = %v, %v; want %v", tc.reducer, tc.cur, tc.upd, got, err, tc.want)
		}
	}
	spec, _ := LookupReducer("deep_merge")
	cur := obj("a", obj("x", 1))
	if _, err := NewReducer(spec).Reduce(cur, obj("a", obj("x", 2))); err != nil || cur["a"].(map[string]any)["x"] != 1 {
		t.Fatal("deep_merge changed the value it merged into")
	}
	if _, err := NewReducer(spec).Reduce(cur, 3); err == nil {
		t.Fatal("deep_merge of a number")
	}
}

// Every reducer in the table is described, and its type is checked at
// load against the field it applies to.
func TestReducerTable(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range Reducers {
		if r.Name == "" || r.Doc == "" || r.reduce == nil || seen[r.Name] {
			t.Errorf("reducer %q: unnamed, undocumented, unimplemented or listed twice", r.Name)
		}
		seen[r.Name] = true
		if r.Option != nil && r.Form == "" {
			t.Errorf("reducer %q has an option but no form to show", r.Name)
		}
	}
}

// A union by key compares items by that key; an item without it is
// refused, never taken for a copy of another keyless item.
func TestUnionByKey(t *testing.T) {
	spec, _ := LookupReducer("union")
	r := NewReducer(spec)
	r.Key = "id"
	a, b := map[string]any{"id": 1, "v": "a"}, map[string]any{"id": 2, "v": "b"}
	got, err := r.Reduce([]any{a}, []any{map[string]any{"id": 1, "v": "again"}, b})
	if err != nil || !reflect.DeepEqual(got, []any{a, b}) {
		t.Fatalf("union by id: %v, %v", got, err)
	}
	for _, upd := range []any{
		[]any{map[string]any{"v": "no id"}},
		[]any{b, map[string]any{"name": "x"}},
		[]any{"not an object"},
	} {
		if got, err := r.Reduce([]any{a}, upd); err == nil {
			t.Errorf("union of %v: %v, want an error", upd, got)
		}
	}
}
