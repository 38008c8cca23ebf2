// Package diag is the one diagnostics type of Trellis. Every phase (load,
// validate, compile) returns what it could build plus a list of diagnostics;
// nothing stops at the first problem, so one run reports every error in every
// file. Diagnostics carry a stable code, a position, the YAML path of the
// offending value and, where a name was close to a known one, a suggestion.
package diag

import (
	"cmp"
	"fmt"
	"slices"
)

// Severity orders diagnostics: errors stop a flow from compiling, warnings do not.
type Severity int

const (
	Error Severity = iota
	Warning
)

func (s Severity) String() string {
	if s == Warning {
		return "warning"
	}
	return "error"
}

// MarshalText makes a Severity print as its name in JSON output.
func (s Severity) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads a Severity back from its name.
func (s *Severity) UnmarshalText(b []byte) error {
	switch string(b) {
	case "error":
		*s = Error
	case "warning":
		*s = Warning
	default:
		return fmt.Errorf("severity %q: want error or warning", b)
	}
	return nil
}

// Pos is a 1-based position in a file. A zero Line means the whole file.
type Pos struct {
	File string `json:"file"`
	Line int    `json:"line"`
	Col  int    `json:"col"`
	// EndCol, when larger than Col, marks a span on the same line.
	EndCol int `json:"end_col,omitempty"`
}

func (p Pos) String() string {
	switch {
	case p.Line == 0:
		return p.File
	default:
		return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Col)
	}
}

// Diagnostic is one problem found in a flow, a schema or a prompt.
type Diagnostic struct {
	Severity Severity `json:"severity"`
	Code     Code     `json:"code"`
	Pos
	// Path is the YAML path of the value, e.g. "nodes.recruiter.prompt".
	Path string `json:"path,omitempty"`
	// Summary is one lowercase sentence without trailing punctuation.
	Summary string `json:"message"`
	// Detail adds context: what was expected, which loop, which writers.
	Detail string `json:"detail,omitempty"`
	// Suggestion is a close known name ("did you mean ...").
	Suggestion string `json:"suggestion,omitempty"`
}

// Message is the one-line text of the diagnostic, suggestion included.
func (d Diagnostic) Message() string {
	if d.Suggestion != "" {
		return fmt.Sprintf("%s; did you mean %q?", d.Summary, d.Suggestion)
	}
	return d.Summary
}

func (d Diagnostic) String() string {
	return fmt.Sprintf("%s: %s[%s]: %s", d.Pos, d.Severity, d.Code, d.Message())
}

// List collects diagnostics across phases and files.
type List []Diagnostic

// Add appends a diagnostic.
func (l *List) Add(d Diagnostic) { *l = append(*l, d) }

// Errorf appends an error at pos.
func (l *List) Errorf(code Code, pos Pos, path, format string, args ...any) *Diagnostic {
	*l = append(*l, Diagnostic{Severity: Error, Code: code, Pos: pos, Path: path, Summary: fmt.Sprintf(format, args...)})
	return &(*l)[len(*l)-1]
}

// HasErrors reports whether any diagnostic is an error.
func (l List) HasErrors() bool {
	for _, d := range l {
		if d.Severity == Error {
			return true
		}
	}
	return false
}

// Sort orders diagnostics by file, line, column and code, and drops exact
// duplicates, so output is stable whatever order the passes ran in.
func (l List) Sort() List {
	slices.SortStableFunc(l, func(a, b Diagnostic) int {
		return cmp.Or(
			cmp.Compare(a.File, b.File),
			cmp.Compare(a.Line, b.Line),
			cmp.Compare(a.Col, b.Col),
			cmp.Compare(a.Code, b.Code),
			cmp.Compare(a.Summary, b.Summary),
		)
	})
	return slices.Compact(l)
}

// Err returns the list as an error when it holds errors, else nil.
func (l List) Err() error {
	if !l.HasErrors() {
		return nil
	}
	return &ListError{List: l}
}

// ListError is a diagnostics list used as an error, with the text of the
// files it points into when known.
type ListError struct {
	List    List
	Sources Sources
}

func (e *ListError) Error() string {
	n := 0
	first := ""
	for _, d := range e.List {
		if d.Severity == Error {
			if n == 0 {
				first = d.String()
			}
			n++
		}
	}
	if n == 1 {
		return first
	}
	return fmt.Sprintf("%s (and %d more errors)", first, n-1)
}
