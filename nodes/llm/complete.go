package llm

import (
	"context"
	"encoding/json"
	"fmt"

	openai "github.com/sashabaranov/go-openai"
)

// Complete asks the provider's model for one chat completion outside a
// node (the eval's rubric judges ask through it): a system and a user
// message, and when schema is set a JSON reply that fits it. It retries
// as a node's calls do; model empty is the provider's default. The reply
// is not checked against the schema: the caller reads it.
func (p *Provider) Complete(ctx context.Context, model, system, user, schemaName string, schema map[string]any) (string, error) {
	c := newClient(p)
	if model == "" {
		model = c.p.Model
	}
	req := openai.ChatCompletionRequest{Model: model, Temperature: temperature(new(float32))}
	if system != "" {
		req.Messages = append(req.Messages, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleSystem, Content: system})
	}
	req.Messages = append(req.Messages, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: user})
	if schema != nil {
		raw, err := json.Marshal(schema)
		if err != nil {
			return "", err
		}
		req.ResponseFormat = &openai.ChatCompletionResponseFormat{
			Type:       openai.ChatCompletionResponseFormatTypeJSONSchema,
			JSONSchema: &openai.ChatCompletionResponseFormatJSONSchema{Name: schemaName, Schema: json.RawMessage(raw)},
		}
	}
	var reply string
	err := c.call(ctx, func(ctx context.Context, oa *openai.Client, _ *try) error {
		resp, err := oa.CreateChatCompletion(ctx, req)
		if err != nil {
			return err
		}
		if len(resp.Choices) == 0 {
			return fmt.Errorf("the reply has no choices")
		}
		reply = resp.Choices[0].Message.Content
		return nil
	})
	if err != nil {
		return "", c.errorf(err)
	}
	return reply, nil
}
