// Making a case of a thread: a real conversation (in the studio, over the
// API, in a terminal) becomes a case of a dataset, with the model replies
// its runs were told in the dataset's cassette, so that it replays
// offline.

package eval

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/testfile"
)

// ErrNotACase says a thread's history holds what a case cannot do again;
// ErrCaseExists that the dataset has a case of the name asked.
var (
	ErrNotACase   = errors.New("the thread cannot be made into a case")
	ErrCaseExists = errors.New("the dataset has a case of that name")
)

// MadeCase is a case made from a thread.
type MadeCase struct {
	Name string
	// Text is the dataset with the case added.
	Text []byte
	// Entries are the model replies the thread's runs were told, for the
	// dataset's cassette under the case's name.
	Entries []CassetteEntry
	// Report is the case's report when it was run as made: offline, told
	// the replies.
	Report *Report
}

// AddCase makes a case called name of thread (whose flow is g, in store
// st) and adds it to the dataset at path, whose text is src (nil: a new
// dataset of flowRef, the flow relative to path). The case starts a
// thread with the thread's initial values and sends what its runs were
// sent; each turn expects the path its run took. It is run as made, told
// the thread's replies, and
// must pass: a thread that does not replay so is an error saying what
// differed. Nothing is written. g is the flow compiled with no model, so
// that the case runs as the eval runs it offline.
func AddCase(ctx context.Context, st store.Store, g *flow.Graph, thread, name, path string, src []byte, flowRef string) (*MadeCase, error) {
	if src != nil {
		had, err := LoadSource(path, src)
		if err != nil {
			return nil, fmt.Errorf("the dataset does not load: %w", err)
		}
		if _, dup := had.Case(name); dup {
			return nil, fmt.Errorf("%w: %q; name the new one otherwise", ErrCaseExists, name)
		}
	}
	tr, err := testfile.ReadThread(ctx, st, g, thread)
	if err != nil {
		return nil, err
	}
	c, err := caseOf(g, tr, thread, name)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode([]*genCase{c}); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	var text []byte
	if src == nil {
		text = fmt.Appendf(nil, "flow: %s\ncases:\n%s", yamlScalar(flowRef), indentLines(buf.String(), "  "))
	} else if text, err = insertCase(src, buf.String()); err != nil {
		return nil, err
	}
	ds, err := LoadSource(path, text)
	if err != nil {
		return nil, fmt.Errorf("the dataset with the case added does not load: %w", err)
	}
	var entries []CassetteEntry
	for _, r := range tr.Replies {
		entries = append(entries, CassetteEntry{Case: name, Node: r.Node, Hash: r.Key, Reply: r.Text})
	}
	cas := &Cassette{}
	if prev, err := OpenCassette(CassettePath(path)); err == nil {
		cas.entries = prev.Entries()
	}
	cas.Replace([]string{name}, entries)
	res, err := Run(ctx, ds, []Target{{Label: g.Path, Graph: g}}, Options{Names: []string{name}, Cassette: cas, Concurrency: 1})
	if err != nil {
		return nil, err
	}
	cr := res.Report.Cases[0]
	if cr.Status != Passed {
		var why []string
		for _, f := range cr.Results[0].Failures {
			why = append(why, f.Check+": "+f.Reason)
		}
		if len(why) == 0 {
			why = append(why, cr.Results[0].Reason)
		}
		return nil, fmt.Errorf("%w: run as a case, it does not do what the thread did:\n  %s", ErrNotACase, strings.Join(why, "\n  "))
	}
	return &MadeCase{Name: name, Text: text, Entries: entries, Report: res.Report}, nil
}

// Save writes the dataset and its cassette.
func (m *MadeCase) Save(path string) error {
	cas, err := OpenCassette(CassettePath(path))
	if err != nil {
		return err
	}
	cas.Replace([]string{m.Name}, m.Entries)
	if err := os.WriteFile(path, m.Text, 0o644); err != nil {
		return err
	}
	if len(cas.Entries()) == 0 {
		return nil
	}
	return cas.Save()
}

// The case as it is written.
type genCase struct {
	Name        string         `yaml:"name"`
	Description string         `yaml:"description"`
	With        map[string]any `yaml:"with,omitempty"`
	Config      map[string]any `yaml:"config,omitempty"`
	Turns       []any          `yaml:"turns,omitempty"`
}

type genTurn struct {
	Message *string        `yaml:"message,omitempty"`
	Input   map[string]any `yaml:"input,omitempty"`
	Answers map[string]any `yaml:"answers,omitempty"`
	Expect  *genTurnExpect `yaml:"expect,omitempty"`
}

type genTurnExpect struct {
	Path genPath `yaml:"path"`
}

type genPath struct {
	Exact *yaml.Node `yaml:"exact"`
}

// caseOf turns a thread's runs into a case's turns.
func caseOf(g *flow.Graph, tr *testfile.ThreadRuns, thread, name string) (*genCase, error) {
	c := &genCase{Name: name, Description: fmt.Sprintf("Made from thread %s on %s: each turn expects the path its run took. Say what it should have done instead.", thread, time.Now().UTC().Format("2006-01-02")), With: tr.With}
	runs := tr.Runs
	conv := g.Conversation
	if conv != nil {
		if len(runs) == 0 || len(runs[0].Input) > 0 || runs[0].Answers != nil || runs[0].Resume || runs[0].Update != nil {
			return nil, fmt.Errorf("%w: a case of a conversational flow opens with a run of no input, as a conversation does, and the thread's first run was not one", ErrNotACase)
		}
		runs = runs[1:]
	}
	for i, r := range tr.Runs {
		switch {
		case r.Update != nil:
			return nil, fmt.Errorf("%w: its run %d is a correction (trellis update), which a case does not make; trellis test --from-thread makes a flow test of it", ErrNotACase, i+1)
		case r.StopAfter != nil:
			return nil, fmt.Errorf("%w: its run %d was stopped part way, which a case does not do; trellis test --from-thread makes a flow test of it", ErrNotACase, i+1)
		case r.Resume && r.Answers == nil:
			return nil, fmt.Errorf("%w: its run %d resumed a run that paused before or after a node, which a case does not do; trellis test --from-thread makes a flow test of it", ErrNotACase, i+1)
		}
		if i > 0 && !reflect.DeepEqual(r.Config, tr.Runs[0].Config) && r.Answers == nil {
			return nil, fmt.Errorf("%w: its runs were given different configurations, and a case gives all its turns one", ErrNotACase)
		}
	}
	if len(tr.Runs) > 0 {
		c.Config = tr.Runs[0].Config
	}
	if conv == nil && len(runs) == 1 && len(runs[0].Input) == 0 && runs[0].Answers == nil {
		runs = nil // the one run with no input a case makes by itself
	}
	for _, r := range runs {
		t := &genTurn{}
		if r.Answers != nil {
			t.Answers = r.Answers
		} else {
			in := maps.Clone(r.Input)
			if conv != nil {
				if msg, ok := in[conv.Input].(string); ok {
					t.Message = &msg
					delete(in, conv.Input)
				}
			}
			if len(in) > 0 {
				t.Input = in
			}
		}
		if r.Path != nil {
			t.Expect = &genTurnExpect{Path: genPath{Exact: stepsNode(r.Path)}}
		}
		c.Turns = append(c.Turns, t)
	}
	return c, nil
}

// stepsNode writes a path on one line: [a, [b, c], d].
func stepsNode(path [][]string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
	for _, step := range path {
		if len(step) == 1 {
			n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: step[0]})
			continue
		}
		s := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
		for _, name := range slices.Sorted(slices.Values(step)) {
			s.Content = append(s.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: name})
		}
		n.Content = append(n.Content, s)
	}
	return n
}

// insertCase adds a case (a one-item YAML list) at the end of a
// dataset's cases, keeping the rest of its text as it is.
func insertCase(src []byte, item string) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil || len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, errors.New("the dataset is not a YAML mapping")
	}
	root := doc.Content[0]
	lines := strings.SplitAfter(string(src), "\n")
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value != "cases" {
			continue
		}
		seq := root.Content[i+1]
		if seq.Kind != yaml.SequenceNode || seq.Style&yaml.FlowStyle != 0 || len(seq.Content) == 0 {
			return nil, errors.New("the dataset's cases are not a block list (- name: ...): add the case by hand")
		}
		first := lines[seq.Content[0].Line-1]
		indent := first[:strings.Index(first, "-")]
		at := len(lines) // the line the case goes before
		if i+2 < len(root.Content) {
			at = root.Content[i+2].Line - 1
			for at > 0 && (strings.TrimSpace(lines[at-1]) == "" || strings.HasPrefix(lines[at-1], "#")) {
				at--
			}
		}
		var b strings.Builder
		for _, l := range lines[:at] {
			b.WriteString(l)
		}
		if at > 0 && !strings.HasSuffix(lines[at-1], "\n") {
			b.WriteByte('\n')
		}
		b.WriteString("\n")
		b.WriteString(indentLines(item, indent))
		if at < len(lines) && strings.TrimSpace(lines[at]) != "" {
			b.WriteString("\n")
		}
		for _, l := range lines[at:] {
			b.WriteString(l)
		}
		return []byte(b.String()), nil
	}
	return nil, errors.New("the dataset has no cases")
}

func indentLines(text, indent string) string {
	lines := strings.SplitAfter(text, "\n")
	var b strings.Builder
	for _, l := range lines {
		if l != "" && l != "\n" {
			b.WriteString(indent)
		}
		b.WriteString(l)
	}
	return b.String()
}

// yamlScalar writes s as a YAML scalar (quoted when it must be).
func yamlScalar(s string) string {
	b, err := yaml.Marshal(s)
	if err != nil {
		return fmt.Sprintf("%q", s)
	}
	return strings.TrimSuffix(string(b), "\n")
}
