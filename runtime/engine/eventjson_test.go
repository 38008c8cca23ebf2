package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/kind"
)

// sameAsMarshal checks that the event's direct encoding is json.Marshal's
// bytes, and that JSON and AppendJSON give them too.
func sameAsMarshal(t *testing.T, name string, ev Event) {
	t.Helper()
	want, err := json.Marshal(ev)
	if err != nil {
		t.Fatalf("%s: json.Marshal: %v", name, err)
	}
	got, err := ev.appendJSON([]byte("prefix"))
	if err != nil {
		t.Fatalf("%s: encoded by encoding/json (%v), not directly", name, err)
	}
	if !bytes.Equal(got[len("prefix"):], want) {
		t.Fatalf("%s:\n got %s\nwant %s", name, got[len("prefix"):], want)
	}
	if j, err := ev.JSON(); err != nil || !bytes.Equal(j, want) {
		t.Fatalf("%s: JSON gives %s, %v", name, j, err)
	}
	if a, err := ev.AppendJSON([]byte("x")); err != nil || !bytes.Equal(a, append([]byte("x"), want...)) {
		t.Fatalf("%s: AppendJSON gives %s, %v", name, a, err)
	}
}

// stamp is a time with nanoseconds in a zone east of UTC.
var stamp = time.Date(2026, 3, 4, 5, 6, 7, 89000, time.FixedZone("", 5*3600+30*60))

// tricky holds strings every escaping rule of encoding/json applies to.
var tricky = []string{
	"",
	"plain",
	`quote " backslash \ slash /`,
	"<script>&amp;</script>",
	"\x00\x01\x07\b\t\n\v\f\r\x1b\x1f\x7f",
	"é ü 中文 😀",
	"line\u2028para\u2029end",
	"bad \xff\xfe utf8 \xc3",
	"\xe2\x80",         // a cut U+2028
	"\xed\xa0\x80",     // a surrogate half in UTF-8
	"\xf4\x90\x80\x80", // beyond U+10FFFF
}

func TestEventJSONIsMarshals(t *testing.T) {
	update := map[string]any{
		"name":    "Ada",
		"score":   0.75,
		"count":   3,
		"big":     int64(math.MaxInt64),
		"neg":     math.MinInt64,
		"u":       uint64(math.MaxUint64),
		"i32":     int32(-7),
		"ok":      true,
		"no":      false,
		"none":    nil,
		"num":     json.Number("12.5e-3"),
		"zeronum": json.Number(""),
		"list":    []any{1, "two", nil, 3.5, []any{}, map[string]any{}, []any{nil}},
		"nested":  map[string]any{"z": 1, "a": map[string]any{"y": nil, "b": []any{"<&>"}}, "M": 2, "é": 3, "_": 4, "": 5},
		"nilmap":  map[string]any(nil),
		"nillist": []any(nil),
		"strs":    []string{"a", "<b>"},
		"nilstrs": []string(nil),
	}
	floats := []float64{0, math.Copysign(0, -1), 1, -1, 0.1, 1.0 / 3, 1e-6, 9.99e-7, 1e-7, 1.5e-9, -2.5e-10, 1e20, 1e21, -1e21, 123456789e13,
		1e100, 5e-324, math.MaxFloat64, -math.MaxFloat64, math.SmallestNonzeroFloat64, 1 << 53, 1<<53 + 2, 12345.678}
	for i, f := range floats {
		update[fmt.Sprintf("f%02d", i)] = f
	}
	for i, s := range tricky {
		update[fmt.Sprintf("s%02d", i)] = s
		update[s] = s // keys escape, and sort by their bytes
	}
	state := map[string]any{}
	for i := range 20 {
		state[fmt.Sprintf("field_%d", 20-i)] = []any{i, fmt.Sprint(i), map[string]any{"at": i}}
	}
	cases := map[string]Event{
		"zero":      {},
		"zero time": {Type: RunStart, Run: "r", Thread: "t"},
		"run_start": {Type: RunStart, Run: "run-1", Thread: "th", Time: stamp},
		"node_start": {Type: NodeStart, Run: "r", Thread: "t", Step: 3, Time: stamp.UTC(), Node: "ask", Kind: "llm", Attempt: 1,
			NS: "child:2|sub:1"},
		"node_end": {Type: NodeEnd, Run: "r", Thread: "t", Step: -1, Time: stamp, Node: "n", Kind: "code", Attempt: 2, Duration: 1500 * time.Millisecond,
			Update: update, Degraded: "fallback <used>", Cached: true, Usage: map[string]int64{"tokens": 120, "calls": 1, "<x>": -5}},
		"node_error":  {Type: NodeFailed, Run: "r", Time: stamp, Node: "n", Error: "boom: \"bad\"\n\tat <here>", Handled: true, Duration: -3},
		"node_output": {Type: NodeOutput, Run: "r", Time: stamp, Node: "say", Attempt: 1, Text: "Hello, <b>world</b> \u2028 \xff"},
		"state_update": {Type: StateUpdate, Run: "r", Thread: "t", Step: 7, Time: stamp, Update: map[string]any{"x": 1},
			Fields: []string{"x", "log", "<y>"}, Appended: map[string]any{"log": []any{"a", "b"}}, Checkpoint: math.MaxUint64, Next: []string{"a", "b&c"}},
		"empty collections": {Type: StateUpdate, Update: map[string]any{}, Fields: []string{}, Appended: map[string]any{}, Next: []string{},
			Usage: map[string]int64{}, State: map[string]any{}},
		"run_end": {Type: RunEnd, Run: "r", Thread: "t", Time: stamp, Duration: time.Hour, State: state,
			Interrupt: &Interrupt{Before: []string{"a"}, After: []string{"b"}, Asks: []Ask{{ID: "q", Path: "p/q", Payload: map[string]any{"k": "<v>"}}}}},
		"empty interrupt": {Type: RunEnd, Interrupt: &Interrupt{}},
		"tool_start": {Type: ToolStart, Run: "r", Time: stamp, Node: "agent", Tool: &kind.ToolEvent{ID: "c1", Name: "search", Kind: "http", Seq: 2,
			Arguments: map[string]any{"q": "a<b"}, Approval: "edited"}},
		"tool_end":   {Type: ToolEnd, Run: "r", Time: stamp, Tool: &kind.ToolEvent{ID: "c1", Name: "search", Result: []any{1.5, "x"}, Error: "e", Done: true}},
		"empty tool": {Type: ToolEnd, Tool: &kind.ToolEvent{}},
		"store":      {Type: StoreBack, Run: "r", Time: stamp, Duration: time.Nanosecond},
		"other values": {Type: NodeEnd, Update: map[string]any{
			"struct":   struct{ A int }{1},
			"typed":    map[string]int{"b": 2, "a": 1},
			"bytes":    []byte("hi"),
			"time":     stamp,
			"ptr":      &[]any{1},
			"float32":  float32(0.1),
			"int8":     int8(-3),
			"marshals": json.RawMessage(`{ "b" : [ 1 , 2 ] }`),
			"named":    EventType("x<y"),
		}},
		"time zones": {Time: time.Date(0, 1, 1, 0, 0, 0, 0, time.FixedZone("", -23*3600-59*60))},
		"time 9999":  {Time: time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)},
		"time local": {Time: time.Date(2026, 1, 1, 0, 0, 0, 1, time.Local)},
	}
	for i, s := range tricky {
		cases[fmt.Sprintf("strings %d", i)] = Event{Type: EventType(s), Run: s, Thread: s, NS: s, Node: s, Kind: s, Fields: []string{s}, Next: []string{s},
			Degraded: s, Text: s, Error: s, Usage: map[string]int64{s: 1}, State: map[string]any{s: s}}
	}
	for name, ev := range cases {
		sameAsMarshal(t, name, ev)
	}
}

// TestEventJSONFailsAsMarshal: an event json.Marshal refuses is refused
// with its error, and one it encodes by a way appendJSON does not take
// (deeper than it goes) gives its bytes.
func TestEventJSONFailsAsMarshal(t *testing.T) {
	cyclic := map[string]any{}
	cyclic["self"] = cyclic
	deep := any("bottom")
	for range 600 {
		deep = []any{map[string]any{"d": deep}}
	}
	cases := map[string]Event{
		"NaN":            {Update: map[string]any{"x": math.NaN()}},
		"Inf":            {State: map[string]any{"x": []any{math.Inf(-1)}}},
		"bad number":     {Appended: map[string]any{"x": json.Number("1.")}},
		"number words":   {Update: map[string]any{"x": json.Number("NaN")}},
		"func":           {Update: map[string]any{"x": func() {}}},
		"cycle":          {State: cyclic},
		"year 10000":     {Time: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
		"year -1":        {Time: time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)},
		"zone of 24h":    {Time: time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("", 24*3600))},
		"tool NaN":       {Tool: &kind.ToolEvent{Result: math.NaN()}},
		"deep but legal": {Update: map[string]any{"d": deep}},
		"bad raw":        {Update: map[string]any{"x": json.RawMessage(`{`)}},
	}
	for name, ev := range cases {
		want, werr := json.Marshal(ev)
		got, gerr := ev.AppendJSON(nil)
		if (werr == nil) != (gerr == nil) || werr != nil && werr.Error() != gerr.Error() || !bytes.Equal(got, want) {
			t.Fatalf("%s: got %.80s, %v; json.Marshal gives %.80s, %v", name, got, gerr, want, werr)
		}
		if j, jerr := ev.JSON(); !bytes.Equal(j, want) || (jerr == nil) != (werr == nil) {
			t.Fatalf("%s: JSON gives %.80s, %v", name, j, jerr)
		}
	}
}

// TestEventJSONLayout: appendJSON knows every field of Event, and fills
// each as encoding/json does: an event with every field set (by
// reflection: a field added to Event is set too) encodes alike. A field
// appendJSON does not know turns the direct encoding off.
func TestEventJSONLayout(t *testing.T) {
	if !eventLayout {
		t.Fatal("Event's fields are not those appendJSON writes: update eventFields and appendJSON")
	}
	var ev Event
	v := reflect.ValueOf(&ev).Elem()
	for i := range v.NumField() {
		if !fill(v.Field(i), v.Type().Field(i).Name) {
			t.Fatalf("the test cannot fill Event.%s", v.Type().Field(i).Name)
		}
	}
	sameAsMarshal(t, "every field", ev)
	// each field alone
	for i := range v.NumField() {
		var one Event
		fill(reflect.ValueOf(&one).Elem().Field(i), "x")
		sameAsMarshal(t, v.Type().Field(i).Name, one)
	}
}

// fill sets v to a value that is not empty.
func fill(v reflect.Value, s string) bool {
	switch v.Kind() {
	case reflect.String:
		v.SetString(s + "<")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		if v.Type() == reflect.TypeFor[time.Duration]() {
			v.SetInt(int64(time.Minute))
		} else {
			v.SetInt(-42)
		}
	case reflect.Uint64:
		v.SetUint(42)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		return fill(v.Index(0), s)
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		e := reflect.New(v.Type().Elem()).Elem()
		if !fill(e, s) {
			return false
		}
		v.SetMapIndex(reflect.ValueOf(s), e)
	case reflect.Interface:
		v.Set(reflect.ValueOf(map[string]any{s: []any{s, 1.5}}))
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		return fill(v.Elem(), s)
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(stamp))
			return true
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() && !fill(v.Field(i), s) {
				return false
			}
		}
	default:
		return false
	}
	return true
}

// FuzzEventJSON builds events from fuzzed strings, numbers and nesting
// and checks that they encode as json.Marshal encodes them, directly
// when their values are those appendJSON writes and json.Marshal takes.
func FuzzEventJSON(f *testing.F) {
	f.Add("node_end", "<a&b>", int64(1), uint64(2), 0.5, int64(1700000000123456789), 0, []byte{6, 1, 2, 3, 4, 5, 7, 0, 1, 8, 8})
	f.Add("\u2028\xff", "\x00\"\\", int64(-1), uint64(1<<63), 1e21, int64(0), -3600, []byte{7, 7, 7, 2, 8, 8, 8, 6, 6, 0, 8})
	f.Add("", "", int64(0), uint64(0), 1e-7, int64(-1), 86400, []byte{})
	f.Add("k", "v", int64(math.MaxInt64), uint64(math.MaxUint64), math.NaN(), int64(math.MaxInt64), 0, []byte{2, 5})
	f.Add("1.5e3", "-0", int64(math.MinInt64), uint64(5), -0.0, int64(math.MinInt64), 12345, []byte{5, 9, 5, 10, 2})
	f.Add("a", "b", int64(3), uint64(4), math.Inf(1), int64(1), 0, []byte{6, 2, 6, 0, 6, 1, 8, 8, 8})
	f.Fuzz(func(t *testing.T, s1, s2 string, i int64, u uint64, fl float64, nanos int64, zone int, shape []byte) {
		b := &builder{strs: []string{s1, s2, s1 + s2}, i: i, u: u, f: fl, shape: shape}
		ev := Event{Type: EventType(s1), Run: s2, Thread: s1, Step: int(i), NS: s2, Node: s1, Kind: s2, Attempt: int(u),
			Time: time.Unix(nanos/1000, nanos%1000).In(time.FixedZone(s1, zone%(36*3600))), Duration: time.Duration(i),
			Checkpoint: u, Fields: []string{s1, s2}, Next: []string{s2}, Handled: i%2 == 0, Cached: u%2 == 0,
			Degraded: s2, Text: s1, Error: s2, Usage: map[string]int64{s1: i, s2: int64(u)}}
		ev.Update = b.object(0)
		ev.Appended = b.object(0)
		ev.State = b.object(0)
		want, werr := json.Marshal(ev)
		got, gerr := ev.AppendJSON(nil)
		if (werr == nil) != (gerr == nil) || werr != nil && werr.Error() != gerr.Error() || !bytes.Equal(got, want) {
			t.Fatalf("got %s, %v\nwant %s, %v", got, gerr, want, werr)
		}
		if werr == nil {
			if direct, err := ev.appendJSON(nil); err != nil || !bytes.Equal(direct, want) {
				t.Fatalf("directly: %s, %v\nwant %s", direct, err, want)
			}
		}
	})
}

// builder makes values from a fuzzed shape: each byte adds a value (a
// string, a number, a boolean, null, a json.Number) or opens a map or a
// list, which a later byte closes.
type builder struct {
	strs  []string
	i     int64
	u     uint64
	f     float64
	shape []byte
	n     int
}

func (b *builder) value(depth int) any {
	if len(b.shape) == 0 {
		return nil
	}
	c := b.shape[0]
	b.shape = b.shape[1:]
	b.n++
	switch c % 12 {
	case 0:
		return nil
	case 1:
		return b.strs[b.n%len(b.strs)]
	case 2:
		return b.f
	case 3:
		return int(b.i)
	case 4:
		return b.i%3 == 0
	case 5:
		return json.Number(b.strs[b.n%len(b.strs)])
	case 6:
		return b.object(depth + 1)
	case 7:
		var l []any
		for len(b.shape) > 0 && b.shape[0]%12 != 8 && depth < 20 {
			l = append(l, b.value(depth+1))
		}
		if len(b.shape) > 0 {
			b.shape = b.shape[1:]
		}
		if c >= 128 {
			l = []any{} // an empty list, not null
		}
		return l
	case 9:
		return b.u
	case 10:
		return b.f * float64(b.i)
	}
	return strings.Repeat(b.strs[0], int(c%4))
}

func (b *builder) object(depth int) map[string]any {
	m := map[string]any{}
	for k := 0; len(b.shape) > 0 && b.shape[0]%12 != 8 && depth < 20; k++ {
		m[b.strs[k%len(b.strs)]+fmt.Sprint(k%5)] = b.value(depth + 1)
	}
	if len(b.shape) > 0 {
		b.shape = b.shape[1:]
	}
	return m
}

// benchEvents are a turn's typical events: a node_end with a dozen
// fields written, a state_update, a run_end with a state of 20 fields.
func benchEvents() []Event {
	at := time.Date(2026, 3, 4, 5, 6, 7, 123456789, time.UTC)
	update := map[string]any{
		"reply":     "Thanks, that helps. Could you tell me about a project where you led the design?",
		"question":  3,
		"score":     0.82,
		"topics":    []any{"design", "leadership", "testing"},
		"done":      false,
		"candidate": map[string]any{"name": "Ada Lovelace", "years": 7, "remote": true},
		"notes":     "answered <clearly>; gave numbers",
		"follow_up": nil,
		"turn":      12,
		"language":  "en",
		"history":   []any{map[string]any{"role": "assistant", "text": "Hello!"}, map[string]any{"role": "user", "text": "Hi, I'm Ada."}},
		"sentiment": -0.125,
	}
	state := maps.Clone(update)
	for i := range 8 {
		state[fmt.Sprintf("extra_%d", i)] = fmt.Sprintf("value %d", i)
	}
	return []Event{
		{Type: NodeEnd, Run: "run_01HZX3", Thread: "thr_01HZX3", Step: 12, Time: at, Node: "interviewer", Kind: "llm", Attempt: 1,
			Duration: 812 * time.Millisecond, Update: update, Usage: map[string]int64{"calls": 1, "input_tokens": 1834, "output_tokens": 61}},
		{Type: StateUpdate, Run: "run_01HZX3", Thread: "thr_01HZX3", Step: 12, Time: at, Duration: 300 * time.Microsecond,
			Update: map[string]any{"turn": 13}, Fields: []string{"reply", "question", "history", "turn"},
			Appended: map[string]any{"history": []any{map[string]any{"role": "assistant", "text": "Thanks"}}}, Checkpoint: 25, Next: []string{"listen"}},
		{Type: RunEnd, Run: "run_01HZX3", Thread: "thr_01HZX3", Step: 13, Time: at, Duration: 2 * time.Second, State: state},
	}
}

// BenchmarkEventJSON encodes a turn's typical events with json.Marshal
// and with JSON (what the server's event log calls), in the same run:
// compare their ns/op and allocs/op.
func BenchmarkEventJSON(b *testing.B) {
	evs := benchEvents()
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for i := range evs {
				if _, err := json.Marshal(evs[i]); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("JSON", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for i := range evs {
				if _, err := evs[i].JSON(); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}

// TestEventJSONAllocates: a turn's events are written into a buffer
// without allocating (encoding/json allocates for each map, key and
// value), so the direct encoding is what encodes them.
func TestEventJSONAllocates(t *testing.T) {
	buf := make([]byte, 0, 64<<10)
	for _, ev := range benchEvents() {
		var err error
		if n := testing.AllocsPerRun(50, func() { buf, err = ev.AppendJSON(buf[:0]) }); n != 0 || err != nil {
			t.Errorf("%s: %v allocations per event, %v", ev.Type, n, err)
		}
	}
}
