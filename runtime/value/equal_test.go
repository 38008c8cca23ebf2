package value_test

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/trellisflow/trellis/runtime/value"
)

// Equal compares JSON values by value: a number whatever Go type holds
// it (as it is held in memory, decoded from a store, or a json.Number),
// objects and lists member by member, nil equal to nil only.
func TestEqualByValue(t *testing.T) {
	for _, c := range []struct {
		a, b any
		eq   bool
	}{
		{0, 0.0, true},
		{int64(0), 0.0, true},
		{json.Number("0"), 0.0, true},
		{json.Number("0.0"), 0, true},
		{json.Number("0.1"), 0.1, true},
		{json.Number("1e2"), 100, true},
		{uint64(1 << 63), float64(1 << 63), true},
		{uint64(math.MaxUint64), float64(math.MaxUint64), false},
		{uint64(math.MaxUint64), int64(-1), false},
		{int64(1<<53 + 1), float64(1 << 53), false},
		{int64(math.MaxInt64), float64(1 << 63), false},
		{json.Number("18446744073709551617"), uint64(math.MaxUint64), false},
		{1, 1.5, false},
		{1, "1", false},
		{true, 1, false},
		{nil, nil, true},
		{nil, 0, false},
		{nil, []any(nil), true},
		{nil, []any{}, false},
		{map[string]any{"score": 0.0}, map[string]any{"score": int64(0)}, true},
		{map[string]any{"score": 0.0}, map[string]any{"score": 0, "x": nil}, false},
		{map[string]any{"a": []any{1.0, map[string]any{"b": json.Number("2")}}}, map[string]any{"a": []any{1, map[string]any{"b": 2}}}, true},
		{[]any{1, 2}, []any{2, 1}, false},
		{[]any{"a", "b"}, []string{"a", "b"}, true},
		{[]int{1, 2}, []any{1.0, 2.0}, true},
		{map[string]int{"a": 1}, map[string]any{"a": 1.0}, true},
		{map[string]any{}, []any{}, false},
	} {
		if got := value.Equal(c.a, c.b); got != c.eq {
			t.Errorf("Equal(%#v, %#v) = %v", c.a, c.b, got)
		}
		if got := value.Equal(c.b, c.a); got != c.eq {
			t.Errorf("Equal(%#v, %#v) = %v (the other way)", c.b, c.a, got)
		}
	}
}
