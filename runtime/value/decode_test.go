package value

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
)

func TestDecodeNumbers(t *testing.T) {
	v, err := Decode([]byte(`{"i": 3, "big": 9007199254740993, "f": 2.5, "e": 1e3, "neg": -7, "huge": 1e400,
		"l": [1, 2.0, {"n": 4, "s": "5", "m": {"k": [6]}}], "t": true, "z": null}`))
	if err == nil {
		t.Fatalf("1e400 decoded: %v", v)
	}
	v, err = Decode([]byte(`{"i": 3, "big": 9007199254740993, "f": 2.5, "e": 1e3, "neg": -7,
		"l": [1, 2.0, {"n": 4, "s": "5", "m": {"k": [6]}}], "t": true, "z": null}`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"i": 3, "big": 9007199254740993, "f": 2.5, "e": 1000.0, "neg": -7,
		"l": []any{1, 2.0, map[string]any{"n": 4, "s": "5", "m": map[string]any{"k": []any{6}}}}, "t": true, "z": nil}
	if !reflect.DeepEqual(v, want) {
		t.Fatalf("decoded %#v\nwant    %#v", v, want)
	}
	if _, err := Decode([]byte(`[1, 2`)); err == nil {
		t.Fatal("truncated JSON decoded")
	}
}

// BenchmarkConversation reads a 1,000-turn conversation as a cold thread
// load does: from JSON, as write rows hold it, and packed, as segments do:
// go test ./runtime/value -run '^$' -bench Conversation
func BenchmarkConversation(b *testing.B) {
	data := conversation()
	v, err := Decode(data)
	if err != nil {
		b.Fatal(err)
	}
	p, err := Pack(nil, v)
	if err != nil {
		b.Fatal(err)
	}
	packed := string(p) // as a store reads it
	for _, c := range []struct {
		name string
		size int
		read func() (any, error)
	}{
		{"json", len(data), func() (any, error) { return Decode(data) }},
		{"packed", len(p), func() (any, error) { return Unpack(packed) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(c.size))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.read(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestUnpackRejectsMalformed(t *testing.T) {
	v := map[string]any{"role": "candidate", "turn": 300, "score": 0.5, "tags": []any{"a", true, nil, false}, "n": -1}
	p, err := Pack(nil, v)
	if err != nil {
		t.Fatal(err)
	}
	if back, err := Unpack(string(p)); err != nil || !reflect.DeepEqual(back, v) {
		t.Fatalf("round trip: %#v, %v", back, err)
	}
	// every truncation, and trailing bytes, are errors
	for n := range len(p) {
		if back, err := Unpack(string(p[:n])); err == nil {
			t.Fatalf("%d of %d bytes unpacked to %#v", n, len(p), back)
		}
	}
	if _, err := Unpack(string(append(p, tagNull))); err == nil {
		t.Fatal("trailing byte accepted")
	}
	if _, err := Unpack(`["json"]`); err == nil {
		t.Fatal("JSON unpacked")
	}
	// a count larger than what remains is refused before anything is made
	if _, err := Unpack(string([]byte{PackMagic, tagArray, 0xff, 0xff, 0xff, 0xff, 0x0f})); err == nil {
		t.Fatal("huge count accepted")
	}
	// varints as encoding/binary reads them: the extremes, and overflow
	for _, n := range []int{0, -1, 1, math.MaxInt64, math.MinInt64} {
		p, _ := Pack(nil, n)
		if back, err := Unpack(string(p)); err != nil || back != n {
			t.Fatalf("%d unpacked as %v %v", n, back, err)
		}
	}
	over := []byte{PackMagic, tagInt, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}
	if _, n := binary.Uvarint(over[2:]); n > 0 {
		t.Fatal("encoding/binary reads the overflowing varint")
	}
	if v, err := Unpack(string(over)); err == nil {
		t.Fatalf("overflowing varint unpacked as %v", v)
	}
	if _, err := Pack(nil, struct{}{}); err == nil {
		t.Fatal("packed a struct")
	}
}

// conversation is a 1,000-turn interview's messages as JSON.
func conversation() []byte {
	answer := strings.Repeat("I worked on the ingestion pipeline and its backpressure. ", 3)
	var items []any
	for turn := 1; turn <= 1000; turn++ {
		q := fmt.Sprintf("Question %d: how did you design the part of the system that handled retries?", turn)
		items = append(items, map[string]any{"role": "candidate", "content": answer, "turn": turn},
			map[string]any{"role": "interviewer", "content": q, "turn": turn, "node": "question"})
	}
	data, _ := json.Marshal(items)
	return data
}

// decodeStd is what Decode must agree with: encoding/json with UseNumber,
// numbers made int or float64 by number.
func decodeStd(b []byte) (any, error) {
	d := json.NewDecoder(strings.NewReader(string(b)))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if d.More() || d.InputOffset() < int64(len(strings.TrimRight(string(b), " \t\r\n"))) {
		return nil, fmt.Errorf("trailing data")
	}
	var fix func(v any) (any, error)
	fix = func(v any) (any, error) {
		var err error
		switch x := v.(type) {
		case json.Number:
			return number(x)
		case []any:
			for i := range x {
				if x[i], err = fix(x[i]); err != nil {
					return nil, err
				}
			}
		case map[string]any:
			for k := range x {
				if x[k], err = fix(x[k]); err != nil {
					return nil, err
				}
			}
		}
		return v, nil
	}
	return fix(v)
}

// agree checks Decode against decodeStd on one input: both fail, or both
// give the same value.
func agree(t *testing.T, b []byte) {
	t.Helper()
	got, err := Decode(b)
	want, werr := decodeStd(b)
	if (err != nil) != (werr != nil) {
		t.Fatalf("%q: Decode error %v, encoding/json error %v", b, err, werr)
	}
	if err == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%q:\nDecode        %#v\nencoding/json %#v", b, got, want)
	}
	// the varint reader agrees with encoding/binary's
	x, n := binary.Uvarint(b)
	u := unpacker{s: string(b)}
	if y, err := u.uvarint(); (n > 0) != (err == nil) || n > 0 && (x != y || u.i != n) {
		t.Fatalf("%q: uvarint %d %v at %d, encoding/binary %d at %d", b, y, err, u.i, x, n)
	}
	// any input read as a packed value is an error or a value, never a
	// panic; a decoded value survives packing unchanged
	Unpack(string(append([]byte{PackMagic}, b...)))
	if err == nil {
		p, err := Pack(nil, got)
		if err != nil {
			t.Fatalf("%q: Pack: %v", b, err)
		}
		if back, err := Unpack(string(p)); err != nil || !reflect.DeepEqual(back, got) {
			t.Fatalf("%q: Unpack(Pack(v)) = %#v, %v", b, back, err)
		}
	}
}

func TestDecodeAgreesWithEncodingJSON(t *testing.T) {
	for _, s := range []string{
		`{}`, `[]`, `null`, `true`, ` false `, `0`, `-0`, `1.0`, `-12`, `1e2`, `1E-2`, `9223372036854775807`,
		`9223372036854775808`, `-9223372036854775809`, `1e400`, `""`, `"a\"b\\c\/d\n\u00e9\ud83d\ude00"`,
		`"\ud800"`, `"\udc00x"`, "\"\xff\xfe\"", "\"caf\xc3\xa9\"", `{"a":1,"a":2}`, `{"a":{"b":[1,{"c":null}]}}`,
		`[1,2,]`, `{"a":1,}`, `{"a" 1}`, `[1 2]`, `{"a":1} x`, `{"a":1} {}`, `[1]]`, ``, ` `, `nul`, `tru`,
		`01`, `1.`, `.5`, `-`, `+1`, `NaN`, `"\x"`, "\"a\tb\"", `{"k":"` + strings.Repeat("long ", 20) + `"}`,
		`[` + strings.Repeat(`{"role":"candidate","turn":300},`, 50) + `{}]`,
	} {
		agree(t, []byte(s))
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{"a":[1,2.5,"x",null,true]}`, `"\u00e9\ud83d\ude00"`, `[{"k":1},{"k":2}]`, `1e400`, "\"\xff\"",
		"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x02"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { agree(t, b) })
}
