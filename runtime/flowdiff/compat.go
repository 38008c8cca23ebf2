package flowdiff

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"testing/fstest"

	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/schema"
)

// Effect is what one change between two versions of a flow means for the
// threads the older version made: whether they can run on the newer one
// as they are (compatible) or not (breaking), and why.
type Effect struct {
	// Area is field, reducer or node; Name the field or node.
	Area string `json:"area"`
	Name string `json:"name"`
	// Kind is added, removed or changed.
	Kind string `json:"kind"`
	// Breaking is set when a thread's state does not fit the newer
	// version as it is: a migration must give the field's value.
	Breaking bool `json:"breaking"`
	// Reason says why, in a sentence.
	Reason string `json:"reason"`
}

// Compat classifies, for the threads of old, each change of state fields,
// reducers and nodes in new. A field removed or retyped (its old values
// may not fit its new schema), or added as required with no default, is
// breaking; a field added that is optional or has a default, a node
// added, removed or changed, a prompt changed, a reducer changed, is
// compatible. A node removed breaks the threads whose checkpoint waits to
// run it: that depends on the thread, and is checked when one moves.
func Compat(old, new *flow.Graph) []Effect {
	var out []Effect
	for _, f := range old.Fields {
		nf, ok := new.Field(f.Name)
		if !ok {
			out = append(out, Effect{Area: "field", Name: f.Name, Kind: Removed, Breaking: true,
				Reason: fmt.Sprintf("field %q is removed: the threads' values of it would be left behind; a migration drops it", f.Name)})
			continue
		}
		if why := schema.Fits(f.Shape, nf.Shape, ""); len(why) > 0 {
			out = append(out, Effect{Area: "field", Name: f.Name, Kind: Changed, Breaking: true,
				Reason: fmt.Sprintf("field %q is retyped from %s to %s: %s", f.Name, f.Shape.Describe(), nf.Shape.Describe(), strings.Join(why, "; "))})
		} else if nf.Required && !f.Required && !nf.HasDefault && !f.HasDefault {
			out = append(out, Effect{Area: "field", Name: f.Name, Kind: Changed, Breaking: true,
				Reason: fmt.Sprintf("field %q is now required and has no default: threads may have no value for it", f.Name)})
		} else if f.Shape.Describe() != nf.Shape.Describe() {
			out = append(out, Effect{Area: "field", Name: f.Name, Kind: Changed,
				Reason: fmt.Sprintf("field %q is widened from %s to %s: its values still fit", f.Name, f.Shape.Describe(), nf.Shape.Describe())})
		}
		if f.Reducer != nil && nf.Reducer != nil && f.Reducer.Name != nf.Reducer.Name {
			out = append(out, Effect{Area: "reducer", Name: f.Name, Kind: Changed,
				Reason: fmt.Sprintf("field %q merges updates by %s instead of %s from now on", f.Name, nf.Reducer.Name, f.Reducer.Name)})
		}
	}
	for _, nf := range new.Fields {
		if _, ok := old.Field(nf.Name); ok {
			continue
		}
		switch {
		case nf.Required && !nf.HasDefault:
			out = append(out, Effect{Area: "field", Name: nf.Name, Kind: Added, Breaking: true,
				Reason: fmt.Sprintf("field %q is new, required and has no default: the threads have no value for it", nf.Name)})
		case nf.HasDefault:
			out = append(out, Effect{Area: "field", Name: nf.Name, Kind: Added,
				Reason: fmt.Sprintf("field %q is new and has a default", nf.Name)})
		default:
			out = append(out, Effect{Area: "field", Name: nf.Name, Kind: Added,
				Reason: fmt.Sprintf("field %q is new and optional: the threads read it as null until it is written", nf.Name)})
		}
	}
	for _, n := range old.Nodes {
		if _, ok := new.Node(n.Name); !ok {
			out = append(out, Effect{Area: "node", Name: n.Name, Kind: Removed,
				Reason: fmt.Sprintf("node %q is removed: a thread whose checkpoint waits to run it cannot move", n.Name)})
		}
	}
	for _, n := range new.Nodes {
		if _, ok := old.Node(n.Name); !ok {
			out = append(out, Effect{Area: "node", Name: n.Name, Kind: Added, Reason: fmt.Sprintf("node %q is new", n.Name)})
		}
	}
	return out
}

// Breaking keeps the breaking effects.
func Breaking(effects []Effect) []Effect {
	var out []Effect
	for _, e := range effects {
		if e.Breaking {
			out = append(out, e)
		}
	}
	return out
}

// Compile compiles the version of the flow s reads, with its files as
// they are in that version (a git revision's, for one), to classify a
// change with Compat.
func (s Source) Compile(reg kind.Registry) (*flow.Graph, diag.List, diag.Sources) {
	if s.git {
		return flow.Compile(config.FS(sourceFS{s}), s.Path, nil, reg)
	}
	return flow.Compile(nil, filepath.FromSlash(s.Path), nil, reg)
}

// sourceFS serves the files of a Source's version as a file system.
type sourceFS struct{ s Source }

func (f sourceFS) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	data, err := f.s.read(name)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return fstest.MapFS{name: &fstest.MapFile{Data: data, Mode: 0o444}}.Open(name)
}
