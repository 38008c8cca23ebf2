package engine

import "context"

// Tracer opens a span around each run and each node a run calls, for a
// tracing system (OpenTelemetry's is in runtime/telemetry). An engine
// without one does no tracing work at all.
type Tracer interface {
	// StartRun begins a run's span; end is called once the run returns,
	// with its error.
	StartRun(ctx context.Context, flow, thread, run string) (_ context.Context, end func(err error))
	// StartNode begins the span of one node in a step, around all of its
	// attempts and its fallback; end is called with how many attempts it
	// took, the error its fallback stood in for ("" when it did not
	// degrade), and the node's error.
	StartNode(ctx context.Context, n TracedNode) (_ context.Context, end func(attempts int, degraded string, err error))
}

// TracedNode names a node's call in a run.
type TracedNode struct {
	Flow, Thread, Run string
	Node, Kind        string
	Step              int
}
