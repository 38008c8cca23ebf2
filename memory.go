package trellis

import (
	"context"

	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/store"
)

// WithTenantMemory returns ctx whose runs read and write tenant's memory
// in rt's store: the documents memory nodes remember across threads. A
// server gives each run its tenant's, so that no tenant sees another's.
// A run started with a context carrying none uses the store's memory of
// no tenant (""), which every program sharing the store outside a server
// sees. On a store that keeps no memory, ctx is returned as it is.
func (rt *Runtime) WithTenantMemory(ctx context.Context, tenant string) context.Context {
	m, ok := store.MemoryOf(rt.Store())
	if !ok {
		return ctx
	}
	return kind.WithMemory(ctx, engine.Memory(m, tenant))
}
