// What a thread did, as a flow test made from it replays it, for tools
// that make something else of a thread (an eval's case).

package testfile

import (
	"context"
	"fmt"
	"maps"
	"reflect"

	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/store"
)

// ThreadRuns is what a thread did: the initial values the flow's
// defaults do not give, each run in order (a fork or a branch followed
// back through where it came from), and the model replies its runs were
// told, in the order they were told.
type ThreadRuns struct {
	With    map[string]any
	Runs    []ThreadRun
	Replies []store.Reply
	// Final is the thread's state at its head.
	Final map[string]any
}

// ThreadRun is one run of a thread: a new run with Input (and Config),
// the resumption of a paused run (Resume, with Answers), a correction
// (Update: written as node As), or a run stopped part way (StopAfter).
// Path is each step's nodes when known step by step; Paused the nodes it
// paused at.
type ThreadRun struct {
	Input, Config, Answers map[string]any
	Resume                 bool
	UpdateAs               string
	Update                 map[string]any
	StopAfter              *int
	Path                   [][]string
	Paused                 []string
}

// ReadThread reads what thread, whose flow is g, did, as FromThread
// reads it; a history a flow test cannot replay is ErrNotReplayable.
func ReadThread(ctx context.Context, st store.Store, g *flow.Graph, thread string) (*ThreadRuns, error) {
	line, err := store.Lineage(ctx, st, thread)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotReplayable, err)
	}
	gt, replies, err := segment(g, line)
	if err != nil {
		return nil, err
	}
	out := &ThreadRuns{With: map[string]any{}, Replies: replies, Final: store.Replay(thread, line).Values}
	for k, v := range gt.With {
		if f, ok := g.Field(k); !ok || !f.HasDefault || !reflect.DeepEqual(f.Default, v) {
			out.With[k] = v
		}
	}
	for _, r := range gt.Runs {
		tr := ThreadRun{Input: maps.Clone(r.Input), Config: maps.Clone(r.Config), Answers: maps.Clone(r.Answers), Resume: r.Resume,
			StopAfter: r.StopAfter, Path: r.path}
		if r.Update != nil {
			tr.UpdateAs, tr.Update = r.Update.As, r.Update.Values
		}
		if r.Expect != nil {
			tr.Paused = r.Expect.Paused
		}
		out.Runs = append(out.Runs, tr)
	}
	return out, nil
}
