package expression_test

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/trellisflow/trellis/runtime/expression"
	"github.com/trellisflow/trellis/runtime/schema"
)

func TestMentions(t *testing.T) {
	cases := []struct {
		text, phrase string
		want         bool
	}{
		{"Built a retrieval pipeline in Python.", "python", true},
		{"Built a retrieval pipeline in Python.", "Retrieval Pipeline", true},
		{"Built a retrieval pipeline in Python.", "pipeline retrieval", false}, // in order
		{"Regression tests of LLM prompts.", "prompt", true},                   // a plural
		{"Regression tests of LLM prompts.", "LLM", true},
		{"Three open-source libraries.", "library", true},
		{"Fine-tuning of small models.", "fine-tuning", true},
		{"Fine-tuning of small models.", "fine tuning", true}, // punctuation is ignored
		{"Pythonic code.", "python", false},                   // whole words only
		{"Wrote C++ and C#.", "C++", true},
		{"Wrote C and Go.", "C++", false},
		{"Wrote C#.", "C", false},
		{"Served with Node.js.", "node.js", true},
		{"Anything.", "", false},
		{"Anything.", "  ...  ", false},
		{"", "go", false},
		{"LLMs in production.", "LLMs", true},
		{"LLM in production.", "LLMs", true}, // the same word, inflected either way
		{"Wrote unit tests for the API.", "testing", true},
		{"Tested the service.", "testing", true},
		{"Cutting costs.", "cut", true},
		{"An experiment.", "experience", false}, // inflections, not derivations
		{"Evaluated models.", "evaluation", false},
		{"We are going to ship it.", "Go", false}, // a short capitalised word is that word only
		{"I like go.", "Go", false},
		{"Services in Go.", "Go", true},
		{"Ran CI on every commit.", "CI", true},
		{"Added retries.", "add", true},
		{"Embedded the vectors in embeddings.", "embedding", true},
		{"検索基盤を再設計し、応答時間を35%短縮した。", "検索", true}, // a term inside a Japanese sentence
		{"検索基盤を再設計し", "基盤を検索", false},
		{"Développé une API naïve.", "naïve", true},
		{"नमस्ते दुनिया", "दुनिया", true}, // vowel signs stay in their word
		{"Prompt engineering", "prompt engineering for agents", false},
	}
	for _, c := range cases {
		if got := expression.Mentions(c.text, c.phrase); got != c.want {
			t.Errorf("Mentions(%q, %q) = %v, want %v", c.text, c.phrase, got, c.want)
		}
	}
}

func TestWords(t *testing.T) {
	for text, want := range map[string][]string{
		"Cut p95 latency by 35%.": {"cut", "p95", "latency", "by", "35"},
		"  Worked   on backend. ": {"worked", "on", "backend"},
		"":                        {},
		" -- ... ":                {},
		"Wrote C++ tests.":        {"wrote", "c", "tests"},
		"検索を35%改善":                {"検", "索", "を", "35", "改", "善"},
		"naïve Straße":            {"naïve", "straße"},
		"नमस्ते दुनिया":           {"नमस्ते", "दुनिया"},
	} {
		if got := expression.Words(text); !slices.Equal(got, want) || got == nil {
			t.Errorf("Words(%q) = %#v, want %#v", text, got, want)
		}
	}
}

func TestWordsAsWritten(t *testing.T) {
	for text, want := range map[string][]string{
		"Wrote unit tests for APIs and Kubernetes.": {"Wrote", "unit", "tests", "for", "APIs", "and", "Kubernetes"},
		"":    {},
		"東京で": {"東", "京", "で"},
	} {
		if got := expression.WordsAsWritten(text); !slices.Equal(got, want) || got == nil {
			t.Errorf("WordsAsWritten(%q) = %#v, want %#v", text, got, want)
		}
		if got := expression.WordsAsWritten(text); len(got) != len(expression.Words(text)) {
			t.Errorf("%q: %d words as written, %d normalised", text, len(got), len(expression.Words(text)))
		}
	}
}

func TestBaseForm(t *testing.T) {
	for _, group := range [][]string{
		{"test", "tests", "tested", "testing"},
		{"code", "codes", "coded", "coding"},
		{"library", "libraries"},
		{"cut", "cuts", "cutting"},
		{"plan", "planned", "planning"},
		{"process", "processes", "processed", "processing"},
		{"measure", "measured", "measuring", "measures"},
		{"embedded", "embedding", "embeddings"},
		{"use", "used", "uses", "using"},
		{"add", "added", "adds"},
		{"install", "installed", "installing"},
		{"speed", "speeds"},
		{"apply", "applied", "applies"},
		{"cache", "caches", "cached"},
	} {
		for _, w := range group[1:] {
			if a, b := expression.BaseForm(group[0]), expression.BaseForm(w); a != b {
				t.Errorf("BaseForm(%q) = %q, BaseForm(%q) = %q: want the same", group[0], a, w, b)
			}
		}
	}
	for _, pair := range [][2]string{{"experiment", "experience"}, {"evaluation", "evaluate"}, {"led", "lead"},
		{"status", "stat"}, {"string", "str"}, {"bring", "br"}, {"need", "ne"}, {"red", "r"}} {
		if expression.BaseForm(pair[0]) == expression.BaseForm(pair[1]) {
			t.Errorf("BaseForm(%q) == BaseForm(%q) = %q", pair[0], pair[1], expression.BaseForm(pair[0]))
		}
	}
}

func TestStems(t *testing.T) {
	got := expression.Stems("We measured the p99 latency, and I cut it by 35%!")
	if want := []string{"measur", "p99", "latency", "cut", "35"}; !slices.Equal(got, want) {
		t.Fatalf("Stems = %#v, want %#v", got, want)
	}
	if got := expression.Stems("I don't know."); len(got) != 1 || got[0] != "know" {
		t.Fatalf("Stems of a non-answer = %#v", got)
	}
	if got := expression.Stems(""); got == nil || len(got) != 0 {
		t.Fatalf("Stems of nothing = %#v", got)
	}
}

// A fence holds any text whole: nothing inside closes it.
func TestFence(t *testing.T) {
	for text, want := range map[string]string{
		"print(1)":                   "```\nprint(1)\n```",
		"a ``` b\n":                  "````\na ``` b\n````",
		"```\nignore the above\n```": "````\n```\nignore the above\n```\n````",
		"":                           "```\n\n```",
	} {
		text = strings.ReplaceAll(text, `\n`, "\n")
		want = strings.ReplaceAll(want, `\n`, "\n")
		if got := expression.Fence(text); got != want {
			t.Errorf("Fence(%q) = %q, want %q", text, got, want)
		}
	}
}

func TestTruncate(t *testing.T) {
	for _, c := range []struct {
		text string
		n    int
		want string
	}{
		{"idk", 10, "idk"},
		{"héllo wörld", 5, "héll…"},
		{"ab cd", 4, "ab…"},
		{"検索を35%改善", 4, "検索を…"},
		{"anything", 0, ""},
	} {
		if got := expression.Truncate(c.text, c.n); got != c.want || !utf8.ValidString(got) {
			t.Errorf("Truncate(%q, %d) = %q, want %q", c.text, c.n, got, c.want)
		}
	}
}

// FuzzFence: the fenced text comes back whole between the first and the
// last line, and no line inside is the fence.
func FuzzFence(f *testing.F) {
	for _, s := range []string{"x", "```", "`````\n```", "a\n\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		got := expression.Fence(text)
		lines := strings.Split(got, "\n")
		bar := lines[0]
		if len(lines) < 3 || lines[len(lines)-1] != bar || !strings.HasPrefix(bar, "```") {
			t.Fatalf("Fence(%q) = %q", text, got)
		}
		if inner := strings.Join(lines[1:len(lines)-1], "\n"); inner != strings.TrimRight(text, "\n") {
			t.Fatalf("Fence(%q) holds %q", text, inner)
		}
		for _, l := range lines[1 : len(lines)-1] {
			if strings.HasPrefix(strings.TrimSpace(l), bar) {
				t.Fatalf("Fence(%q): line %q closes the fence", text, l)
			}
		}
	})
}

// The functions are callable from expressions, typed: mentions is a
// condition, split_words a list of strings.
func TestTextFunctionsInExpressions(t *testing.T) {
	str := &schema.Shape{Types: []string{"string"}}
	env := expression.NewEnv().WithFields("state", &schema.Shape{Types: []string{"object"}, Closed: true,
		Props: map[string]*schema.Shape{"text": str, "keywords": {Types: []string{"array"}, Items: str}}, Order: []string{"keywords", "text"}})
	vars := map[string]any{"state.text": "Shipped RAG evaluations in Python.", "state.keywords": []any{"python", "evaluation", "go", "rag"},
		"state": map[string]any{"text": "Shipped RAG evaluations in Python.", "keywords": []any{"python", "evaluation", "go", "rag"}}}
	p, probs := expression.Compile("filter(state.keywords, mentions(state.text, #))", env, false)
	if p == nil {
		t.Fatal(probs)
	}
	got, err := p.Eval(vars)
	if err != nil || !slices.Equal(got.([]any), []any{"python", "evaluation", "rag"}) {
		t.Fatalf("found %#v %v", got, err)
	}
	c, probs := expression.Compile("len(split_words(state.text)) == 5 && split_words(state.text)[0] == 'shipped'", env, true)
	if c == nil {
		t.Fatal(probs)
	}
	if ok, err := c.EvalBool(vars); !ok || err != nil {
		t.Fatalf("words: %v %v", ok, err)
	}
	for src, want := range map[string]any{
		"written_words(state.text)[0]":          "Shipped",
		"word_stems(state.text)":                []any{"ship", "rag", "evaluation", "python"},
		"fence(state.text) startsWith '```\\n'": true,
		"truncate(state.text, 8)":               "Shipped…",
	} {
		p, probs := expression.Compile(src, env, false)
		if p == nil {
			t.Fatal(src, probs)
		}
		got, err := p.Eval(vars)
		if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s = %#v (%v), want %#v", src, got, err, want)
		}
	}
	if _, probs := expression.Compile("mentions(state.text)", env, true); len(probs) == 0 {
		t.Fatal("mentions with one argument compiled")
	}
	if _, probs := expression.Compile("mentions(state.text, 3)", env, true); len(probs) == 0 {
		t.Fatal("mentions of a number compiled")
	}
}

// FuzzMentions: a text mentions each of its own words and itself, and
// mentioning never panics.
func FuzzMentions(f *testing.F) {
	for _, s := range []string{"Built a RAG pipeline.", "C++ and C#", "libraries", "", "ÄÖ über straße", "y ies"} {
		f.Add(s, "pipeline")
	}
	f.Fuzz(func(t *testing.T, text, phrase string) {
		_ = expression.Mentions(text, phrase)
		if len(expression.Words(text)) > 0 && !expression.Mentions(text, text) {
			t.Fatalf("%q does not mention itself", text)
		}
	})
}

// The interview's de-duplication as it runs each turn: every question of
// the bank against every question asked, the same texts turn after turn.
func BenchmarkWordOverlapOfABank(b *testing.B) {
	bank := make([]string, 40)
	for i := range bank {
		bank[i] = fmt.Sprintf("Tell me about a time you scaled service %d past its limits: what broke first, and why?", i)
	}
	asked := bank[:8]
	b.ReportAllocs()
	for b.Loop() {
		for _, c := range bank {
			for _, a := range asked {
				if expression.NormalizeText(a) == expression.NormalizeText(c) || expression.WordOverlap(a, c) > 0.8 {
					continue
				}
			}
		}
	}
}

// word_overlap is the Jaccard similarity of the word sets, whatever the
// texts kept read: the same as counting the sets afresh, for texts seen
// before and texts too long to keep; the texts kept stay bounded.
func TestWordOverlapAsTheSetsSay(t *testing.T) {
	jaccard := func(a, b string) float64 {
		set := map[string]uint8{}
		for _, w := range strings.Fields(expression.NormalizeText(a)) {
			set[w] |= 1
		}
		for _, w := range strings.Fields(expression.NormalizeText(b)) {
			set[w] |= 2
		}
		if len(set) == 0 {
			return 1
		}
		both := 0
		for _, v := range set {
			if v == 3 {
				both++
			}
		}
		return float64(both) / float64(len(set))
	}
	words := []string{"go", "Go!", "rust", "the", "The", "a", "scale", "p95", "é", "naïve", "", "  ", "?"}
	rnd := rand.New(rand.NewPCG(1, 2))
	text := func() string {
		n := rnd.IntN(12)
		if rnd.IntN(20) == 0 {
			n = 600 // past the length kept
		}
		var b strings.Builder
		for range n {
			b.WriteString(words[rnd.IntN(len(words))])
			b.WriteString(" ")
		}
		return b.String()
	}
	for range 3 * expression.TextsBound {
		a, b := text(), text()
		for range 2 { // read, then kept
			if got, want := expression.WordOverlap(a, b), jaccard(a, b); got != want {
				t.Fatalf("word_overlap(%q, %q) = %v, want %v", a, b, got, want)
			}
		}
		if n := expression.TextsKept(); n > expression.TextsBound {
			t.Fatalf("%d texts kept, bound %d", n, expression.TextsBound)
		}
	}
}

// The built-in functions that build lists give an empty list, never a nil
// one, for no items: a nil list is null to JSON, so a field written with
// it would read back as null elsewhere. concat still refuses what is not
// a list when it compiles.
func TestListFunctionsGiveEmptyLists(t *testing.T) {
	env := expression.NewEnv().WithFields("state", &schema.Shape{Types: []string{"object"}, Closed: true,
		Props: map[string]*schema.Shape{"l": {Types: []string{"array"}}, "m": {Types: []string{"object"}}}, Order: []string{"l", "m"}})
	vars := map[string]any{"state.l": []any{}, "state.m": map[string]any{}, "state": map[string]any{"l": []any{}, "m": map[string]any{}}}
	for _, src := range []string{"concat([], [])", "concat(state.l)", "concat(state.l, [], state.l)", "flatten([])", "flatten([state.l])",
		"map(state.l, #)", "filter(state.l, true)", "filter([1], false)", "uniq(state.l)", "keys(state.m)", "values(state.m)",
		"sort(state.l)", "sortBy(state.l, #)", "reverse(state.l)", "take(state.l, 2)", "state.l[0:0]", "split_words('')", "toPairs(state.m)"} {
		p, probs := expression.Compile(src, env, false)
		if p == nil {
			t.Fatalf("%s: %v", src, probs)
		}
		got, err := p.Eval(vars)
		r := reflect.ValueOf(got)
		if err != nil || r.Kind() != reflect.Slice || r.IsNil() || r.Len() != 0 {
			t.Errorf("%s = %#v, %v: want an empty list", src, got, err)
		}
	}
	if got, err := mustEval(t, env, "concat([1], state.l, [2])", vars); err != nil || !reflect.DeepEqual(got, []any{1, 2}) {
		t.Errorf("concat: %#v %v", got, err)
	}
	if _, probs := expression.Compile("concat(state.l, 3)", env, false); len(probs) == 0 {
		t.Error("concat of a number compiled")
	}
}

func mustEval(t *testing.T, env *expression.Env, src string, vars map[string]any) (any, error) {
	t.Helper()
	p, probs := expression.Compile(src, env, false)
	if p == nil {
		t.Fatalf("%s: %v", src, probs)
	}
	return p.Eval(vars)
}
