package api

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/runtime/engine"
)

// Numbers in the free-form parts of an answer are read as the state
// holds them: integers exactly (beyond 2^53 too), the rest as float64;
// typed fields are as they were.
func TestDecodeIsExact(t *testing.T) {
	var run Run
	body := `{"id": "r", "thread": "t", "flow": "f", "flow_version": "v", "status": "succeeded", "created": "2026-01-01T00:00:00Z",
		"checkpoint": 18446744073709551615, "input": {"n": 9007199254740993, "x": 1.5, "l": [9223372036854775807, {"k": -9223372036854775808}], "big": 1e300, "null": null}}`
	if err := decode(strings.NewReader(body), &run); err != nil {
		t.Fatal(err)
	}
	l := run.Input["l"].([]any)
	if run.Checkpoint != 18446744073709551615 || run.Input["n"] != 9007199254740993 || run.Input["x"] != 1.5 || l[0] != 9223372036854775807 ||
		l[1].(map[string]any)["k"] != -9223372036854775808 || run.Input["big"] != 1e300 || run.Input["null"] != nil {
		t.Fatalf("%#v", run)
	}
	var eb ErrorBody
	if err := decodeBytes([]byte(`{"error": {"code": "run_requeued", "message": "m", "details": {"run": "r", "n": 3}}}`), &eb); err != nil {
		t.Fatal(err)
	}
	if run, ok := WaitAgain(eb.Error); !ok || run != "r" || eb.Error.Details.(map[string]any)["n"] != 3 {
		t.Fatalf("%#v", eb.Error)
	}
}

// eventSamples are events as a server sends them, and some no server
// sends: the fast reading of an event must agree with decode on each.
func eventSamples() []string {
	state := `{"n": 9007199254740993, "x": 1.5, "big": 1e300, "neg": -9223372036854775808, "t": true, "nil": null,
		"turns": [{"q": "How did you design it?", "a": "With care \u00e9\ud83d\ude00", "score": 4}, {"q": "", "a": "", "score": 0.5}],
		"nested": {"deep": [[1, 2.0, "3"], {"k": [null]}]}, "s": "tab\tquote\" backslash\\"}`
	return []string{
		`{"type":"run_end","run":"r","thread":"t","step":9,"time":"2026-11-30T05:36:51.999637799Z","duration":605561399,"state":` + state + `}`,
		`{"type":"node_end","run":"r","thread":"t","step":3,"time":"2026-11-30T05:36:51Z","node":"n","kind":"llm","attempt":1,"duration":5,"update":{"reply":"hi","n":3},"usage":{"calls":1,"tokens":12}}`,
		`{"type":"state_update","run":"r","thread":"t","step":3,"time":"2026-11-30T05:36:51Z","update":{"a":1},"fields":["a","l"],"appended":{"l":[1,{"x":2}]},"checkpoint":4,"next":["b","c"]}`,
		`{"type":"run_end","run":"r","interrupt":{"node":"ask","questions":[{"id":"q","schema":{"type":"integer","maximum":9007199254740993}}]},"state":{}}`,
		`{"type":"node_output","run":"r","node":"n","text":"pi\u00e8ce","attempt":2}`,
		`{"type":"run_end","state":null}`,
		`{"type":"run_end","state":[]}`,
		`{"type":"run_end","state":"x"}`,
		`{"type":"run_end","update":7}`,
		`{"type":"run_end","State":{"a":1}}`,
		`{"type":"run_end","state":{"a":1},"STATE":{"b":2}}`,
		`{"type":"run_end","state":{"a":1},"state":{"b":2}}`,
		`{"type":"run_end","st\u0061te":{"a":1}}`,
		`{"type":"run_end","state":{"a":1,"a":2}}`,
		`{"type":"run_end","state":{"bad":"` + "\xff\xfe" + `"}}`,
		`{"type":"run_end","unknown":{"x":1},"state":{"a":1}}`,
		`{"type":"run_end","step":"nine","state":{"a":1}}`,
		`{"type":"run_end","state":{"a":1}`,
		`{"type":"run_end","state":{"a":1}} trailing`,
		` { "type" : "run_end" , "state" : { "a" : [ 1 ] } } `,
		`[]`, `null`, `{}`, `"x"`, ``,
	}
}

// An event read the fast way is the event decode reads, value for value,
// and it fails where decode fails.
func TestDecodeEventAgreesWithDecode(t *testing.T) {
	for _, s := range eventSamples() {
		agreeOnEvent(t, []byte(s))
	}
	// into an event holding a state already, which decode adds to
	b := []byte(`{"type":"run_end","state":{"b":2}}`)
	fast, slow := engine.Event{State: map[string]any{"a": 1}}, engine.Event{State: map[string]any{"a": 1}}
	if err := decodeEvent(b, &fast); err != nil {
		t.Fatal(err)
	}
	if err := decode(bytes.NewReader(b), &slow); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fast, slow) || len(fast.State) != 2 {
		t.Fatalf("read into a held state as %v, decode's %v", fast.State, slow.State)
	}
}

func FuzzDecodeEvent(f *testing.F) {
	for _, s := range eventSamples() {
		f.Add([]byte(s))
	}
	f.Fuzz(agreeOnEvent)
}

func agreeOnEvent(t *testing.T, b []byte) {
	var fast, slow engine.Event
	ferr := decodeEvent(b, &fast)
	serr := decode(bytes.NewReader(b), &slow)
	if (ferr == nil) != (serr == nil) {
		t.Fatalf("%q: read with error %v, decode's %v", b, ferr, serr)
	}
	if ferr == nil && !reflect.DeepEqual(fast, slow) {
		t.Fatalf("%q: read as\n%#v\ndecode reads\n%#v", b, fast, slow)
	}
}

// BenchmarkDecodeEvent reads a run_end carrying a state of ten
// conversation turns, a state_update appending four and the node_end of
// one, by decodeEvent and by decode (decodeBytes takes the first from
// fastEvent bytes): go test ./runtime/api -run '^$' -bench DecodeEvent
func BenchmarkDecodeEvent(b *testing.B) {
	var turns []string
	for i := range 10 {
		turns = append(turns, fmt.Sprintf(`{"question": "What was the hardest technical challenge in project %d, and how did you work through it?",
			"answer": "We had to index two terabytes of logs a day; I sharded the writers by tenant and batched the flushes.", "score": %d, "aspects": ["design", "impact"]}`, i, i%5))
	}
	state := `{"turns": [` + strings.Join(turns, ",") + `], "phase": "questions", "count": 10, "ratio": 0.75, "done": false}`
	for _, c := range []struct{ name, event string }{
		{"run_end", `{"type":"run_end","run":"run_1","thread":"t","step":9,"time":"2026-11-30T05:36:51.999637799Z","duration":605561399,"state":` + state + `}`},
		{"state_update", `{"type":"state_update","run":"run_1","thread":"t","step":3,"time":"2026-11-30T05:36:51.999637799Z","fields":["turns"],"appended":{"turns": [` + strings.Join(turns[:4], ",") + `]},"checkpoint":4,"next":["plan"]}`},
		{"node_end", `{"type":"node_end","run":"run_1","thread":"t","step":3,"time":"2026-11-30T05:36:51.999637799Z","node":"assess","kind":"llm","attempt":1,"duration":201000000,"update":{"last": ` + turns[0] + `},"usage":{"calls":1,"tokens":120}}`},
	} {
		for _, way := range []struct {
			name string
			read func([]byte, *engine.Event) error
		}{
			{"fast", decodeEvent},
			{"decode", func(b []byte, ev *engine.Event) error { return decode(bytes.NewReader(b), ev) }},
		} {
			b.Run(c.name+"/"+way.name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(c.event)))
				for b.Loop() {
					var ev engine.Event
					if err := way.read([]byte(c.event), &ev); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
