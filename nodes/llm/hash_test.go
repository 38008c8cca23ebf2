package llm

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"testing"

	openai "github.com/sashabaranov/go-openai"
)

// marshalHash is the hash as encoding/json gives it, the one cassettes
// and recorded replies are keyed by.
func marshalHash(req openai.ChatCompletionRequest) string {
	b, _ := json.Marshal(struct {
		Messages []openai.ChatCompletionMessage
		Format   *openai.ChatCompletionResponseFormat
		Tools    []openai.Tool `json:",omitempty"`
		Choice   any           `json:",omitempty"`
	}{req.Messages, req.ResponseFormat, req.Tools, req.ToolChoice})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

var hashTexts = []string{
	"", "plain", "line\nbreak\ttab\rreturn", `quote " backslash \ slash /`, "<html> & </html>",
	"\x00\x01\x1f\x7f control", "\b\f", "é 日本 😀", "\u2028 and \u2029", "bad \xff\xfe utf8 \xed\xa0\x80 surrogate",
	"cut \xe6\x97", "résumé:\n  - Go\n  - PostgreSQL\n",
}

// TestPlainRequestsHashAsEncodingJSON: a request the hash writes itself
// hashes as encoding/json's encoding of it does, so recorded cassettes
// and threads' recorded replies keep answering.
func TestPlainRequestsHashAsEncodingJSON(t *testing.T) {
	format := &openai.ChatCompletionResponseFormat{Type: openai.ChatCompletionResponseFormatTypeJSONSchema,
		JSONSchema: &openai.ChatCompletionResponseFormatJSONSchema{Name: "q", Schema: json.RawMessage(`{"type": "object", "properties": {"text": {"type": "string"}}}`)}}
	reqs := []openai.ChatCompletionRequest{{}, {Messages: []openai.ChatCompletionMessage{}}, {ResponseFormat: format}}
	for _, s := range hashTexts {
		reqs = append(reqs,
			openai.ChatCompletionRequest{Messages: []openai.ChatCompletionMessage{{Role: "user", Content: s}}},
			openai.ChatCompletionRequest{Messages: []openai.ChatCompletionMessage{{Role: "system", Content: "You interview " + s}, {Role: s, Content: s}}, ResponseFormat: format})
	}
	for _, req := range reqs {
		if _, ok := appendPlainRequest(nil, req); !ok {
			t.Fatalf("%+v is not written as a plain request", req)
		}
		if got, want := hashRequest(req), marshalHash(req); got != want {
			t.Fatalf("%+v: hash %s, encoding/json's %s", req, got, want)
		}
	}
	// the others are encoded by encoding/json
	tools := openai.ChatCompletionRequest{Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "x"}},
		Tools: []openai.Tool{{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{Name: "f"}}}}
	call := openai.ChatCompletionRequest{Messages: []openai.ChatCompletionMessage{{Role: "assistant", ToolCalls: []openai.ToolCall{{ID: "1"}}}}}
	for _, req := range []openai.ChatCompletionRequest{tools, call} {
		if _, ok := appendPlainRequest(nil, req); ok {
			t.Fatalf("%+v is written as a plain request", req)
		}
		if got, want := hashRequest(req), marshalHash(req); got != want {
			t.Fatalf("%+v: hash %s, encoding/json's %s", req, got, want)
		}
	}
}

// FuzzHashRequest: whatever the messages say, the hash is encoding/json's.
func FuzzHashRequest(f *testing.F) {
	for _, s := range hashTexts {
		f.Add("user", s)
	}
	f.Fuzz(func(t *testing.T, role, content string) {
		req := openai.ChatCompletionRequest{Messages: []openai.ChatCompletionMessage{{Role: "system", Content: content + role}, {Role: role, Content: content}}}
		if got, want := hashRequest(req), marshalHash(req); got != want {
			t.Fatalf("%q %q: hash %s, encoding/json's %s", role, content, got, want)
		}
	})
}
