package expression

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

// mentionsAfresh is Mentions reading both texts anew at each call, as it
// did before it kept what it read.
func mentionsAfresh(text, phrase string) bool {
	want := segment(phrase, false, "+#")
	if len(want) == 0 {
		return false
	}
	have := segment(text, false, "+#")
	for i := 0; i+len(want) <= len(have); i++ {
		ok := true
		for j, w := range want {
			got := have[i+j]
			var same bool
			if utf8.RuneCountInString(w) <= 2 && strings.ToLower(w) != w {
				same = got == w || got == w+"s"
			} else {
				l, g := strings.ToLower(w), strings.ToLower(got)
				same = g == l || len(l) > 2 && BaseForm(g) == BaseForm(l)
			}
			if !same {
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

// TestMentionsKeptAsRead: what Mentions says of texts and phrases it
// kept is what it says reading them afresh, the first time and after.
func TestMentionsKeptAsRead(t *testing.T) {
	texts := []string{
		"I tested the libraries in Go and C++ with CI; we were going to prompt them.",
		"Built prompts, Node.js services and GOs",
		"検索を35%改善した", "", "go going Go Gos", "AI ais Ai", "testing tests tested tester",
	}
	phrases := []string{"Go", "go", "library", "testing", "C++", "node js", "prompt", "CI", "AI", "検索", "", "prompt them", "Gos", "tests"}
	for pass := range 2 {
		for _, text := range texts {
			for _, p := range phrases {
				if got, want := Mentions(text, p), mentionsAfresh(text, p); got != want {
					t.Fatalf("pass %d: Mentions(%q, %q) = %v, afresh %v", pass, text, p, got, want)
				}
			}
		}
	}
}

// BenchmarkMentionsOfAnAnswer: the interview's judgement of an answer as
// it runs each turn, its terms, hedges and cues looked for in one answer.
func BenchmarkMentionsOfAnAnswer(b *testing.B) {
	answer := "I built data pipelines in Go and PostgreSQL at Northwind; backpressure was the hard part, so we added bounded queues and cut search latency tenfold."
	terms := make([]string, 80)
	for i := range terms {
		terms[i] = fmt.Sprintf("term%d queues", i)
	}
	terms = append(terms, "Go", "PostgreSQL", "bounded queue", "latency", "I think", "maybe")
	b.Run("kept", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, t := range terms {
				Mentions(answer, t)
			}
		}
	})
	b.Run("afresh", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, t := range terms {
				mentionsAfresh(answer, t)
			}
		}
	})
}
