package value_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/runtime/value"
)

// A map keyed by interface values (what expr's fromPairs builds) is an
// object when every key is a string, and refused when one is not.
func TestNormalizeMapsOfAnyKeys(t *testing.T) {
	got, err := value.Normalize(map[any]any{"name": "Ada", "skills": []any{"Go"}, "n": map[any]any{"x": int64(2)}})
	want := map[string]any{"name": "Ada", "skills": []any{"Go"}, "n": map[string]any{"x": 2}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("got %#v %v", got, err)
	}
	if _, err := value.Normalize(map[any]any{"a": 1, 2: "b"}); err == nil || !strings.Contains(err.Error(), "key 2") {
		t.Fatalf("a number as a key: %v", err)
	}
}
