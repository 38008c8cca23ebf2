package schema

import (
	"encoding/json"
	"fmt"
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

// BenchmarkDecodeConversation decodes a 1,000-turn conversation as a cold
// thread load does: go test ./runtime/schema -run '^$' -bench Decode
func BenchmarkDecodeConversation(b *testing.B) {
	answer := strings.Repeat("I worked on the ingestion pipeline and its backpressure. ", 3)
	var items []any
	for turn := 1; turn <= 1000; turn++ {
		q := fmt.Sprintf("Question %d: how did you design the part of the system that handled retries?", turn)
		items = append(items, map[string]any{"role": "candidate", "content": answer, "turn": turn},
			map[string]any{"role": "interviewer", "content": q, "turn": turn, "node": "question"})
	}
	data, _ := json.Marshal(items)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(data); err != nil {
			b.Fatal(err)
		}
	}
}
