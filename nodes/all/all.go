// Package all assembles the registry of every built-in node kind and
// tool kind.
package all

import (
	"sync"

	"github.com/trellisflow/trellis/nodes/assign"
	"github.com/trellisflow/trellis/nodes/interrupt"
	"github.com/trellisflow/trellis/nodes/llm"
	"github.com/trellisflow/trellis/nodes/mapnode"
	"github.com/trellisflow/trellis/nodes/memory"
	"github.com/trellisflow/trellis/nodes/noop"
	"github.com/trellisflow/trellis/nodes/render"
	"github.com/trellisflow/trellis/nodes/sandbox"
	"github.com/trellisflow/trellis/nodes/subflow"
	"github.com/trellisflow/trellis/nodes/tools/flowtool"
	"github.com/trellisflow/trellis/nodes/tools/httptool"
	"github.com/trellisflow/trellis/nodes/tools/mcptool"
	"github.com/trellisflow/trellis/nodes/tools/sandboxtool"
	"github.com/trellisflow/trellis/runtime/flow"
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
		reg = With(llm.FromEnv, sandbox.Env)
	})
	return reg
}

var (
	offlineOnce sync.Once
	offline     *kind.Set
)

// Offline returns the registry of the built-in kinds with no model and no
// sandbox configured: llm nodes always use their prompts' fallbacks and
// sandbox nodes write a not_run result; MCP servers' tools are read from
// their pinned copies, the servers not asked at load. Flow tests use it,
// so they are deterministic wherever they run.
func Offline() kind.Registry {
	offlineOnce.Do(func() {
		offline = build(func() *llm.Provider { return nil }, func() *sandbox.Pool { return nil }, false)
	})
	return offline
}

// WithProvider returns a new registry of the built-in kinds whose llm kind
// calls provider when a flow is loaded (nil from it: no model), with no
// sandbox.
func WithProvider(provider func() *llm.Provider) *kind.Set {
	return With(provider, func() *sandbox.Pool { return nil })
}

// With returns a new registry of the built-in kinds whose llm kind calls
// provider and whose sandbox kind calls pool when a flow is loaded (nil
// from them: no model, no sandbox); a flow's load lists its MCP servers'
// tools from the servers that answer.
func With(provider func() *llm.Provider, pool func() *sandbox.Pool) *kind.Set {
	set := build(provider, pool, true)
	// the same kinds, reaching no MCP server at load: for flows from
	// hands that may not have the process reach anything
	set.SetOffline(build(provider, pool, false))
	return set
}

// build makes the registry; live has a flow's load list its MCP servers'
// tools from the servers that answer.
func build(provider func() *llm.Provider, pool func() *sandbox.Pool, live bool) *kind.Set {
	set := kind.NewSet(assign.Spec, noop.Spec, render.Spec, interrupt.Spec, llm.NewSpec(provider), sandbox.NewSpec(pool),
		subflow.Spec, mapnode.Spec, memory.Spec)
	set.RegisterTool(httptool.Spec)
	set.RegisterTool(flowtool.Spec)
	set.RegisterTool(sandboxtool.NewSpec(pool))
	set.RegisterTool(mcptool.NewSpec(live))
	return set
}

// Reference renders the node-kind reference (nodes/README.md).
func Reference() []byte { return flow.Reference(Registry()) }
