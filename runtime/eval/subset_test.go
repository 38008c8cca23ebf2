package eval

import "testing"

// A rule's arguments are a subset of the call's: other keys allowed at
// every depth, a list item by item, numbers equal as numbers whatever
// their Go type (a model's JSON decodes them as float64).
func TestArgumentsMatchAsSubset(t *testing.T) {
	got := map[string]any{"id": float64(42), "city": "Oslo", "opts": map[string]any{"units": "metric", "days": int64(3)}, "tags": []any{"a", "b"}}
	for _, c := range []struct {
		want map[string]any
		ok   bool
	}{
		{map[string]any{}, true},
		{map[string]any{"id": 42}, true},
		{map[string]any{"id": int64(42), "city": "Oslo"}, true},
		{map[string]any{"opts": map[string]any{"days": 3}}, true},
		{map[string]any{"tags": []any{"a", "b"}}, true},
		{map[string]any{"id": 43}, false},
		{map[string]any{"id": "42"}, false},
		{map[string]any{"city": "oslo"}, false},
		{map[string]any{"missing": nil}, false},
		{map[string]any{"opts": map[string]any{"days": 4}}, false},
		{map[string]any{"tags": []any{"a"}}, false},
		{map[string]any{"opts": "metric"}, false},
	} {
		if subset(c.want, got) != c.ok {
			t.Errorf("subset(%v) = %v, want %v", c.want, !c.ok, c.ok)
		}
	}
	if subset(map[string]any{"id": 1}, nil) {
		t.Error("a call with no arguments has none to match")
	}
}
