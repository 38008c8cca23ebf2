package value

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

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

// Normalize converts any Go value into a state value, in the form a store
// hands it back: what Decode reads from the JSON the stores write. A value
// a node writes and the same value read back by another process are then
// the same Go value, so a flow behaves alike in both. It returns the
// value unchanged (no allocation) when it already is in that form.
//
// So a nil slice or map is an empty list or object ([] and {}, never
// null: a Go list with nothing in it is an empty list); a whole float64
// is an int (JSON has one kind of number, and "2" reads back as 2); a
// string's invalid UTF-8 bytes are each U+FFFD, as encoding/json writes
// them; NaN and the infinities are refused. One exception: a whole float
// of 2^53 or more in magnitude, below 2^63, stays a float64, because it
// may be a rounding of the integer meant (9007199254740993.0 reads as
// 9007199254740992) and a schema that wants an integer refuses it; once
// the schema has had its say, Settle makes it the int the store hands
// back.
func Normalize(v any) (any, error) {
	switch x := v.(type) {
	case nil, bool, int:
		return v, nil
	case string:
		if utf8.ValidString(x) {
			return v, nil
		}
		return validUTF8(x), nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) || x == math.Trunc(x) && x > -(1<<53) && x < 1<<53 {
			return float(x)
		}
		return v, nil // the same float, not boxed again
	case []any:
		if x == nil {
			return []any{}, nil
		}
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
		if x == nil {
			return map[string]any{}, nil
		}
		var out map[string]any
		for k, e := range x {
			n, err := Normalize(e)
			if err != nil {
				return nil, err
			}
			if out == nil && (!same(n, e) || !utf8.ValidString(k)) {
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
		return validKeys(out), nil
	case json.Number:
		n, err := number(x)
		if err != nil {
			return nil, err
		}
		return Normalize(n)
	case int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, uintptr:
		r := reflect.ValueOf(v)
		if r.CanInt() {
			return int(r.Int()), nil
		}
		u := r.Uint()
		if u > math.MaxInt {
			// as the store reads it back: beyond int, a float
			return float64(u), nil
		}
		return int(u), nil
	case float32:
		return float(float64(x))
	}
	r := reflect.ValueOf(v)
	switch r.Kind() {
	case reflect.Slice, reflect.Array:
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
			return validKeys(out), nil
		}
	case reflect.Pointer, reflect.Interface:
		if r.IsNil() {
			return nil, nil
		}
		return Normalize(r.Elem().Interface())
	case reflect.String:
		return Normalize(r.String())
	case reflect.Bool:
		return r.Bool(), nil
	case reflect.Float32, reflect.Float64:
		return float(r.Float())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return int(r.Int()), nil
	}
	// structs and the rest: through their JSON form
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("value of type %T is not JSON: %w", v, err)
	}
	d, err := Decode(b)
	if err != nil {
		return nil, err
	}
	return Normalize(d)
}

// float is a float64 as a state value: an int when it is whole and below
// 2^53 in magnitude (see Normalize for those of 2^53 or more).
func float(x float64) (any, error) {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil, fmt.Errorf("%v is not a JSON number", x)
	}
	if x == math.Trunc(x) && x > -(1<<53) && x < 1<<53 {
		return int(x), nil
	}
	return x, nil
}

// wide reports whether x is a whole float that Normalize keeps as a float
// and the store hands back as an int: 2^53 or more in magnitude, within
// the int range.
func wide(x float64) bool {
	return x == math.Trunc(x) && (x <= -(1<<53) || x >= 1<<53) && x >= -(1<<63) && x < 1<<63
}

// Settle returns v, a normalised value, with its whole floats of 2^53 or
// more in magnitude made the ints a store hands back for them (below
// 2^63; larger ones stay floats, as they read back), and whether it held
// any. Containers are copied only where one changes.
func Settle(v any) (any, bool) {
	switch x := v.(type) {
	case float64:
		if wide(x) {
			return int(x), true
		}
	case []any:
		var out []any
		for i, e := range x {
			n, changed := Settle(e)
			if !changed {
				continue
			}
			if out == nil {
				out = make([]any, len(x))
				copy(out, x)
			}
			out[i] = n
		}
		if out != nil {
			return out, true
		}
	case map[string]any:
		var out map[string]any
		for k, e := range x {
			n, changed := Settle(e)
			if !changed {
				continue
			}
			if out == nil {
				out = make(map[string]any, len(x))
				for k2, e2 := range x {
					out[k2] = e2
				}
			}
			out[k] = n
		}
		if out != nil {
			return out, true
		}
	}
	return v, false
}

// validUTF8 replaces each byte of s that is not part of valid UTF-8 with
// U+FFFD, as encoding/json writes it.
func validUTF8(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// validKeys makes m's keys valid UTF-8, in place. Keys that become the
// same keep the value of the one that sorts last, as the store reads back
// the JSON encoding/json writes for m (its keys in order, the last of
// equal names winning).
func validKeys(m map[string]any) map[string]any {
	var bad []string
	for k := range m {
		if !utf8.ValidString(k) {
			bad = append(bad, k)
		}
	}
	if len(bad) == 0 {
		return m
	}
	slices.Sort(bad)
	fixed := make(map[string]string, len(bad))
	for _, k := range bad {
		fixed[k] = validUTF8(k)
	}
	// every key, valid or not, in the order encoding/json writes them
	keys := slices.Sorted(maps.Keys(m))
	out := make(map[string]any, len(m))
	for _, k := range keys {
		name := k
		if f, ok := fixed[k]; ok {
			name = f
		}
		out[name] = m[k]
	}
	return out
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

// Show writes v as Go holds it, telling apart what its JSON does not: a
// nil list or object and an empty one ([]any(nil), []), a whole float and
// an int (2.0, 2), a typed value and a state value. Long output is cut
// at max bytes.
func Show(v any, max int) string {
	var b strings.Builder
	show(&b, v, max)
	if b.Len() > max {
		return b.String()[:max] + "..."
	}
	return b.String()
}

func show(b *strings.Builder, v any, max int) {
	if b.Len() > max {
		return
	}
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool, int:
		fmt.Fprint(b, x)
	case float64:
		s := strconv.FormatFloat(x, 'g', -1, 64)
		if !strings.ContainsAny(s, ".eEIN") {
			s += ".0"
		}
		b.WriteString(s)
	case string:
		b.WriteString(strconv.Quote(x))
	case []any:
		if x == nil {
			b.WriteString("[]any(nil)")
			return
		}
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			show(b, e, max)
		}
		b.WriteByte(']')
	case map[string]any:
		if x == nil {
			b.WriteString("map[string]any(nil)")
			return
		}
		b.WriteByte('{')
		for i, k := range slices.Sorted(maps.Keys(x)) {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(strconv.Quote(k))
			b.WriteString(": ")
			show(b, x[k], max)
		}
		b.WriteByte('}')
	default:
		fmt.Fprintf(b, "%T(%#v)", v, v)
	}
}
