package engine

import (
	"maps"
	"slices"
	"time"

	"github.com/trellisflow/trellis/runtime/kind"
)

// EventType names what happened.
type EventType string

// The events of a run, in the order they occur. run_start comes once the
// run holds its thread and has accepted its input; a run refused before
// then (a busy thread, a bad input) emits nothing.
const (
	RunStart    EventType = "run_start"
	NodeStart   EventType = "node_start"
	NodeRetry   EventType = "node_retry"
	NodeOutput  EventType = "node_output"
	ToolStart   EventType = "tool_start"
	ToolEnd     EventType = "tool_end"
	NodeEnd     EventType = "node_end"
	NodeFailed  EventType = "node_error"
	StateUpdate EventType = "state_update"
	RunEnd      EventType = "run_end"
	RunError    EventType = "run_error"
	// StoreUnavailable: the run found its store unavailable (its
	// connections lost, its server restarting, its disk full) and waits
	// for it, trying again (Error says why); StoreBack: the store
	// answers again (Duration: how long the run waited). A run that
	// waits longer than it may fails with the store's error.
	StoreUnavailable EventType = "store_unavailable"
	StoreBack        EventType = "store_back"
)

// Event is one entry of a run's event stream. Fields not relevant to the
// type are zero.
type Event struct {
	Type   EventType `json:"type"`
	Run    string    `json:"run"`
	Thread string    `json:"thread"`
	Step   int       `json:"step"`
	Time   time.Time `json:"time"`
	// NS is the namespace of the child flow the event happened in
	// (NODE:SEQ, nested levels joined by NSSep), empty for the run's own.
	NS string `json:"ns,omitempty"`
	// Node and Kind for node events; Attempt counts from 1.
	Node    string `json:"node,omitempty"`
	Kind    string `json:"kind,omitempty"`
	Attempt int    `json:"attempt,omitempty"`
	// Duration of a node's attempts (node_end, node_error), of a retry's
	// backoff (node_retry), of a wait for the store (store_back), of the step's commit to the store
	// (state_update, for steps that read the clock: those that ran a node
	// not inline, and one in 64, unless held to commit with the steps
	// after them; with Async durability, the hand-off) or of the whole
	// run (run_end).
	Duration time.Duration `json:"duration,omitempty"`
	// Update is a node's update (node_end, and node_error that on_error
	// handled): field to the value it wrote. On a state_update, the new
	// values of the changed fields that no node event of the step gave:
	// a field one node wrote whose reducer replaces has the value that
	// node's event gave, and is not repeated here; a field whose reducer
	// appends is in Appended. (Events recorded before Fields existed
	// carry every changed field here.)
	Update map[string]any `json:"update,omitempty"`
	// Fields lists the fields a step changed, in the order it wrote them
	// (state_update).
	Fields []string `json:"fields,omitempty"`
	// Appended holds, per changed field whose reducer appends, the items
	// the step appended (state_update): the field's new value is its old
	// one followed by them.
	Appended map[string]any `json:"appended,omitempty"`
	// Checkpoint is the sequence number a state_update committed.
	Checkpoint uint64 `json:"checkpoint,omitempty"`
	// Next lists the nodes triggered for the next step (state_update).
	Next []string `json:"next,omitempty"`
	// Handled marks a node_error that on_error absorbed.
	Handled bool `json:"handled,omitempty"`
	// Degraded gives why a node's update is a fallback (node_end).
	Degraded string `json:"degraded,omitempty"`
	// Cached marks an update replayed from the node's cache instead of
	// run (node_end).
	Cached bool `json:"cached,omitempty"`
	// Interrupt says a run paused at a node's interrupt_before or
	// interrupt_after, or for questions (run_end); on a node_end, that
	// the node paused the run midway (it runs again when resumed).
	Interrupt *Interrupt `json:"interrupt,omitempty"`
	// Usage counts the node's work, as its kind measured it (node_end,
	// node_error): a model's calls and tokens.
	Usage map[string]int64 `json:"usage,omitempty"`
	// Tool is the tool call a tool_start or tool_end event reports: its
	// id, tool, arguments and, at its end, its result or error.
	Tool *kind.ToolEvent `json:"tool,omitempty"`
	// Text is a piece of a node's streamed output (node_output), from
	// the attempt Attempt says.
	Text  string `json:"text,omitempty"`
	Error string `json:"error,omitempty"`
	// State is the final state (run_end).
	State map[string]any `json:"state,omitempty"`
}

// Observer receives a run's events, synchronously and in order, from the
// goroutine that drives the run (node events may come from node
// goroutines, serialised by the engine). It is never called once Run has
// returned: what a node's attempt the run gave up on sends afterwards is
// dropped (see Late). A nil Observer costs nothing.
type Observer func(Event)

// Changed lists the fields a state_update says its step changed: Fields,
// or, in an event recorded before it existed, the fields of Update (which
// then held every changed field), in name order.
func (e *Event) Changed() []string {
	if e.Fields != nil || e.Update == nil {
		return e.Fields
	}
	return slices.Sorted(maps.Keys(e.Update))
}

// StepChanges is the new values of the fields a step changed, from its
// state_update and the node events of the same step before it (those of
// the run's own flow: NS empty), given the state before the step (for
// the fields whose reducer appends). It reads events of either shape:
// an older state_update carried every changed field in Update.
func StepChanges(before map[string]any, nodes []Event, update Event) map[string]any {
	out := make(map[string]any, len(update.Fields)+len(update.Update))
	if update.Fields == nil {
		maps.Copy(out, update.Update)
		return out
	}
	for _, f := range update.Fields {
		if v, ok := update.Update[f]; ok {
			out[f] = v
			continue
		}
		if items, ok := update.Appended[f]; ok {
			old, _ := before[f].([]any)
			add, _ := items.([]any)
			out[f] = append(slices.Clip(old), add...)
			continue
		}
		for _, ev := range nodes {
			if ev.NS != "" || ev.Step != update.Step || (ev.Type != NodeEnd && ev.Type != NodeFailed) {
				continue
			}
			if v, ok := ev.Update[f]; ok {
				out[f] = v
			}
		}
	}
	return out
}
