package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"
)

// chunkSamples are chat.completion.chunk objects as servers send them,
// and some they might.
var chunkSamples = []string{
	`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":null}]}`,
	`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"Hello"},"finish_reason":null}]}`,
	`{"choices":[{"delta":{"content":"a \"quoted\"\n\ttab \\ slash \/ \u00e9 \ud83d\ude00 é 日本"}}]}`,
	`{"choices":[{"delta":{"content":"lone \ud83d and \ude00 low, \ud83dx"}}]}`,
	"{\"choices\":[{\"delta\":{\"content\":\"bad utf8 \xff\xfe end\"}}]}",
	`{"choices":[{"delta":{"content":null,"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"lookup","arguments":""}}]}}]}`,
	`{"choices":[{"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{\"q\": \"x\"}"}},{"index":0,"function":{"arguments":"{}"}}]}}]}`,
	`{"choices":[{"delta":{"tool_calls":[{"id":"no_index","function":{"name":"f"}}]}}]}`,
	`{"choices":[{"delta":{"tool_calls":[{"index":null,"function":null}]}}]}`,
	`{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":34,"total_tokens":46,"prompt_tokens_details":{"cached_tokens":0}}}`,
	`{"choices":[{"delta":{"content":"x"}}],"usage":null}`,
	`{"choices":null}`,
	`{"choices":[{"delta":null}]}`,
	`{"choices":[{"delta":{"content":"first"}},{"delta":{"content":"second"}}]}`,
	`{ "choices" : [ { "delta" : { "content" : "spaced" , "refusal" : null } , "logprobs" : {"content":[{"token":"a","logprob":-0.5,"bytes":[97],"top_logprobs":[]}]} } ] , "system_fingerprint" : "fp" , "x" : [1, -2.5e3, true, false, null, {"y": []}] }`,
	`{"choices":[{"delta":{"content":""}}]}`,
}

// expected is what go-openai's decoding of a chunk gives the node.
func expected(t testing.TB, data string) (content string, calls []callDelta, usage *openai.Usage, choice bool) {
	var resp openai.ChatCompletionStreamResponse
	if err := json.Unmarshal([]byte(data), &resp); err != nil {
		t.Fatalf("encoding/json reads %s: %v", data, err)
	}
	if len(resp.Choices) > 0 {
		choice = true
		d := resp.Choices[0].Delta
		content = d.Content
		for _, tc := range d.ToolCalls {
			cd := callDelta{ID: []byte(tc.ID), Name: []byte(tc.Function.Name), Arguments: []byte(tc.Function.Arguments)}
			if tc.Index != nil {
				cd.Index, cd.HasIndex = *tc.Index, true
			}
			calls = append(calls, cd)
		}
	}
	return content, calls, resp.Usage, choice
}

func same(t testing.TB, data string, c *chunk) {
	t.Helper()
	content, calls, usage, choice := expected(t, data)
	if c.choice != choice || string(c.Content) != content {
		t.Fatalf("%s: read choice %v %q, go-openai %v %q", data, c.choice, c.Content, choice, content)
	}
	if len(c.Calls) != len(calls) {
		t.Fatalf("%s: read %d calls, go-openai %d", data, len(c.Calls), len(calls))
	}
	for i, want := range calls {
		got := c.Calls[i]
		if got.Index != want.Index || got.HasIndex != want.HasIndex || string(got.ID) != string(want.ID) ||
			string(got.Name) != string(want.Name) || string(got.Arguments) != string(want.Arguments) {
			t.Fatalf("%s: call %d read %+v, go-openai %+v", data, i, got, want)
		}
	}
	if (usage != nil) != c.HasUsage || (usage != nil && (usage.PromptTokens != c.Usage.PromptTokens ||
		usage.CompletionTokens != c.Usage.CompletionTokens || usage.TotalTokens != c.Usage.TotalTokens)) {
		t.Fatalf("%s: usage read %v %+v, go-openai %+v", data, c.HasUsage, c.Usage, usage)
	}
}

// TestChunksReadAsGoOpenAIReadsThem: every member the node uses comes out
// of the decoder as go-openai's own decoding gives it, escapes, invalid
// UTF-8, nulls and members it skips included.
func TestChunksReadAsGoOpenAIReadsThem(t *testing.T) {
	var body strings.Builder
	for _, c := range chunkSamples {
		body.WriteString("data: " + c + "\n\n")
	}
	body.WriteString("data: [DONE]\n\n")
	cs := newChunkStream(strings.NewReader(body.String()))
	defer cs.release()
	for _, want := range chunkSamples {
		c, err := cs.next()
		if err != nil {
			t.Fatalf("%s: %v", want, err)
		}
		same(t, want, c)
	}
	if _, err := cs.next(); !errors.Is(err, io.EOF) {
		t.Fatalf("after [DONE]: %v, want io.EOF", err)
	}
}

// TestBadChunksAreErrors: what encoding/json refuses, the decoder refuses.
func TestBadChunksAreErrors(t *testing.T) {
	for _, bad := range []string{
		`{"choices":[{"delta":{"content":"x"}}]`,
		`{"choices":[{"delta":{"content":"x}}]}`,
		`{"choices":[{"delta":{"content":"a` + "\x01" + `b"}}]}`,
		`{"choices":[{"delta":{"content":"\q"}}]}`,
		`{"choices":[{"delta":{"content":"\u12"}}]}`,
		`{"choices":[{"delta":{"tool_calls":[{"index":1.5}]}}]}`,
		`{"choices":[{"delta":{"tool_calls":[{"index":"1"}]}}]}`,
		`{"choices":[{"delta":{}}],}`,
		`{"choices":[{"delta":{}}]} x`,
		`{"x": tru}`,
		`{"x": 01}`,
		`[]`,
	} {
		var resp openai.ChatCompletionStreamResponse
		if json.Unmarshal([]byte(bad), &resp) == nil {
			t.Fatalf("encoding/json reads %s", bad)
		}
		cs := newChunkStream(strings.NewReader("data: " + bad + "\n"))
		if c, err := cs.next(); err == nil {
			t.Fatalf("%s read as %+v", bad, c)
		}
		cs.release()
	}
}

// TestStreamEndsAsGoOpenAIs: [DONE] ends the stream and what follows it
// is not read; an error object mid-stream is the stream's error, with
// the server's message; the body's end without [DONE] is the end; a body
// that is a plain error is that error; a line longer than the read
// buffer reads whole; too many lines that are not data is an error.
func TestStreamEndsAsGoOpenAIs(t *testing.T) {
	read := func(body string) ([]string, error) {
		cs := newChunkStream(strings.NewReader(body))
		defer cs.release()
		var got []string
		for {
			c, err := cs.next()
			if errors.Is(err, io.EOF) {
				return got, nil
			}
			if err != nil {
				return got, err
			}
			got = append(got, string(c.Content))
		}
	}
	got, err := read(": comment\nevent: message\ndata: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\r\n\r\ndata:{\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\ndata: [DONE]\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"after\"}}]}\n")
	if err != nil || strings.Join(got, "|") != "a|b" {
		t.Fatalf("read %q, %v", got, err)
	}
	got, err = read("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"error\": {\"message\": \"overloaded\", \"type\": \"server_error\", \"code\": \"busy\"}}\n\n")
	var api *openai.APIError
	if !errors.As(err, &api) || api.Message != "overloaded" || strings.Join(got, "|") != "a" {
		t.Fatalf("mid-stream error: read %q, %v", got, err)
	}
	got, err = read("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n")
	if err != nil || strings.Join(got, "|") != "a" {
		t.Fatalf("no [DONE]: read %q, %v", got, err)
	}
	_, err = read(`{"error": {"message": "no such model", "type": "invalid_request_error"}}` + "\n")
	if !errors.As(err, &api) || api.Message != "no such model" {
		t.Fatalf("plain error body: %v", err)
	}
	long := strings.Repeat("word ", 10000)
	got, err = read(`data: {"choices":[{"delta":{"content":"` + long + `"}}]}` + "\n\ndata: [DONE]\n")
	if err != nil || len(got) != 1 || got[0] != long {
		t.Fatalf("a long line: %d pieces, %v", len(got), err)
	}
	_, err = read(strings.Repeat(": keep-alive\n", maxEmptyLines+1) + "data: [DONE]\n")
	if !errors.Is(err, openai.ErrTooManyEmptyStreamMessages) {
		t.Fatalf("too many empty lines: %v", err)
	}
}

// TestStreamedTokensAllocateNothing: once warm, reading a chunk costs no
// allocation, tool-call pieces and escapes included.
func TestStreamedTokensAllocateNothing(t *testing.T) {
	line := []byte("data: " + chunkSamples[1] + "\n\n" + "data: " + chunkSamples[6] + "\n\n" + "data: " + chunkSamples[2] + "\n\n")
	r := bytes.NewReader(line)
	cs := newChunkStream(r)
	defer cs.release()
	readAll := func() {
		r.Reset(line)
		cs.r.Reset(r)
		cs.done = false
		for range 3 {
			if _, err := cs.next(); err != nil {
				t.Fatal(err)
			}
		}
	}
	readAll()
	if n := testing.AllocsPerRun(100, readAll); n != 0 {
		t.Fatalf("%v allocations per three chunks", n)
	}
}

// FuzzChunk: whatever encoding/json reads as a chunk, the decoder reads
// the same.
func FuzzChunk(f *testing.F) {
	for _, c := range chunkSamples {
		f.Add(c)
	}
	f.Fuzz(func(t *testing.T, data string) {
		if strings.ContainsAny(data, "\n\r") {
			return
		}
		var resp openai.ChatCompletionStreamResponse
		if json.Unmarshal([]byte(data), &resp) != nil {
			return
		}
		cs := newChunkStream(strings.NewReader("data: " + data + "\n"))
		defer cs.release()
		c, err := cs.next()
		if trimmed := strings.TrimSpace(data); trimmed == "[DONE]" || strings.HasPrefix(trimmed, `{"error":`) {
			return
		}
		if err != nil {
			t.Fatalf("%s: %v", data, err)
		}
		same(t, data, c)
	})
}

// streamBody is a reply as the test model server streams it: a word a
// chunk, then the usage.
func streamBody(words int) string {
	var b strings.Builder
	b.WriteString(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":null}]}` + "\n\n")
	for i := range words {
		fmt.Fprintf(&b, `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"word%d "},"finish_reason":null}]}`+"\n\n", i)
	}
	b.WriteString(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":100,"completion_tokens":50,"total_tokens":150}}` + "\n\ndata: [DONE]\n\n")
	return b.String()
}

// BenchmarkStreamedReply reads a 60-chunk reply from a server on
// loopback with go-openai's stream and with the node's decoder (its
// readReply), each after go-openai sent the request.
func BenchmarkStreamedReply(b *testing.B) {
	body := streamBody(60)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, body)
	}))
	defer ts.Close()
	c := newClient(&Provider{BaseURL: ts.URL + "/v1", APIKey: "sk-bench"})
	req := openai.ChatCompletionRequest{Model: "m", Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "hi"}}}
	ctx := context.Background()
	b.Run("go-openai", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			err := c.call(ctx, func(ctx context.Context, oa *openai.Client, _ *try) error {
				stream, err := oa.CreateChatCompletionStream(ctx, req)
				if err != nil {
					return err
				}
				defer stream.Close()
				var text strings.Builder
				for {
					chunk, err := stream.Recv()
					if errors.Is(err, io.EOF) {
						break
					}
					if err != nil {
						return err
					}
					if len(chunk.Choices) > 0 {
						text.WriteString(chunk.Choices[0].Delta.Content)
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decoder", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			err := c.call(ctx, func(ctx context.Context, oa *openai.Client, t *try) error {
				stream, err := oa.CreateChatCompletionStream(ctx, req)
				if err != nil {
					return err
				}
				defer stream.Close()
				cs := newChunkStream(t.resp.Body)
				defer cs.release()
				_, err = readReply(cs, func(string) {}, func(openai.Usage) {})
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}
