package llm

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"

	openai "github.com/sashabaranov/go-openai"
	"gopkg.in/yaml.v3"
)

// A Cassette holds a model's replies, each keyed by the node that asked
// and a hash of what it sent (the rendered messages and the reply
// schema), so that flow tests recorded once against a real model replay
// offline and deterministically. A reply is looked up by node and hash:
// when the node has replies but none for this hash, its prompt (or
// schema, or the state it renders) changed since the recording, and the
// cassette reports the node as drifted instead of answering.
type Cassette struct {
	// Path is the file the cassette is read from and saved to.
	Path string
	// Recording: calls go to the model and their replies are kept; else
	// replies come from the cassette only.
	Recording bool

	mu      sync.Mutex
	entries []CassetteEntry
	used    map[int]bool
	drifts  []string
}

// CassetteEntry is one recorded reply.
type CassetteEntry struct {
	Node string `yaml:"node"`
	Hash string `yaml:"hash"`
	// Prompt is the start of the user message, for people reading the
	// file.
	Prompt string `yaml:"prompt"`
	Reply  string `yaml:"reply"`
	// ToolCalls are the functions the reply called.
	ToolCalls []CassetteCall `yaml:"tool_calls,omitempty"`
}

// CassetteCall is a function call of a recorded reply.
type CassetteCall struct {
	ID        string `yaml:"id"`
	Name      string `yaml:"name"`
	Arguments string `yaml:"arguments"`
}

// OpenCassette reads a cassette file (a missing file is an empty
// cassette).
func OpenCassette(path string, recording bool) (*Cassette, error) {
	c := &Cassette{Path: path, Recording: recording, used: map[int]bool{}}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return nil, err
	}
	if err := yaml.Unmarshal(b, &c.entries); err != nil {
		return nil, fmt.Errorf("cassette %s: %w", path, err)
	}
	return c, nil
}

// CassettePath is the cassette of a flow test file: x.test.yaml keeps
// its replies in x.cassette.yaml.
func CassettePath(testFile string) string {
	return strings.TrimSuffix(strings.TrimSuffix(testFile, ".yaml"), ".test") + ".cassette.yaml"
}

// ErrDrifted says a node's request is not the one recorded.
var ErrDrifted = errors.New("drifted from the cassette")

// replay returns the recorded reply for node's request.
func (c *Cassette) replay(node string, req openai.ChatCompletionRequest) (reply, error) {
	h := hashRequest(req)
	c.mu.Lock()
	defer c.mu.Unlock()
	recorded := false
	for i, e := range c.entries {
		if e.Node != node {
			continue
		}
		recorded = true
		if e.Hash == h {
			c.used[i] = true
			// (a cassette made from a thread's history holds a reply
			// that calls tools as the run recorded it)
			r := decodeReply(e.Reply)
			for _, tc := range e.ToolCalls {
				r.ToolCalls = append(r.ToolCalls, toolCall(tc))
			}
			return r, nil
		}
	}
	why := fmt.Sprintf("node %s has no recorded reply in %s (record with trellis test --record)", node, c.Path)
	if recorded {
		why = fmt.Sprintf("node %s drifted: what it sends changed since %s was recorded (its prompt, reply schema or the state it renders); record again with trellis test --record", node, c.Path)
	}
	if !slices.Contains(c.drifts, why) {
		c.drifts = append(c.drifts, why)
	}
	return reply{}, fmt.Errorf("%w: %s", ErrDrifted, why)
}

// record keeps a reply.
func (c *Cassette) record(node string, req openai.ChatCompletionRequest, r reply) {
	h := hashRequest(req)
	prompt := ""
	if n := len(req.Messages); n > 0 {
		prompt = req.Messages[n-1].Content
		if len(prompt) > 160 {
			prompt = prompt[:160] + "…"
		}
	}
	var calls []CassetteCall
	for _, tc := range r.ToolCalls {
		calls = append(calls, CassetteCall(tc))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, e := range c.entries {
		if e.Node == node && e.Hash == h {
			c.entries[i].Reply, c.entries[i].ToolCalls = r.Content, calls
			c.used[i] = true
			return
		}
	}
	c.used[len(c.entries)] = true
	c.entries = append(c.entries, CassetteEntry{Node: node, Hash: h, Prompt: prompt, Reply: r.Content, ToolCalls: calls})
}

// Drifts lists the nodes whose requests the cassette could not answer,
// and why, since the last call.
func (c *Cassette) Drifts() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.drifts
	c.drifts = nil
	return out
}

// Save writes the cassette: after recording, only the replies this
// recording used, so replies of prompts that changed are dropped.
func (c *Cassette) Save() error {
	c.mu.Lock()
	keep := c.entries
	if c.Recording {
		keep = nil
		for i, e := range c.entries {
			if c.used[i] {
				keep = append(keep, e)
			}
		}
	}
	c.mu.Unlock()
	var buf bytes.Buffer
	buf.WriteString("# Model replies recorded by trellis test --record: each keyed by the node\n# and a hash of what it sent. Replayed offline by trellis test.\n")
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(keep); err != nil {
		return err
	}
	return os.WriteFile(c.Path, buf.Bytes(), 0o644)
}
