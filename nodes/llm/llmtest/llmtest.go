// Package llmtest is an OpenAI-compatible chat-completions server for
// tests and demos. It speaks the real wire protocol over HTTP (plain and
// SSE-streamed replies, response_format json_schema), answers from a script
// of rules matched against the request's messages, and can inject the
// failures a real endpoint produces: 429 with Retry-After, 5xx, malformed
// JSON and slow replies. A reply may call tools (tool_calls: each a name
// and its arguments; several are parallel calls), plainly or streamed in
// pieces as OpenAI streams them. A request no rule answers gets a
// generated reply: for a structured request, the smallest value that
// satisfies its schema.
//
//	srv := llmtest.New(llmtest.Rule{Match: "recruiter", Replies: []llmtest.Reply{
//		{Status: 429, RetryAfter: "1"},
//		{Content: `{"agent_name": "recruiter", "score": 8, ...}`},
//	}})
//	ts := httptest.NewServer(srv)
package llmtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	openai "github.com/sashabaranov/go-openai"
)

// Reply is one scripted answer.
type Reply struct {
	// Content is the assistant message: text, or JSON for a structured
	// request (sent as it is, so malformed JSON is just bad Content).
	Content string `yaml:"content" json:"content,omitempty"`
	// Status, when not 0, answers with this HTTP error instead.
	Status int `yaml:"status" json:"status,omitempty"`
	// RetryAfter is the Retry-After header of an error reply.
	RetryAfter string `yaml:"retry_after" json:"retry_after,omitempty"`
	// Delay waits before answering.
	Delay time.Duration `yaml:"delay" json:"delay,omitempty"`
	// ToolCalls, when set, are the functions the reply calls (beside
	// Content, which may be empty).
	ToolCalls []ToolCall `yaml:"tool_calls" json:"tool_calls,omitempty"`
	// Cut, when set, ends a streamed reply's body after the first half of
	// its text, with no finish_reason and no [DONE], as a connection
	// closed mid-reply does (a reply not streamed is sent whole).
	Cut bool `yaml:"cut" json:"cut,omitempty"`
}

// ToolCall is a function call in a scripted reply.
type ToolCall struct {
	// ID is the call's id (default call_N, N its place in the server's
	// calls so far).
	ID   string `yaml:"id" json:"id,omitempty"`
	Name string `yaml:"name" json:"name"`
	// Arguments are sent as the call's JSON arguments: a value (a
	// mapping), or a string sent as it is (so malformed JSON is just a
	// bad string).
	Arguments any `yaml:"arguments" json:"arguments,omitempty"`
}

// Rule answers the requests whose messages contain Match (any request when
// empty), one reply per request; the last reply repeats.
type Rule struct {
	Match   string  `yaml:"match" json:"match,omitempty"`
	Replies []Reply `yaml:"replies" json:"replies"`
}

// Call is a request the server received.
type Call struct {
	Model      string
	Messages   []openai.ChatCompletionMessage
	Stream     bool
	Structured bool
	// Tools are the names of the functions the request offered, and
	// ToolChoice its tool_choice when it is a string (auto, none,
	// required).
	Tools      []string
	ToolChoice string
	// Authorized reports whether the request carried the server's key
	// (always true when the server has none).
	Authorized bool
	// Rule is the index of the rule that answered, or -1.
	Rule   int
	Status int
}

// Server is the model server; it is an http.Handler.
type Server struct {
	// Key, when set, is the bearer token every request must carry.
	Key string
	// Latency delays every answer, as a real model's would be; a reply's
	// own Delay comes on top.
	Latency time.Duration

	mu    sync.Mutex
	rules []Rule
	used  []int
	calls []Call
	ids   int
}

// New returns a server answering with rules, tried in order.
func New(rules ...Rule) *Server {
	return &Server{rules: rules, used: make([]int, len(rules))}
}

// Calls returns the requests received so far.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// ServeHTTP implements http.Handler: POST /chat/completions (with or
// without a /v1 prefix) and GET /models.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimPrefix(r.URL.Path, "/v1")
	switch {
	case path == "/models" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []any{map[string]any{"id": "trellis-test", "object": "model", "owned_by": "trellis"}}})
		return
	case path != "/chat/completions":
		apiError(w, http.StatusNotFound, "not_found", "no such endpoint: "+r.URL.Path)
		return
	case r.Method != http.MethodPost:
		apiError(w, http.StatusMethodNotAllowed, "invalid_request_error", "use POST")
		return
	}
	var req openai.ChatCompletionRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		apiError(w, http.StatusBadRequest, "invalid_request_error", "request body: "+err.Error())
		return
	}
	call := Call{Model: req.Model, Messages: req.Messages, Stream: req.Stream, Rule: -1,
		Structured: req.ResponseFormat != nil && req.ResponseFormat.Type == openai.ChatCompletionResponseFormatTypeJSONSchema,
		Authorized: s.Key == "" || r.Header.Get("Authorization") == "Bearer "+s.Key}
	call.ToolChoice, _ = req.ToolChoice.(string)
	for _, t := range req.Tools {
		if t.Function != nil {
			call.Tools = append(call.Tools, t.Function.Name)
		}
	}
	reply := s.pick(&call, &req)
	calls, err := s.toolCalls(reply)
	if err != nil {
		apiError(w, http.StatusInternalServerError, "server_error", err.Error())
		return
	}
	call.Status = reply.Status
	s.mu.Lock()
	s.calls = append(s.calls, call)
	s.mu.Unlock()
	if !call.Authorized {
		apiError(w, http.StatusUnauthorized, "invalid_api_key", "invalid API key")
		return
	}
	if d := reply.Delay + s.Latency; d > 0 {
		select {
		case <-time.After(d):
		case <-r.Context().Done():
			return
		}
	}
	if reply.Status != 0 {
		if reply.RetryAfter != "" {
			w.Header().Set("Retry-After", reply.RetryAfter)
		}
		code := "server_error"
		if reply.Status == http.StatusTooManyRequests {
			code = "rate_limit_exceeded"
		}
		apiError(w, reply.Status, code, fmt.Sprintf("scripted error %d", reply.Status))
		return
	}
	usage := openai.Usage{PromptTokens: tokens(req.Messages), CompletionTokens: len(strings.Fields(reply.Content))}
	usage.TotalTokens = usage.PromptTokens + usage.CompletionTokens
	if req.Stream {
		var u *openai.Usage
		if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
			u = &usage
		}
		stream(w, req.Model, reply.Content, calls, u, reply.Cut)
		return
	}
	finish := openai.FinishReasonStop
	if len(calls) > 0 {
		finish = openai.FinishReasonToolCalls
	}
	writeJSON(w, http.StatusOK, openai.ChatCompletionResponse{
		ID: "chatcmpl-test", Object: "chat.completion", Created: time.Now().Unix(), Model: req.Model,
		Choices: []openai.ChatCompletionChoice{{Index: 0, FinishReason: finish,
			Message: openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: reply.Content, ToolCalls: calls}}},
		Usage: usage,
	})
}

// toolCalls makes a reply's tool calls, numbering the ids not given.
func (s *Server) toolCalls(reply Reply) ([]openai.ToolCall, error) {
	var out []openai.ToolCall
	for _, tc := range reply.ToolCalls {
		args, ok := tc.Arguments.(string)
		if !ok {
			if tc.Arguments == nil {
				tc.Arguments = map[string]any{}
			}
			b, err := json.Marshal(jsonable(tc.Arguments))
			if err != nil {
				return nil, fmt.Errorf("tool call %s: arguments: %w", tc.Name, err)
			}
			args = string(b)
		}
		id := tc.ID
		if id == "" {
			s.mu.Lock()
			s.ids++
			id = fmt.Sprintf("call_%d", s.ids)
			s.mu.Unlock()
		}
		out = append(out, openai.ToolCall{ID: id, Type: openai.ToolTypeFunction, Function: openai.FunctionCall{Name: tc.Name, Arguments: args}})
	}
	return out, nil
}

// jsonable turns what YAML decodes (maps with any keys) into what JSON
// encodes.
func jsonable(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = jsonable(e)
		}
		return out
	case map[any]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[fmt.Sprint(k)] = jsonable(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = jsonable(e)
		}
		return out
	}
	return v
}

// pick finds the reply for a request.
func (s *Server) pick(call *Call, req *openai.ChatCompletionRequest) Reply {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, rule := range s.rules {
		if len(rule.Replies) == 0 || !matches(rule.Match, req.Messages) {
			continue
		}
		n := min(s.used[i], len(rule.Replies)-1)
		s.used[i]++
		call.Rule = i
		return rule.Replies[n]
	}
	return Reply{Content: generate(req)}
}

func matches(pattern string, msgs []openai.ChatCompletionMessage) bool {
	if pattern == "" {
		return true
	}
	for _, m := range msgs {
		if strings.Contains(m.Content, pattern) {
			return true
		}
	}
	return false
}

func tokens(msgs []openai.ChatCompletionMessage) int {
	n := 0
	for _, m := range msgs {
		n += len(strings.Fields(m.Content))
	}
	return n
}

// stream sends content as server-sent events, a word per chunk, then each
// tool call (its id and name, then its arguments in pieces), and, when the
// request asked for it (stream_options.include_usage), a last chunk with
// no choices and the usage, as OpenAI's API does.
func stream(w http.ResponseWriter, model, content string, calls []openai.ToolCall, usage *openai.Usage, cut bool) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	send := func(delta openai.ChatCompletionStreamChoiceDelta, finish openai.FinishReason) {
		chunk := openai.ChatCompletionStreamResponse{ID: "chatcmpl-test", Object: "chat.completion.chunk",
			Created: time.Now().Unix(), Model: model,
			Choices: []openai.ChatCompletionStreamChoice{{Index: 0, Delta: delta, FinishReason: finish}}}
		b, _ := json.Marshal(chunk)
		fmt.Fprintf(w, "data: %s\n\n", b)
		if flusher != nil {
			flusher.Flush()
		}
	}
	send(openai.ChatCompletionStreamChoiceDelta{Role: openai.ChatMessageRoleAssistant}, "")
	pieces := splitTokens(content)
	if cut {
		for _, piece := range pieces[:len(pieces)/2] {
			send(openai.ChatCompletionStreamChoiceDelta{Content: piece}, "")
		}
		return
	}
	for _, piece := range pieces {
		send(openai.ChatCompletionStreamChoiceDelta{Content: piece}, "")
	}
	for i, c := range calls {
		idx := i
		send(openai.ChatCompletionStreamChoiceDelta{ToolCalls: []openai.ToolCall{{Index: &idx, ID: c.ID, Type: c.Type,
			Function: openai.FunctionCall{Name: c.Function.Name}}}}, "")
		args := c.Function.Arguments
		for len(args) > 0 {
			n := min(len(args), 7)
			for n < len(args) && !utf8.RuneStart(args[n]) {
				n++ // pieces of whole characters
			}
			send(openai.ChatCompletionStreamChoiceDelta{ToolCalls: []openai.ToolCall{{Index: &idx, Function: openai.FunctionCall{Arguments: args[:n]}}}}, "")
			args = args[n:]
		}
	}
	finish := openai.FinishReasonStop
	if len(calls) > 0 {
		finish = openai.FinishReasonToolCalls
	}
	send(openai.ChatCompletionStreamChoiceDelta{}, finish)
	if usage != nil {
		b, _ := json.Marshal(openai.ChatCompletionStreamResponse{ID: "chatcmpl-test", Object: "chat.completion.chunk",
			Created: time.Now().Unix(), Model: model, Choices: []openai.ChatCompletionStreamChoice{}, Usage: usage})
		fmt.Fprintf(w, "data: %s\n\n", b)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	if flusher != nil {
		flusher.Flush()
	}
}

// splitTokens cuts s into word-sized pieces that concatenate back to s.
func splitTokens(s string) []string {
	var out []string
	start := 0
	for i := 1; i < len(s); i++ {
		if s[i] == ' ' && s[i-1] != ' ' {
			out = append(out, s[start:i])
			start = i
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func apiError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{"message": msg, "type": code, "code": code}})
}

// generate answers an unscripted request: for a structured one, the
// smallest value its schema allows; otherwise a short acknowledgement.
func generate(req *openai.ChatCompletionRequest) string {
	if req.ResponseFormat != nil && req.ResponseFormat.JSONSchema != nil && req.ResponseFormat.JSONSchema.Schema != nil {
		raw, err := req.ResponseFormat.JSONSchema.Schema.MarshalJSON()
		if err == nil {
			var sch any
			if json.Unmarshal(raw, &sch) == nil {
				b, _ := json.Marshal(sample(sch, sch, 0, "reply"))
				return string(b)
			}
		}
	}
	return "Thank you. Could you tell me more about that?"
}

// sample builds a value valid for common schemas: required properties,
// the first enum value or const, minimums, minItems.
func sample(s, root any, depth int, name string) any {
	m, ok := s.(map[string]any)
	if !ok || depth > 12 {
		return nil
	}
	if ref, ok := m["$ref"].(string); ok && strings.HasPrefix(ref, "#/") {
		target := root
		for _, part := range strings.Split(ref[2:], "/") {
			tm, _ := target.(map[string]any)
			target = tm[part]
		}
		return sample(target, root, depth+1, name)
	}
	if c, ok := m["const"]; ok {
		return c
	}
	if e, ok := m["enum"].([]any); ok && len(e) > 0 {
		return e[0]
	}
	for _, key := range []string{"anyOf", "oneOf", "allOf"} {
		if alts, ok := m[key].([]any); ok && len(alts) > 0 {
			return sample(alts[0], root, depth+1, name)
		}
	}
	t := m["type"]
	if ts, ok := t.([]any); ok && len(ts) > 0 {
		t = ts[0]
	}
	switch t {
	case "object":
		out := map[string]any{}
		props, _ := m["properties"].(map[string]any)
		req, _ := m["required"].([]any)
		for _, r := range req {
			name, _ := r.(string)
			out[name] = sample(props[name], root, depth+1, name)
		}
		return out
	case "array":
		n, _ := m["minItems"].(float64)
		out := make([]any, int(n))
		for i := range out {
			out[i] = sample(m["items"], root, depth+1, name)
		}
		return out
	case "string":
		n, _ := m["minLength"].(float64)
		text := "sample " + strings.ReplaceAll(name, "_", " ")
		for len(text) < int(n) {
			text += "."
		}
		return text
	case "integer", "number":
		if v, ok := m["minimum"].(float64); ok {
			return v
		}
		return 0
	case "boolean":
		return false
	}
	return nil
}
