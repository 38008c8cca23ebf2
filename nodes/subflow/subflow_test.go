package subflow_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/nodes/all/alltest"
	"github.com/trellisflow/trellis/nodes/llm"
	"github.com/trellisflow/trellis/nodes/llm/llmtest"
	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/kind/kindtest"
	"github.com/trellisflow/trellis/runtime/store"
	_ "github.com/trellisflow/trellis/runtime/store/all"
	"github.com/trellisflow/trellis/runtime/store/storetest"
	"go.uber.org/goleak"
)

// TestMain runs the tests with the stores' servers, and fails when a
// goroutine outlives them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(withStores{m}) }

type withStores struct{ *testing.M }

func (m withStores) Run() int { return storetest.Main(m.M) }

// gate counts its runs per node and, while its channel is open, blocks
// until the run is cancelled (a process dying in the middle of it).
type gate struct {
	mu    sync.Mutex
	runs  map[string]int
	block atomic.Bool
	// blocked, when set, hears that a node blocks
	blocked func()
}

func (g *gate) registry() kind.Registry {
	set := alltest.WithTestKinds()
	set.Register(kind.Spec{Name: "gate", Summary: "Count runs; block while told to.", Fields: []config.Field{config.Map("set", "Field to expression.", nil)},
		New: func(b kind.Builder) kind.Node {
			sets := kindtest.CompileSet(b)
			name := b.Node()
			return kind.Func(func(ctx context.Context, s kind.State) (kind.Update, error) {
				g.mu.Lock()
				g.runs[name]++
				g.mu.Unlock()
				if g.block.Load() {
					if g.blocked != nil {
						g.blocked()
					}
					<-ctx.Done()
					return nil, ctx.Err()
				}
				return sets.Eval(s.Vars())
			})
		}})
	return set
}

func (g *gate) count(node string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.runs[node]
}

func write(t *testing.T, dir, name, src string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const child = `version: 1
name: review
input: [resume]
state:
  schema:
    type: object
    required: [resume]
    properties:
      resume: {type: string}
      notes: {type: array, items: {type: string}, default: []}
      score: {type: integer, default: 0}
  reducers:
    notes: append
nodes:
  read: {kind: gate, set: {notes: "'read ' + input.resume"}}
  judge: {kind: gate, set: {notes: "'judged'", score: "len(state.resume)"}}
edges:
  - {from: START, to: read}
  - {from: read, to: judge}
  - {from: judge, to: END}
`

const parent = `version: 1
name: hiring
input: [resume]
state:
  schema:
    type: object
    properties:
      resume: {type: string, default: ""}
      score: {type: integer, default: 0}
      summary: {type: string, default: ""}
      log: {type: array, items: {type: string}, default: []}
  reducers:
    log: append
nodes:
  prepare: {kind: gate, set: {log: "'prepared'"}}
  review:
    kind: subflow
    flow: review.yaml
    input: {resume: "upper(state.resume)"}
    writes:
      score: "output.score"
      summary: "join(output.notes, '; ')"
  close: {kind: gate, set: {log: "'closed at ' + string(state.score)"}}
edges:
  - {from: START, to: prepare}
  - {from: prepare, to: review}
  - {from: review, to: close}
  - {from: close, to: END}
`

func loadParent(t *testing.T, g *gate) *flow.Graph {
	t.Helper()
	dir := t.TempDir()
	write(t, dir, "review.yaml", child)
	p := write(t, dir, "hiring.yaml", parent)
	gr, dl := flow.Load(p, g.registry())
	if gr == nil || dl.HasErrors() {
		t.Fatalf("the flows do not load:\n%v", dl)
	}
	return gr
}

// A subflow runs as one node of its parent: its checkpoints live in a
// thread of their own under the parent's namespace, where its history and
// any state of it can be read (and a thread forked from it); its events
// reach the parent's stream tagged with the namespace; its final state is
// written back through the node's writes. On each store.
func TestSubflowHistoryUnderItsNamespace(t *testing.T) {
	ctx := context.Background()
	gt := &gate{runs: map[string]int{}}
	g := loadParent(t, gt)
	for name, url := range storetest.URLs(t) {
		t.Run(name, func(t *testing.T) {
			st, err := store.Open(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			var mu sync.Mutex
			var events []engine.Event
			res, err := engine.New(st).Run(ctx, g, engine.Request{Thread: "cand", Input: map[string]any{"resume": "go, sql"},
				Observe: func(ev engine.Event) { mu.Lock(); events = append(events, ev); mu.Unlock() }})
			if err != nil {
				t.Fatal(err)
			}
			if res.State["score"] != 7 || res.State["summary"] != "read GO, SQL; judged" {
				t.Fatalf("parent state %v", res.State)
			}
			var ns string
			var childNodes []string
			for _, ev := range events {
				if ev.NS == "" {
					continue
				}
				if ev.Thread != "cand" || ev.Run != res.Run {
					t.Fatalf("a child's event is not the run's: %+v", ev)
				}
				ns = ev.NS
				if ev.Type == engine.NodeEnd {
					childNodes = append(childNodes, ev.Node)
				}
			}
			if !strings.HasPrefix(ns, "review:") || !slices.Equal(childNodes, []string{"read", "judge"}) {
				t.Fatalf("namespace %q, child nodes %v", ns, childNodes)
			}
			thread := engine.ChildThread("cand", ns)
			cps, err := st.History(ctx, thread, store.HistoryOptions{})
			// created, its run's input (the mapping), read, judge
			if err != nil || len(cps) != 4 {
				t.Fatalf("the child's history: %d checkpoints, %v", len(cps), err)
			}
			if cps[3].Source != store.SourceCreate || cps[2].Source != store.SourceInput || cps[1].Writers[0].Node != "read" || cps[0].Writers[0].Node != "judge" {
				t.Fatalf("the child's checkpoints: %+v %+v %+v %+v", cps[3], cps[2], cps[1], cps[0])
			}
			mid, err := st.StateAt(ctx, thread, cps[1].Seq)
			if err != nil || mid.Values["score"] != 0 || len(mid.Values["notes"].([]any)) != 1 || mid.Values["resume"] != "GO, SQL" {
				t.Fatalf("the child's state after read: %+v %v", mid, err)
			}
			if _, err := store.Fork(ctx, st, thread, cps[1].Seq, "review-again"); err != nil {
				t.Fatalf("fork from the child: %v", err)
			}
			// the parent's step that ran the subflow names it
			pcps, _ := st.History(ctx, "cand", store.HistoryOptions{Node: "review"})
			if len(pcps) != 1 || !strings.HasSuffix(ns, ":"+strconv.FormatUint(pcps[0].Parent, 10)) {
				t.Fatalf("the parent's review step %+v does not follow checkpoint %s", pcps, ns)
			}
			// deleting the parent deletes the child's thread, not the fork
			if err := engine.New(st).Delete(ctx, "cand"); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Head(ctx, thread); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("the child after the parent's delete: %v", err)
			}
			if _, err := st.Head(ctx, "review-again"); err != nil {
				t.Fatalf("the fork after the parent's delete: %v", err)
			}
		})
	}
}

// A parent run that dies while its subflow is in the middle of a step
// (its context ends) leaves both threads unfinished; resuming the parent
// resumes the child where it stopped: the child's first node does not
// run again, nor the parent's. On each store.
func TestSubflowResumesInsideItsNamespace(t *testing.T) {
	ctx := context.Background()
	for name, url := range storetest.URLs(t) {
		t.Run(name, func(t *testing.T) {
			gt := &gate{runs: map[string]int{}}
			g := loadParent(t, gt)
			st, err := store.Open(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			eng := engine.New(st)
			var once sync.Once
			cctx, cancel := context.WithCancel(ctx)
			// the child's judge blocks; the run dies there, once the judge
			// has started (the step before it committed)
			gt.blocked = func() { once.Do(cancel) }
			observe := func(ev engine.Event) {
				if ev.NS != "" && ev.Type == engine.NodeEnd && ev.Node == "read" {
					gt.block.Store(true)
				}
			}
			_, err = eng.Run(cctx, g, engine.Request{Thread: "cand", Input: map[string]any{"resume": "rust"}, Observe: observe})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("the first run: %v", err)
			}
			head, _ := st.Head(ctx, "cand")
			if !slices.Equal(head.Next, []string{"review"}) {
				t.Fatalf("parent next %v", head.Next)
			}
			threads, _ := st.Threads(ctx, store.ThreadOptions{})
			var childThread string
			for _, th := range threads {
				if strings.HasPrefix(th.ID, "cand"+engine.NSSep) {
					childThread = th.ID
				}
			}
			ch, err := st.Head(ctx, childThread)
			if err != nil || !slices.Equal(ch.Next, []string{"judge"}) {
				t.Fatalf("child %q: %+v %v", childThread, ch, err)
			}
			gt.block.Store(false)
			res, err := eng.Run(ctx, g, engine.Request{Thread: "cand", Resume: true})
			if err != nil {
				t.Fatal(err)
			}
			if res.State["score"] != 4 || res.State["summary"] != "read RUST; judged" {
				t.Fatalf("parent state %v", res.State)
			}
			if gt.count("prepare") != 1 || gt.count("read") != 1 || gt.count("judge") != 2 || gt.count("close") != 1 {
				t.Fatalf("runs: %v", gt.runs)
			}
		})
	}
}

// What the validator says of subflows: a child that is missing, that
// includes its parent, that declares no input the input names (a field of
// its state the input may not set among them) or no field state names,
// that reads an input or requires a field it is not given, whose input or
// state does not fit its types, whose output does not fit what it is
// written to.
func TestSubflowDiagnostics(t *testing.T) {
	gt := &gate{runs: map[string]int{}}
	for _, tc := range []struct {
		edit, childEdit, code, text string
	}{
		{"flow: review.yaml|flow: reveiw.yaml", "", "C001", `cannot read subflow "reveiw.yaml"`},
		{"input: {resume: \"upper(state.resume)\"}|input: {resme: \"state.resume\"}", "", "C003", `has no input "resme"`},
		{"input: {resume: \"upper(state.resume)\"}|input: {resume: state.resume, score: \"1\"}", "", "C003", `has no input "score": it is a field of its state, which its input does not set (inputs: resume); seed it under state`},
		{"input: {resume: \"upper(state.resume)\"}|state: {notes: \"[]\"}", "", "C003", `reads input.resume with nothing to fall back on: give it under input`},
		{"input: {resume: \"upper(state.resume)\"}|state: {resume: state.resume}", "", "C003", `reads input.resume with nothing to fall back on: give it under input`},
		{"input: {resume: \"upper(state.resume)\"}|input: {resume: state.resume}\n    state: {scroe: \"1\"}", "", "C003", `has no field "scroe"`},
		{"input: {resume: \"upper(state.resume)\"}|input: {resume: state.resume}\n    state: {score: \"'high'\"}", "", "W004", `field "score" of subflow review takes integer`},
		{"input: {resume: \"upper(state.resume)\"}|input: {resume: \"1 + 2\"}", "", "W004", `input "resume" of subflow review takes string, but this expression yields an integer`},
		{"input: {resume: \"upper(state.resume)\"}|state: {notes: \"[]\"}", "  read: {kind: gate, set: {notes: \"'read ' + input.resume\"}}|  read: {kind: gate, set: {notes: \"'read ' + state.resume\"}}", "C003", `requires input "resume", which has no default: give it under input`},
		{`summary: "join(output.notes, '; ')"|summary: "output.score"`, "", "W004", `field "summary" cannot hold what this expression gives: output.score is integer`},
		{`score: "output.score"|score: "output.scroe"`, "", "E003", ""},
		{"", "  judge: {kind: gate, set: {notes: \"'judged'\", score: \"len(state.resume)\"}}|  judge: {kind: subflow, flow: hiring.yaml, input: {resume: state.resume}}", "C002", "flows include each other"},
		{"name: hiring|name: hiring\ninteractive: false", "  judge: {kind: gate, set: {notes: \"'judged'\", score: \"len(state.resume)\"}}|  judge: {kind: gate, interrupt_before: true, set: {score: \"1\"}}", "C006", "may pause at review/judge (interrupt_before)"},
	} {
		dir := t.TempDir()
		c := child
		if tc.childEdit != "" {
			old, repl, _ := strings.Cut(tc.childEdit, "|")
			c = strings.Replace(c, old, repl, 1)
		}
		write(t, dir, "review.yaml", c)
		p := parent
		if tc.edit != "" {
			old, repl, _ := strings.Cut(tc.edit, "|")
			p = strings.Replace(p, old, repl, 1)
		}
		path := write(t, dir, "hiring.yaml", p)
		_, dl := flow.Load(path, gt.registry())
		found := false
		for _, d := range dl {
			if string(d.Code) == tc.code && strings.Contains(d.Summary, tc.text) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s%s: want %s %q, got:\n%v", tc.edit, tc.childEdit, tc.code, tc.text, dl)
		}
	}
}

const chatChild = `version: 1
name: chat_child
state:
  schema:
    type: object
    required: [topic]
    properties:
      topic: {type: string}
      reply: {type: string, default: ""}
nodes:
  say: {kind: llm, prompt: say, writes: {reply: output}}
edges:
  - {from: START, to: say}
  - {from: say, to: END}
`

const chatParent = `version: 1
name: chat_parent
input: [topics]
state:
  schema:
    type: object
    properties:
      topics: {type: array, items: {type: string}, default: []}
      replies: {type: array, items: {type: string}, default: []}
  reducers:
    replies: append
nodes:
  each:
    kind: map
    items: "state.topics"
    max_concurrency: 2
    node:
      kind: subflow
      flow: chat_child.yaml
      state: {topic: item}
      writes: {replies: "output.reply"}
edges:
  - {from: START, to: each}
  - {from: each, to: END}
`

// A map whose node is a subflow: each item runs the child flow on a
// thread of its own (NODE[INDEX]:SEQ), the replies fold in item order, and
// the children's model tokens reach the parent's stream as node_output
// events tagged with each child's namespace.
func TestMapOfSubflowsStreamsTheChildrensTokens(t *testing.T) {
	ctx := context.Background()
	srv := llmtest.New(
		llmtest.Rule{Match: "alpha", Replies: []llmtest.Reply{{Content: "first reply about alpha", Delay: 30 * time.Millisecond}}},
		llmtest.Rule{Match: "beta", Replies: []llmtest.Reply{{Content: "second reply about beta"}}},
	)
	ts := httptest.NewServer(srv)
	defer llm.CloseIdleConnections()
	defer ts.Close()
	p := &llm.Provider{BaseURL: ts.URL + "/v1", APIKey: srv.Key, Backoff: time.Millisecond, Retries: 1}
	dir := t.TempDir()
	write(t, dir, "chat_child.yaml", chatChild)
	path := write(t, dir, "chat_parent.yaml", chatParent)
	_ = os.MkdirAll(filepath.Join(dir, "prompts"), 0o755)
	write(t, dir, "prompts/say.prompt", "---\nfallback: none\n---\nSay something about {{.state.topic}}.\n")
	g, dl := flow.Load(path, all.WithProvider(func() *llm.Provider { return p }))
	if g == nil || dl.HasErrors() {
		t.Fatal(dl)
	}
	st, _ := store.Open(ctx, "memory")
	var mu sync.Mutex
	tokens := map[string]string{}
	res, err := engine.New(st).Run(ctx, g, engine.Request{Thread: "c", Input: map[string]any{"topics": []any{"alpha", "beta"}},
		Observe: func(ev engine.Event) {
			if ev.Type == engine.NodeOutput {
				mu.Lock()
				tokens[ev.NS] += ev.Text
				mu.Unlock()
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.State["replies"].([]any); !slices.Equal(got, []any{"first reply about alpha", "second reply about beta"}) {
		t.Fatalf("replies %v", got)
	}
	if len(tokens) != 2 {
		t.Fatalf("tokens by namespace: %v", tokens)
	}
	for ns, text := range tokens {
		i := strings.TrimSuffix(strings.TrimPrefix(ns, "each["), "]:2")
		want := map[string]string{"0": "first reply about alpha", "1": "second reply about beta"}[i]
		if want == "" || text != want {
			t.Errorf("namespace %q streamed %q", ns, text)
		}
		if _, err := st.Head(ctx, engine.ChildThread("c", ns)); err != nil {
			t.Errorf("the thread of %s: %v", ns, err)
		}
	}
}

// A subflow's input is the child run's input, as a caller's would be: the
// child reads it as input.NAME (and its input field as state.NAME), the
// engine checks it as any run's input (a value its schema refuses fails
// the node naming the input, and the child's thread is not created), and
// state seeds a field that is not an input; both work in a map's items.
func TestSubflowInputIsTheChildRunsInput(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	write(t, dir, "tag.yaml", `version: 1
name: tag
input: [code]
state:
  schema:
    type: object
    required: [code]
    properties:
      code: {type: string, maxLength: 3}
      prefix: {type: string, default: "#"}
      label: {type: string, default: ""}
nodes:
  name: {kind: gate, set: {label: "state.prefix + input.code + '/' + state.code"}}
edges:
  - {from: START, to: name}
  - {from: name, to: END}
`)
	p := write(t, dir, "tags.yaml", `version: 1
name: tags
input: [codes]
state:
  schema:
    type: object
    properties:
      codes: {type: array, items: {type: string}, default: []}
      labels: {type: array, items: {type: string}, default: []}
      first: {type: string, default: ""}
  reducers:
    labels: append
nodes:
  one:
    kind: subflow
    flow: tag.yaml
    input: {code: "state.codes[0]"}
    writes: {first: output.label}
  each:
    kind: map
    items: "state.codes"
    node:
      kind: subflow
      flow: tag.yaml
      input: {code: item}
      state: {prefix: "'@'"}
      writes: {labels: "[output.label]"}
edges:
  - {from: START, to: one}
  - {from: one, to: each}
  - {from: each, to: END}
`)
	gt := &gate{runs: map[string]int{}}
	g, dl := flow.Load(p, gt.registry())
	if g == nil || dl.HasErrors() {
		t.Fatalf("the flows do not load:\n%v", dl)
	}
	for name, url := range storetest.URLs(t) {
		t.Run(name, func(t *testing.T) {
			st, err := store.Open(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			eng := engine.New(st)
			res, err := eng.Run(ctx, g, engine.Request{Thread: "ok", Input: map[string]any{"codes": []any{"go", "sql"}}})
			if err != nil {
				t.Fatal(err)
			}
			if res.State["first"] != "#go/go" || !slices.Equal(strs(res.State["labels"]), []string{"@go/go", "@sql/sql"}) {
				t.Fatalf("state %v", res.State)
			}
			_, err = eng.Run(ctx, g, engine.Request{Thread: "long", Input: map[string]any{"codes": []any{"rust"}}})
			var ie *engine.InputError
			if !errors.As(err, &ie) || !strings.Contains(err.Error(), `input "code": length must be <= 3`) || !strings.Contains(err.Error(), `node "one"`) {
				t.Fatalf("an input the child refuses: %v", err)
			}
			threads, _ := st.Threads(ctx, store.ThreadOptions{})
			for _, th := range threads {
				if strings.HasPrefix(th.ID, "long"+engine.NSSep) {
					t.Errorf("the refused input left the child's thread %s", th.ID)
				}
			}
		})
	}
}

func strs(v any) []string {
	l, _ := v.([]any)
	out := make([]string, len(l))
	for i, x := range l {
		out[i], _ = x.(string)
	}
	return out
}
