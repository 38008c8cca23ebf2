package kind

import (
	"fmt"

	"github.com/trellisflow/trellis/runtime/config"

	"github.com/trellisflow/trellis/runtime/expression"
)

// Writes are a node's writes setting compiled: each field with the
// expression whose value it is written (over output, state, input and the
// kind's other variables).
type Writes []Write

// Write is one field of Writes.
type Write struct {
	Field   string
	Program *expression.Program
	// at names the entry in errors: the setting and the field.
	at string
}

// CompileWrites compiles the node's setting of that name (field to
// expression, such as writes): it declares each write, compiles each
// expression with the extra variables vars and checks what it yields
// against its field. ok is false when an expression did not compile
// (reported through b).
func CompileWrites(b Builder, setting string, vars Vars) (w Writes, ok bool) {
	return CompileEntries(b, b.Settings().Entries(setting), setting, vars)
}

// CompileEntries is CompileWrites for the entries of a mapping anywhere
// in the node's settings; at names it in errors (such as
// on_item_error.set).
func CompileEntries(b Builder, entries []config.Entry, at string, vars Vars) (w Writes, ok bool) {
	ok = true
	for _, e := range entries {
		b.Writes(e.Name, e.Key)
		p := b.Expr(e.Value, vars)
		if p == nil {
			ok = false
			continue
		}
		b.WritesValue(e.Name, p, e.Value)
		w = append(w, Write{Field: e.Name, Program: p, at: at + "." + e.Name})
	}
	return w, ok
}

// Eval evaluates every write over vars into an update.
func (w Writes) Eval(vars map[string]any) (Update, error) {
	upd := make(Update, 0, len(w))
	for _, x := range w {
		v, err := x.Program.Eval(vars)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", x.at, err)
		}
		upd = append(upd, FieldValue{Field: x.Field, Value: v})
	}
	return upd, nil
}
