package expression

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/builtin"
	"github.com/expr-lang/expr/conf"
)

// The function library flows may call besides expr's built-ins (len, filter,
// map, mean, lower, ...): text normalisation and word similarity for
// de-duplication, a text's words (normalised, as written, or as stems)
// and whether it mentions a phrase (for rules over prose: keywords, vague
// openers, length, what an answer shares with its question), a fence for
// untrusted text shown to a model, truncate to quote a long text, ids, and json (a value as compact JSON
// text, where expr's toJSON indents).
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
	expr.Function("written_words", func(p ...any) (any, error) {
		return WordsAsWritten(p[0].(string)), nil
	}, new(func(string) []string)),
	expr.Function("word_stems", func(p ...any) (any, error) {
		return Stems(p[0].(string)), nil
	}, new(func(string) []string)),
	expr.Function("fence", func(p ...any) (any, error) {
		return Fence(p[0].(string)), nil
	}, new(func(string) string)),
	expr.Function("truncate", func(p ...any) (any, error) {
		n, ok := wholeNumber(p[1])
		if !ok {
			return nil, fmt.Errorf("truncate: the count %v is not a whole number", p[1])
		}
		return Truncate(p[0].(string), n), nil
	}, new(func(string, int) string)),
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
	uniqByValue(),
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

var registered = []string{"normalize", "word_overlap", "split_words", "mentions", "written_words", "word_stems", "fence", "truncate", "uuid", "slug", "json"}

// NormalizeText lowercases s, turns punctuation into spaces and collapses runs of
// spaces: "What's  your Stack?" becomes "what s your stack". Accents and
// other combining marks stay in their words, and the characters of
// scripts written without spaces are spaced (see segment).
func NormalizeText(s string) string { return read(s).norm }

func normalize(s string) string { return strings.Join(segment(s, true, ""), " ") }

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

// Words returns the words of s (split_words in expressions), normalised as
// NormalizeText does: "Cut p95 latency by 35%." gives [cut p95 latency by
// 35]. Words are those of any script (see segment): "検索を35%改善" gives
// [検 索 を 35 改 善]. An empty or all-punctuation text has none, so
// len(split_words(s)) counts words.
func Words(s string) []string {
	w := strings.Fields(read(s).norm)
	if w == nil {
		w = []string{}
	}
	return w
}

// Mentions reports whether text mentions phrase: the phrase's words occur
// in text one after another, ignoring case and punctuation, each in any
// of its English inflections there ("prompt" is mentioned by "prompts",
// "library" by "libraries", "testing" by "tests" and "tested": BaseForm).
// A word of one or two letters written with a capital (Go, CI, AI) is
// that word only in that case, so "go" and "going" do not mention Go. A
// word is a run of letters, marks and digits, with + and # kept (C++ and
// C# are words; Node.js is "node js"); each Han or kana character is a
// word, so a Japanese text mentions a term written inside a sentence. An
// empty phrase is mentioned by nothing.
func Mentions(text, phrase string) bool {
	keys := mentionKeys(phrase)
	if len(keys) == 0 {
		return false
	}
	have := mentionWords(text)
	for i := 0; i+len(keys) <= len(have.words); i++ {
		ok := true
		for j, k := range keys {
			if !k.matches(have, i+j) {
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

// mentionKey is a phrase's word as Mentions compares text words with it.
type mentionKey struct {
	exact string // a short capitalised word, compared as written
	lower string
	base  string
}

func keyOf(w string) mentionKey {
	if utf8.RuneCountInString(w) <= 2 && strings.ToLower(w) != w {
		return mentionKey{exact: w}
	}
	l := strings.ToLower(w)
	k := mentionKey{lower: l}
	if len(l) > 2 {
		k.base = BaseForm(l)
	}
	return k
}

// matches reports whether the text's word i is the key's word.
func (k mentionKey) matches(t *mentionText, i int) bool {
	if k.exact != "" {
		got := t.words[i]
		return got == k.exact || len(got) == len(k.exact)+1 && got[len(got)-1] == 's' && got[:len(k.exact)] == k.exact
	}
	return t.lower[i] == k.lower || k.base != "" && t.base[i] == k.base
}

// mentionText is a text's words as Mentions reads them: as written, in
// lower case, and in their base form.
type mentionText struct {
	words, lower, base []string
}

// mentions keeps the texts and phrases Mentions read lately, as texts
// keeps those of the other text functions: a flow looks for many terms
// in one answer (each term against the same text), and for the same
// terms turn after turn, so each is read once. Bounded as texts is.
var mentions = struct {
	sync.RWMutex
	texts   map[string]*mentionText
	phrases map[string][]mentionKey
}{texts: map[string]*mentionText{}, phrases: map[string][]mentionKey{}}

func mentionWords(text string) *mentionText {
	kept := len(text) <= textsLongest
	if kept {
		mentions.RLock()
		t := mentions.texts[text]
		mentions.RUnlock()
		if t != nil {
			return t
		}
	}
	words := segment(text, false, "+#")
	t := &mentionText{words: words, lower: make([]string, len(words)), base: make([]string, len(words))}
	for i, w := range words {
		t.lower[i] = strings.ToLower(w)
		t.base[i] = BaseForm(t.lower[i])
	}
	if kept {
		mentions.Lock()
		if len(mentions.texts) >= textsKept {
			clear(mentions.texts)
		}
		mentions.texts[text] = t
		mentions.Unlock()
	}
	return t
}

func mentionKeys(phrase string) []mentionKey {
	kept := len(phrase) <= textsLongest
	if kept {
		mentions.RLock()
		keys, ok := mentions.phrases[phrase]
		mentions.RUnlock()
		if ok {
			return keys
		}
	}
	want := segment(phrase, false, "+#")
	keys := make([]mentionKey, len(want))
	for i, w := range want {
		keys[i] = keyOf(w)
	}
	if kept {
		mentions.Lock()
		if len(mentions.phrases) >= textsKept {
			clear(mentions.phrases)
		}
		mentions.phrases[phrase] = keys
		mentions.Unlock()
	}
	return keys
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

// wholeNumber is v as an int when it is a whole number of any of the
// kinds a value may come as (a float64 such as 3.0 from JSON too).
func wholeNumber(v any) (int, bool) {
	if n, ok := asInt(v); ok {
		return n, true
	}
	switch x := v.(type) {
	case int32:
		return int(x), true
	case float64:
		if x == math.Trunc(x) && x >= -(1<<53) && x <= 1<<53 {
			return int(x), true
		}
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return int(i), true
		}
	}
	return 0, false
}
