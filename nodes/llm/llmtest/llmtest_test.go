package llmtest

import (
	"encoding/json"
	"testing"

	openai "github.com/sashabaranov/go-openai"
)

func TestGeneratedReplySatisfiesCommonSchemas(t *testing.T) {
	schema := json.RawMessage(`{"type": "object", "required": ["kind", "score", "tags", "text", "nested"],
	  "properties": {"kind": {"enum": ["a", "b"]}, "score": {"type": "number", "minimum": 2},
	    "tags": {"type": "array", "minItems": 1, "items": {"type": "string"}},
	    "text": {"type": "string", "minLength": 20}, "optional": {"type": "string"},
	    "nested": {"$ref": "#/$defs/N"}},
	  "$defs": {"N": {"type": "object", "required": ["ok"], "properties": {"ok": {"type": "boolean"}}}}}`)
	req := &openai.ChatCompletionRequest{ResponseFormat: &openai.ChatCompletionResponseFormat{
		Type: openai.ChatCompletionResponseFormatTypeJSONSchema, JSONSchema: &openai.ChatCompletionResponseFormatJSONSchema{Name: "x", Schema: schema}}}
	var got map[string]any
	if err := json.Unmarshal([]byte(generate(req)), &got); err != nil {
		t.Fatal(err)
	}
	if got["kind"] != "a" || got["score"] != 2.0 || len(got["tags"].([]any)) != 1 || len(got["text"].(string)) < 20 ||
		got["nested"].(map[string]any)["ok"] != false || got["optional"] != nil {
		t.Fatalf("generated %v", got)
	}
}

func TestSplitTokensKeepsText(t *testing.T) {
	for _, s := range []string{"", "one", "two words", "  leading and  double  spaces ", "end "} {
		joined := ""
		for _, p := range splitTokens(s) {
			joined += p
		}
		if joined != s {
			t.Errorf("%q split and joined is %q", s, joined)
		}
	}
}
