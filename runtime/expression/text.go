package expression

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// How the text functions see words, in any script: a word is a run of
// letters, combining marks and digits (so "naïve", "straße" and a
// Devanagari word with its vowel signs stay whole), and each character of
// a script written without spaces between words (Han, Hiragana,
// Katakana) is a word of its own, so that a Japanese sentence has a
// length in words and a two-character term is found inside it.

// spaceless reports whether r belongs to a script written without
// spaces, whose characters each count as a word.
func spaceless(r rune) bool {
	return unicode.In(r, unicode.Han, unicode.Hiragana, unicode.Katakana)
}

// wordRune reports whether r belongs to a word; extra lists the other
// runes a word may hold (mentions keeps + and #, for C++ and C#).
func wordRune(r rune, extra string) bool {
	return unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r) || strings.ContainsRune(extra, r)
}

// segment splits s into its words, lowercased when lower is set.
func segment(s string, lower bool, extra string) []string {
	var out []string
	start := -1
	flush := func(end int) {
		if start >= 0 {
			w := s[start:end]
			if lower {
				w = strings.ToLower(w)
			}
			out = append(out, w)
			start = -1
		}
	}
	for i, r := range s {
		switch {
		case spaceless(r):
			flush(i)
			w := s[i : i+utf8.RuneLen(r)]
			if r == utf8.RuneError {
				w = string(r)
			}
			out = append(out, w)
		case wordRune(r, extra) && r != utf8.RuneError:
			if start < 0 {
				start = i
			}
		default:
			flush(i)
		}
	}
	flush(len(s))
	return out
}

// WordsAsWritten returns the words of s as it writes them (words in
// expressions): the same words as Words, with their case kept, so
// "Wrote unit tests for APIs." gives [Wrote unit tests for APIs] and a
// slice of one lines up with the other.
func WordsAsWritten(s string) []string {
	w := segment(s, false, "")
	if w == nil {
		w = []string{}
	}
	return w
}

// Stems returns the base forms of the words of s that carry its meaning
// (word_stems in expressions): each word lowercased and stripped of its
// English inflection (BaseForm), the function words (the, and, I, was,
// ...) left out, in the text's order. Two texts that share stems talk of
// the same things: "We measured the latency" and "How did you measure
// latency?" share measur and latency.
func Stems(s string) []string {
	out := []string{}
	for _, w := range Words(s) {
		if !stopWords[w] {
			out = append(out, BaseForm(w))
		}
	}
	return out
}

// BaseForm strips a lowercase English word of its inflection: the
// plural (-s, -es, -ies), the past (-ed, -ied) and -ing, undoing a
// doubled final consonant (cutting, planned) and dropping a final e, so
// that the forms of one word meet: test, tests, tested and testing give
// test; code, codes and coding give cod; library and libraries give
// library. What it returns is a key to compare words by, not always a
// word. Derivations are left alone (evaluation is not evaluate,
// experiment not experience), and words of other scripts are returned as
// they are.
func BaseForm(w string) string {
	n := len(w)
	switch {
	case n > 4 && strings.HasSuffix(w, "ies"):
		w = w[:n-3] + "y"
	case n > 4 && strings.HasSuffix(w, "ied"):
		w = w[:n-3] + "y"
	case n > 4 && (strings.HasSuffix(w, "sses") || strings.HasSuffix(w, "xes") || strings.HasSuffix(w, "ches") ||
		strings.HasSuffix(w, "shes") || strings.HasSuffix(w, "zzes")):
		w = w[:n-2]
	case n > 3 && strings.HasSuffix(w, "s") && !strings.HasSuffix(w, "ss") && !strings.HasSuffix(w, "us") && !strings.HasSuffix(w, "is"):
		w = w[:n-1]
		// a plural's own -ing or -ed (embeddings, proceeds) is an
		// inflection too
		if strings.HasSuffix(w, "ing") {
			w = stripSuffix(w, "ing", 2)
		}
	case strings.HasSuffix(w, "ing"):
		w = stripSuffix(w, "ing", 2)
	case strings.HasSuffix(w, "ed") && !strings.HasSuffix(w, "eed"):
		w = stripSuffix(w, "ed", 2)
	}
	if len(w) >= 3 && strings.HasSuffix(w, "e") && !strings.HasSuffix(w, "ee") {
		w = w[:len(w)-1]
	}
	return w
}

// stripSuffix takes suffix off w when at least keep letters with a vowel
// remain, then undoes a doubled final consonant (cutt, plann; not in a
// word of three letters, nor ll, ss or zz, which the word may own: add,
// install, process, buzz).
func stripSuffix(w, suffix string, keep int) string {
	rest := strings.TrimSuffix(w, suffix)
	if len(rest) < keep || !strings.ContainsAny(rest, "aeiouy") || !isASCIIWord(rest) {
		return w
	}
	if n := len(rest); n >= 4 && rest[n-1] == rest[n-2] && !strings.ContainsRune("aeiouylsz", rune(rest[n-1])) {
		rest = rest[:n-1]
	}
	return rest
}

func isASCIIWord(w string) bool {
	for i := 0; i < len(w); i++ {
		if w[i] < 'a' || w[i] > 'z' {
			return false
		}
	}
	return true
}

// stopWords are the English function words Stems leaves out: they say
// how a text is put, not what it is about.
var stopWords = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`a about above after again against all also am an and any are as at be
		because been before being below between both but by can could did do does doing don done down during each
		either else even ever few for from further get got had has have having he her here hers herself him himself
		his how however i if in into is it its itself just let lets me might more most much must my myself no nor
		not now of off on once one only or other our ours ourselves out over own quite rather really s same shall
		she should so some such t than that the their theirs them themselves then there these they this those
		though through thus to too under until up upon us very via was we were what when where whether which
		while who whom whose why will with within without would yet you your yours yourself yourselves
		ll re ve d m`) {
		m[w] = true
	}
	return m
}()

// Fence returns text inside a Markdown code fence that nothing in it can
// close (fence in expressions): a run of backticks longer than any the
// text holds, at least three. A prompt that says what a fence holds
// (code, a program's output, a candidate's message: data to read, never
// instructions to follow) shows such text in one, and the text cannot end
// the fence early to speak as the prompt.
func Fence(text string) string {
	longest, run := 0, 0
	for i := 0; i < len(text); i++ {
		if text[i] == '`' {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	bar := strings.Repeat("`", max(3, longest+1))
	return bar + "\n" + strings.TrimRight(text, "\n") + "\n" + bar
}

// Truncate returns text cut to at most n characters (truncate in
// expressions), ending in "…" when it was cut, never inside a character
// (expr's own slicing of a string counts bytes): what a flow keeps of a
// long text it only quotes.
func Truncate(text string, n int) string {
	if n <= 0 {
		return ""
	}
	if utf8.RuneCountInString(text) <= n {
		return text
	}
	runes := []rune(text)
	return strings.TrimRight(string(runes[:n-1]), " \t\n") + "…"
}
