// Package config reads the files a flow is made of and declares what they
// may hold.
//
// Files come from the disk or from an fs.FS (Files). Parse reads YAML with
// the position of every value, so that every problem can be reported at
// its file:line:col; a Value is one value as written, with its position.
//
// A Field declares one setting: its name, type, documentation and
// constraints. The flow format, the settings every node shares and each
// node kind's own settings are declared this way once; from the
// declarations come the JSON Schema of the format (Schema), the Markdown
// reference (Table) and typed accessors over a parsed block (Settings).
package config
