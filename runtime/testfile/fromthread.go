// Making a flow test from a thread: its initial values, the input of each
// of its runs (the answers of those that resumed a paused one, the
// corrections made between them), the path each run took and the state
// the thread ended in, as its history records them; and the model's
// replies its runs were told, for the test's cassette, so that the test
// replays the thread offline.

package testfile

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/store"
)

// Made is a flow test made from a thread.
type Made struct {
	// Text is the test file.
	Text []byte
	// Replies are the model replies the thread's runs were told, in the
	// order they were told: the test's cassette (see WriteCassette).
	Replies []store.Reply
	// Unasserted names the fields of the final state the test does not
	// check, each with why: they came out otherwise when the test was
	// run (the time, a random id).
	Unasserted []string
	// Results are the test's results when it was run as it was made:
	// passed, with its replies and no model.
	Results []Result
}

// ErrNotReplayable says a thread's history holds what a flow test cannot
// do again.
var ErrNotReplayable = errors.New("the thread cannot be made into a flow test")

// FromThread makes a flow test of thread, whose flow is g, to be saved at
// testPath with flowRef naming the flow relative to it: the test creates
// a thread with the thread's initial values and runs what the thread ran,
// expecting each run's path and the final state. A thread forked from
// another, or branched by an update at an older checkpoint, is followed
// back through where it came from. The test is run as made, on reg's kinds
// (those of a flow loaded offline) with the replies and nothing else, and
// the fields it finds otherwise than the thread had them (the time, a
// random id) are left unasserted; a path or pause it does not take again
// is an error.
func FromThread(ctx context.Context, st store.Store, g *flow.Graph, reg kind.Registry, thread, testPath, flowRef string) (*Made, error) {
	line, err := store.Lineage(ctx, st, thread)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotReplayable, err)
	}
	gt, replies, err := segment(g, line)
	if err != nil {
		return nil, err
	}
	gt.Name = "replays thread " + thread
	final := store.Replay(thread, line).Values
	initial := gt.With
	// the thread's initial values: those the defaults do not give
	gt.With = map[string]any{}
	for k, v := range initial {
		if f, ok := g.Field(k); !ok || !f.HasDefault || !reflect.DeepEqual(f.Default, v) {
			gt.With[k] = v
		}
	}
	var fields []string
	for _, k := range slices.Sorted(maps.Keys(final)) {
		if v, ok := initial[k]; !ok || !reflect.DeepEqual(v, final[k]) {
			fields = append(fields, k)
		}
	}
	unasserted := map[string]string{}
	for attempt := 0; ; attempt++ {
		gt.Expect = nil
		var conds []string
		var condFields []string
		for _, k := range fields {
			if _, skip := unasserted[k]; skip {
				continue
			}
			conds = append(conds, condition(k, final[k]))
			condFields = append(condFields, k)
		}
		if len(conds) > 0 {
			gt.Expect = &genExpect{State: conds}
		}
		text, err := encode(genFile{Flow: flowRef, Tests: []genTest{gt}}, thread, unasserted)
		if err != nil {
			return nil, err
		}
		f, err := LoadSource(testPath, text)
		if err != nil {
			return nil, fmt.Errorf("the test made of thread %s does not load: %w", thread, err)
		}
		results, err := runWith(ctx, f, reg, engine.NewReplies(replies))
		if err != nil {
			return nil, err
		}
		var other []string
		var failing []string
		ex := f.Tests[0].Expect
		for _, fail := range results[0].Failures {
			i := -1
			if ex != nil {
				i = slices.IndexFunc(ex.statePos, func(p diag.Pos) bool { return strings.HasPrefix(fail, p.String()+":") })
			}
			if i < 0 {
				other = append(other, fail)
				continue
			}
			failing = append(failing, fail)
			unasserted[condFields[i]] = fail
		}
		if len(other) > 0 {
			return nil, fmt.Errorf("%w: run as a test, it does not do what the thread did:\n  %s", ErrNotReplayable, strings.Join(other, "\n  "))
		}
		if len(failing) == 0 {
			m := &Made{Text: text, Replies: replies, Results: results}
			for _, k := range slices.Sorted(maps.Keys(unasserted)) {
				m.Unasserted = append(m.Unasserted, k)
			}
			return m, nil
		}
		if attempt > 0 {
			// fields that held once and not the second time
			return nil, fmt.Errorf("%w: its state comes out otherwise each time it runs:\n  %s", ErrNotReplayable, strings.Join(failing, "\n  "))
		}
	}
}

// runWith loads f's flow and runs its tests with replies.
func runWith(ctx context.Context, f *File, reg kind.Registry, replies *engine.Replies) ([]Result, error) {
	g, dl, src := flow.Compile(nil, f.FlowPath(), nil, reg)
	if dl.HasErrors() {
		return nil, &diag.ListError{List: dl, Sources: src}
	}
	var out []Result
	for _, t := range f.Tests {
		fails, _ := runTest(ctx, f, g, t, replies, false)
		out = append(out, Result{Name: t.Name, Failures: fails})
	}
	return out, nil
}

// segment reads the runs of a lineage: the test's initial values, its run
// entries with each run's path and pause, and the replies its runs were
// told.
func segment(g *flow.Graph, line []*store.Checkpoint) (genTest, []store.Reply, error) {
	var t genTest
	var replies []store.Reply
	if len(line) == 0 || line[0].Source != store.SourceCreate {
		return t, nil, fmt.Errorf("%w: its history does not start where it was created", ErrNotReplayable)
	}
	t.With = writesOf(line[0].Writes)
	var cur *genRun // the run being read
	var path [][]string
	var prev *store.Checkpoint
	exact := true // the path of the current run is known step by step
	closeRun := func() {
		if cur == nil {
			return
		}
		if exact && len(path) > 0 {
			cur.expect().Path = pathNode(path)
			cur.path = path
		}
		t.Runs = append(t.Runs, *cur)
		cur, path, exact = nil, nil, true
	}
	pausedAt := func(cp *store.Checkpoint) []string {
		return pauses(g, cp)
	}
	for _, cp := range line[1:] {
		replies = append(replies, cp.Replies...)
		open := prev != nil && len(prev.Next) > 0 // a run is under way at prev
		switch cp.Source {
		case store.SourceInput:
			closeRun()
			cur = &genRun{Input: cp.Input, Config: cp.Config}
			cur.Input = writesOf(cp.Writes)
		case store.SourceStep, store.SourceRun:
			switch {
			case cur != nil && cp.Run == prev.Run && prev.Source != store.SourceUpdate:
			case open && cur != nil && len(pausedAt(prev)) == 0 && len(cp.Answers) == 0:
				// a run that stopped part way (a crash, a cancel) and
				// was resumed: in the test it runs through
			case open:
				// a pause: the run resumes it (one inside a node, a
				// subflow's or a map item's, is known by the answers
				// the step took, named by their paths)
				paused := pausedAt(prev)
				if len(paused) == 0 {
					paused = answeredPaths(cp.Answers)
				}
				if cur != nil {
					cur.expect().Paused = paused
				}
				closeRun()
				cur = &genRun{Resume: len(cp.Answers) == 0, Answers: byPath(cp.Answers)}
			default:
				closeRun()
				cur = &genRun{}
			}
			if cp.Source == store.SourceRun {
				exact = false
			} else {
				step := make([]string, len(cp.Writers))
				for i, w := range cp.Writers {
					step[i] = w.Node
				}
				path = append(path, step)
			}
		case store.SourceUpdate:
			switch {
			case open && len(pausedAt(prev)) > 0 && cur != nil:
				cur.expect().Paused = pausedAt(prev)
			case open && cur != nil:
				// an edit of a run part way: the test stops it there
				step := prev.Step
				cur.StopAfter = &step
			case open:
				return t, nil, fmt.Errorf("%w: checkpoint %d of thread %s edits a run the test does not run", ErrNotReplayable, cp.Seq, cp.Thread)
			}
			closeRun()
			if len(cp.Writers) > 0 && len(cp.Input) > 0 {
				t.Runs = append(t.Runs, genRun{Update: &genUpdate{As: cp.Writers[0].Node, Values: cp.Input}})
			}
			if len(cp.Next) > 0 {
				// the paused run goes on after the edit
				cur = nil
			}
		case store.SourceFork:
			// the checkpoint a fork starts from: nothing changes
		default:
			return t, nil, fmt.Errorf("%w: checkpoint %d of thread %s (%s) is not something a test does", ErrNotReplayable, cp.Seq, cp.Thread, cp.Source)
		}
		prev = cp
	}
	if prev != nil && len(prev.Next) > 0 {
		if p := pausedAt(prev); len(p) > 0 && cur != nil {
			cur.expect().Paused = p
		} else if cur != nil {
			// the last run stopped part way and was not resumed: what it
			// would do is not known
			cur = nil
		}
	}
	closeRun()
	if len(t.Runs) == 0 {
		return t, nil, fmt.Errorf("%w: it ran nothing", ErrNotReplayable)
	}
	return t, replies, nil
}

// pauses names the nodes a run paused at after cp, as the engine pauses:
// after nodes of cp's step that pause after, before its next nodes that
// pause before, or for its next nodes' questions; none when it did not.
func pauses(g *flow.Graph, cp *store.Checkpoint) []string {
	var after, before, asks []string
	for _, w := range cp.Writers {
		if n, ok := g.Node(w.Node); ok && n.InterruptAfter && cp.Source != store.SourceInput {
			after = append(after, n.Name)
		}
	}
	for _, name := range cp.Next {
		n, ok := g.Node(name)
		if !ok {
			continue
		}
		if n.InterruptBefore {
			before = append(before, name)
		}
		if _, ok := n.Impl.(kind.Asker); ok {
			asks = append(asks, name)
		}
	}
	switch {
	case len(after) > 0:
		return after
	case len(before) > 0:
		return before
	}
	return asks
}

// answeredPaths are the paths of the questions asked inside nodes that
// answers (a step's, by question id) answered, sorted.
func answeredPaths(answers map[string]any) []string {
	var out []string
	for id := range answers {
		if p := engine.PathOf(id); p != id {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// byPath names the answers of questions asked inside nodes by their
// paths, which a test's runs reproduce whatever the checkpoints they
// make are numbered.
func byPath(answers map[string]any) map[string]any {
	if answers == nil {
		return nil
	}
	out := make(map[string]any, len(answers))
	for id, a := range answers {
		out[engine.PathOf(id)] = a
	}
	return out
}

// writesOf turns a checkpoint's writes into field values (an append
// write's items as a list).
func writesOf(ws []store.Write) map[string]any {
	if len(ws) == 0 {
		return nil
	}
	m := make(map[string]any, len(ws))
	for _, w := range ws {
		if w.Append {
			m[w.Field] = w.Items
		} else {
			m[w.Field] = w.Value
		}
	}
	return m
}

// condition is the expression a test checks a field's final value with:
// a text compared as text, anything else by its JSON; a value too long to
// read by its length.
func condition(field string, v any) string {
	ref := "state." + field
	if s, ok := v.(string); ok && len(s) <= maxLiteral {
		return ref + " == " + strconv.Quote(s)
	}
	b, err := json.Marshal(v)
	if err == nil && len(b) <= maxLiteral {
		return "json(" + ref + ") == " + strconv.Quote(string(b))
	}
	switch x := v.(type) {
	case string:
		return "len(" + ref + ") == " + strconv.Itoa(len([]rune(x)))
	case []any:
		return "len(" + ref + ") == " + strconv.Itoa(len(x))
	case map[string]any:
		return "len(" + ref + ") == " + strconv.Itoa(len(x))
	}
	return "json(" + ref + ") == " + strconv.Quote(string(b))
}

// maxLiteral is the longest value a condition spells out.
const maxLiteral = 2000

// The test file as it is written.
type genFile struct {
	Flow  string    `yaml:"flow"`
	Tests []genTest `yaml:"tests"`
}

type genTest struct {
	Name   string         `yaml:"name"`
	With   map[string]any `yaml:"with,omitempty"`
	Runs   []genRun       `yaml:"runs"`
	Expect *genExpect     `yaml:"expect,omitempty"`
}

type genRun struct {
	Input     map[string]any `yaml:"input,omitempty"`
	Config    map[string]any `yaml:"config,omitempty"`
	Answers   map[string]any `yaml:"answers,omitempty"`
	Resume    bool           `yaml:"resume,omitempty"`
	StopAfter *int           `yaml:"stop_after,omitempty"`
	Update    *genUpdate     `yaml:"update,omitempty"`
	Expect    *genExpect     `yaml:"expect,omitempty"`
	// path is the run's path, step by step, when it is known
	path [][]string
}

func (r *genRun) expect() *genExpect {
	if r.Expect == nil {
		r.Expect = &genExpect{}
	}
	return r.Expect
}

type genUpdate struct {
	As     string         `yaml:"as"`
	Values map[string]any `yaml:"values"`
}

type genExpect struct {
	Path   *yaml.Node `yaml:"path,omitempty"`
	Paused []string   `yaml:"paused,omitempty,flow"`
	State  []string   `yaml:"state,omitempty"`
}

// pathNode writes a path as one line: [a, [b, c], d].
func pathNode(path [][]string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
	for _, step := range path {
		if len(step) == 1 {
			n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: step[0]})
			continue
		}
		s := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
		for _, name := range step {
			s.Content = append(s.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: name})
		}
		n.Content = append(n.Content, s)
	}
	return n
}

func encode(f genFile, thread string, unasserted map[string]string) ([]byte, error) {
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "# A flow test made from thread %s: its initial values, the input of each\n# of its runs, the path each took and the state it ended in. The model's\n# replies its runs were told are in the cassette beside this file.\n", thread)
	for _, k := range slices.Sorted(maps.Keys(unasserted)) {
		fmt.Fprintf(&buf, "# Not asserted: %s, which comes out otherwise when the test runs.\n", k)
	}
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(f); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// WriteCassette is the text of a cassette of replies, as package llm
// reads it (a list of node, hash, prompt, reply), each (node, request)
// once: the first reply told for it.
func WriteCassette(replies []store.Reply) ([]byte, error) {
	type entry struct {
		Node   string `yaml:"node"`
		Hash   string `yaml:"hash"`
		Prompt string `yaml:"prompt"`
		Reply  string `yaml:"reply"`
	}
	var out []entry
	seen := map[[2]string]bool{}
	for _, r := range replies {
		k := [2]string{r.Node, r.Key}
		if seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, entry{Node: r.Node, Hash: r.Key, Reply: r.Text})
	}
	var buf bytes.Buffer
	buf.WriteString("# Model replies recorded in a thread's history: each keyed by the node\n# and a hash of what it sent. Replayed offline by trellis test.\n")
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if out == nil {
		out = []entry{}
	}
	if err := enc.Encode(out); err != nil {
		return nil, err
	}
	return buf.Bytes(), enc.Close()
}
