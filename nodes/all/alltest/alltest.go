// Package alltest gives tests the built-in node kinds together with the
// runtime's test kinds, so that the kinds' own tests can mix them.
package alltest

import (
	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/nodes/llm"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/kind/kindtest"
)

// WithTestKinds returns a new registry of the built-in kinds with no
// model and no sandbox, and the runtime's test kinds (kindtest: set,
// fail, sleep); more kinds may be registered into it.
func WithTestKinds() *kind.Set {
	set := all.WithProvider(func() *llm.Provider { return nil })
	for _, sp := range kindtest.Registry().Specs() {
		set.Register(*sp)
	}
	return set
}
