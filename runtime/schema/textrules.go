package schema

import (
	"fmt"
	"slices"
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

// KeepsText reports whether every text a value of shape s can be keeps
// the text rules of dst (its enum, pattern, lengths and format): s's own
// rules are as strict.
func (s *Shape) KeepsText(dst *Shape) bool {
	if dst == nil {
		return true
	}
	if s == nil {
		return dst.TextRules(0) == ""
	}
	if want, ok := dst.Strings(); ok {
		have, ok := s.Strings()
		if !ok {
			return false
		}
		for _, v := range have {
			if !slices.Contains(want, v) {
				return false
			}
		}
		return true // (an enum's values are checked whole: lengths too)
	}
	if dst.MaxLength != nil && (s.MaxLength == nil || *s.MaxLength > *dst.MaxLength) {
		return false
	}
	if s.MinLength < dst.MinLength {
		return false
	}
	if dst.PatternRE() != nil && s.Pattern != dst.Pattern {
		return false
	}
	return dst.Format == "" || s.Format == dst.Format
}
