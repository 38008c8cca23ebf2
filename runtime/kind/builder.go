package kind

import (
	"text/template"

	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/expression"
	"github.com/trellisflow/trellis/runtime/schema"
)

// Builder is what a kind's constructor works with: the node's settings
// and the hooks to compile what they hold. Every hook reports the problems
// it finds at their exact position (in the flow file, or in a file the
// node reads) and returns nil after reporting one, so a constructor goes on
// and every problem of a flow is reported in one pass.
type Builder interface {
	// Node is the node's name.
	Node() string
	// Settings reads the node's block through the kind's Fields.
	Settings() config.Settings
	// FlowSettings reads the flow file's top level through the kind's
	// FlowFields.
	FlowSettings() config.Settings

	// Field returns the shape of a state field, or nil when the state has
	// no such field.
	Field(name string) *schema.Shape
	// Writes declares that the node writes field; at is where it says so.
	Writes(field string, at config.Value)
	// WritesValue reports when what p yields, as far as its type is
	// known, cannot be written to field through the field's reducer (a
	// string to a number, a list to a merge); at holds the expression.
	WritesValue(field string, p *expression.Program, at config.Value)

	// Expr compiles the expression held by a string scalar against the
	// flow's state and input and the extra variables vars. It returns nil
	// after reporting a problem.
	Expr(v config.Value, vars Vars) *expression.Program
	// Condition compiles like Expr an expression that must be boolean.
	Condition(v config.Value, vars Vars) *expression.Program
	// Template compiles the text/template held by a string scalar (or a
	// text region, see config.TextAt) and checks every field it reads
	// against its data: state, input and the extra values vars (each
	// top-level, as .state, .input, .NAME). name names it in render
	// errors. It returns nil after reporting a problem.
	Template(v config.Value, name string, vars Vars) *template.Template
	// Schema reads a JSON Schema written inline (a mapping) or named by a
	// path relative to the file holding v, and compiles it. It reports
	// nothing: the error says what is wrong and where, for the kind to
	// report in its own words.
	Schema(v config.Value, name string) (*JSONSchema, *SchemaError)

	// File reads a file named relative to the flow file (or absolute).
	File(name string) (*Resource, error)
	// Find looks for folder/name beside the flow file and in each directory
	// above it, and reads the first it finds.
	Find(folder, name string) (*Resource, bool)
	// Names lists the files ending in ext under folder beside the flow file
	// and above it (relative to folder, without ext), for suggestions.
	Names(folder, ext string) []string
	// ParseYAML reads YAML with positions, reporting syntax errors; nil
	// when nothing usable was read.
	ParseYAML(path string, src []byte) *config.File

	// Fits reports (as a W004 error at at) when what p yields, as far as
	// its type and declared shape are known, cannot be a value of shape
	// dst; what names the destination in the message ("field x of flow
	// y"). It reports nothing for an unknown type or shape.
	Fits(p *expression.Program, dst *schema.Shape, at config.Value, what string)

	// Nested compiles the node block v holds (a mapping with a kind and
	// its settings, as under nodes:) as a node run by this one: its
	// expressions and templates may also read vars, and the fields it
	// writes count as this node's writes. Settings that act on the run
	// (interrupt_before, interrupt_after, on_error) are refused there.
	// It returns nil after reporting a problem.
	Nested(v config.Value, vars Vars) *Nested
	// Subflow loads, validates and compiles the flow file the string
	// scalar v names (relative to this flow's file), for this node to run
	// as a child. The child's own problems are reported in its file; a
	// flow that includes itself, directly or through others, is an error.
	// It returns nil after reporting a problem.
	Subflow(v config.Value) *Subflow

	// Tools resolves the names the string list v holds to the tools of
	// the flow's tools block that they name (an entry that declares
	// several, such as an MCP server's, stands for all of them), for this
	// node to call. A name that is no entry, and two tools that share a
	// name, are reported; it returns nil after reporting a problem.
	Tools(v config.Value) []*Tool

	// Errorf reports a problem with the node's settings at a position
	// (the node's block when at is the zero Value).
	Errorf(at config.Value, format string, args ...any)
	// Report reports a problem of the given code at a position, such as
	// one inside a file the node reads; path is the YAML path of the value.
	Report(code diag.Code, pos diag.Pos, path, format string, args ...any) *diag.Diagnostic
	// Shared returns what build returns for key, calling it once per flow
	// load: a file several nodes read is parsed, and its problems
	// reported, once.
	Shared(key string, build func() any) any
}

// Vars declares extra expression or template variables and their shapes
// (nil: unknown, so nothing below it is checked).
type Vars map[string]*schema.Shape

// Resource is a file a node reads.
type Resource struct {
	// Path is the file's name as diagnostics show it.
	Path string
	// Data is its content.
	Data []byte
}

// JSONSchema is a compiled JSON Schema.
type JSONSchema struct {
	// Raw is the schema with every $ref inlined, so it stands alone (as
	// sent to a model); annotations and definitions are dropped.
	Raw map[string]any
	// Validator checks values and holds the schema's shape.
	Validator *schema.Validator
}

// SchemaError says why Schema failed.
type SchemaError struct {
	// Unreadable is set when the file cannot be read (or v is neither a
	// mapping nor a path); Message then is empty.
	Unreadable bool
	// Pos is where the problem is: inside the schema when it is invalid.
	Pos     diag.Pos
	Message string
}
