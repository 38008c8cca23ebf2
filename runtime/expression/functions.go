package expression

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"unicode"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/builtin"
	"github.com/expr-lang/expr/conf"
)

// The function library flows may call besides expr's built-ins (len, filter,
// map, mean, lower, ...): text normalisation and word similarity for
// de-duplication, a text's words and whether it mentions a phrase (for
// rules over prose: keywords, vague openers, length), ids, and json (a
// value as compact JSON text, where expr's toJSON indents).
var functions = []expr.Option{
	expr.Function("normalize", func(p ...any) (any, error) {
		return NormalizeText(p[0].(string)), nil
	}, new(func(string) string)),
	expr.Function("word_overlap", func(p ...any) (any, error) {
		return WordOverlap(p[0].(string), p[1].(string)), nil
	}, new(func(string, string) float64)),
	expr.Function("split_words", func(p ...any) (any, error) {
		return Words(p[0].(string)), nil
	}, new(func(string) []string)),
	expr.Function("mentions", func(p ...any) (any, error) {
		return Mentions(p[0].(string), p[1].(string)), nil
	}, new(func(string, string) bool)),
	expr.Function("uuid", func(...any) (any, error) {
		return NewID(), nil
	}, new(func() string)),
	expr.Function("slug", func(p ...any) (any, error) {
		return strings.ReplaceAll(NormalizeText(p[0].(string)), " ", "_"), nil
	}, new(func(string) string)),
	expr.Function("json", func(p ...any) (any, error) {
		b, err := json.Marshal(p[0])
		return string(b), err
	}, new(func(any) string)),
	emptyConcat(),
}

// emptyConcat replaces expr's concat with one that gives an empty list,
// not a nil one, when its lists hold nothing: a nil list is null to JSON,
// so a state field written with it would read back as null in any other
// process. It type-checks its arguments as expr's does.
func emptyConcat() expr.Option {
	i := slices.IndexFunc(builtin.Builtins, func(f *builtin.Function) bool { return f.Name == "concat" })
	base := builtin.Builtins[i]
	fn := &builtin.Function{Name: base.Name, Validate: base.Validate, Func: func(args ...any) (any, error) {
		v, _, err := base.Safe(args...)
		if l, ok := v.([]any); ok && l == nil && err == nil {
			v = []any{}
		}
		return v, err
	}}
	return func(c *conf.Config) { c.Functions[fn.Name] = fn }
}

var registered = []string{"normalize", "word_overlap", "split_words", "mentions", "uuid", "slug", "json"}

// NormalizeText lowercases s, turns punctuation into spaces and collapses runs of
// spaces: "What's  your Stack?" becomes "what s your stack".
func NormalizeText(s string) string { return read(s).norm }

func normalize(s string) string {
	var b strings.Builder
	space := true
	for _, r := range s {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			b.WriteRune(unicode.ToLower(r))
			space = false
		} else if !space {
			b.WriteByte(' ')
			space = true
		}
	}
	return strings.TrimRight(b.String(), " ")
}

// WordOverlap is the Jaccard similarity of the two texts' normalised word
// sets: 1 for the same words, 0 for none in common.
func WordOverlap(a, b string) float64 {
	wa, wb := read(a).words, read(b).words
	if len(wa) == 0 && len(wb) == 0 {
		return 1
	}
	both := 0
	for i, j := 0, 0; i < len(wa) && j < len(wb); {
		switch c := strings.Compare(wa[i], wb[j]); {
		case c == 0:
			both++
			i++
			j++
		case c < 0:
			i++
		default:
			j++
		}
	}
	return float64(both) / float64(len(wa)+len(wb)-both)
}

// A text as the text functions read it: normalised, and its set of words.
type readText struct {
	norm  string
	words []string // each once, sorted
}

// texts keeps the recent texts as read: a flow compares the same texts
// (a question bank, the questions asked) on every turn, each against
// many, so each is read once and not at every comparison. It is bounded:
// full, it starts again empty. A longer text is read each time.
var texts = struct {
	sync.RWMutex
	m map[string]*readText
}{m: map[string]*readText{}}

const (
	textsKept    = 4096
	textsLongest = 2048
)

func read(s string) *readText {
	kept := len(s) <= textsLongest
	if kept {
		texts.RLock()
		t := texts.m[s]
		texts.RUnlock()
		if t != nil {
			return t
		}
	}
	t := &readText{norm: normalize(s)}
	w := strings.Fields(t.norm)
	slices.Sort(w)
	t.words = slices.Compact(w)
	if kept {
		texts.Lock()
		if len(texts.m) >= textsKept {
			clear(texts.m)
		}
		texts.m[s] = t
		texts.Unlock()
	}
	return t
}

// Words returns the words of s (split_words in expressions), normalised as NormalizeText does: "Cut
// p95 latency by 35%." gives [cut p95 latency by 35]. An empty or
// all-punctuation text has none, so len(split_words(s)) counts words.
func Words(s string) []string {
	w := strings.Fields(read(s).norm)
	if w == nil {
		w = []string{}
	}
	return w
}

// Mentions reports whether text mentions phrase: the phrase's words occur
// in text one after another, ignoring case and punctuation, and each may
// be in its plural there ("prompt" is mentioned by "prompts", "library"
// by "libraries"). A word is a run of letters and digits, with + and #
// kept (C++ and C# are words; Node.js is "node js"). An empty phrase is
// mentioned by nothing.
func Mentions(text, phrase string) bool {
	want := mentionWords(phrase)
	if len(want) == 0 {
		return false
	}
	have := mentionWords(text)
	for i := 0; i+len(want) <= len(have); i++ {
		ok := true
		for j, w := range want {
			if !sameOrPlural(have[i+j], w) {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// mentionWords splits s into lowercase words of letters, digits, + and #.
func mentionWords(s string) []string {
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '+' && r != '#'
	})
}

// sameOrPlural reports whether got is want or a regular plural of it.
func sameOrPlural(got, want string) bool {
	if got == want {
		return true
	}
	rest, ok := strings.CutPrefix(got, want)
	if ok && (rest == "s" || rest == "es") {
		return true
	}
	stem, isY := strings.CutSuffix(want, "y")
	return isY && stem != "" && got == stem+"ies"
}

// NewID returns a random RFC 4122 version 4 UUID.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	var out [36]byte
	hex.Encode(out[0:8], b[0:4])
	out[8] = '-'
	hex.Encode(out[9:13], b[4:6])
	out[13] = '-'
	hex.Encode(out[14:18], b[6:8])
	out[18] = '-'
	hex.Encode(out[19:23], b[8:10])
	out[23] = '-'
	hex.Encode(out[24:], b[10:16])
	return string(out[:])
}
