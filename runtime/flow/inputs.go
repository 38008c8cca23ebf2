package flow

import (
	"slices"

	"github.com/trellisflow/trellis/runtime/diag"
)

// NeededInput is an input field a run must give, and why. The engine
// refuses a run that lacks one by these rules (OwedInputs and
// Field.ReadAt), and `trellis validate` lists them from NeededInputs.
type NeededInput struct {
	Name string `json:"name"`
	// EveryRun: every run gives it, because the flow reads input.NAME at
	// ReadAt with nothing to fall back on.
	EveryRun bool      `json:"every_run"`
	ReadAt   *diag.Pos `json:"read_at,omitempty"`
	// FirstRun: the state schema requires the field and gives it no
	// default, so the first run of a new thread gives it (unless the
	// thread was created with a value for it).
	FirstRun bool `json:"first_run"`
}

// OwedInputs are the input fields the state schema requires that state
// has no value for: a thread may be created without them, and the run
// that brings input brings them (a run without them is refused).
func (g *Graph) OwedInputs(state map[string]any) []string {
	if g.root == nil {
		return nil
	}
	var out []string
	for _, name := range g.root.Shape.Required {
		if _, ok := state[name]; ok {
			continue
		}
		if f, ok := g.Field(name); ok && f.Input {
			out = append(out, name)
		}
	}
	return out
}

// NeededInputs lists, in the order the input is declared, the inputs a
// run must give: those the flow reads with nothing to fall back on (every
// run), and those a new thread's state of defaults owes (its first run).
func (g *Graph) NeededInputs() []NeededInput {
	return slices.Clone(g.Memo(neededKey{}, neededInputs).([]NeededInput))
}

type neededKey struct{}

func neededInputs(g *Graph) any {
	defaults := map[string]any{}
	for _, f := range g.Fields {
		if f.HasDefault {
			defaults[f.Name] = f.Default
		}
	}
	owed := map[string]bool{}
	for _, name := range g.OwedInputs(defaults) {
		owed[name] = true
	}
	var out []NeededInput
	for _, f := range g.Inputs {
		if f.ReadAt == nil && !owed[f.Name] {
			continue
		}
		out = append(out, NeededInput{Name: f.Name, EveryRun: f.ReadAt != nil, ReadAt: f.ReadAt, FirstRun: owed[f.Name]})
	}
	return out
}
