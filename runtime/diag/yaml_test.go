package diag

import (
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// The YAML parser's messages are said in words, with what was expected.
func TestYAMLMessagesInWords(t *testing.T) {
	for src, want := range map[string]string{
		"a: b: c":           "a colon followed by a space starts a key where no key can be",
		"a: [1, 2":          "a list opened with [ is not closed: expected , or ]",
		"a: {b: 1":          "a mapping opened with { is not closed: expected , or }",
		"a: 'abc":           "the file ends inside a quoted text",
		"a: *x":             "the alias *x names no anchor",
		"a: \"\\q\"":        "an unknown escape",
		"a:\n  b: 1\n c: 2": "expected a key (name: value) at this indentation",
		"a:\n  - x\n  y: 1": "expected a list item (- value) at this indentation",
		"a: @x":             "a character that cannot start a value here",
	} {
		var n yaml.Node
		err := yaml.Unmarshal([]byte(src), &n)
		if err == nil {
			t.Fatalf("%q parses", src)
		}
		msg := err.Error()
		msg = msg[strings.LastIndex(msg, ": ")+2:]
		if i := strings.Index(err.Error(), ": line "); i < 0 {
			msg = strings.TrimPrefix(err.Error(), "yaml: ")
		} else {
			msg = err.Error()[strings.Index(err.Error()[i+7:], ": ")+i+9:]
		}
		if got := YAMLMessage(msg); !strings.Contains(got, want) {
			t.Errorf("%q: %q (from %q), want %q", src, got, msg, want)
		}
	}
}
