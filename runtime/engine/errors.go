package engine

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/trellisflow/trellis/runtime/diag"
)

// ErrBusy is returned when a run is started on a thread that is running.
var ErrBusy = errors.New("thread is busy with another run")

// ErrStopped is returned by a run stopped through Request.Stop.
var ErrStopped = errors.New("run stopped between steps; the thread has an unfinished run")

// BusyError is ErrBusy when the thread is leased by another process: who
// holds it and until when. A process that died holds it until then;
// after, resuming the thread takes its unfinished run over.
type BusyError struct {
	Owner string
	Until time.Time
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("%v: %s holds it until %s (%s from now); if that process is gone, resuming the thread after then takes its run over",
		ErrBusy, e.Owner, e.Until.UTC().Format("15:04:05 UTC"), time.Until(e.Until).Round(time.Second))
}

// Is makes a BusyError an ErrBusy.
func (e *BusyError) Is(target error) bool { return target == ErrBusy }

// PanicError ends a run whose own code (the engine's, a store's, an
// observer's) panicked, outside the guards that turn a node's panic into
// that node's error: the value and the stack where it was recovered.
type PanicError struct {
	Step  int
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("step %d: panic: %v", e.Step, e.Value) }

// ErrUnfinished refuses a new run on a thread whose previous run did not
// finish; resume it first.
var ErrUnfinished = errors.New("thread has an unfinished run; resume it first")

// InputError refuses a run input.
type InputError struct {
	Field      string
	Reason     string
	Suggestion string
	// More are the other problems found with the same input, each
	// reported with this one.
	More []*InputError
}

func (e *InputError) Error() string {
	msg := e.one()
	for _, m := range e.More {
		msg += "; " + m.one()
	}
	return msg
}

func (e *InputError) one() string {
	msg := e.Reason
	if e.Field != "" {
		msg = fmt.Sprintf("input %q: %s", e.Field, e.Reason)
	}
	if e.Suggestion != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", e.Suggestion)
	}
	return msg
}

// NodeError is a node's failure, located in its flow file.
type NodeError struct {
	Node string
	Kind string
	Pos  diag.Pos
	Err  error
}

func (e *NodeError) Error() string {
	return fmt.Sprintf("node %q (%s) at %s: %v", e.Node, e.Kind, e.Pos, e.Err)
}

func (e *NodeError) Unwrap() error { return e.Err }

// LimitError is a run stopped by its superstep limit or an edge bound.
type LimitError struct {
	Limit int
	Loop  []string
	// Edge is the bounded edge's position, for bound errors.
	Edge *diag.Pos
}

func (e *LimitError) Error() string {
	loop := strings.Join(e.Loop, " → ")
	if e.Edge != nil {
		return fmt.Sprintf("edge at %s exceeded its bound of %d in loop %s", e.Edge, e.Limit, loop)
	}
	if loop == "" {
		return fmt.Sprintf("run exceeded its limit of %d supersteps", e.Limit)
	}
	return fmt.Sprintf("run exceeded its limit of %d supersteps in loop %s", e.Limit, loop)
}
