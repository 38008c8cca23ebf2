package expression

import (
	"fmt"
	"strings"

	"github.com/trellisflow/trellis/runtime/diag"
)

// expr's own messages name tokens and Go types (Operator("="),
// mismatched types []interface {} and int); a designer reads them in the
// flow's words, with what was expected.

var (
	unexpectedToken = diag.Pattern(`^unexpected token (\w+)\("(.*)"\)$`)
	mismatched2     = diag.Pattern(`^invalid operation: (\S+) \(mismatched types (.+) and (.+)\)$`)
	mismatched1     = diag.Pattern(`^invalid operation: (\S+) \(mismatched type (.+)\)$`)
	badArgument     = diag.Pattern(`^invalid argument for (\w+) \(type (.+)\)$`)
	noField         = diag.Pattern(`^type (.+) has no field (\w+)$`)
	cannotUse       = diag.Pattern(`^cannot use (.+) as argument \(type (.+)\) to call (\w+)\s*$`)
	notCallable     = diag.Pattern(`^(.+) is not callable$`)
	mixed           = diag.Pattern(`^Operator \((\S+)\) and coalesce expressions \(\?\?\) cannot be mixed`)
	argCount        = diag.Pattern(`^invalid number of arguments \(expected (\d+), got (\d+)\)$`)
	unrecognized    = diag.Pattern(`^unrecognized character: (U\+[0-9A-F]+) '(.+)'$`)
)

// goWords names a Go type as the values of a flow are named.
func goWords(t string) string {
	t = strings.TrimSpace(t)
	switch {
	case strings.HasPrefix(t, "*"):
		return goWords(t[1:]) + " (or null)"
	case strings.HasPrefix(t, "[]"):
		return "a list"
	case strings.HasPrefix(t, "map["), strings.HasPrefix(t, "struct"):
		return "an object"
	case strings.HasPrefix(t, "func"):
		return "a function"
	}
	switch t {
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		return "an integer"
	case "float32", "float64":
		return "a number"
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "interface {}", "any":
		return "a value of any type"
	case "nil", "<nil>":
		return "nil"
	}
	return t
}

// inWords rephrases one of expr's messages about src (the problem at
// rune offset at), "" when it has no rephrasing.
func inWords(src, msg string, at int) string {
	if m := unexpectedToken().FindStringSubmatch(msg); m != nil {
		r := []rune(src)
		return unexpected(string(r[:min(max(at, 0), len(r))]), m[1], m[2])
	}
	switch {
	case msg == "unexpected token EOF" || msg == "unexpected end of expression":
		return ended(src)
	case msg == "literal not terminated":
		return "a quoted text is never closed: add its closing quote"
	}
	if m := unrecognized().FindStringSubmatch(msg); m != nil {
		c := []rune(m[2])[0]
		if strings.ContainsRune("‘’‚‛“”„‟«»′″`´", c) {
			return fmt.Sprintf("%s is not a quote an expression reads: write a text between straight quotes, 'like this' or \"like this\"", m[2])
		}
		return fmt.Sprintf("the character %s (%s) has no meaning in an expression: a text holding it is written in quotes", m[2], m[1])
	}
	if m := mismatched2().FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("%s does not apply to %s and %s", m[1], goWords(m[2]), goWords(m[3]))
	}
	if m := mismatched1().FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("%s does not apply to %s", m[1], goWords(m[2]))
	}
	if m := badArgument().FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("%s does not take %s", m[1], goWords(m[2]))
	}
	if m := noField().FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("%s has no field %q", goWords(m[1]), m[2])
	}
	if m := cannotUse().FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("%s takes %s, not %s", m[3], goWords(m[2]), goWords(m[1]))
	}
	if m := notCallable().FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("%s is not a function: it cannot be called", goWords(m[1]))
	}
	if m := mixed().FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("?? and %s need parentheses to be mixed: write (a ?? b) %s c, or a ?? (b %s c)", m[1], m[1], m[1])
	}
	if m := argCount().FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("this takes %s argument(s), not %s", m[1], m[2])
	}
	return ""
}

// unexpected rephrases a token the parser did not expect after before.
func unexpected(before, kind, text string) string {
	switch {
	case kind == "Operator" && text == "=":
		return `"=" does not compare (there is no assignment): write == to compare`
	case kind == "Bracket" && strings.ContainsAny(text, ")]}"):
		if opened(before) == 0 {
			return fmt.Sprintf("%q closes nothing: there is no opening bracket before it", text)
		}
		return fmt.Sprintf("unexpected %q: a value is missing before it", text)
	case kind == "Operator":
		return fmt.Sprintf("unexpected operator %q: a value is expected here", text)
	case kind == "Number" || kind == "String" || kind == "Identifier":
		what := map[string]string{"Number": "number", "String": "text", "Identifier": "name"}[kind]
		return fmt.Sprintf("unexpected %s %q: an operator (such as + or ==) or a comma is missing before it", what, text)
	}
	return fmt.Sprintf("unexpected %q", text)
}

// ended says what an expression that ends too soon lacks.
func ended(src string) string {
	if n := opened(src); n > 0 {
		return "the expression ends before a bracket it opens is closed"
	}
	t := strings.TrimSpace(src)
	for _, op := range []string{"==", "!=", "<=", ">=", "&&", "||", "??", "+", "-", "*", "/", "%", "<", ">", "!", "?", ":", ",", "in", "not", "and", "or", "matches", "contains", "startsWith", "endsWith", "|", "."} {
		if strings.HasSuffix(t, op) {
			return fmt.Sprintf("the expression ends after %q: a value is expected after it", op)
		}
	}
	return "the expression ends too soon: a value is expected"
}

// opened counts the brackets src opens and does not close (outside
// quoted text).
func opened(src string) int {
	n := 0
	var quote rune
	escaped := false
	for _, r := range src {
		switch {
		case escaped:
			escaped = false
		case quote != 0 && r == '\\':
			escaped = true
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"' || r == '`':
			quote = r
		case r == '(' || r == '[' || r == '{':
			n++
		case r == ')' || r == ']' || r == '}':
			n--
		}
	}
	return n
}
