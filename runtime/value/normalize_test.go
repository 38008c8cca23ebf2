package value_test

import (
	"encoding/json"
	"math"
	"reflect"
	"strconv"
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

// What a node writes is what a store hands back: a normalised value,
// settled, is the same Go value after the stores' codec (the JSON they
// write, Decode) and after Pack and Unpack, and normalising it again
// changes nothing.
func TestNormalizedValuesReloadUnchanged(t *testing.T) {
	for _, v := range []any{
		[]any(nil), map[string]any(nil), []string(nil), map[string]int(nil), []any{[]any(nil), map[string]any(nil)},
		map[string]any{"anchors": []any(nil)}, 2.0, -0.0, 0.5, 1e21, 1e300, float64(1 << 60), -float64(1 << 63), float64(1 << 63),
		float32(0.1), "caf\xc3\xa9 \xff\xfe", map[string]any{"\xff": 1, "\xfe": 2, "\uFFFD": 3}, uint64(math.MaxUint64),
		int64(math.MinInt64), json.Number("2.0"), json.Number("9007199254740993"), []int{1, 2}, struct{ A []int }{},
		(*int)(nil), map[any]any{"k": []any(nil)},
	} {
		reloads(t, v)
	}
}

// reloads checks the round trips of v once normalised and settled.
func reloads(t *testing.T, v any) {
	t.Helper()
	n, err := value.Normalize(v)
	if err != nil {
		t.Fatalf("%#v: %v", v, err)
	}
	if again, err := value.Normalize(n); err != nil || !reflect.DeepEqual(again, n) {
		t.Fatalf("%#v: normalised twice %#v, once %#v (%v)", v, again, n, err)
	}
	s, _ := value.Settle(n)
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatalf("%#v: %v", v, err)
	}
	back, err := value.Decode(b)
	if err != nil || !reflect.DeepEqual(back, s) {
		t.Fatalf("%#v: held as %#v, read back from %s as %#v (%v)", v, s, b, back, err)
	}
	p, err := value.Pack(nil, s)
	if err != nil {
		t.Fatalf("%#v: %v", v, err)
	}
	if back, err := value.Unpack(string(p)); err != nil || !reflect.DeepEqual(back, s) {
		t.Fatalf("%#v: held as %#v, unpacked as %#v (%v)", v, s, back, err)
	}
	if again, err := value.Normalize(s); err != nil || !reflect.DeepEqual(again, s) {
		t.Fatalf("%#v: settled %#v normalises to %#v (%v)", v, s, again, err)
	}
}

// A nil list or object is the empty one; a whole float an int below 2^53,
// and from 2^53 (where it may be a rounding) until settled.
func TestNormalizeForms(t *testing.T) {
	for _, c := range []struct {
		in, want any
	}{
		{[]any(nil), []any{}}, {map[string]any(nil), map[string]any{}}, {[]string(nil), []any{}},
		{map[string]any{"l": []any(nil)}, map[string]any{"l": []any{}}}, {2.0, 2}, {-0.0, 0}, {2.5, 2.5},
		{float64(1 << 60), float64(1 << 60)}, {json.Number("3.0"), 3}, {"a\xffb", "a\uFFFDb"},
		{map[string]any{"\xff": 1, "\xfe": 2}, map[string]any{"\uFFFD": 1}},
	} {
		got, err := value.Normalize(c.in)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("Normalize(%#v) = %#v, %v; want %#v", c.in, got, err, c.want)
		}
	}
	if s, wide := value.Settle([]any{1, float64(1 << 60), 2.5}); !wide || !reflect.DeepEqual(s, []any{1, 1 << 60, 2.5}) {
		t.Errorf("Settle: %#v %v", s, wide)
	}
	for _, bad := range []any{math.NaN(), math.Inf(1), []any{math.Inf(-1)}} {
		if _, err := value.Normalize(bad); err == nil {
			t.Errorf("Normalize(%v) accepted", bad)
		}
	}
}

// FuzzNormalize draws Go values from the bytes (lists and objects, nil
// ones among them, numbers of every kind, text with invalid UTF-8) and
// checks that each, normalised and settled, reloads unchanged.
func FuzzNormalize(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13})
	f.Add([]byte("\x0b\x0c\x05\xff\xfe\x00\x09\x43\x30\x00\x00\x00\x00\x00\x00\x0a"))
	f.Fuzz(func(t *testing.T, b []byte) {
		g := &draw{b: b}
		reloads(t, g.value(0))
	})
}

// draw makes Go values from fuzz bytes.
type draw struct {
	b []byte
	i int
}

func (d *draw) byte() byte {
	if d.i >= len(d.b) {
		return 0
	}
	c := d.b[d.i]
	d.i++
	return c
}

func (d *draw) u64() uint64 {
	var x uint64
	for range 8 {
		x = x<<8 | uint64(d.byte())
	}
	return x
}

func (d *draw) text() string {
	n := int(d.byte() % 6)
	s := make([]byte, n)
	for i := range s {
		s[i] = d.byte()
	}
	return string(s)
}

func (d *draw) value(depth int) any {
	kind := d.byte() % 16
	if depth > 4 {
		kind %= 8
	}
	switch kind {
	case 0:
		return nil
	case 1:
		return d.byte()%2 == 0
	case 2:
		return int(int64(d.u64()))
	case 3:
		f := math.Float64frombits(d.u64())
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return 0.5
		}
		return f
	case 4:
		return float64(int64(d.u64()) >> (d.byte() % 64)) // whole floats of every size
	case 5:
		return d.text()
	case 6:
		return json.Number(strconv.FormatFloat(float64(int32(d.u64())), 'f', int(d.byte()%3), 64))
	case 7:
		return uint64(d.u64())
	case 8:
		return []any(nil)
	case 9:
		return map[string]any(nil)
	case 10, 11:
		l := make([]any, d.byte()%4)
		for i := range l {
			l[i] = d.value(depth + 1)
		}
		return l
	case 12, 13:
		m := map[string]any{}
		for range d.byte() % 4 {
			m[d.text()] = d.value(depth + 1)
		}
		return m
	case 14:
		return []string{d.text(), d.text()}
	default:
		f := math.Float32frombits(uint32(d.u64())) / 3
		if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
			return float32(0.1)
		}
		return f
	}
}

// Show tells apart the values JSON writes alike.
func TestShow(t *testing.T) {
	for v, want := range map[string]string{
		value.Show([]any(nil), 80):                                   "[]any(nil)",
		value.Show([]any{}, 80):                                      "[]",
		value.Show(map[string]any{"b": 2.0, "a": []any{2, nil}}, 80): `{"a": [2, null], "b": 2.0}`,
		value.Show(map[string]any(nil), 80):                          "map[string]any(nil)",
		value.Show([]string{"x"}, 80):                                `[]string([]string{"x"})`,
		value.Show(1e21, 80):                                         "1e+21",
		value.Show("a long text", 4):                                 `"a l...`,
	} {
		if v != want {
			t.Errorf("shown %s, want %s", v, want)
		}
	}
}

// BenchmarkNormalizeHeld normalises and settles what a step writes when
// it is already in the state's form, as most writes are (a 1,000-turn
// conversation, read back from JSON): a walk that allocates nothing.
func BenchmarkNormalizeHeld(b *testing.B) {
	v, err := value.Decode(conversationJSON())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		n, err := value.Normalize(v)
		if err != nil {
			b.Fatal(err)
		}
		value.Settle(n)
	}
}

func conversationJSON() []byte {
	var items []any
	for turn := 1; turn <= 1000; turn++ {
		items = append(items, map[string]any{"role": "candidate", "content": "I worked on the ingestion pipeline.", "turn": turn, "score": 0.5},
			map[string]any{"role": "interviewer", "content": "How did you design it?", "turn": turn, "tags": []any{"design"}})
	}
	b, _ := json.Marshal(items)
	return b
}
