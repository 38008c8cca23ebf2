package kind

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/expression"
	"github.com/trellisflow/trellis/runtime/schema"
)

// Tools are what a model may call from an llm node: functions declared in
// a flow's top-level tools block, each entry of a registered tool kind.
//
//	tools:
//	  get_weather:
//	    kind: http                    # http, flow, mcp, sandbox
//	    description: The weather in a city now.
//	    parameters: {type: object, properties: {city: {type: string}}, required: [city]}
//	    url: "https://weather.example/v1?city={{urlquery .args.city}}"
//	    allow: [weather.example]
//	    approve: never                # always | never | {when: EXPR}
//
// A tool kind registers one declarative ToolSpec, as a node kind registers
// a Spec: its name, a summary, the declaration of its own settings and a
// constructor. One declaration drives the flow schema (each entry of the
// block is checked against its kind's settings), the reference docs, the
// validation of the block (the constructor compiles templates and schemas
// through a Builder, reporting every problem at its position) and the
// function list sent to the model (each Tool's name, description and
// parameters). The settings every entry shares (description, approve)
// are added by the runtime, as a node's common settings are.
//
// An entry declares one Tool, or several (an MCP server's). An llm node
// names the entries it may call (tools: [get_weather]); the model's
// function calls are checked against each tool's parameters, approved as
// the entry's approve says, run with Call, and their results fed back.

// ToolSpec declares a tool kind.
type ToolSpec struct {
	// Name is snake_case and unique among tool kinds.
	Name string
	// Summary is one sentence for docs and editor hovers.
	Summary string
	// Fields declare the kind's own keys in a tools entry; the keys every
	// entry shares are added by the runtime (ToolCommonFields).
	Fields []config.Field
	// New builds the tools an entry declares. b.Node() is the entry's
	// name, b.Settings() reads the entry through Fields; expressions and
	// templates compiled through b may read the vars the kind gives them
	// (args: the call's arguments) besides state, input and config. It
	// reports problems through b, may return nil when it found any, and
	// does no I/O beyond reading the flow's files (a kind that must reach
	// a server, as mcp does, reads a pinned copy when it cannot).
	New func(b Builder) []*Tool
}

// ToolCommonFields are the settings every tools entry accepts, whatever
// its kind (besides kind).
var ToolCommonFields = []config.Field{
	config.String("description", "What the tool does, as the model reads it (required of kinds that have no description of their own)."),
	config.OneOf("approve", "Whether a call waits for a person's approval before it runs: never (default), always, or {when: EXPR} over args (the call's arguments), tool (its name), state, input and config. A call that waits pauses the run with an interrupt carrying the call; the answer approves it, edits its arguments or rejects it.",
		config.String("", "").OneOfValues("always", "never"),
		config.Object("", "", config.Condition("when", "The call waits when this holds.").Require()),
	),
}

// Tool is one function a model may call.
type Tool struct {
	// Name is what the model calls it: the entry's name, or for an entry
	// that declares several (an MCP server's tools), each one's own. It
	// matches ^[A-Za-z0-9_-]{1,64}$, as chat models require.
	Name        string
	Description string
	// Parameters is the JSON Schema of its arguments, an object schema
	// standing alone (every $ref inlined), as sent to the model; Params
	// checks the arguments of a call and holds their shape.
	Parameters map[string]any
	Params     *schema.Validator
	// Result is the shape of what a call returns (nil: not known).
	Result *schema.Shape
	// Impl makes the calls.
	Impl Caller

	// Set by the loader: the entry that declared the tool, its kind,
	// where it is, and its approval (nil: never).
	Entry   string
	Kind    string
	Pos     diag.Pos
	Approve *Approval
}

// Caller makes a tool's calls.
type Caller interface {
	// Call runs one call on the state of the step of the node that makes
	// it, and returns its result: any JSON value. Args were checked
	// against the tool's parameters. An error is the call's failure; the
	// model is told of it, and may try again. Call honours ctx.
	Call(ctx context.Context, s State, c *Call) (any, error)
}

// CallerFunc adapts a function to Caller.
type CallerFunc func(ctx context.Context, s State, c *Call) (any, error)

// Call implements Caller.
func (f CallerFunc) Call(ctx context.Context, s State, c *Call) (any, error) { return f(ctx, s, c) }

// Call is one call of a tool.
type Call struct {
	// ID is the call's id (the model's tool call id); Seq numbers the
	// model's calls in the node's step from 1 (or its fallback's).
	ID  string
	Seq int
	// Key names the call among all the node's calls in its step (the
	// model's and its fallback's), the same when the step runs again
	// after a crash, a pause or on a retry: a tool names what it starts
	// by it (a child flow's thread), and finds it again.
	Key string
	// Tool is the name of the tool called, Args its arguments.
	Tool string
	Args map[string]any
}

// Approval says when a tool's calls wait for a person.
type Approval struct {
	// Always: every call waits; otherwise a call waits when When holds
	// (over args, tool, state, input and config).
	Always bool
	When   *expression.Program
}

// Needed reports whether a call waits for approval; vars are the step's
// expression variables.
func (a *Approval) Needed(vars map[string]any, c *Call) (bool, error) {
	switch {
	case a == nil:
		return false, nil
	case a.Always:
		return true, nil
	case a.When == nil:
		return false, nil
	}
	v := make(map[string]any, len(vars)+2)
	maps.Copy(v, vars)
	v["args"], v["tool"] = c.Args, c.Tool
	ok, err := a.When.Eval(v)
	if err != nil {
		return false, fmt.Errorf("approve.when: %w", err)
	}
	b, _ := ok.(bool)
	return b, nil
}

// ToolRegistry is implemented by registries that hold tool kinds besides
// node kinds (Set does): a flow's tools block is read through it. A
// registry without it has no tool kinds, and a flow with a tools block
// is an error.
type ToolRegistry interface {
	LookupTool(name string) (*ToolSpec, bool)
	// ToolSpecs lists every tool kind, sorted by name.
	ToolSpecs() []*ToolSpec
}

// RegisterTool adds a tool kind. A duplicate or malformed spec is a
// programmer error and panics.
func (s *Set) RegisterTool(sp ToolSpec) {
	if !kindName.MatchString(sp.Name) {
		panic(fmt.Sprintf("kind: tool kind %q is not snake_case", sp.Name))
	}
	if s.tools == nil {
		s.tools = map[string]*ToolSpec{}
	}
	if _, dup := s.tools[sp.Name]; dup {
		panic(fmt.Sprintf("kind: tool kind %q registered twice", sp.Name))
	}
	if sp.New == nil || sp.Summary == "" {
		panic(fmt.Sprintf("kind: tool kind %q needs a summary and a constructor", sp.Name))
	}
	for _, f := range sp.Fields {
		if !kindName.MatchString(f.Name) {
			panic(fmt.Sprintf("kind: tool kind %q: setting %q is not snake_case", sp.Name, f.Name))
		}
		if _, clash := config.Lookup(ToolCommonFields, f.Name); clash || f.Name == "kind" {
			panic(fmt.Sprintf("kind: tool kind %q: setting %q clashes with a common setting", sp.Name, f.Name))
		}
	}
	s.tools[sp.Name] = &sp
}

// LookupTool implements ToolRegistry.
func (s *Set) LookupTool(name string) (*ToolSpec, bool) {
	sp, ok := s.tools[name]
	return sp, ok
}

// ToolSpecs implements ToolRegistry.
func (s *Set) ToolSpecs() []*ToolSpec {
	out := slices.Collect(maps.Values(s.tools))
	slices.SortFunc(out, func(a, b *ToolSpec) int {
		if a.Name < b.Name {
			return -1
		}
		return 1
	})
	return out
}

// ToolSpecsOf lists the tool kinds of reg (none when it holds none).
func ToolSpecsOf(reg Registry) []*ToolSpec {
	if tr, ok := reg.(ToolRegistry); ok {
		return tr.ToolSpecs()
	}
	return nil
}

// Interrupter is implemented by nodes whose Run may pause the run midway
// (returning the error Interrupt makes), such as an llm node whose tool
// call waits for approval: the run ends paused with the node's question,
// and a later run resumes the thread with an answer for the node, which
// Run reads with State.Answer. Work the node did before it paused and
// kept with State.Once is not done again. CheckAnswer refuses an answer
// the node cannot take, before the resumed run starts.
type Interrupter interface {
	CheckAnswer(answer any) error
}

// Interrupt returns the error that pauses the run at the node that
// returns it, asking payload (any JSON value). The engine neither retries
// it nor calls a fallback.
func Interrupt(payload any) error { return &interruptError{payload: payload} }

// InterruptPayload reports whether err pauses the run (see Interrupt),
// and with what question.
func InterruptPayload(err error) (any, bool) {
	var ie *interruptError
	if errors.As(err, &ie) {
		return ie.payload, true
	}
	return nil, false
}

type interruptError struct{ payload any }

func (e *interruptError) Error() string { return "the node paused the run for an answer" }

// ToolEvent is a tool call as the run's events show it: its start
// (Result, Error and Done empty) and its end.
type ToolEvent struct {
	// ID is the call's id, Name the tool's, Kind its kind.
	ID   string `json:"id"`
	Name string `json:"name"`
	Kind string `json:"kind,omitempty"`
	// Seq numbers the node's calls in the order the model made them (from
	// 1): calls made at once run at once, and end in any order.
	Seq int `json:"seq,omitempty"`
	// Arguments are the arguments it runs with (after an edit).
	Arguments any `json:"arguments,omitempty"`
	// Approval is how a call that waited was answered: approved, edited
	// or rejected.
	Approval string `json:"approval,omitempty"`
	// Result is what it returned, Error why it failed (tool_end).
	Result any    `json:"result,omitempty"`
	Error  string `json:"error,omitempty"`
	Done   bool   `json:"-"`
}

type toolMockKey struct{}

// ToolMock stands in for a tool's calls (flow tests): it returns the
// call's result, or handled false to let the tool run.
type ToolMock func(ctx context.Context, c *Call) (result any, handled bool, err error)

// WithToolMock returns ctx carrying m: the runs started with it call m
// before each tool.
func WithToolMock(ctx context.Context, m ToolMock) context.Context {
	return context.WithValue(ctx, toolMockKey{}, m)
}

// ToolMockOf returns the mock ctx carries.
func ToolMockOf(ctx context.Context) (ToolMock, bool) {
	m, ok := ctx.Value(toolMockKey{}).(ToolMock)
	return m, ok && m != nil
}

// Parameters reads a tool's parameters setting, a JSON Schema inline or
// in a file, as an object schema (the arguments of a call are an object).
// It reports a problem at its position and returns nil.
func Parameters(b Builder, v config.Value) *JSONSchema {
	if !v.Exists() {
		return nil
	}
	s, err := b.Schema(v, "parameters")
	switch {
	case err != nil && err.Unreadable:
		b.Report(diag.CodeToolSetting, v.Pos(), v.Path(), "cannot read the parameters schema %q (a schema, or a path relative to the flow)", v.Text())
		return nil
	case err != nil:
		b.Report(diag.CodeToolSetting, err.Pos, v.Path(), "invalid parameters schema: %s", err.Message)
		return nil
	}
	if t, _ := s.Raw["type"].(string); t != "object" {
		b.Report(diag.CodeToolSetting, v.Pos(), v.Path(), "the parameters schema must be an object schema (type: object): a call's arguments are an object")
		return nil
	}
	return s
}

// ToolFailed marks a call's failure that the model may act on (a request
// a server refused, arguments that do not fit): the model gets its message
// as the call's result, marked as an error, and the loop goes on. Any
// other error of a call fails the node that made it.
func ToolFailed(err error) error { return toolFailed{err} }

// IsToolFailed reports whether err was marked by ToolFailed.
func IsToolFailed(err error) bool {
	var f toolFailed
	return errors.As(err, &f)
}

type toolFailed struct{ err error }

func (f toolFailed) Error() string { return f.err.Error() }
func (f toolFailed) Unwrap() error { return f.err }

// Fails marks an error that fails the node whatever its Fallback: the
// engine calls no Fallback for it (retry and on_error still apply). A
// tool that may not be called as asked (an address its allow-list does not
// permit, a response over its cap) is not a model that did not answer,
// which a fallback stands in for. It unwraps to err.
func Fails(err error) error { return fails{err} }

// IsFails reports whether err was marked by Fails.
func IsFails(err error) bool {
	var f fails
	return errors.As(err, &f)
}

type fails struct{ err error }

func (f fails) Error() string { return f.err.Error() }
func (f fails) Unwrap() error { return f.err }

// Offliner is implemented by registries some of whose kinds reach outside
// the process while a flow loads (an mcp tool lists its server's tools,
// starting a command or dialling a URL): Offline is the same kinds
// reaching nothing then (an mcp tool reads its pinned copy), to check a
// flow from hands that may not have the process reach anything, such as
// a flow posted to an API to be validated.
type Offliner interface {
	Offline() Registry
}

// OfflineOf is reg's kinds reaching nothing while a flow loads (reg
// itself when it does not say).
func OfflineOf(reg Registry) Registry {
	if o, ok := reg.(Offliner); ok {
		return o.Offline()
	}
	return reg
}

// SetOffline gives the set its kinds reaching nothing at load (see
// Offliner).
func (s *Set) SetOffline(r Registry) { s.offline = r }

// Offline implements Offliner: the set given to SetOffline, or the set.
func (s *Set) Offline() Registry {
	if s.offline == nil {
		return s
	}
	return s.offline
}
