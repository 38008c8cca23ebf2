package llm

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/trellisflow/trellis/runtime/kind"
)

// Approval: a tool whose approve setting says a call waits (always, or
// when its condition holds over the call's arguments) pauses the run
// before the call runs. The run ends paused with an interrupt carrying
// the calls of the model's turn that wait: their ids, tools and
// arguments. The thread is resumed with an answer for the node:
//
//	approve                                  every call asked runs
//	reject  or {decision: reject, reason: …} none runs; the model is told
//	{decision: edit, arguments: {…}}         the one call asked runs with these
//	{calls: {ID: DECISION, …}}               a decision per call
//
// (true and false stand for approve and reject.) Each decision is kept
// once made, so a later pause in the same step asks only about the calls
// of its own turn, and the answer serves only the calls it was asked for.

// decision is a person's answer about one call.
type decision struct {
	kind   string // approve, reject or edit
	args   map[string]any
	reason string
}

// answer is a resumed run's answer to the node's question.
type answer struct {
	all   *decision
	calls map[string]decision
}

// parseAnswer reads an answer, or says what is wrong with it.
func parseAnswer(a any) (*answer, error) {
	if m, ok := a.(map[string]any); ok {
		if per, ok := m["calls"]; ok {
			if len(m) != 1 {
				return nil, errors.New("an answer with calls holds nothing else: {calls: {ID: approve | reject | {decision: ...}}}")
			}
			pm, ok := per.(map[string]any)
			if !ok || len(pm) == 0 {
				return nil, errors.New("calls must map each call's id to its decision")
			}
			out := &answer{calls: map[string]decision{}}
			for _, id := range slices.Sorted(maps.Keys(pm)) {
				d, err := parseDecision(pm[id])
				if err != nil {
					return nil, fmt.Errorf("calls.%s: %w", id, err)
				}
				out.calls[id] = d
			}
			return out, nil
		}
	}
	d, err := parseDecision(a)
	if err != nil {
		return nil, err
	}
	return &answer{all: &d}, nil
}

const answerForm = "answer approve, reject, {decision: reject, reason: TEXT}, {decision: edit, arguments: {...}} or {calls: {ID: DECISION}}"

func parseDecision(a any) (decision, error) {
	switch x := a.(type) {
	case bool:
		if x {
			return decision{kind: "approve"}, nil
		}
		return decision{kind: "reject"}, nil
	case string:
		switch x {
		case "approve", "reject":
			return decision{kind: x}, nil
		}
		return decision{}, fmt.Errorf("%q is not a decision: %s", x, answerForm)
	case map[string]any:
		d := decision{}
		d.kind, _ = x["decision"].(string)
		for k := range x {
			switch k {
			case "decision":
			case "arguments":
				args, ok := x[k].(map[string]any)
				if !ok {
					return decision{}, errors.New("arguments must be an object: the call's arguments as the tool takes them")
				}
				d.args = args
			case "reason":
				r, ok := x[k].(string)
				if !ok {
					return decision{}, errors.New("reason must be a text")
				}
				d.reason = r
			default:
				return decision{}, fmt.Errorf("unknown key %q: %s", k, answerForm)
			}
		}
		switch {
		case d.kind != "approve" && d.kind != "reject" && d.kind != "edit":
			return decision{}, fmt.Errorf("decision must be approve, reject or edit: %s", answerForm)
		case d.kind == "edit" && d.args == nil:
			return decision{}, errors.New("an edit gives the call's arguments: {decision: edit, arguments: {...}}")
		case d.kind != "edit" && d.args != nil:
			return decision{}, errors.New("arguments go with decision: edit")
		}
		return d, nil
	}
	return decision{}, fmt.Errorf("not a decision: %s", answerForm)
}

// errNotKept is what a look at a piece of work not kept yet finds.
var errNotKept = errors.New("not kept")

// peek reports whether key was kept this step, and its value.
func peek(ctx context.Context, s kind.State, key string) (any, bool) {
	v, err := s.Once(ctx, key, func(context.Context) (any, error) { return nil, errNotKept })
	return v, err == nil
}

// approve decides the calls of a batch that wait for a person: from the
// decisions kept, else from the run's answer when this batch was asked
// about, else by pausing the run to ask. Decided calls get their approval
// (and edited arguments).
func (n *node) approve(ctx context.Context, s kind.State, where string, batch []*pendingCall) error {
	vars := s.Vars()
	var waiting []*pendingCall
	for _, c := range batch {
		if c.problem != "" {
			continue
		}
		need, err := c.tool.Approve.Needed(vars, &c.call)
		if err != nil {
			return fmt.Errorf("tool %q: %w", c.call.Tool, err)
		}
		if !need {
			continue
		}
		if v, kept := peek(ctx, s, "approval:"+c.key); kept {
			applyKept(c, v)
			continue
		}
		waiting = append(waiting, c)
	}
	if len(waiting) == 0 {
		return nil
	}
	askedKey := "asked:" + where
	problem := ""
	if _, asked := peek(ctx, s, askedKey); asked {
		if a, ok := s.Answer(); ok {
			ans, err := parseAnswer(a)
			if err != nil {
				problem = err.Error()
			} else {
				var rest []*pendingCall
				for _, c := range waiting {
					d, ok := ans.decisionFor(c, len(waiting))
					if !ok {
						rest = append(rest, c)
						continue
					}
					if d.kind == "edit" {
						if err := c.tool.Params.Validate(d.args); err != nil {
							problem = fmt.Sprintf("the arguments given for call %s do not match the parameters of %s: %v", c.call.ID, c.tool.Name, err)
							rest = append(rest, c)
							continue
						}
					}
					kept, err := s.Once(ctx, "approval:"+c.key, func(context.Context) (any, error) {
						return map[string]any{"decision": d.kind, "arguments": d.args, "reason": d.reason}, nil
					})
					if err != nil {
						return err
					}
					applyKept(c, kept)
				}
				waiting = rest
				if len(waiting) > 0 && problem == "" && ans.all != nil && ans.all.kind == "edit" {
					problem = "an edit gives the arguments of one call: with several waiting, answer {calls: {ID: {decision: edit, arguments: {...}}}}"
				}
			}
		}
	}
	if len(waiting) == 0 {
		return nil
	}
	ids := make([]any, len(waiting))
	calls := make([]any, len(waiting))
	for i, c := range waiting {
		ids[i] = c.call.ID
		calls[i] = map[string]any{"id": c.call.ID, "tool": c.call.Tool, "arguments": c.call.Args}
	}
	if _, err := s.Once(ctx, askedKey, func(context.Context) (any, error) { return ids, nil }); err != nil {
		return err
	}
	payload := map[string]any{"type": "tool_approval", "calls": calls, "answer": answerForm}
	if problem != "" {
		payload["problem"] = problem
	}
	return kind.Interrupt(payload)
}

// decisionFor is the answer's decision about c, one of n calls asked.
func (a *answer) decisionFor(c *pendingCall, n int) (decision, bool) {
	if a.calls != nil {
		d, ok := a.calls[c.call.ID]
		return d, ok
	}
	if a.all.kind == "edit" && n > 1 {
		return decision{}, false
	}
	return *a.all, true
}

// applyKept gives a call a kept decision.
func applyKept(c *pendingCall, v any) {
	m, _ := v.(map[string]any)
	kind, _ := m["decision"].(string)
	switch kind {
	case "approve":
		c.approval = "approved"
	case "edit":
		c.approval = "edited"
		if args, ok := m["arguments"].(map[string]any); ok {
			c.call.Args = args
		}
	default:
		c.approval = "rejected"
		c.reason, _ = m["reason"].(string)
	}
}

// approving is a node some of whose tools wait for approval: it may pause
// the run midway, and takes answers (kind.Interrupter).
type approving struct{ *node }

// CheckAnswer implements kind.Interrupter.
func (approving) CheckAnswer(a any) error {
	_, err := parseAnswer(a)
	return err
}

// handledApproving is approving for a node that sets on_error.
type handledApproving struct{ handled }

// CheckAnswer implements kind.Interrupter.
func (handledApproving) CheckAnswer(a any) error {
	_, err := parseAnswer(a)
	return err
}

var (
	_ kind.Interrupter = approving{}
	_ kind.Interrupter = handledApproving{}
	_ kind.Fallback    = approving{}
	_ kind.Outputter   = approving{}
	_ kind.Previewer   = approving{}
	_ kind.Outputter   = handledApproving{}
)
