// Package mcptest is an MCP server of sample tools, for tests and demos
// (`trellis dev mcp-server` serves it over stdio or streamable HTTP):
//
//   - add: {a, b} numbers, the sum
//   - echo: {text}, the text
//   - word_count: {text}, {words: N} as structured content
//   - delete_note: {title}, says it deleted the note (a tool a flow
//     would have a person approve)
//   - fail: {message}, a tool error (isError) with the message
//   - sleep: {seconds}, waits (honouring cancellation) and says so: a
//     server that does not answer in time
//
// Every call is reported to Config.OnCall. Handler serves them over
// streamable HTTP with a sample HTTP API (GET /weather) beside them.
package mcptest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Config says how the server behaves.
type Config struct {
	// OnCall, when set, is told of every call: the tool and its
	// arguments.
	OnCall func(tool string, args map[string]any)
	// Drift, when set, changes add's input schema (c joins a and b), as
	// a server that changed since a flow pinned its tools.
	Drift bool
}

// Tools are the sample tools' names.
var Tools = []string{"add", "echo", "word_count", "delete_note", "fail", "sleep"}

func object(props map[string]any, required ...string) map[string]any {
	r := make([]any, len(required))
	for i, x := range required {
		r[i] = x
	}
	return map[string]any{"type": "object", "properties": props, "required": r, "additionalProperties": false}
}

var (
	num = map[string]any{"type": "number"}
	str = map[string]any{"type": "string"}
)

// New returns the server.
func New(cfg Config) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "trellis-samples", Version: "1.0.0"}, nil)
	var mu sync.Mutex
	add := func(t *mcp.Tool, h func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error)) {
		s.AddTool(t, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var args map[string]any
			if len(req.Params.Arguments) > 0 {
				if err := json.Unmarshal(req.Params.Arguments, &args); err != nil {
					return nil, err
				}
			}
			if cfg.OnCall != nil {
				mu.Lock()
				cfg.OnCall(t.Name, args)
				mu.Unlock()
			}
			return h(ctx, args)
		})
	}
	text := func(s string) *mcp.CallToolResult {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
	}
	addSchema := object(map[string]any{"a": num, "b": num}, "a", "b")
	if cfg.Drift {
		addSchema = object(map[string]any{"a": num, "b": num, "c": num}, "a", "b", "c")
	}
	add(&mcp.Tool{Name: "add", Description: "Add two numbers.", InputSchema: addSchema},
		func(_ context.Context, a map[string]any) (*mcp.CallToolResult, error) {
			x, _ := a["a"].(float64)
			y, _ := a["b"].(float64)
			return text(fmt.Sprint(x + y)), nil
		})
	add(&mcp.Tool{Name: "echo", Description: "Say a text back.", InputSchema: object(map[string]any{"text": str}, "text")},
		func(_ context.Context, a map[string]any) (*mcp.CallToolResult, error) {
			s, _ := a["text"].(string)
			return text(s), nil
		})
	add(&mcp.Tool{Name: "word_count", Description: "Count the words of a text.", InputSchema: object(map[string]any{"text": str}, "text"),
		OutputSchema: object(map[string]any{"words": map[string]any{"type": "integer"}}, "words")},
		func(_ context.Context, a map[string]any) (*mcp.CallToolResult, error) {
			s, _ := a["text"].(string)
			n := len(strings.Fields(s))
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(`{"words":%d}`, n)}},
				StructuredContent: map[string]any{"words": n}}, nil
		})
	add(&mcp.Tool{Name: "delete_note", Description: "Delete a note by its title.", InputSchema: object(map[string]any{"title": str}, "title")},
		func(_ context.Context, a map[string]any) (*mcp.CallToolResult, error) {
			return text(fmt.Sprintf("deleted the note %q", a["title"])), nil
		})
	add(&mcp.Tool{Name: "fail", Description: "Fail with a message.", InputSchema: object(map[string]any{"message": str}, "message")},
		func(_ context.Context, a map[string]any) (*mcp.CallToolResult, error) {
			m, _ := a["message"].(string)
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: m}}}, nil
		})
	add(&mcp.Tool{Name: "sleep", Description: "Wait some seconds.", InputSchema: object(map[string]any{"seconds": num}, "seconds")},
		func(ctx context.Context, a map[string]any) (*mcp.CallToolResult, error) {
			d, _ := a["seconds"].(float64)
			t := time.NewTimer(time.Duration(d * float64(time.Second)))
			defer t.Stop()
			select {
			case <-t.C:
				return text(fmt.Sprintf("slept %gs", d)), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		})
	return s
}

// Handler serves the sample tools over streamable HTTP at /mcp, and a
// sample HTTP API beside them at /weather?city=NAME: {city, celsius, sky}
// as JSON (404 for a city it does not know), for http tools.
func Handler(cfg Config) http.Handler {
	srv := New(cfg)
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{Stateless: true}))
	mux.HandleFunc("GET /weather", func(w http.ResponseWriter, r *http.Request) {
		city := r.URL.Query().Get("city")
		if cfg.OnCall != nil {
			cfg.OnCall("weather", map[string]any{"city": city})
		}
		w.Header().Set("Content-Type", "application/json")
		wx, ok := weather[strings.ToLower(city)]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			json.NewEncoder(w).Encode(map[string]any{"error": "no weather known for " + city})
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"city": city, "celsius": wx.celsius, "sky": wx.sky})
	})
	return mux
}

var weather = map[string]struct {
	celsius int
	sky     string
}{
	"oslo": {12, "rain"}, "lisbon": {24, "clear"}, "reykjavik": {3, "snow"}, "cairo": {33, "clear"}, "tokyo": {18, "cloudy"},
}
