package kind

import (
	"errors"
	"fmt"
	"strings"
)

// A run pauses wherever something it runs waits for a person: an asking
// node of its own (an Asker), a node a map runs for an item, or a node of
// a child flow at any depth. What paused inside a node comes back from
// State.RunNested and State.RunFlow as a *Paused error, which the node
// returns from Run (joined with its other items' pauses by Pause): the run
// then pauses at the node. The step does not commit; the nodes of the step
// that completed keep their updates (as pending writes), a child flow
// keeps its own checkpoints, and a later run resumed with answers runs the
// node again, which finds everything that had finished and goes on only
// where the questions were asked.

// Question is one question a paused run waits on.
type Question struct {
	// ID answers the question: unique among the questions of the run,
	// and never given to another question of the thread's run. At the
	// top of a run it is the asking node's name (a map's item's as
	// NODE[INDEX]); inside a child flow, the child's namespace, the
	// separator | and the question's id in the child (review:7|approve).
	ID string `json:"id"`
	// Path says where it was asked, for people: the names of the nodes
	// from the top of the run down to the asking node, joined by /, a
	// map's item as NODE[INDEX] (review/approve, items[2]/check/approve).
	// Among the questions a run waits on at once, a path is unique too.
	Path string `json:"path"`
	// Payload is the question itself: any JSON value.
	Payload any `json:"payload"`
}

// Paused is the error that says what a node ran paused: the questions it
// waits on, and where it stopped at a node's interrupt_before or
// interrupt_after inside a child flow (paths, as Question.Path). An engine
// neither retries it nor hands it to a fallback or on_error: the run
// pauses at the node.
type Paused struct {
	Questions []Question
	Before    []string
	After     []string
}

func (p *Paused) Error() string {
	var where []string
	for _, q := range p.Questions {
		where = append(where, q.Path)
	}
	where = append(append(where, p.Before...), p.After...)
	return fmt.Sprintf("paused at %s", strings.Join(where, ", "))
}

// PausedBy returns the pause err holds, if it is one.
func PausedBy(err error) (*Paused, bool) {
	var p *Paused
	if errors.As(err, &p) {
		return p, true
	}
	return nil, false
}

// Pause joins the pauses among errs (nil and other errors are left out)
// into one, in their order: what a node that ran several things returns
// when some of them paused. It returns nil when none paused.
func Pause(errs ...error) error {
	var out *Paused
	for _, err := range errs {
		p, ok := PausedBy(err)
		if !ok {
			continue
		}
		if out == nil {
			out = &Paused{}
		}
		out.Questions = append(out.Questions, p.Questions...)
		out.Before = append(out.Before, p.Before...)
		out.After = append(out.After, p.After...)
	}
	if out == nil {
		return nil
	}
	return out
}
