// Package all assembles the registry of every built-in node kind.
package all

import (
	"sync"

	"github.com/trellisflow/trellis/nodes/assign"
	"github.com/trellisflow/trellis/nodes/noop"
	"github.com/trellisflow/trellis/runtime/kind"
)

var (
	once sync.Once
	reg  *kind.Set
)

// Registry returns the registry of the built-in kinds. It is built once and
// shared, so compiled flow schemas are cached across loads.
func Registry() kind.Registry {
	once.Do(func() {
		reg = kind.NewSet(assign.Spec, noop.Spec)
	})
	return reg
}
