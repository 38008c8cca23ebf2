// Package llm is the llm node kind: it renders a prompt file over state,
// asks an OpenAI-compatible model for a chat completion (plain text, or JSON
// checked against the prompt's output schema) and writes the reply to state
// through expressions.
//
//	detect_intent:
//	  kind: llm
//	  prompt: interview/detect_intent      # prompts/interview/detect_intent.prompt
//	  vars:
//	    recent: "last(state.conversation_history, 6)"
//	  writes:
//	    detected_intents: "[output]"
//
// A structured reply that fails its schema gets one repair turn quoting the
// validation error. Calls that fail with 429, 5xx or a timeout are retried
// with backoff, honouring Retry-After. When no model is configured, or the
// model still fails, the node writes its prompt's fallback instead and its
// end event is marked degraded; the fallback's no_model tells the first
// case from the second. A node that sets on_error (fail, set or route)
// handles a model that fails with it instead: the fallback then stands in
// only when no model is configured, so offline runs and flow tests still
// run end to end. With events observed, the reply is streamed
// token by token as node_output events.
package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"text/template"

	openai "github.com/sashabaranov/go-openai"

	"github.com/trellisflow/trellis/nodes/llm/prompt"
	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/expression"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/schema"
	"github.com/trellisflow/trellis/runtime/tmpl"
	"github.com/trellisflow/trellis/runtime/value"
)

// NewSpec returns the kind with the provider returned by provider, called
// when a flow is loaded (nil: no model; every node uses its fallback).
func NewSpec(provider func() *Provider) kind.Spec {
	return kind.Spec{
		Name:    "llm",
		Summary: "Ask a chat model with a prompt file and write its reply (text or schema-checked JSON) to state; the prompt's fallback stands in when no model answers, unless the node sets on_error: a model that fails then goes to on_error (fail, set or route), and the fallback stands in only when no model is configured.",
		Fields: []config.Field{
			config.String("prompt", "The prompt: a name under prompts/ (interview/question), or a path ending in .prompt relative to the flow.").Require(),
			config.Map("vars", "Extra template variables ({{.vars.NAME}}): expressions over state and input.",
				config.Elem(config.Expression("", ""))),
			config.Map("writes", "Field to expression over output (the reply), vars, state and input.",
				config.Elem(config.Expression("", ""))).NonEmpty(1).Require(),
			config.List("tools", "Tools of the flow's tools block the model may call (an MCP entry stands for all its tools): each call is checked against its tool's parameters, approved as the tool says, run, and its result fed back, until the model answers. Writes may read tool_calls: the calls made, with their results.",
				config.Elem(config.String("", "").NonEmpty(1))).NonEmpty(1).Distinct(),
			config.Integer("max_tool_calls", "How many tool calls the node makes in its step (default 10); then the model answers without tools.").Min(1).Max(1000),
			config.String("model", "The model, overriding the prompt's and the flow's: a name, or a template over state, input, vars and config ({{.config.model}}; one that renders nothing leaves the choice to the prompt, the flow, then $TRELLIS_MODEL).").NonEmpty(1),
			config.Number("temperature", "Overrides the prompt's temperature.").Min(0).Max(2),
			config.Integer("max_tokens", "Overrides the prompt's max_tokens.").Min(1),
		},
		FlowFields: []config.Field{
			config.String("model", "The model this flow's prompts use unless a prompt or node names another (default: $TRELLIS_MODEL): a name, or a template over state, input and config, such as {{.config.model}}.").NonEmpty(1),
		},
		New: func(b kind.Builder) kind.Node { return build(b, provider) },
	}
}

type binding struct {
	name    string
	program *expression.Program
}

type node struct {
	prompt *prompt.Prompt
	vars   []binding
	writes kind.Writes
	model  string
	// models are the node's, the prompt's and the flow's model settings
	// when one of them is a template (over state, input, vars and
	// config): the first that renders a name is the model
	models      []modelChoice
	temperature *float32
	maxTokens   int
	client      *client // nil: no model configured
	// tools are what the model may call (nil: none)
	tools *toolset
	// replyFormat is a structured prompt's reply format (see format)
	formatOnce  sync.Once
	replyFormat *openai.ChatCompletionResponseFormat
	formatErr   error
}

var stringShape = &schema.Shape{Types: []string{"string"}}

// Contained implements kind.Contained: a node with no tools only asks
// the model.
func (n *node) Contained() bool { return n.tools == nil }

func build(b kind.Builder, provider func() *Provider) kind.Node {
	s := b.Settings()
	n := &node{}
	varShapes := kind.Vars{}
	for _, e := range s.Entries("vars") {
		p := b.Expr(e.Value, nil)
		n.vars = append(n.vars, binding{e.Name, p})
		varShapes[e.Name] = nil
	}
	n.prompt = prompt.Load(b, s.Value("prompt"), varShapes)
	var outShape *schema.Shape // unknown when the prompt did not load: no cascade
	if n.prompt != nil {
		outShape = stringShape
		if n.prompt.Output != nil {
			outShape = n.prompt.Output.Validator.Shape
		}
	}
	toolsOK := true
	if s.Has("tools") {
		tools := b.Tools(s.Value("tools"))
		max := DefaultMaxToolCalls
		if m, ok := s.Int("max_tool_calls"); ok {
			max = m
		}
		if tools == nil {
			toolsOK = false
		} else {
			n.tools = newToolset(tools, max)
		}
	} else if s.Has("max_tool_calls") {
		b.Errorf(s.Value("max_tool_calls"), "max_tool_calls bounds the calls of a node with tools: name them under tools")
		toolsOK = false
	}
	if n.prompt != nil && toolsOK && !checkFallbackCalls(b, n.prompt, n.tools) {
		toolsOK = false
	}
	writes, writesOK := kind.CompileWrites(b, "writes", kind.Vars{"output": outShape, "vars": schema.Object(varShapes), "tool_calls": prompt.ToolCallsShape})
	n.writes = writes
	n.maxTokens, _ = s.Int("max_tokens")
	if t, ok := s.Float("temperature"); ok {
		f := float32(t)
		n.temperature = &f
	}
	if n.prompt == nil || !writesOK || !toolsOK || slices.ContainsFunc(n.vars, func(x binding) bool { return x.program == nil }) {
		return nil
	}
	if n.maxTokens == 0 {
		n.maxTokens = n.prompt.MaxTokens
	}
	if n.temperature == nil {
		n.temperature = n.prompt.Temperature
	}
	model, _ := s.String("model")
	flowModel, _ := b.FlowSettings().String("model")
	n.model = firstOf(model, n.prompt.Model, flowModel)
	if strings.Contains(model, "{{") || strings.Contains(flowModel, "{{") {
		for _, c := range []struct {
			text string
			at   config.Value
		}{{model, s.Value("model")}, {n.prompt.Model, config.Value{}}, {flowModel, b.FlowSettings().Value("model")}} {
			mc := modelChoice{name: c.text}
			switch {
			case !strings.Contains(c.text, "{{"):
			case c.at.File() != nil && c.at.File() == b.FlowSettings().Value("model").File() && c.text == flowModel:
				// the flow's setting, compiled (and reported) once
				mc.t, _ = b.Shared("llm.flow-model", func() any { return b.Template(c.at, "model", nil) }).(*template.Template)
			default:
				mc.t = b.Template(c.at, "model", kind.Vars{"vars": schema.Object(varShapes)})
			}
			if strings.Contains(c.text, "{{") && mc.t == nil {
				return nil
			}
			n.models = append(n.models, mc)
		}
	}
	if p := provider(); p != nil {
		n.client = newClient(p)
		if n.model == "" {
			n.model = n.client.p.Model
		}
	}
	approves := n.tools != nil && n.tools.approves
	switch {
	case s.Block().Get("on_error").Exists() && approves:
		return handledApproving{handled{n}}
	case s.Block().Get("on_error").Exists():
		return handled{n}
	case approves:
		return approving{n}
	}
	return n
}

// checkFallbackCalls checks the calls a prompt's fallback names against
// the node's tools: each one of them, its arguments fitting.
func checkFallbackCalls(b kind.Builder, p *prompt.Prompt, ts *toolset) bool {
	ok := true
	for _, fc := range p.FallbackCalls {
		var t *kind.Tool
		if ts != nil {
			t = ts.by[fc.Tool]
		}
		if t == nil {
			var names []string
			if ts != nil {
				for _, x := range ts.list {
					names = append(names, x.Name)
				}
			}
			msg := fmt.Sprintf("the fallback of prompt %s calls %q, which node %q may not call", p.Name, fc.Tool, b.Node())
			if ts == nil {
				msg += ": the node names no tools"
			}
			b.Report(diag.CodeToolName, fc.At.Pos(), fc.At.Path(), "%s", msg).Suggestion = diag.Suggest(fc.Tool, names)
			ok = false
			continue
		}
		shape := t.Params.Shape
		if fc.ArgsExpr != nil {
			checkArgument(b, fc.ArgsExpr, shape, fc.At, fmt.Sprintf("the arguments of tool %s", t.Name))
			continue
		}
		given := map[string]bool{}
		for i, name := range fc.ArgNames {
			given[name] = true
			ps, has := shape.Prop(name)
			if !has && shape.Closed {
				b.Report(diag.CodeToolSetting, fc.ArgsAt[i].Pos(), fc.ArgsAt[i].Path(), "tool %s takes no argument %q", t.Name, name).Suggestion = diag.Suggest(name, shape.Order)
				ok = false
				continue
			}
			checkArgument(b, fc.Args[i], ps, fc.ArgsAt[i], fmt.Sprintf("argument %q of tool %s", name, t.Name))
		}
		for _, r := range shape.Required {
			if !given[r] {
				b.Report(diag.CodeToolSetting, fc.At.Pos(), fc.At.Path(), "the fallback's call of %s leaves out its required argument %q", t.Name, r)
				ok = false
			}
		}
	}
	return ok
}

// handled is a node that sets on_error: a model that fails after its
// retries is a failure of the node, which on_error handles (the engine
// calls no fallback, handled has none); with no model configured, Run
// writes the prompt's fallback itself, marked degraded.
type handled struct{ n *node }

// Run implements kind.Node.
func (h handled) Run(ctx context.Context, s kind.State) (kind.Update, error) {
	upd, err := h.n.Run(ctx, s)
	if h.n.client == nil && errors.Is(err, ErrNoModel) {
		upd, err = h.n.Fallback(ctx, s, ErrNoModel)
		if err == nil {
			s.Degrade(ErrNoModel.Error())
		}
	}
	return upd, err
}

// WithOutput implements kind.Outputter.
func (h handled) WithOutput(s kind.State, out any) (kind.Update, error) {
	return h.n.WithOutput(s, out)
}

// Preview implements kind.Previewer.
func (h handled) Preview(s kind.State) (*kind.Preview, error) { return h.n.Preview(s) }

// modelChoice is a model setting: a name, or a template that renders one.
type modelChoice struct {
	name string
	t    *template.Template
}

// modelFor is the model a call uses for data.
func (n *node) modelFor(data prompt.Data) (string, error) {
	if n.client != nil && n.client.p.Override != "" {
		return n.client.p.Override, nil
	}
	if len(n.models) == 0 {
		return n.model, nil
	}
	m := map[string]any{"state": data.State, "input": data.Input, "vars": data.Vars, "config": data.Config}
	for _, c := range n.models {
		name := c.name
		if c.t != nil {
			var err error
			if name, err = tmpl.Execute(c.t, m); err != nil {
				return "", fmt.Errorf("model: %w", err)
			}
		}
		if name = strings.TrimSpace(name); name != "" && name != "<no value>" {
			return name, nil
		}
	}
	if n.client != nil {
		return n.client.p.Model, nil
	}
	return "", nil
}

func firstOf(names ...string) string {
	for _, s := range names {
		if s != "" {
			return s
		}
	}
	return ""
}

// ErrNoModel is the reason a node uses its fallback when no model is
// configured.
var ErrNoModel = errors.New("no model is configured (set OPENAI_BASE_URL or OPENAI_API_KEY)")

// Run implements kind.Node. With no model configured, only a replay of a
// thread's recorded replies answers; otherwise the node fails with
// ErrNoModel, which is not retried (the engine calls Fallback).
func (n *node) Run(ctx context.Context, s kind.State) (kind.Update, error) {
	// with no model, what keeps the request from being made is no
	// model: the fallback stands in, as it always did
	failed := func(err error) error {
		if n.client == nil {
			return kind.Permanent(ErrNoModel)
		}
		return err
	}
	data, vars, err := n.data(s)
	if err != nil {
		return nil, failed(err)
	}
	msgs, err := n.prompt.Render(data)
	if err != nil {
		return nil, failed(err)
	}
	model, err := n.modelFor(data)
	if err != nil {
		return nil, failed(err)
	}
	if n.tools != nil {
		req, err := n.request(model, msgs)
		if err != nil {
			return nil, err
		}
		out, calls, err := n.agent(ctx, s, req)
		if err != nil {
			return nil, err
		}
		vars["tool_calls"] = calls
		return n.write(vars, out)
	}
	out, err := n.ask(ctx, s, model, msgs)
	if err != nil {
		return nil, err
	}
	return n.write(vars, out)
}

// WithOutput implements kind.Outputter: out stands for the model's reply;
// a structured reply is checked against the prompt's schema.
func (n *node) WithOutput(s kind.State, out any) (kind.Update, error) {
	_, vars, err := n.data(s)
	if err != nil {
		return nil, err
	}
	if n.prompt.Output != nil {
		if err := n.prompt.Output.Validator.Validate(out); err != nil {
			return nil, fmt.Errorf("output does not match the schema of prompt %s: %w", n.prompt.Name, err)
		}
	} else if _, ok := out.(string); !ok {
		return nil, fmt.Errorf("prompt %s replies with text, not %s", n.prompt.Name, value.TypeOf(out))
	}
	return n.write(vars, out)
}

// Preview implements kind.Previewer: the messages, model settings and
// reply schema the node would send.
func (n *node) Preview(s kind.State) (*kind.Preview, error) {
	data, _, err := n.data(s)
	if err != nil {
		return nil, err
	}
	msgs, err := n.prompt.Render(data)
	if err != nil {
		return nil, err
	}
	model, err := n.modelFor(data)
	if err != nil {
		return nil, err
	}
	r := request{Prompt: n.prompt.Name, Model: model, Temperature: n.temperature, MaxTokens: n.maxTokens,
		System: msgs.System, User: msgs.User}
	if r.Model == "" {
		r.Model = FromEnvModel()
	}
	title := fmt.Sprintf("prompt %s, model %s", r.Prompt, r.Model)
	if r.Temperature != nil {
		title += fmt.Sprintf(", temperature %g", *r.Temperature)
	}
	if r.MaxTokens > 0 {
		title += fmt.Sprintf(", max_tokens %d", r.MaxTokens)
	}
	p := &kind.Preview{Title: title, Request: r}
	if r.System != "" {
		p.Sections = append(p.Sections, kind.Section{Name: "system", Text: r.System})
	}
	p.Sections = append(p.Sections, kind.Section{Name: "user", Text: r.User})
	if n.prompt.Output != nil {
		r.Output = n.prompt.Output.Schema
		p.Request = r
		b, _ := json.MarshalIndent(r.Output, "", "  ")
		p.Sections = append(p.Sections, kind.Section{Name: "reply schema", Text: string(b)})
	}
	if n.tools != nil {
		var text strings.Builder
		for _, t := range n.tools.list {
			r.Tools = append(r.Tools, previewTool{Name: t.Name, Description: t.Description, Parameters: t.Parameters})
			b, _ := json.Marshal(t.Parameters)
			fmt.Fprintf(&text, "%s (%s): %s\n  %s\n", t.Name, t.Kind, t.Description, b)
		}
		p.Request = r
		p.Sections = append(p.Sections, kind.Section{Name: "tools", Text: strings.TrimRight(text.String(), "\n")})
	}
	return p, nil
}

// previewTool is a tool a node offers, as a preview shows it.
type previewTool struct {
	Name        string         `json:"name"`
	Description string         `json:"description"`
	Parameters  map[string]any `json:"parameters"`
}

// request is what a node would send to a model, as a preview shows it.
type request struct {
	Prompt      string         `json:"prompt"`
	Model       string         `json:"model"`
	Temperature *float32       `json:"temperature,omitempty"`
	MaxTokens   int            `json:"max_tokens,omitempty"`
	System      string         `json:"system,omitempty"`
	User        string         `json:"user"`
	Output      map[string]any `json:"output_schema,omitempty"`
	Tools       []previewTool  `json:"tools,omitempty"`
}

// Fallback implements kind.Fallback: the prompt's fallback, with the
// failure as .error and, when the cause is that no model is configured,
// .no_model set.
func (n *node) Fallback(ctx context.Context, s kind.State, cause error) (kind.Update, error) {
	data, vars, err := n.data(s)
	if err != nil {
		return nil, err
	}
	return n.fallback(ctx, s, data, vars, cause)
}

func (n *node) fallback(ctx context.Context, s kind.State, data prompt.Data, vars map[string]any, cause error) (kind.Update, error) {
	data.Error = n.client.redact(cause.Error())
	data.NoModel = errors.Is(cause, ErrNoModel)
	vars["error"], vars["no_model"] = data.Error, data.NoModel
	calls := []any{}
	if n.tools != nil && len(n.prompt.FallbackCalls) > 0 {
		var err error
		if calls, err = n.fallbackCalls(ctx, s, vars); err != nil {
			if _, paused := kind.InterruptPayload(err); paused {
				return nil, err
			}
			return nil, fmt.Errorf("fallback of prompt %s: %w", n.prompt.Name, err)
		}
	}
	data.ToolCalls, vars["tool_calls"] = calls, calls
	out, err := n.prompt.Fallback(data, func(p *expression.Program) (any, error) { return p.Eval(vars) })
	if err != nil {
		return nil, fmt.Errorf("fallback of prompt %s: %w", n.prompt.Name, err)
	}
	if out, err = value.Normalize(out); err != nil {
		return nil, fmt.Errorf("fallback of prompt %s: %w", n.prompt.Name, err)
	}
	if n.prompt.Output != nil {
		if err := n.prompt.Output.Validator.Validate(out); err != nil {
			return nil, fmt.Errorf("fallback of prompt %s does not match its output schema: %w", n.prompt.Name, err)
		}
	}
	return n.write(vars, out)
}

// data evaluates the node's vars and returns the template data and the
// expression variables (a copy of the step's, plus vars).
func (n *node) data(s kind.State) (prompt.Data, map[string]any, error) {
	base := s.Vars()
	vars := make(map[string]any, len(base)+3)
	maps.Copy(vars, base)
	nv := make(map[string]any, len(n.vars))
	for _, b := range n.vars {
		v, err := b.program.Eval(base)
		if err != nil {
			return prompt.Data{}, nil, fmt.Errorf("vars.%s: %w", b.name, err)
		}
		nv[b.name] = v
	}
	vars["vars"] = nv
	st, _ := base["state"].(map[string]any)
	in, _ := base["input"].(map[string]any)
	cfg, _ := base["config"].(map[string]any)
	return prompt.Data{State: st, Input: in, Vars: nv, Config: cfg}, vars, nil
}

func (n *node) write(vars map[string]any, out any) (kind.Update, error) {
	vars["output"] = out
	if _, ok := vars["tool_calls"]; !ok {
		vars["tool_calls"] = []any{}
	}
	return n.writes.Eval(vars)
}

// request is the chat request a node starts with: the rendered messages,
// the model's settings and, for a structured prompt, the reply's schema.
func (n *node) request(model string, msgs prompt.Messages) (openai.ChatCompletionRequest, error) {
	req := openai.ChatCompletionRequest{
		Model:       model,
		Temperature: temperature(n.temperature),
		MaxTokens:   n.maxTokens,
	}
	if msgs.System != "" {
		req.Messages = append(req.Messages, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleSystem, Content: msgs.System})
	}
	req.Messages = append(req.Messages, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: msgs.User})
	if n.prompt.Output != nil {
		f, err := n.format()
		if err != nil {
			return req, err
		}
		req.ResponseFormat = f
	}
	return req, nil
}

// format is the reply format of a structured prompt, its schema encoded
// once for all the node's calls (the requests share it and only read
// it).
func (n *node) format() (*openai.ChatCompletionResponseFormat, error) {
	n.formatOnce.Do(func() {
		out := n.prompt.Output
		raw, err := json.Marshal(out.Schema)
		if err != nil {
			n.formatErr = err
			return
		}
		n.replyFormat = &openai.ChatCompletionResponseFormat{
			Type:       openai.ChatCompletionResponseFormatTypeJSONSchema,
			JSONSchema: &openai.ChatCompletionResponseFormatJSONSchema{Name: out.Name, Schema: json.RawMessage(raw)},
		}
	})
	return n.replyFormat, n.formatErr
}

// ask sends the prompt and returns the reply: a string, or for a
// structured prompt the decoded JSON value, checked against its schema
// (with one repair turn).
func (n *node) ask(ctx context.Context, s kind.State, model string, msgs prompt.Messages) (any, error) {
	req, err := n.request(model, msgs)
	if err != nil {
		return nil, err
	}
	out := n.prompt.Output
	reply, err := n.complete(ctx, s, req)
	if err != nil || out == nil {
		return reply, err
	}
	v, perr := parseStructured(reply, out)
	if perr == nil {
		return v, nil
	}
	// one repair turn: show the model its reply and what is wrong with it
	req.Messages = append(req.Messages,
		openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: reply},
		openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: "Your reply does not match the required JSON schema: " +
			perr.Error() + "\nReply again with only the corrected JSON object."})
	if reply, err = n.complete(ctx, s, req); err != nil {
		return nil, err
	}
	v, err = parseStructured(reply, out)
	if err != nil {
		return nil, fmt.Errorf("model reply does not match the output schema after a repair turn: %w", err)
	}
	return v, nil
}

func parseStructured(reply string, out *prompt.Output) (any, error) {
	text := strings.TrimSpace(reply)
	if strings.HasPrefix(text, "```") {
		text = strings.TrimPrefix(text[strings.IndexByte(text+"\n", '\n'):], "\n")
		text = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(text), "```"))
	}
	v, err := value.Decode([]byte(text))
	if err != nil {
		return nil, fmt.Errorf("not valid JSON: %v", err)
	}
	if err := out.Validator.Validate(v); err != nil {
		return nil, err
	}
	// 2.0 where the schema says integer is the int 2 for the writes
	return schema.Coerce(out.Validator.Shape, v), nil
}

// reply is a model's answer: its text, and the functions it calls.
type reply struct {
	Content   string     `json:"content"`
	ToolCalls []toolCall `json:"tool_calls,omitempty"`
}

// toolCall is a function the model calls: the call's id, the function's
// name and its arguments as the model wrote them (JSON, not yet checked).
type toolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// recordedReply marks a reply that calls tools as a run records it (a
// reply is recorded as text, see kind.State.Record): a JSON object with
// this one key, {"trellis_reply": {content, tool_calls}}; a reply with no
// call is recorded as its text.
const recordedReply = `{"trellis_reply":`

// encodeReply is a reply as text, for the run's record.
func encodeReply(r reply) string {
	if len(r.ToolCalls) == 0 {
		return r.Content
	}
	b, err := json.Marshal(map[string]reply{"trellis_reply": r})
	if err != nil {
		return r.Content
	}
	return string(b)
}

// decodeReply reads what encodeReply wrote.
func decodeReply(text string) reply {
	if strings.HasPrefix(text, recordedReply) {
		var m map[string]reply
		if json.Unmarshal([]byte(text), &m) == nil && len(m) == 1 {
			if r, ok := m["trellis_reply"]; ok {
				return r
			}
		}
	}
	return reply{Content: text}
}

// complete makes one chat completion with retries, streaming the reply
// when the run is observed, and returns the reply's text.
func (n *node) complete(ctx context.Context, s kind.State, req openai.ChatCompletionRequest) (string, error) {
	r, err := n.completeReply(ctx, s, req)
	return r.Content, err
}

// completeReply makes one chat completion with retries, streaming the
// reply's text when the run is observed: its text and tool calls.
func (n *node) completeReply(ctx context.Context, s kind.State, req openai.ChatCompletionRequest) (reply, error) {
	c := n.client
	key := hashRequest(req)
	if text, ok := s.Recorded(key); ok {
		// a replay of a thread: what the model said then
		s.Record(key, text)
		r := decodeReply(text)
		if s.Observed() && r.Content != "" {
			s.Stream(r.Content)
		}
		return r, nil
	}
	if c == nil {
		return reply{}, kind.Permanent(ErrNoModel)
	}
	if cas := c.p.Cassette; cas != nil && !cas.Recording {
		r, err := cas.replay(s.Node(), req)
		if err != nil {
			return reply{}, kind.Permanent(err)
		}
		s.Record(key, encodeReply(r))
		if s.Observed() && r.Content != "" {
			s.Stream(r.Content)
		}
		return r, nil
	}
	var r reply
	err := c.call(ctx, func(ctx context.Context, oa *openai.Client, t *try) error {
		s.Measure("calls", 1)
		if !s.Observed() {
			resp, err := oa.CreateChatCompletion(ctx, req)
			if err != nil {
				return err
			}
			measure(s, resp.Usage)
			if len(resp.Choices) == 0 {
				return fmt.Errorf("the reply has no choices")
			}
			m := resp.Choices[0].Message
			r = reply{Content: m.Content}
			for _, tc := range m.ToolCalls {
				r.ToolCalls = append(r.ToolCalls, toolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
			}
			return nil
		}
		req.Stream = true
		req.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
		stream, err := oa.CreateChatCompletionStream(ctx, req)
		if err != nil {
			return err
		}
		defer stream.Close()
		if t.resp == nil {
			return errors.New("the reply stream has no response")
		}
		cs := newChunkStream(t.resp.Body)
		defer cs.release()
		// output streamed by a try that then fails is void: the node's
		// events say so before the call is made again
		r, err = readReply(cs, func(text string) {
			if t.retrying == nil {
				t.retrying = s.Retrying
			}
			s.Stream(text)
		}, func(u openai.Usage) { measure(s, u) })
		return err
	})
	if err != nil {
		return reply{}, c.errorf(err)
	}
	if cas := c.p.Cassette; cas != nil {
		cas.record(s.Node(), req, r)
	}
	s.Record(key, encodeReply(r))
	return r, nil
}

// measure reports a reply's token counts.
func measure(s kind.State, u openai.Usage) {
	if u.PromptTokens > 0 {
		s.Measure("input_tokens", int64(u.PromptTokens))
	}
	if u.CompletionTokens > 0 {
		s.Measure("output_tokens", int64(u.CompletionTokens))
	}
}

var (
	_ kind.Fallback  = (*node)(nil)
	_ kind.Outputter = (*node)(nil)
	_ kind.Previewer = (*node)(nil)
	_ kind.Outputter = handled{}
	_ kind.Previewer = handled{}
)
