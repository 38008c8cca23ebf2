// Package mcpserver serves a Trellis server's flows as Model Context
// Protocol tools, over streamable HTTP with the official Go SDK's server:
// `trellis serve` mounts it at /mcp (server.Config.MCP).
//
// Each flow is a tool named as the flow, described by the flow's
// description, whose input schema is the flow's input (each input field
// with its schema from the state), plus _thread: the id of a thread of the
// caller's to run on (a conversation goes on), instead of a new one, and
// _answers: the answers to the questions a run paused on _thread asks, by
// node (a tool call's approval among them), which resume that run. A
// call runs the flow once, reports progress from the run's events (each
// node and tool call that ends) to a client that asked for it, and
// returns the run's output (the flow's output block rendered over the
// final state; the final state as JSON when it declares none), with the
// thread, the run and the state as structured content. A run that pauses
// for a question returns the question (answered by a call with _thread and
// _answers, or through the API); a run that fails is a tool error.
//
// Every call goes through the API's own handler with the caller's
// bearer key, in the process: the key, its tenant's threads and every
// rule of the API apply as they do to its routes, and nothing here keeps
// state between requests (a stateless server: any replica answers any
// request). This package is the one place the API meets the MCP SDK.
package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/engine"
)

// The arguments of a flow's tool that are not the flow's input.
const (
	// ThreadArg names the thread a call runs on.
	ThreadArg = "_thread"
	// AnswersArg answers the questions of a run paused on the thread,
	// by node, and resumes it.
	AnswersArg = "_answers"
)

// New returns the MCP handler over the API's handler h. Requests reach it
// authenticated (the server checks the key first); it forwards the key.
func New(h http.Handler) http.Handler {
	m := &handler{api: h, tools: map[string]cachedTool{}}
	return mcp.NewStreamableHTTPHandler(m.server, &mcp.StreamableHTTPOptions{Stateless: true})
}

type handler struct {
	api http.Handler
	// tools caches each flow's tool by flow name and version
	mu    sync.Mutex
	tools map[string]cachedTool
}

type cachedTool struct {
	version string
	tool    *mcp.Tool
}

// client is the API as the request's caller reaches it.
func (m *handler) client(r *http.Request) *api.Client {
	key, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return &api.Client{BaseURL: "http://trellis.internal", Key: key, HTTP: &http.Client{Transport: inproc{h: m.api, remote: r.RemoteAddr}}}
}

// server makes the MCP server of one request: the flows as tools.
func (m *handler) server(r *http.Request) *mcp.Server {
	c := m.client(r)
	s := mcp.NewServer(&mcp.Implementation{Name: "trellis", Title: "Trellis flows"}, nil)
	flows, err := c.Flows(r.Context())
	if err != nil {
		return s // the call that lists tools finds none; the API said why
	}
	for _, f := range flows {
		t, err := m.tool(r.Context(), c, f)
		if err != nil {
			continue
		}
		s.AddTool(t, m.call(c, f.Name))
	}
	return s
}

// tool is a flow as a tool: its input's schema, and _thread.
func (m *handler) tool(ctx context.Context, c *api.Client, f api.Flow) (*mcp.Tool, error) {
	m.mu.Lock()
	ct, ok := m.tools[f.Name]
	m.mu.Unlock()
	if ok && ct.version == f.Version {
		return ct.tool, nil
	}
	full, err := c.Flow(ctx, f.Name)
	if err != nil {
		return nil, err
	}
	schema := map[string]any{"type": "object", "properties": map[string]any{}}
	if len(full.InputSchema) > 0 {
		if err := json.Unmarshal(full.InputSchema, &schema); err != nil {
			return nil, err
		}
	}
	schema["type"] = "object"
	props, _ := schema["properties"].(map[string]any)
	if props == nil {
		props = map[string]any{}
		schema["properties"] = props
	}
	props[ThreadArg] = map[string]any{"type": "string", "description": "Run on this thread of yours (a conversation goes on); none: a new thread."}
	props[AnswersArg] = map[string]any{"type": "object", "description": "With " + ThreadArg + ": answer the questions its paused run asks, by node, and resume it " +
		"(a tool call waiting for approval takes approve, reject, {decision: reject, reason: TEXT} or {decision: edit, arguments: {...}}). " +
		"The other arguments are then left out."}
	delete(schema, "additionalProperties")
	desc := full.Description
	if desc == "" {
		desc = "Run the flow " + f.Name + "."
	}
	if len(full.Inputs) > 0 {
		desc += " Input: " + strings.Join(full.Inputs, ", ") + "."
	}
	t := &mcp.Tool{Name: f.Name, Description: desc, InputSchema: schema,
		Annotations: &mcp.ToolAnnotations{Title: f.Name, OpenWorldHint: ptr(true)}}
	m.mu.Lock()
	m.tools[f.Name] = cachedTool{version: f.Version, tool: t}
	m.mu.Unlock()
	return t, nil
}

func ptr[T any](v T) *T { return &v }

// call runs the flow: on the thread _thread names, or a new one.
func (m *handler) call(c *api.Client, flow string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args map[string]any
		if len(req.Params.Arguments) > 0 {
			if err := json.Unmarshal(req.Params.Arguments, &args); err != nil {
				return failed("the arguments are not a JSON object: " + err.Error()), nil
			}
		}
		thread, _ := args[ThreadArg].(string)
		answers, resume := args[AnswersArg]
		delete(args, ThreadArg)
		delete(args, AnswersArg)
		start := api.StartRun{Input: args}
		if resume {
			a, ok := answers.(map[string]any)
			switch {
			case !ok:
				return failed(AnswersArg + " is an object of answers by node, not " + kindOf(answers)), nil
			case thread == "":
				return failed(AnswersArg + " answers the paused run of a thread: give " + ThreadArg + " too"), nil
			case len(args) > 0:
				return failed("a call with " + AnswersArg + " resumes a paused run, which takes no input: leave out " + strings.Join(slices.Sorted(maps.Keys(args)), ", ")), nil
			}
			start = api.StartRun{Resume: true, Answers: a}
		}
		if thread == "" {
			th, err := c.CreateThread(ctx, api.CreateThread{Flow: flow})
			if err != nil {
				return failed(apiMessage(err)), nil
			}
			thread = th.ID
		} else if th, err := c.Thread(ctx, thread); err != nil {
			return failed(apiMessage(err)), nil
		} else if th.Flow != flow {
			return failed(fmt.Sprintf("thread %q runs flow %s, not %s", thread, th.Flow, flow)), nil
		}
		progress := progressOf(ctx, req)
		var run string
		var last *engine.Event
		for ev, err := range c.StreamRun(ctx, thread, start) {
			if err != nil {
				return failed(apiMessage(err)), nil
			}
			run = ev.Run
			switch ev.Event.Type {
			case engine.RunEnd, engine.RunError, api.RunRequeued:
				e := ev.Event
				last = &e
			default:
				progress(ev.Event)
			}
		}
		if last == nil {
			return failed("the run's events ended before the run"), nil
		}
		out := map[string]any{"thread": thread, "run": run}
		switch last.Type {
		case engine.RunError:
			out["status"] = api.RunFailed
			res := failed("the run failed: " + last.Error)
			res.StructuredContent = out
			return res, nil
		case api.RunRequeued:
			out["status"] = api.RunQueued
			res := failed("the server stopped before the run ended; it resumes on another server: read run " + run + " of thread " + thread + " through the API")
			res.StructuredContent = out
			return res, nil
		}
		out["state"] = last.State
		if in := last.Interrupt; in != nil {
			out["status"] = "paused"
			out["interrupt"] = in
			b, _ := json.Marshal(in)
			text := fmt.Sprintf("The run paused on thread %s, waiting for answers: %s. Answer them by calling %s again with %s: %q and %s: {NODE: ANSWER}, or through the API (a run with resume and answers).",
				thread, b, flow, ThreadArg, thread, AnswersArg)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, StructuredContent: out}, nil
		}
		out["status"] = api.RunSucceeded
		text := ""
		if r, err := c.Run(ctx, thread, run); err == nil && r.Output != "" {
			text = r.Output
			out["output"] = r.Output
		} else {
			b, _ := json.Marshal(last.State)
			text = string(b)
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, StructuredContent: out}, nil
	}
}

// progressOf reports a run's events as progress to a client that asked
// for it (a progress token): each node and tool call that ends.
func progressOf(ctx context.Context, req *mcp.CallToolRequest) func(engine.Event) {
	token := req.Params.GetProgressToken()
	if token == nil || req.Session == nil {
		return func(engine.Event) {}
	}
	n := 0.0
	return func(ev engine.Event) {
		var msg string
		switch ev.Type {
		case engine.NodeEnd:
			msg = "node " + ev.Node + " done"
		case engine.NodeFailed:
			msg = "node " + ev.Node + " failed"
		case engine.ToolEnd:
			if ev.Tool != nil {
				msg = "tool " + ev.Tool.Name + " done"
			}
		}
		if msg == "" {
			return
		}
		if ev.NS != "" {
			msg += " (in " + ev.NS + ")"
		}
		n++
		_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: n, Message: msg})
	}
}

// kindOf names a JSON value's type.
func kindOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case float64:
		return "a number"
	case []any:
		return "an array"
	}
	return "an object"
}

func failed(msg string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}}
}

// apiMessage is what the API said, with its code.
func apiMessage(err error) string {
	var ae *api.Error
	if errors.As(err, &ae) {
		msg := string(ae.Code) + ": " + ae.Message
		if ae.Details != nil {
			if b, err := json.Marshal(ae.Details); err == nil {
				msg += " " + string(b)
			}
		}
		return msg
	}
	return err.Error()
}
