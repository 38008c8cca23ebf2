package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	openai "github.com/sashabaranov/go-openai"

	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/value"
)

// An llm node with tools (tools: [NAME, ...]) runs a loop: the model is
// offered the tools' functions (their names, descriptions and parameter
// schemas, through the chat API's tools), and each function call it makes
// is checked against its tool's parameters, approved when the tool says
// so, run, and its result fed back, until the model answers with no call
// or max_tool_calls calls were made (the model is then asked to answer
// without tools). Calls the model makes in one turn run at once.
//
// Every model turn and every call is kept the moment it completes
// (kind.State.Once), so a step run again after a crash, after a pause for
// approval, or on a retry goes on from the first turn or call it had not
// finished: a finished call never runs twice. Each call is reported as a
// tool_start and a tool_end event.
//
// A call that fails in a way the model may act on (arguments that do not
// fit, a request the server refused, a call a person rejected) is fed back
// to the model as an error; any other failure (an address the tool may
// not reach, a response over its cap or against its schema, a server that
// does not answer) fails the node, naming the tool: the prompt's
// fallback, which stands in for a model that does not answer, does not
// stand in for it (retry and on_error apply).
//
// With no model configured the node's prompt's fallback stands in, and
// the calls it names (fallback_calls) are made, approval included, so a
// flow runs its tools offline too.

// DefaultMaxToolCalls is how many tool calls a node makes in a run of its
// step unless it sets max_tool_calls.
const DefaultMaxToolCalls = 10

// toolset is what a node may call.
type toolset struct {
	list []*kind.Tool
	by   map[string]*kind.Tool
	// functions are the tools as the chat API offers them
	functions []openai.Tool
	max       int
	// approves is set when some tool may wait for approval
	approves bool
}

func newToolset(tools []*kind.Tool, max int) *toolset {
	ts := &toolset{list: tools, by: map[string]*kind.Tool{}, max: max}
	for _, t := range tools {
		ts.by[t.Name] = t
		params, _ := json.Marshal(t.Parameters)
		ts.functions = append(ts.functions, openai.Tool{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{
			Name: t.Name, Description: t.Description, Parameters: json.RawMessage(params)}})
		ts.approves = ts.approves || t.Approve != nil
	}
	return ts
}

// agent asks the model with the node's tools until it answers: its reply
// (text, or for a structured prompt the decoded JSON value) and the calls
// made on the way (see prompt.ToolCallsShape).
func (n *node) agent(ctx context.Context, s kind.State, req openai.ChatCompletionRequest) (any, []any, error) {
	req.Tools = n.tools.functions
	records := []any{}
	seq := 0
	repaired := false
	for turn := 1; ; turn++ {
		if turn > n.tools.max+4 {
			return nil, nil, fmt.Errorf("the model went on calling tools after %d of them, told to answer without", seq)
		}
		asked := false
		v, err := s.Once(ctx, "turn:"+strconv.Itoa(turn), func(ctx context.Context) (any, error) {
			asked = true
			r, err := n.completeReply(ctx, s, req)
			if err != nil {
				return nil, err
			}
			return toJSON(r)
		})
		if err != nil {
			return nil, nil, err
		}
		var r reply
		if err := fromJSON(v, &r); err != nil {
			return nil, nil, err
		}
		if !asked {
			// kept from an earlier run of the step: the step's checkpoint
			// records it all the same, for a replay of the thread
			s.Record(hashRequest(req), encodeReply(r))
		}
		msg := openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: r.Content}
		for _, tc := range r.ToolCalls {
			msg.ToolCalls = append(msg.ToolCalls, openai.ToolCall{ID: tc.ID, Type: openai.ToolTypeFunction,
				Function: openai.FunctionCall{Name: tc.Name, Arguments: tc.Arguments}})
		}
		req.Messages = append(req.Messages, msg)
		if len(r.ToolCalls) == 0 {
			out := n.prompt.Output
			if out == nil {
				return r.Content, records, nil
			}
			v, perr := parseStructured(r.Content, out)
			if perr == nil {
				return v, records, nil
			}
			if repaired {
				return nil, nil, fmt.Errorf("model reply does not match the output schema after a repair turn: %w", perr)
			}
			repaired = true
			req.Messages = append(req.Messages, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser,
				Content: "Your reply does not match the required JSON schema: " + perr.Error() + "\nReply again with only the corrected JSON object."})
			continue
		}
		batch := make([]*pendingCall, len(r.ToolCalls))
		for i, tc := range r.ToolCalls {
			seq++
			batch[i] = n.prepare(tc, "call:"+strconv.Itoa(turn)+"."+strconv.Itoa(i), seq, strconv.Itoa(seq))
		}
		results, err := n.runBatch(ctx, s, "turn "+strconv.Itoa(turn), batch)
		if err != nil {
			return nil, nil, err
		}
		for i, c := range batch {
			req.Messages = append(req.Messages, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool,
				ToolCallID: c.call.ID, Name: c.call.Tool, Content: results[i].message()})
			records = append(records, results[i].record(c))
		}
		s.Measure("tool_calls", int64(len(batch)))
		if seq >= n.tools.max {
			// the limit is reached: the model answers with what it has
			req.ToolChoice = "none"
		}
	}
}

// pendingCall is a call of a batch, as it is prepared: its tool, or why
// it is not run (problem, which the model is told).
type pendingCall struct {
	call    kind.Call
	key     string
	tool    *kind.Tool
	problem string
	// approval is how a person answered, edited the arguments they gave
	approval string
	reason   string
}

// prepare checks a call the model made: its tool, its arguments and the
// node's limit.
func (n *node) prepare(tc toolCall, key string, seq int, callKey string) *pendingCall {
	c := &pendingCall{call: kind.Call{ID: tc.ID, Seq: seq, Key: callKey, Tool: tc.Name}, key: key}
	if c.call.ID == "" {
		c.call.ID = strings.ReplaceAll(key, ":", "_")
	}
	if seq > n.tools.max {
		c.problem = fmt.Sprintf("not run: this node's limit of %d tool calls (max_tool_calls) was reached; answer with what you have", n.tools.max)
		return c
	}
	t, ok := n.tools.by[tc.Name]
	if !ok {
		names := make([]string, len(n.tools.list))
		for i, t := range n.tools.list {
			names[i] = t.Name
		}
		c.problem = fmt.Sprintf("there is no tool named %q (the tools are %s)", tc.Name, strings.Join(names, ", "))
		return c
	}
	c.tool = t
	args := strings.TrimSpace(tc.Arguments)
	if args == "" {
		args = "{}"
	}
	v, err := value.Decode([]byte(args))
	if err != nil {
		c.problem = fmt.Sprintf("the arguments are not valid JSON: %v", err)
		return c
	}
	m, ok := v.(map[string]any)
	if !ok {
		c.problem = fmt.Sprintf("the arguments must be a JSON object, not %s", value.TypeOf(v))
		return c
	}
	if err := t.Params.Validate(m); err != nil {
		c.problem = fmt.Sprintf("the arguments do not match the parameters of %s: %v", t.Name, err)
		return c
	}
	c.call.Args = m
	return c
}

// outcome is a call's result as kept: its result, or the error the model
// is told of.
type outcome struct {
	Result any    `json:"result"`
	Error  string `json:"error,omitempty"`
}

// outcomeOf reads back a kept outcome, its result's numbers exact.
func outcomeOf(v any) outcome {
	m, _ := v.(map[string]any)
	o := outcome{Result: m["result"]}
	o.Error, _ = m["error"].(string)
	return o
}

// message is what the model is told of a call.
func (o outcome) message() string {
	if o.Error != "" {
		b, _ := json.Marshal(map[string]any{"error": o.Error})
		return string(b)
	}
	if s, ok := o.Result.(string); ok {
		return s
	}
	b, err := json.Marshal(o.Result)
	if err != nil {
		return fmt.Sprint(o.Result)
	}
	return string(b)
}

// record is the call as tool_calls shows it.
func (o outcome) record(c *pendingCall) map[string]any {
	args := c.call.Args
	if args == nil {
		args = map[string]any{}
	}
	rec := map[string]any{"id": c.call.ID, "tool": c.call.Tool, "arguments": args, "result": o.Result, "error": nil, "approval": nil}
	if o.Error != "" {
		rec["error"] = o.Error
	}
	if c.approval != "" {
		rec["approval"] = c.approval
	}
	return rec
}

// runBatch approves a batch of calls (pausing the run when one waits for
// a person) and runs them at once, each kept when it completes.
func (n *node) runBatch(ctx context.Context, s kind.State, where string, batch []*pendingCall) ([]outcome, error) {
	if n.tools.approves {
		if err := n.approve(ctx, s, where, batch); err != nil {
			return nil, err
		}
	}
	results := make([]outcome, len(batch))
	errs := make([]error, len(batch))
	var wg sync.WaitGroup
	for i, c := range batch {
		switch {
		case c.problem != "":
			results[i] = outcome{Error: c.problem}
			continue
		case c.approval == "rejected":
			why := "the call was rejected by a person"
			if c.reason != "" {
				why += ": " + c.reason
			}
			results[i] = outcome{Error: why}
			s.ToolEvent(kind.ToolEvent{ID: c.call.ID, Name: c.call.Tool, Kind: c.tool.Kind, Seq: c.call.Seq, Arguments: c.call.Args, Approval: c.approval, Error: why, Done: true})
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = n.call(ctx, s, c)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return results, nil
}

// call runs one call once: a call kept from an earlier run of the step is
// not run again.
func (n *node) call(ctx context.Context, s kind.State, c *pendingCall) (outcome, error) {
	ran := false
	v, err := s.Once(ctx, c.key, func(ctx context.Context) (any, error) {
		ran = true
		s.ToolEvent(kind.ToolEvent{ID: c.call.ID, Name: c.call.Tool, Kind: c.tool.Kind, Seq: c.call.Seq, Arguments: c.call.Args, Approval: c.approval})
		var res any
		var err error
		handled := false
		if mock, ok := kind.ToolMockOf(ctx); ok {
			res, handled, err = mock(ctx, &c.call)
		}
		if !handled {
			res, err = c.tool.Impl.Call(ctx, s, &c.call)
		}
		switch {
		case err == nil:
			return map[string]any{"result": res}, nil
		case kind.IsToolFailed(err):
			return map[string]any{"result": nil, "error": err.Error()}, nil
		case ctx.Err() != nil:
			return nil, ctx.Err()
		}
		s.ToolEvent(kind.ToolEvent{ID: c.call.ID, Name: c.call.Tool, Kind: c.tool.Kind, Seq: c.call.Seq, Arguments: c.call.Args, Error: err.Error(), Done: true})
		// the tool's failure, not the model's: the prompt's fallback does
		// not stand in for it
		return nil, kind.Fails(fmt.Errorf("tool %q (%s): %w", c.call.Tool, c.tool.Kind, err))
	})
	if err != nil {
		return outcome{}, err
	}
	o := outcomeOf(v)
	if ran {
		s.ToolEvent(kind.ToolEvent{ID: c.call.ID, Name: c.call.Tool, Kind: c.tool.Kind, Seq: c.call.Seq, Arguments: c.call.Args, Approval: c.approval,
			Result: o.Result, Error: o.Error, Done: true})
	}
	return o, nil
}

// fallbackCalls makes the calls a prompt's fallback names, as the model's
// would be made (approval included), and returns them as tool_calls
// shows them.
func (n *node) fallbackCalls(ctx context.Context, s kind.State, vars map[string]any) ([]any, error) {
	var batch []*pendingCall
	for i, fc := range n.prompt.FallbackCalls {
		if fc.When != nil {
			ok, err := fc.When.Eval(vars)
			if err != nil {
				return nil, fmt.Errorf("fallback_calls[%d].when: %w", i, err)
			}
			if b, _ := ok.(bool); !b {
				continue
			}
		}
		var args any
		if fc.ArgsExpr != nil {
			v, err := fc.ArgsExpr.Eval(vars)
			if err != nil {
				return nil, fmt.Errorf("fallback_calls[%d].arguments: %w", i, err)
			}
			args = v
		} else {
			m := map[string]any{}
			for j, p := range fc.Args {
				v, err := p.Eval(vars)
				if err != nil {
					return nil, fmt.Errorf("fallback_calls[%d].arguments.%s: %w", i, fc.ArgNames[j], err)
				}
				m[fc.ArgNames[j]] = v
			}
			args = m
		}
		b, err := json.Marshal(args)
		if err != nil {
			return nil, fmt.Errorf("fallback_calls[%d].arguments: %w", i, err)
		}
		key := "fallback:" + strconv.Itoa(i)
		// (its Key is not one the model's calls, kept from the step's
		// earlier attempts, could have)
		c := n.prepare(toolCall{ID: "fallback_" + strconv.Itoa(i+1), Name: fc.Tool, Arguments: string(b)}, key, len(batch)+1, "fallback"+strconv.Itoa(i+1))
		if c.problem != "" {
			// the flow's own expressions made these arguments: its
			// mistake, not a model's to correct
			return nil, fmt.Errorf("fallback_calls[%d] (%s): %s", i, fc.Tool, c.problem)
		}
		batch = append(batch, c)
	}
	records := []any{}
	if len(batch) == 0 {
		return records, nil
	}
	results, err := n.runBatch(ctx, s, "fallback", batch)
	if err != nil {
		return nil, err
	}
	for i, c := range batch {
		records = append(records, results[i].record(c))
	}
	s.Measure("tool_calls", int64(len(batch)))
	return records, nil
}

// toJSON turns v into the JSON value Once keeps.
func toJSON(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return value.Decode(b)
}

// fromJSON reads back what toJSON made.
func fromJSON(v any, into any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, into)
}
