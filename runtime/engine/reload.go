package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/value"
)

// WithReload makes every run of the engine read its state back between
// steps, as a process that picks the thread up would: the thread's state
// when the run starts, and after each step it commits, every field's
// value is encoded as the stores encode it (JSON) and decoded, and so are
// the run's input and configuration. A run in this mode and one without
// it take the same path to the same state, or a value held in memory
// differs from the one a store hands back; the flow-test runner (trellis
// test --reload) and the differential fuzzer compare the two.
func WithReload() Option { return func(e *Engine) { e.reload = true } }

// Reload is v as a store hands it back: encoded as the stores encode
// values, and decoded.
func Reload(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return value.Decode(b)
}

// reloadMap is Reload over each value of m, in a new map (nil for nil).
func reloadMap(m map[string]any) (map[string]any, error) {
	if m == nil {
		return nil, nil
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		r, err := Reload(v)
		if err != nil {
			return nil, fmt.Errorf("reload %q: %w", k, err)
		}
		out[k] = r
	}
	return out, nil
}

// reloadHead is the thread's state as read back by another process.
func reloadHead(head *store.Snapshot) (*store.Snapshot, error) {
	values, err := reloadMap(head.Values)
	if err != nil {
		return nil, err
	}
	h := *head
	h.Values = values
	return &h, nil
}

// ReloadError is a field whose value a run held in memory differs from
// the one a store hands back for it (see WithReload): another process
// would go on from another value.
type ReloadError struct {
	Step       int
	Field      string
	Held, Read any
}

func (e *ReloadError) Error() string {
	return fmt.Sprintf("step %d: field %q holds %s in this process, but reads back as %s: another process would go on from another value",
		e.Step, e.Field, value.Show(e.Held, 200), value.Show(e.Read, 200))
}

// reloadState replaces the run's state, input and configuration with
// what another process would read back of them after the step just
// committed; a field whose value in memory differs from that is a
// *ReloadError. The lists the run appends to in place are dropped: the
// next append copies the list read back.
func (r *run) reloadState(ctx context.Context) error {
	for i, f := range r.g.Fields {
		if r.cur[i] == nil {
			continue // null, or not set: either reads back as it is
		}
		v, err := Reload(r.cur[i])
		if err != nil {
			return fmt.Errorf("reload field %q: %w", f.Name, err)
		}
		if !reflect.DeepEqual(v, r.cur[i]) {
			return &ReloadError{Step: r.step, Field: f.Name, Held: r.cur[i], Read: v}
		}
		r.set(i, v)
		r.lists[i] = nil
	}
	return r.reloadInput(ctx)
}

// reloadInput replaces the run's input and configuration with what a
// resumed run reads back of them: the input its input checkpoint records,
// once committed (sync durability), and the configuration as given again.
func (r *run) reloadInput(ctx context.Context) error {
	input := r.input
	if r.req.Durability == "" || r.req.Durability == Sync {
		if recorded, _ := runInput(ctx, r.e.Store, r.req.Retry, r.req.Thread, r.seq); recorded != nil {
			input = recorded
		}
	}
	in, err := reloadMap(input)
	if err != nil {
		return err
	}
	cfg, err := reloadMap(r.config)
	if err != nil {
		return err
	}
	r.input, r.config = in, cfg
	for i, f := range r.g.Fields {
		r.inSlots[i] = in[f.Name]
	}
	// the variables bind input and config: made anew when next asked for
	r.vars, r.staleVars = nil, true
	return nil
}
