package llm

import (
	"errors"
	"fmt"
	"io"
	"strings"

	openai "github.com/sashabaranov/go-openai"
)

// maxStreamedCalls bounds the tool calls one streamed reply may make.
const maxStreamedCalls = 128

// readReply reads a streamed reply to its end: its text, handed to text
// piece by piece as it comes, and the functions it calls; usage is
// called with each usage the stream reports. A body that ends before the
// stream said it was done ([DONE]) and before a choice gave its
// finish_reason was cut short (a connection closed mid-reply): the reply
// is not taken for a whole one (errTruncated, which is tried again).
func readReply(cs *chunkStream, text func(string), usage func(openai.Usage)) (reply, error) {
	var b strings.Builder
	var calls []toolCall
	var args [][]byte
	finished := false
	for {
		chunk, err := cs.next()
		if errors.Is(err, io.EOF) {
			if !cs.closed && !finished {
				return reply{}, errTruncated
			}
			break
		}
		if err != nil {
			return reply{}, err
		}
		if chunk.HasUsage {
			usage(chunk.Usage)
		}
		if !chunk.choice {
			continue
		}
		finished = finished || chunk.Finished
		if len(chunk.Content) > 0 {
			// the piece is streamed as the part of the reply's text it
			// is: the builder never changes what it has written
			at := b.Len()
			b.Write(chunk.Content)
			text(b.String()[at:])
		}
		// a call's id and name come first, its arguments in pieces, each
		// piece naming the call by its index
		for _, tc := range chunk.Calls {
			i := len(calls) - 1
			if tc.HasIndex {
				i = tc.Index
			}
			if i < 0 || i > len(calls) || i >= maxStreamedCalls {
				return reply{}, fmt.Errorf("the reply streams tool call %d after %d calls", i, len(calls))
			}
			if i == len(calls) {
				calls, args = append(calls, toolCall{}), append(args, nil)
			}
			if len(tc.ID) > 0 {
				calls[i].ID = string(tc.ID)
			}
			if len(tc.Name) > 0 {
				calls[i].Name += string(tc.Name)
			}
			args[i] = append(args[i], tc.Arguments...)
		}
	}
	r := reply{Content: b.String(), ToolCalls: calls}
	for i := range calls {
		calls[i].Arguments = string(args[i])
	}
	return r, nil
}
