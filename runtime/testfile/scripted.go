// Scripted nodes: the model calls and tool results a test gives stand in
// for a node's own work, in order, item by item inside a map.

package testfile

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/value"
)

// scripted replaces a node's Run with its script. A scripted output the
// node refuses (a reply its schema does not allow) is kept in bad: the
// test fails on it, whatever the node's fallback or on_error make of it.
type scripted struct {
	inner kind.Node
	calls []Call
	n     int
	mu    sync.Mutex
	bad   []string
}

func (s *scripted) Run(ctx context.Context, st kind.State) (kind.Update, error) {
	s.mu.Lock()
	i := s.n
	s.n++
	s.mu.Unlock()
	if i >= len(s.calls) || s.calls[i].Run {
		return s.inner.Run(ctx, st)
	}
	c := s.calls[i]
	if c.Error != "" {
		return nil, errors.New(c.Error)
	}
	if c.HasOutput {
		o, ok := s.inner.(kind.Outputter)
		if !ok {
			return nil, fmt.Errorf("script: node %s produces no output; script set instead", st.Node())
		}
		upd, err := o.WithOutput(st, c.Output)
		if err != nil {
			s.mu.Lock()
			s.bad = append(s.bad, fmt.Sprintf("%s: the scripted output of %s does not fit the node: %v", c.Pos, st.Node(), err))
			s.mu.Unlock()
			return nil, kind.Permanent(fmt.Errorf("scripted output refused: %w", err))
		}
		return upd, nil
	}
	upd := st.NewUpdate(len(c.Set))
	for _, k := range slices.Sorted(maps.Keys(c.Set)) {
		upd = append(upd, kind.FieldValue{Field: k, Value: c.Set[k]})
	}
	return upd, nil
}

// refused reports whether the last call was a refused scripted output.
func (s *scripted) refused() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.bad) > 0
}

// scriptedFallback keeps the fallback of a node that has one, except for
// a scripted output the node refused: that fails the node.
type scriptedFallback struct{ *scripted }

func (s scriptedFallback) Fallback(ctx context.Context, st kind.State, err error) (kind.Update, error) {
	if s.refused() {
		return nil, errors.New("no fallback for a refused scripted output")
	}
	return s.inner.(kind.Fallback).Fallback(ctx, st, err)
}

// nestedOf finds the nested node that runs the item a script names
// (NODE[INDEX], NODE a map).
func nestedOf(g *flow.Graph, name string) (*flow.Node, bool) {
	base, rest, ok := strings.Cut(name, "[")
	if !ok || !strings.HasSuffix(rest, "]") {
		return nil, false
	}
	host, ok := g.Node(base)
	if !ok {
		return nil, false
	}
	c, ok := host.Impl.(kind.Composite)
	if !ok || c.Parts().Nested == nil {
		return nil, false
	}
	n, ok := c.Parts().Nested.Impl.(*flow.Node)
	return n, ok
}

// itemScripts runs a map's nested node: the items with a script run it,
// the others the real node.
type itemScripts struct {
	inner  kind.Node
	mu     sync.Mutex
	byItem map[string]*scripted
}

func (is *itemScripts) Run(ctx context.Context, st kind.State) (kind.Update, error) {
	is.mu.Lock()
	s := is.byItem[st.Node()]
	is.mu.Unlock()
	if s == nil {
		return is.inner.Run(ctx, st)
	}
	return s.Run(ctx, st)
}

type itemScriptsFallback struct{ *itemScripts }

func (s itemScriptsFallback) Fallback(ctx context.Context, st kind.State, err error) (kind.Update, error) {
	s.mu.Lock()
	sc := s.byItem[st.Node()]
	s.mu.Unlock()
	if sc != nil && sc.refused() {
		return nil, errors.New("no fallback for a refused scripted output")
	}
	return s.inner.(kind.Fallback).Fallback(ctx, st, err)
}

// badScript is a mistake in a test's scripts, where it is.
type badScript struct {
	pos diag.Pos
	msg string
}

// toolScripts makes the mock that answers a test's scripted tool calls,
// each tool's calls in order; a call beyond a tool's script runs it.
func toolScripts(g *flow.Graph, t Test) (kind.ToolMock, []badScript) {
	var bad []badScript
	for _, name := range UnknownTools(g, t.Tools) {
		bad = append(bad, badScript{t.toolPos[name], UnknownTool(g, name).Message()})
	}
	return ToolMock(t.Tools), bad
}

// UnknownTools lists the scripted tools flow g does not have, sorted.
func UnknownTools(g *flow.Graph, tools map[string][]ToolCall) []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(tools)) {
		if _, ok := g.Tool(name); !ok {
			out = append(out, name)
		}
	}
	return out
}

// UnknownTool is the diagnostic for a tool flow g does not have, with
// the closest name it has.
func UnknownTool(g *flow.Graph, name string) diag.Diagnostic {
	var names []string
	for _, te := range g.ToolEntries {
		for _, tool := range te.Tools {
			names = append(names, tool.Name)
		}
	}
	return diag.Diagnostic{Summary: fmt.Sprintf("tools: flow %s has no tool %q", g.Name, name), Suggestion: diag.Suggest(name, names)}
}

// ToolMock makes the mock that answers scripted tool calls (by tool
// name), each tool's calls in order; a call beyond a tool's script runs
// it. Each mock counts its own calls: make one per thread.
func ToolMock(tools map[string][]ToolCall) kind.ToolMock {
	var mu sync.Mutex
	next := map[string]int{}
	return func(_ context.Context, c *kind.Call) (any, bool, error) {
		mu.Lock()
		i := next[c.Tool]
		next[c.Tool]++
		mu.Unlock()
		calls := tools[c.Tool]
		if i >= len(calls) || calls[i].Run {
			return nil, false, nil
		}
		if calls[i].Error != "" {
			return nil, true, kind.ToolFailed(errors.New(calls[i].Error))
		}
		return calls[i].Result, true, nil
	}
}

// ToolCall is one scripted tool call: its Result, its Error (the call
// fails, and the model is told), or Run (the tool runs for real).
type ToolCall struct {
	Result    any
	HasResult bool
	Error     string
	Run       bool
}

// decodeTools reads a test's scripted tool calls.
func decodeTools(t *Test, tools config.Value, dl *diag.List) {
	t.Tools, t.toolPos = DecodeToolScripts(tools, dl)
}

// ToolScriptsField is the format of scripted tool calls: by tool name,
// one entry per call.
func ToolScriptsField(name, doc string) config.Field {
	call := config.Object("", "One scripted tool call: exactly one of result, error or run.",
		config.Any("result", "The call's result instead of the tool's: any value."),
		config.String("error", "The call fails with this message, which the model is told.").NonEmpty(1),
		config.Bool("run", "The tool runs for real."),
	).OnlyOneOf("result", "error", "run").NonEmpty(1)
	return config.Map(name, doc, config.Elem(config.List("", "", config.Elem(call))))
}

// DecodeToolScripts reads scripted tool calls that fit ToolScriptsField,
// with where each tool is named (nil maps when there are none).
func DecodeToolScripts(tools config.Value, dl *diag.List) (map[string][]ToolCall, map[string]diag.Pos) {
	var out map[string][]ToolCall
	pos := map[string]diag.Pos{}
	for _, e := range tools.Entries() {
		if out == nil {
			out = map[string][]ToolCall{}
		}
		pos[e.Name] = e.Key.Pos()
		for _, cn := range e.Value.Items() {
			c := ToolCall{Error: cn.Get("error").Text()}
			run, _ := cn.Get("run").JSON()
			c.Run, _ = run.(bool)
			if o := cn.Get("result"); o.Exists() {
				var raw any
				if err := o.Decode(&raw); err == nil {
					if c.Result, err = value.Normalize(raw); err != nil {
						dl.Errorf(diag.CodeType, o.Pos(), o.Path(), "%v", err)
					}
				}
				c.HasResult = true
			}
			out[e.Name] = append(out[e.Name], c)
		}
	}
	return out, pos
}

func listOrNone(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return "[" + strings.Join(l, ", ") + "]"
}
