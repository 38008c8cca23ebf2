// The json and yaml functions remember what they made of a value, so that
// a prompt that shows a large value each turn (a resume, an evaluation)
// marshals it once, not once a turn.

package tmpl

import (
	"encoding/json"
	"hash/maphash"
	"math"
	"strings"
	"sync"
	"sync/atomic"

	"gopkg.in/yaml.v3"
)

// The forms a value is rendered in.
const (
	formJSON uint8 = iota + 1
	formYAML
)

// renderKey names a value's rendering by its contents: a hash of them,
// with their size beside it. Equal contents render the same bytes (JSON
// and YAML sort an object's keys, and a number's type is in the hash), so
// a value read again from the store, a copy, or the same value in the
// next turn finds the rendering of the first; a value changed in place
// has other contents, and so another key.
type renderKey struct {
	form  uint8
	hash  uint64
	nodes int // values in it
	bytes int // bytes of its texts and keys
}

// rendered holds renderings, within renderedMax of them and
// renderedBytes of text; when full it starts again empty.
var rendered struct {
	mu    sync.Mutex
	m     map[renderKey]string
	bytes int
}

const (
	renderedMax   = 2048
	renderedBytes = 16 << 20
)

var renderSeed = maphash.MakeSeed()

// marshals counts the values marshalled (for tests: a value rendered
// again is not).
var marshals atomic.Int64

// renderJSON is the json function: v as indented JSON.
func renderJSON(v any) (string, error) {
	return render(formJSON, v, func(v any) (string, error) {
		b, err := json.MarshalIndent(v, "", "  ")
		return string(b), err
	})
}

// renderYAML is the yaml function: v as YAML, without its last newline.
func renderYAML(v any) (string, error) {
	return render(formYAML, v, func(v any) (string, error) {
		b, err := yaml.Marshal(v)
		return strings.TrimRight(string(b), "\n"), err
	})
}

// render renders v in form through marshal, or finds it rendered. Only
// lists and objects are remembered: a scalar marshals as fast as it is
// hashed.
func render(form uint8, v any, marshal func(any) (string, error)) (string, error) {
	switch v.(type) {
	case map[string]any, []any:
	default:
		return marshal(v)
	}
	var h maphash.Hash
	h.SetSeed(renderSeed)
	key := renderKey{form: form}
	if !fingerprint(&h, v, &key) {
		return marshal(v)
	}
	key.hash = h.Sum64()
	rendered.mu.Lock()
	s, ok := rendered.m[key]
	rendered.mu.Unlock()
	if ok {
		return s, nil
	}
	marshals.Add(1)
	s, err := marshal(v)
	if err != nil || len(s) > renderedBytes/16 {
		return s, err
	}
	rendered.mu.Lock()
	if rendered.m == nil || len(rendered.m) >= renderedMax || rendered.bytes+len(s) > renderedBytes {
		rendered.m, rendered.bytes = make(map[renderKey]string), 0
	}
	if _, ok := rendered.m[key]; !ok {
		rendered.m[key] = s
		rendered.bytes += len(s)
	}
	rendered.mu.Unlock()
	return s, nil
}

// Tags keep values of different types apart in the hash.
const (
	tagNull byte = iota + 1
	tagFalse
	tagTrue
	tagString
	tagFloat
	tagInt
	tagList
	tagObject
	tagNumber
)

// fingerprint hashes v's contents into h and counts its size into k; it
// reports false for a value of a type state does not hold (rendered
// without the cache). An object's members are hashed each on its own
// and summed, so their order does not matter, as it does not to JSON and
// YAML, which sort them.
func fingerprint(h *maphash.Hash, v any, k *renderKey) bool {
	k.nodes++
	switch x := v.(type) {
	case nil:
		h.WriteByte(tagNull)
	case bool:
		if x {
			h.WriteByte(tagTrue)
		} else {
			h.WriteByte(tagFalse)
		}
	case string:
		h.WriteByte(tagString)
		writeLen(h, len(x))
		h.WriteString(x)
		k.bytes += len(x)
	case float64:
		h.WriteByte(tagFloat)
		writeLen(h, int(math.Float64bits(x)))
	case int:
		h.WriteByte(tagInt)
		writeLen(h, x)
	case int64:
		h.WriteByte(tagInt)
		writeLen(h, int(x))
	case json.Number:
		h.WriteByte(tagNumber)
		writeLen(h, len(x))
		h.WriteString(string(x))
	case []any:
		h.WriteByte(tagList)
		writeLen(h, len(x))
		for _, it := range x {
			if !fingerprint(h, it, k) {
				return false
			}
		}
	case map[string]any:
		h.WriteByte(tagObject)
		writeLen(h, len(x))
		var sum uint64
		for name, it := range x {
			var m maphash.Hash
			m.SetSeed(renderSeed)
			writeLen(&m, len(name))
			m.WriteString(name)
			k.bytes += len(name)
			if !fingerprint(&m, it, k) {
				return false
			}
			sum += m.Sum64()
		}
		writeLen(h, int(sum))
	default:
		return false
	}
	return true
}

func writeLen(h *maphash.Hash, n int) {
	var b [8]byte
	for i := range b {
		b[i] = byte(uint64(n) >> (8 * i))
	}
	h.Write(b[:])
}
