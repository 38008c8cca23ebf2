package flowdiff_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/runtime/flowdiff"
)

const before = `version: 1
name: triage
input: [text]
state:
  schema: state.json
  reducers:
    notes: append
limits: {max_steps: 10}
nodes:
  classify:
    kind: llm
    prompt: classify
    writes: {label: output}
  urgent:
    kind: assign
    set: {priority: "'high'"}
  archive:
    kind: noop
edges:
  - {from: START, to: classify}
  - from: classify
    branch:
      - {when: "state.label == 'urgent'", to: urgent}
      - else: archive
  - {from: urgent, to: END}
  - {from: archive, to: END}
`

const stateBefore = `{"type": "object", "properties": {"text": {"type": "string"}, "label": {"type": "string"}, "priority": {"type": "string"}, "notes": {"type": "array"}}}`

const promptBefore = "---\nfallback_expr: \"'normal'\"\n---\nClassify this message:\n{{.state.text}}\nReply with one word.\n"

func write(t *testing.T, dir, name, text string) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func versions(t *testing.T) (old, new string) {
	dir := t.TempDir()
	for _, v := range []string{"a", "b"} {
		write(t, dir, v+"/prompts/classify.prompt", promptBefore)
		write(t, dir, v+"/state.json", stateBefore)
		write(t, dir, v+"/flow.yaml", before)
	}
	b := filepath.Join(dir, "b")
	write(t, dir, "b/flow.yaml", strings.NewReplacer(
		"max_steps: 10", "max_steps: 20",
		`set: {priority: "'high'"}`, `set: {priority: "'critical'"}`,
		"  archive:\n    kind: noop\n", "  archive:\n    kind: noop\n  escalate:\n    kind: noop\n",
		"      - else: archive", "      - {when: \"state.label == 'angry'\", to: escalate}\n      - else: archive",
		"  - {from: archive, to: END}", "  - {from: archive, to: END}\n  - {from: escalate, to: END}",
		"    notes: append", "    notes: union",
	).Replace(before))
	write(t, dir, "b/state.json", strings.Replace(stateBefore, `"priority": {"type": "string"}`, `"priority": {"enum": ["low", "high", "critical"]}`, 1))
	write(t, dir, "b/prompts/classify.prompt", strings.Replace(promptBefore, "Reply with one word.", "Reply with one word: urgent, angry or normal.", 1))
	return filepath.Join(dir, "a", "flow.yaml"), filepath.Join(b, "flow.yaml")
}

func TestDiff(t *testing.T) {
	a, b := versions(t)
	changes, err := flowdiff.Diff(flowdiff.Disk(a), flowdiff.Disk(b))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range changes {
		line := c.Kind + " " + c.Area + " " + c.Name
		if c.Kind == flowdiff.Changed {
			line += ": " + strings.Join(c.Details(), "; ")
		}
		got = append(got, line)
	}
	want := []string{
		`changed limits max_steps: value: 10 → 20`,
		`changed field priority: enum: added ["low","high","critical"]; type: removed (was "string")`,
		`changed reducer notes: value: "append" → "union"`,
		`changed node urgent: set.priority: "'high'" → "'critical'"`,
		`added node escalate`,
		`changed prompt classify (classify): - Reply with one word.; + Reply with one word: urgent, angry or normal.`,
		`changed edge from classify: branch: added {"to":"escalate","when":"state.label == 'angry'"}`,
		`added edge from escalate`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// the same flow means no change
	if same, err := flowdiff.Diff(flowdiff.Disk(a), flowdiff.Disk(a)); err != nil || len(same) != 0 {
		t.Errorf("a flow against itself: %v %v", same, err)
	}
	// Markdown for a pull request, with the changed nodes drawn
	var md bytes.Buffer
	chart := flowdiff.Highlight("flowchart TD\n", changes, func(n string) string { return "n_" + n })
	flowdiff.GitHub(&md, "a", "b", changes, chart)
	for _, want := range []string{"3 added", "| changed | node | `urgent` |", "```diff\n! set.priority", "class n_escalate added", "class n_urgent changed", "class n_classify changed"} {
		if !strings.Contains(md.String(), strings.Replace(want, "3 added", "2 added", 1)) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
}

// A version is also a file as it was at a git revision, with its prompt
// and schema files as they were then.
func TestDiffAgainstGit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal(err)
	}
	a, b := versions(t)
	repo := filepath.Dir(a)
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", repo, "-c", "user.name=t", "-c", "user.email=t@t"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git("init", "-q")
	git("add", ".")
	git("commit", "-q", "-m", "v1")
	// the work tree moves to the new version
	for _, f := range []string{"flow.yaml", "state.json", "prompts/classify.prompt"} {
		data, err := os.ReadFile(filepath.Join(filepath.Dir(b), f))
		if err != nil {
			t.Fatal(err)
		}
		write(t, repo, f, string(data))
	}
	old, err := flowdiff.Git("HEAD", a)
	if err != nil {
		t.Fatal(err)
	}
	changes, err := flowdiff.Diff(old, flowdiff.Disk(a))
	if err != nil {
		t.Fatal(err)
	}
	if len(changes) != 8 || old.Name != "HEAD:flow.yaml" {
		t.Errorf("%s: %d changes: %+v", old.Name, len(changes), changes)
	}
	if _, err := flowdiff.Git("no-such-rev", a); err == nil {
		t.Error("a revision that does not exist was accepted")
	}
}

// A subflow's file is followed like a prompt: a change inside the child
// flow (an added interrupt, a changed prompt of its own) is a change of
// the node that runs it, named under it; a child that includes its
// parent again is not followed round.
func TestDiffFollowsSubflows(t *testing.T) {
	dir := t.TempDir()
	parent := `version: 1
name: parent
state: {schema: {type: object, properties: {x: {type: string, default: ""}}}}
nodes:
  review:
    kind: subflow
    flow: child.yaml
    writes: {x: output.y}
  each:
    kind: map
    items: "[1]"
    node: {kind: subflow, flow: child.yaml}
edges:
  - {from: START, to: review}
  - {from: review, to: END}
`
	child := `version: 1
name: child
state: {schema: {type: object, properties: {y: {type: string, default: ""}}}}
nodes:
  work: {kind: llm, prompt: work, writes: {y: output}}
  again: {kind: subflow, flow: parent.yaml}
edges:
  - {from: START, to: work}
  - {from: work, to: END}
`
	for _, v := range []string{"a", "b"} {
		write(t, dir, v+"/parent.yaml", parent)
		write(t, dir, v+"/prompts/work.prompt", "---\nfallback: x\n---\nWork.\n")
	}
	write(t, dir, "a/child.yaml", child)
	write(t, dir, "b/child.yaml", strings.Replace(child, "  work:", "  ask: {kind: interrupt, ask: \"'go?'\"}\n  work:", 1))
	write(t, dir, "b/prompts/work.prompt", "---\nfallback: x\n---\nWork harder.\n")
	changes, err := flowdiff.Diff(flowdiff.Disk(filepath.Join(dir, "a/parent.yaml")), flowdiff.Disk(filepath.Join(dir, "b/parent.yaml")))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range changes {
		got = append(got, c.Kind+" "+c.Area+" "+c.Name+" ("+c.Node+")")
	}
	want := []string{
		"added node each[each] › node ask (each)",
		"added node review › node ask (review)",
		"changed prompt each[each] › prompt work (work) (each)",
		"changed prompt review › prompt work (work) (review)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A change to one tool of a flow's tools block is named by the tool.
func TestToolChanges(t *testing.T) {
	dir := t.TempDir()
	tools := func(maxBytes string) string {
		return strings.Replace(before, "nodes:\n", "tools:\n  lookup:\n    kind: http\n    url: https://x.example/\n    max_bytes: "+maxBytes+"\n  other:\n    kind: flow\n    flow: other.yaml\nnodes:\n", 1)
	}
	write(t, dir, "a/triage.yaml", tools("1024"))
	write(t, dir, "b/triage.yaml", tools("2048"))
	changes, err := flowdiff.Diff(flowdiff.Disk(filepath.Join(dir, "a/triage.yaml")), flowdiff.Disk(filepath.Join(dir, "b/triage.yaml")))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	flowdiff.Text(&b, "a", "b", changes)
	if !strings.Contains(b.String(), "~ tool lookup\n    max_bytes: 1024 → 2048") || strings.Contains(b.String(), "tool other") {
		t.Fatalf("diff:\n%s", b.String())
	}
}
