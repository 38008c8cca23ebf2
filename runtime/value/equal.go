package value

import (
	"encoding/json"
	"math"
	"math/big"
	"reflect"
)

// Equal reports whether a and b are the same JSON value: numbers by
// their numeric value whatever Go type holds them (an int, an int64, a
// float64, a json.Number: 0, 0.0 and "0" as a json.Number are one
// number), strings and bools by value, lists item by item, objects by
// their keys and the values under them; null equals null only (a nil
// list or object is null here too, as it is to a comparison in expr).
// It is the equality of expressions (==, !=, in, uniq) and of reducers
// that de-duplicate, so a comparison gives the same answer on a value
// held in memory and on the value a store hands back.
func Equal(a, b any) bool {
	switch x := a.(type) {
	case nil:
		return isNil(b)
	case string:
		y, ok := b.(string)
		return ok && x == y
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case map[string]any:
		if y, ok := b.(map[string]any); ok {
			if x == nil || y == nil {
				return x == nil && y == nil
			}
			if len(x) != len(y) {
				return false
			}
			for k, v := range x {
				w, ok := y[k]
				if !ok || !Equal(v, w) {
					return false
				}
			}
			return true
		}
	case []any:
		if y, ok := b.([]any); ok {
			if x == nil || y == nil {
				return x == nil && y == nil
			}
			if len(x) != len(y) {
				return false
			}
			for i := range x {
				if !Equal(x[i], y[i]) {
					return false
				}
			}
			return true
		}
	}
	if isNil(a) || isNil(b) {
		return isNil(a) && isNil(b)
	}
	if eq, ok := numbersEqual(a, b); ok {
		return eq
	}
	return reflectEqual(reflect.ValueOf(a), reflect.ValueOf(b))
}

func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch r := reflect.ValueOf(v); r.Kind() {
	case reflect.Map, reflect.Slice, reflect.Pointer, reflect.Interface:
		return r.IsNil()
	}
	return false
}

// reflectEqual compares the values of other Go types a value may come
// as (a []string a function gave, a map of another value type) as Equal
// would their JSON form.
func reflectEqual(x, y reflect.Value) bool {
	for x.Kind() == reflect.Interface && !x.IsNil() {
		x = x.Elem()
	}
	for y.Kind() == reflect.Interface && !y.IsNil() {
		y = y.Elem()
	}
	if !x.IsValid() || !y.IsValid() {
		return !x.IsValid() && !y.IsValid()
	}
	list := func(k reflect.Kind) bool { return k == reflect.Slice || k == reflect.Array }
	switch {
	case list(x.Kind()) && list(y.Kind()):
		if x.Len() != y.Len() {
			return false
		}
		for i := range x.Len() {
			if !Equal(x.Index(i).Interface(), y.Index(i).Interface()) {
				return false
			}
		}
		return true
	case x.Kind() == reflect.Map && y.Kind() == reflect.Map:
		if x.Type().Key().Kind() != reflect.String || y.Type().Key().Kind() != reflect.String || x.Len() != y.Len() {
			return x.Type() == y.Type() && reflect.DeepEqual(x.Interface(), y.Interface())
		}
		for it := x.MapRange(); it.Next(); {
			w := y.MapIndex(reflect.ValueOf(it.Key().String()).Convert(y.Type().Key()))
			if !w.IsValid() || !Equal(it.Value().Interface(), w.Interface()) {
				return false
			}
		}
		return true
	case x.Kind() == reflect.String && y.Kind() == reflect.String:
		return x.String() == y.String()
	case x.Kind() == reflect.Bool && y.Kind() == reflect.Bool:
		return x.Bool() == y.Bool()
	}
	return x.Type() == y.Type() && x.Comparable() && x.Equal(y)
}

// numbersEqual compares a and b as numbers; ok is false when either is
// not one.
func numbersEqual(a, b any) (eq, ok bool) {
	x, ok := numberOf(a)
	if !ok {
		return false, false
	}
	y, ok := numberOf(b)
	if !ok {
		return false, false
	}
	switch {
	case x.kind == intNum && y.kind == intNum:
		return x.i == y.i, true
	case x.kind == floatNum && y.kind == floatNum:
		return x.f == y.f, true
	case x.kind == intNum && y.kind == floatNum:
		return intIsFloat(x.i, y.f), true
	case x.kind == floatNum && y.kind == intNum:
		return intIsFloat(y.i, x.f), true
	}
	rx, ry := x.rat(), y.rat()
	return rx != nil && ry != nil && rx.Cmp(ry) == 0, true
}

func intIsFloat(i int64, f float64) bool {
	return f == math.Trunc(f) && f >= -(1<<63) && f < 1<<63 && int64(f) == i
}

type numKind int

const (
	intNum numKind = iota
	floatNum
	otherNum // an unsigned integer beyond int64, or a json.Number beyond both
)

type num struct {
	kind numKind
	i    int64
	f    float64
	u    uint64
	text string // a json.Number read exactly
}

func (n num) rat() *big.Rat {
	switch n.kind {
	case intNum:
		return new(big.Rat).SetInt64(n.i)
	case floatNum:
		if math.IsNaN(n.f) || math.IsInf(n.f, 0) {
			return nil
		}
		return new(big.Rat).SetFloat64(n.f)
	}
	if n.text != "" {
		r, ok := new(big.Rat).SetString(n.text)
		if !ok {
			return nil
		}
		return r
	}
	return new(big.Rat).SetInt(new(big.Int).SetUint64(n.u))
}

func numberOf(v any) (num, bool) {
	switch x := v.(type) {
	case int:
		return num{kind: intNum, i: int64(x)}, true
	case int64:
		return num{kind: intNum, i: x}, true
	case float64:
		return num{kind: floatNum, f: x}, true
	case int8:
		return num{kind: intNum, i: int64(x)}, true
	case int16:
		return num{kind: intNum, i: int64(x)}, true
	case int32:
		return num{kind: intNum, i: int64(x)}, true
	case float32:
		return num{kind: floatNum, f: float64(x)}, true
	case uint8:
		return num{kind: intNum, i: int64(x)}, true
	case uint16:
		return num{kind: intNum, i: int64(x)}, true
	case uint32:
		return num{kind: intNum, i: int64(x)}, true
	case uint:
		return unsigned(uint64(x)), true
	case uint64:
		return unsigned(x), true
	case json.Number:
		// as Decode reads the text: an int when it is one, else a float
		if i, err := x.Int64(); err == nil {
			return num{kind: intNum, i: i}, true
		}
		if f, err := x.Float64(); err == nil {
			return num{kind: floatNum, f: f}, true
		}
		return num{kind: otherNum, text: string(x)}, true
	}
	return num{}, false
}

func unsigned(u uint64) num {
	if u <= math.MaxInt64 {
		return num{kind: intNum, i: int64(u)}
	}
	return num{kind: otherNum, u: u}
}
