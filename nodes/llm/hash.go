package llm

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sync"

	openai "github.com/sashabaranov/go-openai"
	"github.com/trellisflow/trellis/runtime/value"
)

// hashRequest hashes what a node sends: its messages, reply format and
// the tools it offers (a request without tools hashes as it always did).
// The hash is of the request's JSON as encoding/json writes it; a
// request of plain messages (a role and text each) and no tools, as a
// node without tools sends, is written here into a reused buffer, byte
// for byte as encoding/json would (hash_test.go checks it), rather than
// encoded twice (go-openai checks and copies what a message's
// MarshalJSON gives).
func hashRequest(req openai.ChatCompletionRequest) string {
	bp := hashBuffers.Get().(*[]byte)
	b, ok := appendPlainRequest((*bp)[:0], req)
	if !ok {
		b, _ = json.Marshal(struct {
			Messages []openai.ChatCompletionMessage
			Format   *openai.ChatCompletionResponseFormat
			Tools    []openai.Tool `json:",omitempty"`
			Choice   any           `json:",omitempty"`
		}{req.Messages, req.ResponseFormat, req.Tools, req.ToolChoice})
	}
	sum := sha256.Sum256(b)
	if ok && cap(b) <= 1<<20 {
		*bp = b
	}
	hashBuffers.Put(bp)
	return hex.EncodeToString(sum[:8])
}

var hashBuffers = sync.Pool{New: func() any { return new([]byte) }}

// appendPlainRequest appends the JSON hashRequest hashes when req has
// plain messages and no tools; ok is false otherwise.
func appendPlainRequest(b []byte, req openai.ChatCompletionRequest) (_ []byte, ok bool) {
	if len(req.Tools) > 0 || req.ToolChoice != nil {
		return b, false
	}
	for _, m := range req.Messages {
		if m.Refusal != "" || m.MultiContent != nil || m.Name != "" || m.ReasoningContent != "" ||
			m.FunctionCall != nil || m.ToolCalls != nil || m.ToolCallID != "" {
			return b, false
		}
	}
	b = append(b, `{"Messages":`...)
	if req.Messages == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, m := range req.Messages {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"role":`...)
			b = value.AppendJSONString(b, m.Role)
			if m.Content != "" {
				b = append(b, `,"content":`...)
				b = value.AppendJSONString(b, m.Content)
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = append(b, `,"Format":`...)
	if req.ResponseFormat == nil {
		b = append(b, "null"...)
	} else {
		f, err := json.Marshal(req.ResponseFormat)
		if err != nil {
			return b, false
		}
		b = append(b, f...)
	}
	return append(b, '}'), true
}
