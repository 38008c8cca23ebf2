package server

import (
	"context"

	"github.com/trellisflow/trellis/runtime/store"
)

// runOutput is a finished run's output: the flow's declared result (its
// output block) rendered over the state the run ended with, by the
// version of the flow the run ran. It is empty for a flow without one, a
// run that did not succeed or paused with nodes still to run, and a run
// of a version neither loaded nor kept in the store.
func (s *Server) runOutput(ctx context.Context, rec store.RunRecord) string {
	if rec.Status != store.RunSucceeded || rec.Checkpoint == 0 {
		return ""
	}
	l, err := s.flowVersion(ctx, rec.Flow, rec.FlowVersion)
	if err != nil || l.version != rec.FlowVersion || l.flow.Graph().Output == nil {
		return ""
	}
	snap, err := s.eng().Store.StateAt(ctx, rec.Thread, rec.Checkpoint)
	if err != nil || len(snap.Next) > 0 {
		return ""
	}
	text, err := l.flow.Graph().Output.Render(snap.Values)
	if err != nil {
		s.log.Warn("rendering a run's output", "run", rec.ID, "flow", rec.Flow, "error", err.Error())
		return ""
	}
	return text
}
