package engine

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/value"
)

// JSON is the event's JSON: the bytes json.Marshal writes for it, written
// without reflection for the values a run's state holds (see AppendJSON).
func (e *Event) JSON() ([]byte, error) {
	buf := jsonBufs.Get().(*[]byte)
	b, err := e.AppendJSON((*buf)[:0])
	var out []byte
	if err == nil {
		out = slices.Clone(b)
	}
	if cap(b) <= 64<<10 { // a run_end's large state is not kept
		*buf = b
		jsonBufs.Put(buf)
	}
	return out, err
}

var jsonBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// AppendJSON appends the event's JSON to dst: exactly the bytes
// json.Marshal writes for it (members in the struct's order, the same
// omissions, strings escaped and map keys sorted as encoding/json does),
// and the same error where it fails (NaN, a cycle, a value that does not
// marshal). The values of Update, Appended, State and Usage are written
// directly when they are what a run's state holds (maps, lists, strings,
// numbers, booleans, null, json.Number); any other value, and Interrupt
// and Tool, are written by encoding/json.
func (e *Event) AppendJSON(dst []byte) ([]byte, error) {
	if !eventLayout {
		return appendMarshal(dst, e)
	}
	b, err := e.appendJSON(dst)
	if err != nil {
		// encoding/json says what is wrong, as it always did
		return appendMarshal(dst, e)
	}
	return b, nil
}

func appendMarshal(dst []byte, v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return dst, err
	}
	return append(dst, b...), nil
}

// errSlow stops the direct encoding: encoding/json encodes the event
// instead (it fails, or goes deeper than the direct encoding does).
var errSlow = errors.New("engine: event encoded by encoding/json")

func (e *Event) appendJSON(b []byte) ([]byte, error) {
	var err error
	b = append(b, `{"type":`...)
	b = value.AppendJSONString(b, string(e.Type))
	b = append(b, `,"run":`...)
	b = value.AppendJSONString(b, e.Run)
	b = append(b, `,"thread":`...)
	b = value.AppendJSONString(b, e.Thread)
	b = append(b, `,"step":`...)
	b = strconv.AppendInt(b, int64(e.Step), 10)
	b = append(b, `,"time":`...)
	if b, err = appendTime(b, e.Time); err != nil {
		return b, err
	}
	if e.NS != "" {
		b = append(b, `,"ns":`...)
		b = value.AppendJSONString(b, e.NS)
	}
	if e.Node != "" {
		b = append(b, `,"node":`...)
		b = value.AppendJSONString(b, e.Node)
	}
	if e.Kind != "" {
		b = append(b, `,"kind":`...)
		b = value.AppendJSONString(b, e.Kind)
	}
	if e.Attempt != 0 {
		b = append(b, `,"attempt":`...)
		b = strconv.AppendInt(b, int64(e.Attempt), 10)
	}
	if e.Duration != 0 {
		b = append(b, `,"duration":`...)
		b = strconv.AppendInt(b, int64(e.Duration), 10)
	}
	if len(e.Update) > 0 {
		b = append(b, `,"update":`...)
		if b, err = appendObject(b, e.Update, 0); err != nil {
			return b, err
		}
	}
	if len(e.Fields) > 0 {
		b = append(b, `,"fields":`...)
		b = appendStrings(b, e.Fields)
	}
	if len(e.Appended) > 0 {
		b = append(b, `,"appended":`...)
		if b, err = appendObject(b, e.Appended, 0); err != nil {
			return b, err
		}
	}
	if e.Checkpoint != 0 {
		b = append(b, `,"checkpoint":`...)
		b = strconv.AppendUint(b, e.Checkpoint, 10)
	}
	if len(e.Next) > 0 {
		b = append(b, `,"next":`...)
		b = appendStrings(b, e.Next)
	}
	if e.Handled {
		b = append(b, `,"handled":true`...)
	}
	if e.Degraded != "" {
		b = append(b, `,"degraded":`...)
		b = value.AppendJSONString(b, e.Degraded)
	}
	if e.Cached {
		b = append(b, `,"cached":true`...)
	}
	if e.Interrupt != nil {
		b = append(b, `,"interrupt":`...)
		if b, err = appendMarshal(b, e.Interrupt); err != nil {
			return b, err
		}
	}
	if len(e.Usage) > 0 {
		b = append(b, `,"usage":`...)
		b = appendUsage(b, e.Usage)
	}
	if e.Tool != nil {
		b = append(b, `,"tool":`...)
		if b, err = appendMarshal(b, e.Tool); err != nil {
			return b, err
		}
	}
	if e.Text != "" {
		b = append(b, `,"text":`...)
		b = value.AppendJSONString(b, e.Text)
	}
	if e.Error != "" {
		b = append(b, `,"error":`...)
		b = value.AppendJSONString(b, e.Error)
	}
	if len(e.State) > 0 {
		b = append(b, `,"state":`...)
		if b, err = appendObject(b, e.State, 0); err != nil {
			return b, err
		}
	}
	return append(b, '}'), nil
}

// eventFields is Event's layout as appendJSON writes it: each field's
// name, type and tag. A field added, moved or changed makes
// eventLayout false, and every event is then encoded by encoding/json
// (TestEventJSONLayout fails until appendJSON is brought up to date).
var eventFields = []struct {
	name string
	typ  reflect.Type
	tag  string
}{
	{"Type", reflect.TypeFor[EventType](), "type"},
	{"Run", reflect.TypeFor[string](), "run"},
	{"Thread", reflect.TypeFor[string](), "thread"},
	{"Step", reflect.TypeFor[int](), "step"},
	{"Time", reflect.TypeFor[time.Time](), "time"},
	{"NS", reflect.TypeFor[string](), "ns,omitempty"},
	{"Node", reflect.TypeFor[string](), "node,omitempty"},
	{"Kind", reflect.TypeFor[string](), "kind,omitempty"},
	{"Attempt", reflect.TypeFor[int](), "attempt,omitempty"},
	{"Duration", reflect.TypeFor[time.Duration](), "duration,omitempty"},
	{"Update", reflect.TypeFor[map[string]any](), "update,omitempty"},
	{"Fields", reflect.TypeFor[[]string](), "fields,omitempty"},
	{"Appended", reflect.TypeFor[map[string]any](), "appended,omitempty"},
	{"Checkpoint", reflect.TypeFor[uint64](), "checkpoint,omitempty"},
	{"Next", reflect.TypeFor[[]string](), "next,omitempty"},
	{"Handled", reflect.TypeFor[bool](), "handled,omitempty"},
	{"Degraded", reflect.TypeFor[string](), "degraded,omitempty"},
	{"Cached", reflect.TypeFor[bool](), "cached,omitempty"},
	{"Interrupt", reflect.TypeFor[*Interrupt](), "interrupt,omitempty"},
	{"Usage", reflect.TypeFor[map[string]int64](), "usage,omitempty"},
	{"Tool", reflect.TypeFor[*kind.ToolEvent](), "tool,omitempty"},
	{"Text", reflect.TypeFor[string](), "text,omitempty"},
	{"Error", reflect.TypeFor[string](), "error,omitempty"},
	{"State", reflect.TypeFor[map[string]any](), "state,omitempty"},
}

var eventLayout = func() bool {
	t := reflect.TypeFor[Event]()
	if t.NumField() != len(eventFields) {
		return false
	}
	for i, f := range eventFields {
		sf := t.Field(i)
		if sf.Name != f.name || sf.Type != f.typ || sf.Tag != reflect.StructTag(`json:"`+f.tag+`"`) {
			return false
		}
	}
	// a method that changes how encoding/json writes an Event
	pt := reflect.PointerTo(t)
	for _, m := range []reflect.Type{reflect.TypeFor[json.Marshaler](), reflect.TypeFor[interface{ MarshalText() ([]byte, error) }]()} {
		if pt.Implements(m) {
			return false
		}
	}
	return true
}()

// appendTime writes t as time.Time's MarshalJSON does: RFC 3339 with
// nanoseconds, quoted; a year beyond 4 digits, or a zone of 24 hours or
// more, is an error.
func appendTime(b []byte, t time.Time) ([]byte, error) {
	b = append(b, '"')
	n0 := len(b)
	b = t.AppendFormat(b, time.RFC3339Nano)
	if len(b)-n0 < len("2006-01-02T15:04:05Z") || b[n0+4] != '-' {
		return b, errSlow
	}
	if b[len(b)-1] != 'Z' {
		c := b[len(b)-len("Z07:00")]
		z := b[len(b)-len("07:00"):]
		if '0' <= c && c <= '9' || 10*(z[0]-'0')+(z[1]-'0') >= 24 {
			return b, errSlow
		}
	}
	return append(b, '"'), nil
}

// jsonDepth is how deep appendValue goes into nested values; a deeper
// value (or a cycle) is left to encoding/json, which finds cycles past
// the same depth.
const jsonDepth = 500

// appendValue writes v as encoding/json does.
func appendValue(b []byte, v any, depth int) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...), nil
	case string:
		return value.AppendJSONString(b, x), nil
	case bool:
		return strconv.AppendBool(b, x), nil
	case float64:
		return appendFloat(b, x)
	case int:
		return strconv.AppendInt(b, int64(x), 10), nil
	case int64:
		return strconv.AppendInt(b, x, 10), nil
	case int32:
		return strconv.AppendInt(b, int64(x), 10), nil
	case uint64:
		return strconv.AppendUint(b, x, 10), nil
	case uint:
		return strconv.AppendUint(b, uint64(x), 10), nil
	case json.Number:
		s := string(x)
		if s == "" {
			s = "0"
		}
		if !validNumber(s) {
			return b, errSlow
		}
		return append(b, s...), nil
	case map[string]any:
		if x == nil {
			return append(b, "null"...), nil
		}
		return appendObject(b, x, depth)
	case []any:
		if x == nil {
			return append(b, "null"...), nil
		}
		if depth >= jsonDepth {
			return b, errSlow
		}
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = appendValue(b, e, depth+1); err != nil {
				return b, err
			}
		}
		return append(b, ']'), nil
	case []string:
		if x == nil {
			return append(b, "null"...), nil
		}
		return appendStrings(b, x), nil
	}
	return appendMarshal(b, v)
}

// appendObject writes m as encoding/json does: its keys sorted.
func appendObject(b []byte, m map[string]any, depth int) ([]byte, error) {
	if depth >= jsonDepth {
		return b, errSlow
	}
	var buf [32]member
	ms := buf[:0]
	for k, v := range m {
		ms = append(ms, member{k, v})
	}
	slices.SortFunc(ms, func(x, y member) int { return strings.Compare(x.key, y.key) })
	b = append(b, '{')
	for i := range ms {
		if i > 0 {
			b = append(b, ',')
		}
		b = value.AppendJSONString(b, ms[i].key)
		b = append(b, ':')
		var err error
		if b, err = appendValue(b, ms[i].value, depth+1); err != nil {
			return b, err
		}
	}
	return append(b, '}'), nil
}

type member struct {
	key   string
	value any
}

func appendUsage(b []byte, m map[string]int64) []byte {
	var buf [16]string
	keys := buf[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = value.AppendJSONString(b, k)
		b = append(b, ':')
		b = strconv.AppendInt(b, m[k], 10)
	}
	return append(b, '}')
}

func appendStrings(b []byte, s []string) []byte {
	b = append(b, '[')
	for i, e := range s {
		if i > 0 {
			b = append(b, ',')
		}
		b = value.AppendJSONString(b, e)
	}
	return append(b, ']')
}

// appendFloat writes f as encoding/json writes a float64: like
// JavaScript, in exponent form below 1e-6 and from 1e21 in magnitude,
// the exponent unpadded. NaN and the infinities are an error.
func appendFloat(b []byte, f float64) ([]byte, error) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return b, errSlow
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// e-09 is e-9
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, nil
}

// validNumber reports whether s is a JSON number, as encoding/json
// checks a json.Number.
func validNumber(s string) bool {
	if s == "" {
		return false
	}
	if s[0] == '-' {
		s = s[1:]
		if s == "" {
			return false
		}
	}
	switch {
	case s[0] == '0':
		s = s[1:]
	case '1' <= s[0] && s[0] <= '9':
		s = s[1:]
		for len(s) > 0 && '0' <= s[0] && s[0] <= '9' {
			s = s[1:]
		}
	default:
		return false
	}
	if len(s) >= 2 && s[0] == '.' && '0' <= s[1] && s[1] <= '9' {
		s = s[2:]
		for len(s) > 0 && '0' <= s[0] && s[0] <= '9' {
			s = s[1:]
		}
	}
	if len(s) >= 2 && (s[0] == 'e' || s[0] == 'E') {
		s = s[1:]
		if s[0] == '+' || s[0] == '-' {
			s = s[1:]
			if s == "" {
				return false
			}
		}
		for len(s) > 0 && '0' <= s[0] && s[0] <= '9' {
			s = s[1:]
		}
	}
	return s == ""
}
