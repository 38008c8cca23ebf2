package schema

import (
	"fmt"
	"strings"
)

// TextRules says in words which rules a string shape sets for its text
// (its enum, pattern and lengths), such as `is one of "a", "b"`; "" when
// it sets none, and every text is allowed. A text known to be at least
// least characters long keeps a minimum length up to that, which is then
// not named.
func (s *Shape) TextRules(least int) string {
	if s == nil {
		return ""
	}
	var rules []string
	if values, ok := s.Strings(); ok {
		rules = append(rules, "is one of "+quoteList(values))
	}
	if s.PatternRE() != nil {
		rules = append(rules, fmt.Sprintf("matches the pattern %q", s.Pattern))
	}
	if s.MinLength > least {
		rules = append(rules, fmt.Sprintf("is at least %d characters long", s.MinLength))
	}
	if s.MaxLength != nil {
		rules = append(rules, fmt.Sprintf("is at most %d characters long", *s.MaxLength))
	}
	if s.Format != "" {
		rules = append(rules, fmt.Sprintf("is a valid %s (its format, which the run checks)", s.Format))
	}
	return strings.Join(rules, " and ")
}
