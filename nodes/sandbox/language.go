package sandbox

import (
	"bytes"
	"embed"
	"fmt"
	"path"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// Language is what the sandbox needs to run code of one language: data,
// not code. Command starts the language's runner (a program in the
// language itself, with $DRIVER standing for its source) in each process
// of an execution. The runner reads one request on stdin: a line holding
// the length of a JSON header, the header, and the program's input after
// it. The header holds the source and the name of its file, a nonce, the
// limits, whether to report metrics, and the mode: run (the whole
// program, on the input) or call (evaluate the call against the source's
// top level, with empty input). The runner writes the source to File,
// and when asked for metrics, writes them first on stdout as one line,
// "\x1etrellis metrics " followed by a JSON object (lines, comments,
// classes, complexity, max_nesting, functions, or syntax_error, in which
// case nothing runs), before any of the code runs. Then it runs the code
// in its own process; in mode call the last line of stdout is
// "\x1etrellis value NONCE " followed by {"value": V}, or {"text": T}
// for a value with no JSON form. The runner decides nothing: the tests'
// expected values never reach it, and what it prints is compared with
// them outside the sandbox.
type Language struct {
	Name    string   `yaml:"name"`
	Title   string   `yaml:"title"`
	File    string   `yaml:"file"`
	Driver  string   `yaml:"driver"`
	Command []string `yaml:"command"`
	// Image overrides the sandbox image for this language (it must have
	// python3 and sh: the Docker container's first process runs them).
	Image string `yaml:"image"`

	source string // the driver's text
}

//go:embed languages
var builtin embed.FS

// Builtin returns the languages that ship with Trellis, by name.
func Builtin() map[string]*Language {
	out := map[string]*Language{}
	entries, _ := builtin.ReadDir("languages")
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".yaml") {
			continue
		}
		src, _ := builtin.ReadFile(path.Join("languages", e.Name()))
		l, err := ParseLanguage(src, func(name string) ([]byte, error) {
			return builtin.ReadFile(path.Join("languages", name))
		})
		if err != nil {
			panic(fmt.Sprintf("sandbox: built-in language %s: %v", e.Name(), err))
		}
		out[l.Name] = l
	}
	return out
}

// BuiltinNames lists the built-in languages, sorted.
func BuiltinNames() []string {
	var names []string
	for n := range Builtin() {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// ParseLanguage reads a language file; driver reads the driver it names.
func ParseLanguage(src []byte, driver func(name string) ([]byte, error)) (*Language, error) {
	var l Language
	dec := yaml.NewDecoder(bytes.NewReader(src))
	dec.KnownFields(true)
	if err := dec.Decode(&l); err != nil {
		return nil, err
	}
	var missing []string
	for _, f := range []struct{ name, v string }{{"name", l.Name}, {"file", l.File}, {"driver", l.Driver}} {
		if f.v == "" {
			missing = append(missing, f.name)
		}
	}
	if len(l.Command) == 0 {
		missing = append(missing, "command")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("missing %s", strings.Join(missing, ", "))
	}
	if strings.ContainsAny(l.File, "/\\") || l.File == "." || l.File == ".." {
		return nil, fmt.Errorf("file %q is a plain file name", l.File)
	}
	if !slices.Contains(l.Command, "$DRIVER") {
		return nil, fmt.Errorf("command does not pass $DRIVER")
	}
	d, err := driver(l.Driver)
	if err != nil {
		return nil, fmt.Errorf("driver %s: %w", l.Driver, err)
	}
	l.source = string(d)
	if l.Title == "" {
		l.Title = l.Name
	}
	return &l, nil
}

// command is the command line that starts the runner.
func (l *Language) command() []string {
	out := make([]string, len(l.Command))
	for i, a := range l.Command {
		if a == "$DRIVER" {
			a = l.source
		}
		out[i] = a
	}
	return out
}
