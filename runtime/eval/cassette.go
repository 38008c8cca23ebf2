// The dataset's cassette: the model replies an eval was told, by case, so
// that it replays offline.

package eval

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"

	"gopkg.in/yaml.v3"

	"github.com/trellisflow/trellis/runtime/store"
)

// Cassette holds the model replies of a dataset's cases: those the
// flow's nodes were told (keyed as a thread's checkpoints record them: the
// node and a hash of its request) and those of the rubric judges (node
// judge:NAME), each under its case. An eval with no model configured
// tells a case's nodes and judges their recorded replies; a node asking
// what was not recorded uses its fallback, which fails the case when the
// node has replies recorded for it (its prompt, or the state it renders,
// changed since), and a judge with none recorded scores by its rules.
type Cassette struct {
	// Path is the file it is read from and written to.
	Path string

	mu      sync.Mutex
	entries []CassetteEntry
}

// CassetteEntry is one recorded reply.
type CassetteEntry struct {
	Case string `yaml:"case"`
	Node string `yaml:"node"`
	Hash string `yaml:"hash"`
	// Prompt is the start of what was asked, for people reading the file.
	Prompt string `yaml:"prompt,omitempty"`
	Reply  string `yaml:"reply"`
}

// JudgeNode is the node name a judge's replies are recorded under.
func JudgeNode(judge string) string { return "judge:" + judge }

// CassettePath is a dataset's cassette: x.eval.yaml keeps its replies in
// x.eval.cassette.yaml.
func CassettePath(dataset string) string {
	return strings.TrimSuffix(dataset, ".yaml") + ".cassette.yaml"
}

// OpenCassette reads a cassette (a missing file is an empty one).
func OpenCassette(path string) (*Cassette, error) {
	c := &Cassette{Path: path}
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

// Entries returns the entries, in order.
func (c *Cassette) Entries() []CassetteEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.entries)
}

// replies are a case's recorded replies of the flow's nodes, in order.
func (c *Cassette) replies(caseName string) []store.Reply {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []store.Reply
	for _, e := range c.entries {
		if e.Case == caseName && !strings.HasPrefix(e.Node, "judge:") {
			out = append(out, store.Reply{Node: e.Node, Key: e.Hash, Text: e.Reply})
		}
	}
	return out
}

// recorded reports whether the case has replies recorded for node.
func (c *Cassette) recorded(caseName, node string) bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.ContainsFunc(c.entries, func(e CassetteEntry) bool { return e.Case == caseName && e.Node == node })
}

// lookup returns the reply recorded for a case's node and request hash.
func (c *Cassette) lookup(caseName, node, hash string) (string, bool) {
	if c == nil {
		return "", false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.entries {
		if e.Case == caseName && e.Node == node && e.Hash == hash {
			return e.Reply, true
		}
	}
	return "", false
}

// Replace sets the replies of the cases named, dropping those recorded
// for them before; the other cases' stay.
func (c *Cassette) Replace(cases []string, entries []CassetteEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	kept := slices.DeleteFunc(slices.Clone(c.entries), func(e CassetteEntry) bool { return slices.Contains(cases, e.Case) })
	c.entries = append(kept, entries...)
}

// Save writes the cassette.
func (c *Cassette) Save() error {
	c.mu.Lock()
	entries := c.entries
	c.mu.Unlock()
	if entries == nil {
		entries = []CassetteEntry{}
	}
	var buf bytes.Buffer
	buf.WriteString("# Model replies an eval was told, by case: those of the flow's nodes (keyed by\n# the node and a hash of what it sent) and of the rubric judges (judge:NAME).\n# trellis eval replays them when no model is configured; --record writes them.\n")
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(entries); err != nil {
		return err
	}
	if err := enc.Close(); err != nil {
		return err
	}
	return os.WriteFile(c.Path, buf.Bytes(), 0o644)
}

// promptStart is the start of a prompt, as an entry shows it.
func promptStart(s string) string {
	if r := []rune(s); len(r) > 160 {
		return string(r[:160]) + "…"
	}
	return s
}
