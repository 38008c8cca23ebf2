package schema_test

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/runtime/schema"
	"github.com/trellisflow/trellis/runtime/value"
)

// TestFastCheckAgreesWithValidator compares the fast path for type-only
// schemas with the JSON Schema library on random schemas and values.
func TestFastCheckAgreesWithValidator(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var genSchema func(depth int) map[string]any
	genSchema = func(depth int) map[string]any {
		s := randomTyped(r)
		if depth < 2 && r.IntN(2) == 0 {
			s["items"] = genSchema(depth + 1)
		}
		if depth < 2 && r.IntN(2) == 0 {
			props := map[string]any{"a": genSchema(depth + 1), "b": genSchema(depth + 1)}
			s["properties"] = props
			if r.IntN(2) == 0 {
				s["required"] = []any{"a"}
			}
			if r.IntN(2) == 0 {
				s["additionalProperties"] = false
			}
		}
		if r.IntN(4) == 0 {
			s["description"] = "annotation"
		}
		return s
	}
	genValue := func(int) any {
		return randomValue(r, 0, func() any {
			switch r.IntN(5) {
			case 0:
				return nil
			case 1:
				return r.IntN(2) == 0
			case 2:
				return r.IntN(100) - 50
			case 3:
				return float64(r.IntN(10)) / 2
			}
			return "s"
		})
	}
	for i := range 3000 {
		raw := genSchema(0)
		c := schema.NewCompiler(nil)
		url := fmt.Sprintf("file:///s%d.json", i)
		compiled, err := c.Compile(url, raw)
		if err != nil {
			t.Fatal(err)
		}
		fast := schema.NewValidator(compiled, schema.ShapeOf(raw, nil))
		slow := schema.NewValidator(compiled, nil)
		for range 10 {
			v := genValue(0)
			if (fast.Validate(v) == nil) != (slow.Validate(v) == nil) {
				sb, _ := json.Marshal(raw)
				vb, _ := json.Marshal(v)
				t.Fatalf("schema %s value %s: fast %v, library %v", sb, vb, fast.Validate(v), slow.Validate(v))
			}
		}
	}
}

func TestNormalizeAndCoerce(t *testing.T) {
	v, err := value.Normalize(map[string]int64{"a": 3})
	if err != nil || fmt.Sprint(v) != "map[a:3]" {
		t.Fatalf("%v %v", v, err)
	}
	if _, ok := v.(map[string]any)["a"].(int); !ok {
		t.Fatalf("int64 not normalised to int: %T", v.(map[string]any)["a"])
	}
	sh := &schema.Shape{Types: []string{"array"}, Items: &schema.Shape{Types: []string{"integer"}}}
	c := schema.Coerce(sh, []any{1.0, 2.5})
	if _, ok := c.([]any)[0].(int); !ok || c.([]any)[1] != 2.5 {
		t.Fatalf("coerce %#v", c)
	}
	if _, err := value.Normalize([]float32{1}); err != nil {
		t.Fatal(err)
	}
}

// A schema is compiled once per process for its url and text, and again
// when a file it refers to reads differently.
func TestCompiledOnceByContent(t *testing.T) {
	files := map[string]string{"/s/item.json": `{"type": "integer"}`}
	read := func(p string) ([]byte, error) {
		if s, ok := files[p]; ok {
			return []byte(s), nil
		}
		return nil, os.ErrNotExist
	}
	raw := map[string]any{"type": "array", "items": map[string]any{"$ref": "item.json"}}
	a, err := schema.NewCompiler(read).Compile("file:///s/list.json", raw)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := schema.NewCompiler(read).Compile("file:///s/list.json", raw)
	if a != b {
		t.Fatal("the same schema was compiled twice")
	}
	if err := a.Validate([]any{"x"}); err == nil {
		t.Fatal("a string passed as an integer")
	}
	files["/s/item.json"] = `{"type": "string"}`
	c, err := schema.NewCompiler(read).Compile("file:///s/list.json", raw)
	if err != nil || c == a {
		t.Fatalf("a changed $ref target did not recompile: %v", err)
	}
	if err := c.Validate([]any{"x"}); err != nil {
		t.Fatalf("the recompiled schema is stale: %v", err)
	}
	other := map[string]any{"type": "array", "items": map[string]any{"$ref": "item.json"}, "minItems": 1}
	if d, _ := schema.NewCompiler(read).Compile("file:///s/list.json", other); d == c {
		t.Fatal("another text under the same url shares a compiled schema")
	}
}

// A float is taken where an integer is due only when no rounding can
// have made it: below 2^53 in magnitude, where every integer is exactly a
// float64. A float of 2^53 or more (9007199254740993.0 reads as
// 9007199254740992) is refused, saying to write the integer in full, and
// is never coerced to an int; an integer written in full is an int, and
// exact, to the ends of the 64-bit range.
func TestFloatsWhereIntegersAreDue(t *testing.T) {
	raw := map[string]any{"type": "object", "properties": map[string]any{"n": map[string]any{"type": "integer"}, "x": map[string]any{"type": "number"}}}
	compiled, err := schema.NewCompiler(nil).Compile("file:///ints.json", raw)
	if err != nil {
		t.Fatal(err)
	}
	shape := schema.ShapeOf(raw, nil)
	v := schema.NewValidator(compiled, shape)
	for _, c := range []struct {
		n    any
		ok   bool
		want string
	}{
		{float64(1<<53 - 1), true, ""},
		{float64(-(1<<53 - 1)), true, ""},
		{3.0, true, ""},
		{9007199254740993, true, ""}, // an int: exact
		{float64(1 << 53), false, "write the integer in full"},
		{-float64(1 << 53), false, "write the integer in full"},
		{float64(1 << 62), false, "write the integer in full"},
		{1e23, false, "outside the 64-bit integer range"},
		{2.5, false, ""},
	} {
		err := v.Validate(map[string]any{"n": c.n})
		if (err == nil) != c.ok || err != nil && c.want != "" && !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v (%T): %v", c.n, c.n, err)
		}
		coerced := schema.Coerce(shape, map[string]any{"n": c.n}).(map[string]any)["n"]
		if f, isFloat := c.n.(float64); isFloat && f == math.Trunc(f) {
			if _, isInt := coerced.(int); isInt != c.ok {
				t.Errorf("%v coerced to %#v", c.n, coerced)
			}
		}
	}
	// a number field takes any float
	if err := v.Validate(map[string]any{"x": float64(1 << 62)}); err != nil {
		t.Error(err)
	}
}

// TestExactFastCheckAgreesWithTheLibrary compares the fast path with the
// JSON Schema library on random schemas made of the keywords it decides
// (enums and consts, patterns, lengths, bounds, a lone $ref, the
// optional-value idiom) beside ones it leaves to the library, on values
// at and around their edges. A value the fast path passes must be valid;
// the validator's verdict is the library's on every value.
func TestExactFastCheckAgreesWithTheLibrary(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	scalars := []any{nil, true, false, "a", "b", "ab", "é", 0, 1, -1, 2.0, 3, 1.5, 9007199254740993.0}
	patterns := []any{"^a", "b$", "^[a-z]+$", "é", `\d`, "(?<x>a)"} // the last: Go cannot read it
	bounds := []any{0, 1, 2, -1, 0.5, 1e300, true}                  // 0.5: compared as a rational; true: draft-04's form
	pick := func(xs []any) any { return xs[r.IntN(len(xs))] }
	var gen func(depth int) map[string]any
	gen = func(depth int) map[string]any {
		s := randomTyped(r)
		for range r.IntN(3) {
			switch r.IntN(12) {
			case 0:
				e := []any{pick(scalars), pick(scalars)}
				if r.IntN(6) == 0 {
					e = append(e, []any{1})
				}
				s["enum"] = e
			case 1:
				s["const"] = pick(scalars)
			case 2:
				s["pattern"] = pick(patterns)
			case 3:
				s["minLength"] = r.IntN(3)
			case 4:
				s["maxLength"] = r.IntN(3)
			case 5:
				s["minimum"] = pick(bounds)
			case 6:
				s["maximum"] = pick(bounds)
			case 7:
				s["exclusiveMinimum"] = pick(bounds)
			case 8:
				s["exclusiveMaximum"] = pick(bounds)
			case 9:
				if r.IntN(2) == 0 {
					s["minItems"] = 1 // left to the library
				} else {
					s["uniqueItems"] = r.IntN(3) > 0
				}
			case 10:
				if depth < 2 {
					s["items"] = gen(depth + 1)
				}
			case 11:
				if depth < 2 {
					s["properties"] = map[string]any{"a": gen(depth + 1), "b": gen(depth + 1)}
					if r.IntN(2) == 0 {
						s["required"] = []any{"a"}
					}
					switch r.IntN(3) {
					case 0:
						s["additionalProperties"] = false
					case 1:
						s["additionalProperties"] = gen(depth + 1)
					}
				}
			}
		}
		if depth < 2 && r.IntN(5) == 0 {
			// the optional-value idiom, sometimes with a keyword beside it
			branches := []any{gen(depth + 1), map[string]any{"type": "null"}}
			if r.IntN(2) == 0 {
				branches[0], branches[1] = branches[1], branches[0]
			}
			of := "anyOf"
			if r.IntN(2) == 0 {
				of = "oneOf"
			}
			s = map[string]any{of: branches}
			if r.IntN(4) == 0 {
				s["minLength"] = 1
			}
		}
		if depth < 2 && r.IntN(6) == 0 {
			s = map[string]any{"$ref": "#/$defs/d"}
		}
		if r.IntN(4) == 0 {
			s["description"] = "annotation"
		}
		return s
	}
	genValue := func(int) any {
		return randomValue(r, 0, func() any {
			if r.IntN(4) > 0 {
				return pick(scalars)
			}
			return pick([]any{"", "aa", "abc", "ba", "éé", "a1", 0.5, -0.5, 1e300, 2, -2, 1 << 53, float64(1 << 53),
				[]any{"a", "b"}, []any{"a", "a"}, []any{"a", "b", "ab"}, []any{1, 1.0}})
		})
	}
	var decided, exact int
	for i := range 4000 {
		raw := gen(0)
		raw["$defs"] = map[string]any{"d": gen(1)}
		c := schema.NewCompiler(nil)
		compiled, err := c.Compile(fmt.Sprintf("file:///x%d.json", i), raw)
		if err != nil {
			continue // a pattern Go cannot read, a bound of the wrong type
		}
		defs := raw["$defs"].(map[string]any)
		shape := schema.ShapeOf(raw, func(ref string) any {
			if ref == "#/$defs/d" {
				return defs["d"]
			}
			return nil
		})
		if shape.Exact() {
			exact++
		}
		fast := schema.NewValidator(compiled, shape)
		slow := schema.NewValidator(compiled, nil)
		for range 12 {
			v := genValue(0)
			lib := compiled.Validate(v)
			if schema.FastValid(shape, v) {
				decided++
				if lib != nil {
					sb, _ := json.Marshal(raw)
					vb, _ := json.Marshal(v)
					t.Fatalf("schema %s value %s (%T): the fast path passed it, the library says %v", sb, vb, v, lib)
				}
			}
			// the validator's verdict is the library's, but for the
			// integers too wide for the state, which it refuses beside
			got, want := fast.Validate(v), slow.Validate(v)
			if (got == nil) != (want == nil) && !(want == nil && (strings.Contains(got.Error(), "64-bit integer") || strings.Contains(got.Error(), "2^53"))) {
				sb, _ := json.Marshal(raw)
				vb, _ := json.Marshal(v)
				t.Fatalf("schema %s value %s (%T): validator %v, library %v", sb, vb, v, got, want)
			}
		}
	}
	if exact < 400 || decided < 2000 {
		t.Fatalf("the fast path decided too little to be tested: %d exact schemas, %d values passed", exact, decided)
	}
}

// randomValue is a random JSON value: a leaf, or (to a depth of three) a
// list or an object of random values under the keys a, b and c.
func randomValue(r *rand.Rand, depth int, leaf func() any) any {
	switch n := r.IntN(9); {
	case n < 4 || depth > 2:
		return leaf()
	case n < 6:
		l := make([]any, r.IntN(3))
		for i := range l {
			l[i] = randomValue(r, depth+1, leaf)
		}
		return l
	default:
		m := map[string]any{}
		for _, k := range []string{"a", "b", "c"} {
			if r.IntN(2) == 0 {
				m[k] = randomValue(r, depth+1, leaf)
			}
		}
		return m
	}
}

// randomTyped is a schema with a random type, two random types or none.
func randomTyped(r *rand.Rand) map[string]any {
	types := []string{"integer", "number", "string", "boolean", "array", "object", "null"}
	s := map[string]any{}
	switch r.IntN(3) {
	case 0:
		s["type"] = types[r.IntN(len(types))]
	case 1:
		a := r.IntN(len(types))
		s["type"] = []any{types[a], types[(a+1+r.IntN(len(types)-1))%len(types)]}
	}
	return s
}
