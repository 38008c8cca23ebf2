package diag

import (
	"fmt"
	"strings"
)

var unknownAnchor = Pattern(`^unknown anchor '(.*)' referenced$`)

// YAMLMessage rephrases a YAML parser's message in words, with what was
// expected and the usual cause; a message it does not know is kept.
func YAMLMessage(msg string) string {
	if m := unknownAnchor().FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("the alias *%s names no anchor: define &%s on a value above it", m[1], m[1])
	}
	switch msg {
	case "mapping values are not allowed in this context":
		return `a colon followed by a space starts a key where no key can be: quote a value that holds ": ", or put the key on a line of its own`
	case "did not find expected key":
		return "expected a key (name: value) at this indentation: check the indentation of this line and the one above it"
	case "did not find expected '-' indicator":
		return "expected a list item (- value) at this indentation: a list and a mapping cannot share one level"
	case "did not find expected ',' or ']'":
		return "a list opened with [ is not closed: expected , or ]"
	case "did not find expected ',' or '}'":
		return "a mapping opened with { is not closed: expected , or }"
	case "found unexpected end of stream":
		return "the file ends inside a quoted text: add its closing quote"
	case "found unknown escape character":
		return `an unknown escape (\) in a double-quoted text: write \\ for a backslash, or quote the text with ' instead`
	case "found character that cannot start any token":
		return "a character that cannot start a value here (a tab used to indent, or one of @ ` % at the start of a value: quote the value)"
	case "did not find expected node content":
		return "expected a value here"
	case "could not find expected ':'":
		return "expected a colon after the key"
	case "block sequence entries are not allowed in this context":
		return "a list item (- ) cannot follow a key on its line: start the list on the next line, indented"
	}
	if strings.Contains(msg, "found a tab character") {
		return "a tab is used to indent: YAML indents with spaces"
	}
	if strings.Contains(msg, "invalid leading UTF-8 octet") || strings.Contains(msg, "invalid trailing UTF-8 octet") {
		return "the file is not valid UTF-8 text"
	}
	return msg
}
