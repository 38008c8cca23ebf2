package schema

import (
	"fmt"
	"strings"
)

// TextRules says in words which rules a string shape sets for its text
// (its enum, pattern and lengths), such as `is one of "a", "b"`; "" when
// it sets none, and every text is allowed.
func (s *Shape) TextRules() string {
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
	if s.MinLength > 0 {
		rules = append(rules, fmt.Sprintf("is at least %d characters long", s.MinLength))
	}
	if s.MaxLength != nil {
		rules = append(rules, fmt.Sprintf("is at most %d characters long", *s.MaxLength))
	}
	return strings.Join(rules, " and ")
}
