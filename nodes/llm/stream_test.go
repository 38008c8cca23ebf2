package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
)

// wire is what a model server answers a streamed request with: a status,
// and a body written in pieces of split bytes (0: at once), each flushed,
// so that lines reach the reader split across reads.
type wire struct {
	status int
	body   string
	split  int
}

// wireServer serves the wire it is given over loopback HTTP.
type wireServer struct {
	ts  *httptest.Server
	cur atomic.Pointer[wire]
}

func newWireServer(t testing.TB) *wireServer {
	ws := &wireServer{}
	ws.ts = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		c := ws.cur.Load()
		if c.status != 0 && c.status != http.StatusOK {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(c.status)
			_, _ = io.WriteString(w, c.body)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		f, _ := w.(http.Flusher)
		body := c.body
		for c.split > 0 && len(body) > c.split {
			_, _ = io.WriteString(w, body[:c.split])
			f.Flush()
			body = body[c.split:]
		}
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(ws.ts.Close)
	return ws
}

// readout is what a reader made of a stream: the reply, the text pieces
// streamed and the usages reported as they came, and the error.
type readout struct {
	reply  reply
	pieces []string
	usages []openai.Usage
	err    error
	// finished: a choice gave its finish_reason
	finished bool
}

func (ws *wireServer) request() openai.ChatCompletionRequest {
	return openai.ChatCompletionRequest{Model: "m", Stream: true, StreamOptions: &openai.StreamOptions{IncludeUsage: true},
		Messages: []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: "hi"}}}
}

// viaGoOpenAI reads the stream with go-openai's own stream reader, and
// puts the reply together as the node did before it had a decoder of
// its own.
func (ws *wireServer) viaGoOpenAI(ctx context.Context) (o readout) {
	cfg := openai.DefaultConfig("sk-test")
	cfg.BaseURL = ws.ts.URL + "/v1"
	stream, err := openai.NewClientWithConfig(cfg).CreateChatCompletionStream(ctx, ws.request())
	if err != nil {
		o.err = err
		return o
	}
	defer stream.Close()
	var b strings.Builder
	var calls []toolCall
	var args []*strings.Builder
	for {
		chunk, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			o.err = err
			return o
		}
		if chunk.Usage != nil {
			o.usages = append(o.usages, *chunk.Usage)
		}
		if len(chunk.Choices) == 0 {
			continue
		}
		if chunk.Choices[0].FinishReason != "" {
			o.finished = true
		}
		d := chunk.Choices[0].Delta
		if d.Content != "" {
			b.WriteString(d.Content)
			o.pieces = append(o.pieces, d.Content)
		}
		for _, tc := range d.ToolCalls {
			i := len(calls) - 1
			if tc.Index != nil {
				i = *tc.Index
			}
			if i < 0 || i > len(calls) || i > 127 {
				o.err = fmt.Errorf("the reply streams tool call %d after %d calls", i, len(calls))
				return o
			}
			if i == len(calls) {
				calls, args = append(calls, toolCall{}), append(args, &strings.Builder{})
			}
			if tc.ID != "" {
				calls[i].ID = tc.ID
			}
			if tc.Function.Name != "" {
				calls[i].Name += tc.Function.Name
			}
			args[i].WriteString(tc.Function.Arguments)
		}
	}
	o.reply = reply{Content: b.String()}
	for i := range calls {
		calls[i].Arguments = args[i].String()
	}
	o.reply.ToolCalls = calls
	return o
}

// viaNode reads the stream as a node does: go-openai sends the request
// and reads an error response, the node's decoder reads the body.
func (ws *wireServer) viaNode(ctx context.Context) (o readout) {
	c := newClient(&Provider{BaseURL: ws.ts.URL + "/v1", APIKey: "sk-test"})
	t := &try{c: c.p.HTTP}
	stream, err := t.client(c.cfg).CreateChatCompletionStream(ctx, ws.request())
	if err != nil {
		o.err = err
		return o
	}
	defer stream.Close()
	cs := newChunkStream(t.resp.Body)
	defer cs.release()
	o.reply, o.err = readReply(cs, func(s string) { o.pieces = append(o.pieces, s) },
		func(u openai.Usage) { o.usages = append(o.usages, u) })
	return o
}

// compare fails t when the node's reading of w differs from go-openai's:
// the same reply, pieces and usages, or the same kind of error (an API
// error with the same status, message, type and code; a request error
// with the same status; too many lines that are not data; any other).
// A chunk go-openai fails only for the type of a member the node does
// not read is read by the node, as chunks.go says. Where go-openai takes
// a body that ended before [DONE] and before any finish_reason for a
// whole reply, the node finds it cut short (errTruncated).
func compare(t *testing.T, ws *wireServer, w wire) {
	t.Helper()
	ws.cur.Store(&w)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	want, got := ws.viaGoOpenAI(ctx), ws.viaNode(ctx)
	var typeErr *json.UnmarshalTypeError
	if errors.As(want.err, &typeErr) {
		return
	}
	if want.err == nil && w.status == 0 && !want.finished && !closes(w.body) {
		want.reply, want.err = reply{}, errTruncated
	}
	if !reflect.DeepEqual(got.pieces, want.pieces) {
		t.Fatalf("%q: pieces %q, go-openai %q", w.body, got.pieces, want.pieces)
	}
	if !reflect.DeepEqual(got.usages, want.usages) {
		t.Fatalf("%q: usages %+v, go-openai %+v", w.body, got.usages, want.usages)
	}
	if want.err == nil {
		if got.err != nil {
			t.Fatalf("%q: %v, go-openai read %+v", w.body, got.err, want.reply)
		}
		if !reflect.DeepEqual(got.reply, want.reply) {
			t.Fatalf("%q: reply %+v, go-openai %+v", w.body, got.reply, want.reply)
		}
		return
	}
	if got.err == nil {
		t.Fatalf("%q: read %+v, go-openai fails: %v", w.body, got.reply, want.err)
	}
	var wantAPI, gotAPI *openai.APIError
	var wantReq, gotReq *openai.RequestError
	switch {
	case errors.As(want.err, &wantAPI):
		if !errors.As(got.err, &gotAPI) || gotAPI.HTTPStatusCode != wantAPI.HTTPStatusCode || gotAPI.Message != wantAPI.Message ||
			gotAPI.Type != wantAPI.Type || !reflect.DeepEqual(gotAPI.Code, wantAPI.Code) || got.err.Error() != want.err.Error() {
			t.Fatalf("%q: %v, go-openai %v", w.body, got.err, want.err)
		}
	case errors.As(want.err, &wantReq):
		if !errors.As(got.err, &gotReq) || gotReq.HTTPStatusCode != wantReq.HTTPStatusCode {
			t.Fatalf("%q: %v, go-openai %v", w.body, got.err, want.err)
		}
	case errors.Is(want.err, errTruncated):
		if !errors.Is(got.err, errTruncated) {
			t.Fatalf("%q: %v, want the reply found cut short", w.body, got.err)
		}
	case errors.Is(want.err, openai.ErrTooManyEmptyStreamMessages):
		if !errors.Is(got.err, openai.ErrTooManyEmptyStreamMessages) {
			t.Fatalf("%q: %v, go-openai %v", w.body, got.err, want.err)
		}
	default:
		if errors.As(got.err, &gotAPI) || errors.As(got.err, &gotReq) || errors.Is(got.err, openai.ErrTooManyEmptyStreamMessages) {
			t.Fatalf("%q: %v, go-openai %v", w.body, got.err, want.err)
		}
	}
}

// closes reports whether body says the stream is done: a whole line
// (one a newline ends) whose data is [DONE].
func closes(body string) bool {
	lines := strings.Split(body, "\n")
	for _, line := range lines[:len(lines)-1] {
		d, ok := strings.CutPrefix(strings.TrimSpace(line), "data:")
		if ok && strings.TrimLeft(d, " \t\r\n\f") == "[DONE]" {
			return true
		}
	}
	return false
}

// data is a data line of a chunk.
func data(c string) string { return "data: " + c + "\n\n" }

func content(s string) string {
	b, _ := json.Marshal(s)
	return data(`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":` + string(b) + `},"finish_reason":null}]}`)
}

const (
	role    = `{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`
	usage   = `{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12}}`
	done    = "data: [DONE]\n\n"
	apiErr  = `{"error":{"message":"overloaded","type":"server_error","param":null,"code":"busy"}}`
	callA   = `{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"look","arguments":""}}]}}]}`
	callA2  = `{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"q\":"}}]}}]}`
	callB   = `{"choices":[{"delta":{"tool_calls":[{"index":1,"id":"call_b","function":{"name":"up","arguments":"{}"}}]}}]}`
	callA3  = `{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"x\"}"}}]}}]}`
	noIndex = `{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"more"}}]}}]}`
	finish  = `{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`
)

// wires are streams as servers send them, and as they break.
var wires = []wire{
	{body: data(role) + content("Hello") + content(", world") + data(finish) + data(usage) + done},
	{body: strings.ReplaceAll(data(role)+content("crlf")+data(usage)+done, "\n", "\r\n")},
	{body: ": comment\n\nevent: message\nid: 7\nretry: 100\n" + content("a") + ":keep-alive\n\n" + content("b") + done},
	{body: "data:" + role + "\n\ndata:   " + usage + "   \n\n" + "data:[DONE]   \n"},
	{body: data(role) + content("split across reads, é 日本 😀") + content("two") + data(usage) + done, split: 1},
	{body: data(role) + content("split") + data(usage) + done, split: 7},
	{body: content(strings.Repeat("long line ", 20000)) + done, split: 4096},
	{body: content("no done") + data(usage)},
	{body: content("last line has no newline") + "data: " + usage},
	{body: content("before") + done + content("after") + data(usage)},
	{body: content("a") + data(apiErr) + content("b") + done},
	{body: content("a") + data(apiErr)},
	{body: content("a") + "data: " + apiErr},
	{body: ": comment\n" + content("a") + data(apiErr) + content("b") + done},
	{body: ": comment\n" + content("a") + data(apiErr)},
	{body: `{"error":{"message":"no such model","type":"invalid_request_error","code":null}}` + "\n"},
	{body: "event: error\n" + `data: {"error": {"message": "quota", "type": "insufficient_quota", "code": 429}}` + "\n\n"},
	{body: content("a") + data(`{"choices":[{"delta":{"content":"x"}}]`) + done},
	{body: content("a") + data(`{"choices":[{"delta":{"content":5}}]}`) + done},
	{body: content("a") + "data:\n\n" + done},
	{body: content("a") + "data: null\n\n" + content("b") + done},
	{body: content("a") + `data: "text"` + "\n\n" + done},
	{body: content("a") + data(`{"created":"soon","choices":[{"delta":{"content":"b"}}]}`) + done},
	{body: strings.Repeat(": keep-alive\n", maxEmptyLines+1) + content("late") + done},
	{body: strings.Repeat(": keep-alive\n", maxEmptyLines) + content("in time") + done},
	{body: data(role) + data(callA) + data(callA2) + data(callB) + data(callA3) + data(finish) + data(usage) + done},
	{body: data(callA) + data(noIndex) + done},
	{body: data(noIndex) + done},
	{body: data(callA) + data(`{"choices":[{"delta":{"tool_calls":[{"index":2}]}}]}`) + done},
	{body: data(`{"choices":[{"delta":{"tool_calls":[{"index":-1}]}}]}`) + done},
	{body: content(`esc "q" \ / `+"\t\n\u2028") + data(`{"choices":[{"delta":{"content":"\ud83d\ude00 \ud83d lone \u00e9"}}]}`) + done},
	{body: data("{\"choices\":[{\"delta\":{\"content\":\"bad \xff utf8\"}}]}") + done},
	{body: data(`{"choices":[],"usage":null}`) + data(`{"choices":null}`) + data(`{"choices":[{"delta":null}]}`) + done},
	{body: data(`{"CHOICES":[{"Delta":{"Content":"folded"}}],"Usage":{"Prompt_Tokens":1}}`) + done},
	{body: data(`{"choices":[{"delta":{"content":"first"}},{"delta":{"content":"second"}}]}`) + done},
	{body: "data\n\n" + content("a") + done},
	{body: ""},
	{body: done},
	{body: content("cut") + data(finish)},
	{body: content("cut") + data(finish) + data(usage)},
	{body: content("cut") + data(usage)},
	{body: content("cut") + "data: [DONE]"},
	{status: http.StatusTooManyRequests, body: `{"error":{"message":"slow down","type":"rate_limit","code":"rate_limit_exceeded"}}`},
	{status: http.StatusInternalServerError, body: "upstream broke"},
	{status: http.StatusBadRequest, body: `{"error":{"message":["a","b"],"type":"invalid_request_error","code":400}}`},
}

// TestStreamsReadAsGoOpenAIReadsThem: over real HTTP, the node's reading
// of each wire stream, well formed or broken, gives what go-openai's
// stream reader gives: the same reply, pieces and usages, or the same
// kind of error.
func TestStreamsReadAsGoOpenAIReadsThem(t *testing.T) {
	ws := newWireServer(t)
	defer CloseIdleConnections()
	for _, w := range wires {
		compare(t, ws, w)
	}
}

// FuzzStream: whatever bytes a server streams, split however, the node
// reads them as go-openai does. Each input makes two HTTP requests, so
// minimizing a new input for the default minute looks like a stall:
//
//	go test -run XXX -fuzz FuzzStream -fuzzminimizetime 100x ./nodes/llm
func FuzzStream(f *testing.F) {
	for _, w := range wires {
		if w.status == 0 && len(w.body) < 1<<16 {
			f.Add(w.body, uint16(w.split))
		}
	}
	ws := newWireServer(f)
	f.Cleanup(CloseIdleConnections)
	f.Fuzz(func(t *testing.T, body string, split uint16) {
		compare(t, ws, wire{body: body, split: int(split)})
	})
}
