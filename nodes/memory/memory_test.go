package memory_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind"
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

var ctx = context.Background()

// notes remembers a note per thread under its user, recalls the user's
// notes from other threads, finds them by a word, and forgets one.
const notes = `version: 1
name: notes
input: [note, forget]
state:
  schema:
    type: object
    properties:
      user: {type: string, default: "u-1"}
      thread: {type: string, default: "t-1"}
      note: {type: string, default: ""}
      forget: {type: string, default: ""}
      recalled: {type: array, items: {type: string}, default: []}
      found: {type: array, items: {type: string}, default: []}
      mine: {type: ["string", "null"], default: null}
      written_at: {type: string, default: ""}
      expires: {type: ["string", "null"], default: null}
      forgotten: {type: boolean, default: false}
nodes:
  recall:
    kind: memory
    action: search
    namespace: "['users', state.user, 'notes']"
    limit: 50
    schema: &note
      type: object
      required: [text, thread]
      properties:
        text: {type: string}
        thread: {type: string}
    writes:
      recalled: "map(output, .value.text)"
  find:
    kind: memory
    action: search
    namespace: "['users', state.user]"
    query: "'deadline'"
    schema: *note
    writes:
      found: "map(output, .value.thread + ':' + .key)"
  remember:
    kind: memory
    action: put
    namespace: "['users', state.user, 'notes']"
    key: state.thread
    value: "{text: state.note, thread: state.thread}"
    ttl: 720h
    schema: *note
    writes:
      written_at: output.updated
      expires: output.expires
  read_back:
    kind: memory
    action: get
    namespace: "['users', state.user, 'notes']"
    key: state.thread
    schema: *note
    writes:
      mine: "output?.value.text"
  forget:
    kind: memory
    action: delete
    namespace: "['users', state.user, 'notes']"
    key: state.forget
    writes:
      forgotten: output
edges:
  - {from: START, to: recall}
  - {from: recall, to: find}
  - from: find
    branch:
      - {when: "state.forget != ''", to: forget}
      - {when: "state.note != ''", to: remember}
      - else: END
  - {from: remember, to: read_back}
  - {from: read_back, to: END}
  - {from: forget, to: END}
`

func load(t *testing.T, src string) *flow.Graph {
	t.Helper()
	g, dl := flow.LoadSource("notes.yaml", []byte(src), all.Offline())
	if g == nil || dl.HasErrors() {
		t.Fatal(dl)
	}
	return g
}

// Threads of one user remember each other's notes through the store, on
// every store: a thread recalls what the others wrote, finds them by a
// word, reads its own back, and forgets one; another user's notes stay
// apart.
func TestThreadsRememberEachOther(t *testing.T) {
	g := load(t, notes)
	for name, url := range storetest.URLs(t) {
		t.Run(name, func(t *testing.T) {
			st, err := store.Open(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			run := func(thread, user string, input map[string]any) map[string]any {
				t.Helper()
				res, err := engine.New(st).Run(ctx, g, engine.Request{Thread: thread, Values: map[string]any{"user": user, "thread": thread}, Input: input})
				if err != nil {
					t.Fatalf("%s: %v", thread, err)
				}
				return res.State
			}
			before := time.Now()
			s := run("t-1", "u-1", map[string]any{"note": "The deadline is Friday."})
			if !reflect.DeepEqual(s["recalled"], []any{}) || s["mine"] != "The deadline is Friday." {
				t.Fatalf("the first thread: %v", s)
			}
			written, err := time.Parse(time.RFC3339Nano, s["written_at"].(string))
			if err != nil || written.Before(before.Add(-time.Second)) || written.After(time.Now()) {
				t.Fatalf("written at %v: %v", s["written_at"], err)
			}
			expires, err := time.Parse(time.RFC3339Nano, s["expires"].(string))
			if err != nil || expires.Sub(written) != 720*time.Hour {
				t.Fatalf("expires %v, written %v: %v", s["expires"], written, err)
			}
			s = run("t-2", "u-1", map[string]any{"note": "Ask about the cache."})
			if !reflect.DeepEqual(s["recalled"], []any{"The deadline is Friday."}) || !reflect.DeepEqual(s["found"], []any{"t-1:t-1"}) {
				t.Fatalf("the second thread recalls %v, finds %v", s["recalled"], s["found"])
			}
			// another user has notes of their own
			s = run("t-3", "u-2", map[string]any{"note": "A deadline too."})
			if !reflect.DeepEqual(s["recalled"], []any{}) || !reflect.DeepEqual(s["found"], []any{}) {
				t.Fatalf("another user recalls %v, finds %v", s["recalled"], s["found"])
			}
			// newest first
			s = run("t-4", "u-1", nil)
			if !reflect.DeepEqual(s["recalled"], []any{"Ask about the cache.", "The deadline is Friday."}) {
				t.Fatalf("the third thread recalls %v", s["recalled"])
			}
			s = run("t-4", "u-1", map[string]any{"forget": "t-1"})
			if s["forgotten"] != true {
				t.Fatalf("forget: %v", s)
			}
			s = run("t-4", "u-1", map[string]any{"forget": "t-1"})
			if s["forgotten"] != false || !reflect.DeepEqual(s["recalled"], []any{"Ask about the cache."}) {
				t.Fatalf("after forgetting: %v", s)
			}
		})
	}
}

// A run's memory is its context's when it carries one (a server's
// tenant's): tenants do not see each other's documents, nor those of
// runs given no tenant.
func TestTenantsApart(t *testing.T) {
	g := load(t, notes)
	st, err := store.Open(ctx, "memory")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	m, _ := store.MemoryOf(st)
	run := func(tenant, thread string, input map[string]any) map[string]any {
		t.Helper()
		c := ctx
		if tenant != "" {
			c = kind.WithMemory(ctx, engine.Memory(m, tenant))
		}
		res, err := engine.New(st).Run(c, g, engine.Request{Thread: tenant + thread, Values: map[string]any{"thread": thread}, Input: input})
		if err != nil {
			t.Fatal(err)
		}
		return res.State
	}
	run("acme", "a1", map[string]any{"note": "acme's deadline"})
	run("", "n1", map[string]any{"note": "nobody's deadline"})
	if s := run("globex", "g1", nil); !reflect.DeepEqual(s["recalled"], []any{}) {
		t.Fatalf("globex recalls %v", s["recalled"])
	}
	if s := run("acme", "a2", nil); !reflect.DeepEqual(s["recalled"], []any{"acme's deadline"}) {
		t.Fatalf("acme recalls %v", s["recalled"])
	}
	if s := run("", "n2", nil); !reflect.DeepEqual(s["recalled"], []any{"nobody's deadline"}) {
		t.Fatalf("a run with no tenant recalls %v", s["recalled"])
	}
	if _, err := m.GetMemory(ctx, "acme", []string{"users", "u-1", "notes"}, "a1", time.Now()); err != nil {
		t.Fatalf("acme's document in the store: %v", err)
	}
}

// What a run cannot do says why, and does not retry: a name that is not a
// string, a document that does not match the schema (put, or found), a
// key the store refuses, a store that keeps no memory.
func TestRunErrors(t *testing.T) {
	st, err := store.Open(ctx, "memory")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	base := `version: 1
name: bad
input: [user, text]
state:
  schema:
    type: object
    properties:
      user: {type: ["string", "null"], default: null}
      text: {type: ["string", "null"], default: null}
      got: {default: null}
nodes:
  n:
    kind: memory
    retry: {attempts: 3}
NODE
edges:
  - {from: START, to: n}
  - {from: n, to: END}
`
	for _, c := range []struct {
		name, node string
		input      map[string]any
		want       string
	}{
		{"null-name", `    action: put
    namespace: "['users', state.user]"
    key: "'k'"
    value: "1"`, nil, `namespace: name 2 is null, not a string`},
		{"not-a-list", `    action: get
    namespace: "state.got"
    key: "'k'"
    writes: {got: output}`, nil, `namespace: null, not a list of names`},
		{"refused-key", `    action: put
    namespace: "['users']"
    key: "state.text"
    value: "1"`, map[string]any{"text": "a\nb"}, `invalid memory namespace or key: key "a\nb" holds a control character`},
		{"value-against-schema", `    action: put
    namespace: "['users']"
    key: "'k'"
    value: "{text: state.text ?? ''}"
    schema: {type: object, properties: {text: {type: string, minLength: 2}}}`, map[string]any{}, `value does not match the documents' schema`},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := load(t, strings.Replace(base, "NODE", c.node, 1))
			var attempts int
			_, err := engine.New(st).Run(ctx, g, engine.Request{Thread: c.name, Input: c.input, Observe: func(ev engine.Event) {
				if ev.Type == engine.NodeStart {
					attempts++
				}
			}})
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), `node "n"`) {
				t.Fatalf("got %v, want an error of node n saying %q", err, c.want)
			}
			if attempts != 1 {
				t.Fatalf("%d attempts: a permanent failure is not retried", attempts)
			}
		})
	}
	// a document someone else wrote that does not match the schema
	m, _ := store.MemoryOf(st)
	if err := m.PutMemory(ctx, "", &store.MemoryItem{Namespace: []string{"users"}, Key: "k", Value: []byte(`{"text": 7}`), Updated: time.Now()}); err != nil {
		t.Fatal(err)
	}
	for _, action := range []string{"get", "search"} {
		node := `    action: ` + action + `
    namespace: "['users']"
    schema: {type: object, properties: {text: {type: string}}}
    writes: {got: output}`
		if action == "get" {
			node += "\n    key: \"'k'\""
		}
		g := load(t, strings.Replace(base, "NODE", node, 1))
		_, err := engine.New(st).Run(ctx, g, engine.Request{Thread: "found-" + action})
		if err == nil || !strings.Contains(err.Error(), `the document [users] "k" does not match the documents' schema`) {
			t.Fatalf("%s of a document that does not match: %v", action, err)
		}
	}
	// a store that keeps no memory
	g := load(t, strings.Replace(base, "NODE", `    action: delete
    namespace: "['users']"
    key: "'k'"`, 1))
	_, err = engine.New(noMemory{st}).Run(ctx, g, engine.Request{Thread: "none"})
	if !errors.Is(err, kind.ErrNoMemory) {
		t.Fatalf("a store without memory: %v", err)
	}
}

// noMemory is a store that keeps no documents.
type noMemory struct{ store.Store }

// The settings are checked before anything runs, each problem where it
// is: settings of another action, a missing key, value or writes,
// expressions of the wrong type, a value that does not fit the schema,
// writes reading what the documents do not have.
func TestSettingsChecked(t *testing.T) {
	base := `version: 1
name: bad
state:
  schema:
    type: object
    properties:
      user: {type: string, default: "u"}
      n: {type: integer, default: 0}
      text: {type: string, default: ""}
      list: {type: array, default: []}
nodes:
  n:
    kind: memory
NODE
edges:
  - {from: START, to: n}
  - {from: n, to: END}
`
	for _, c := range []struct{ node, want string }{
		{`    action: search
    namespace: "['u']"
    key: "'k'"
    writes: {list: output}`, `key is a setting of get, put and delete, not of search`},
		{`    action: get
    namespace: "['u']"
    writes: {list: output}`, `a get needs key`},
		{`    action: put
    namespace: "['u']"
    key: "'k'"`, `a put needs value`},
		{`    action: get
    namespace: "['u']"
    key: "'k'"
    query: "'x'"
    writes: {list: output}`, `query is a setting of search, not of get`},
		{`    action: delete
    namespace: "['u']"
    key: "'k'"
    ttl: 1h`, `ttl is a setting of put, not of delete`},
		{`    action: get
    namespace: "['u']"
    key: "'k'"
    index: false
    writes: {list: output}`, `index is a setting of put, not of get`},
		{`    action: put
    namespace: "['u']"
    key: "'k'"
    value: "{text: 'x'}"
    index: "no"`, `index: expected boolean, but got string`},
		{`    action: search
    namespace: "['u']"`, `a search writes what it finds: give writes`},
		{`    action: search
    namespace: "state.user"
    writes: {list: output}`, `namespace gives a string, not a list`},
		{`    action: get
    namespace: "['u']"
    key: "state.n"
    writes: {list: output}`, `key gives a number, not a string`},
		{`    action: put
    namespace: "['u']"
    key: "'k'"
    value: "{text: 1}"
    ttl: 10ms`, `ttl: 10ms is under a second`},
		{`    action: put
    namespace: "['u']"
    key: "'k'"
    value: "state.n"
    schema: {type: object, properties: {text: {type: string}}}`, `the documents' schema`},
		{`    action: get
    namespace: "['u']"
    key: "'k'"
    schema: {type: object, additionalProperties: false, properties: {text: {type: string}}}
    writes: {text: "output?.value.title ?? ''"}`, `title`},
		{`    action: put
    namespace: "['u']"
    key: "'k'"
    value: "{text: 'x'}"
    schema: {type: object, additionalProperties: false, required: [text], properties: {text: {type: string}}}
    writes: {n: "output.value.text"}`, `output.value.text is string, where the field takes integer`},
		{`    action: search
    namespace: "['u']"
    writes: {n: output}`, `field "n"`},
		{`    action: frob
    namespace: "['u']"`, `value must be one of`},
	} {
		_, dl := flow.LoadSource("bad.yaml", []byte(strings.Replace(base, "NODE", c.node, 1)), all.Offline())
		if !dl.HasErrors() || !strings.Contains(fmt.Sprint(dl), c.want) {
			t.Errorf("settings\n%s\ngave %v, want an error saying %q", c.node, dl, c.want)
			continue
		}
		for _, d := range dl {
			if d.Severity == diag.Error && d.Line == 0 {
				t.Errorf("%q has no position", d.Summary)
			}
		}
	}
	// the same, right, load clean
	for _, node := range []string{`    action: get
    namespace: "['u', state.user]"
    key: "'k'"
    schema: {type: object, additionalProperties: false, required: [text], properties: {text: {type: string}}}
    writes: {text: "output?.value.text ?? ''"}`, `    action: search
    namespace: "['u']"
    query: state.text
    limit: 5
    writes: {list: "map(output, .key)", n: "len(output)"}`, `    action: put
    namespace: "['u']"
    key: "'k'"
    value: "{text: state.text}"
    ttl: 1h
    schema: {type: object, properties: {text: {type: string}}}
    writes: {text: output.updated}`} {
		if _, dl := flow.LoadSource("good.yaml", []byte(strings.Replace(base, "NODE", node, 1)), all.Offline()); len(dl) > 0 {
			t.Errorf("settings\n%s\ngave %v", node, dl)
		}
	}
}

// failingCommits is a store whose commits of a step that puts documents
// fail, as when the process dies between the node's put and its step's
// commit.
type failingCommits struct{ store.Store }

var errDied = errors.New("the process died before the step's commit")

func (f failingCommits) Commit(ctx context.Context, cp *store.Checkpoint) error {
	if len(cp.Memory) > 0 {
		return errDied
	}
	return f.Store.Commit(ctx, cp)
}

// A put is written with its step's checkpoint, in one transaction: when
// the step is not committed, the document is not written either (a put
// written at once would be there, its step not); when it is, both are.
func TestPutWithItsStep(t *testing.T) {
	g := load(t, notes)
	for name, url := range storetest.URLs(t) {
		t.Run(name, func(t *testing.T) {
			st, err := store.Open(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			m, ok := store.MemoryOf(st)
			if !ok {
				t.Fatalf("%s keeps no memory", name)
			}
			c := kind.WithMemory(ctx, engine.Memory(m, ""))
			ns := []string{"users", "u-1", "notes"}
			_, err = engine.New(failingCommits{st}).Run(c, g, engine.Request{Thread: "dies", Values: map[string]any{"thread": "dies"},
				Input: map[string]any{"note": "lost with its step"}})
			if !errors.Is(err, errDied) {
				t.Fatalf("the run whose step's commit failed: %v, want %v", err, errDied)
			}
			if it, err := m.GetMemory(ctx, "", ns, "dies", time.Now()); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("the document of a step that was not committed: %+v (%v), want none", it, err)
			}
			hist, err := st.History(ctx, "dies", store.HistoryOptions{Node: "remember"})
			if err != nil || len(hist) != 0 {
				t.Fatalf("the thread holds %d checkpoints of remember (%v), want none", len(hist), err)
			}
			// resumed, the step runs again and is committed with its put
			res, err := engine.New(st).Run(c, g, engine.Request{Thread: "dies", Resume: true})
			if err != nil {
				t.Fatal(err)
			}
			if res.State["mine"] != "lost with its step" {
				t.Fatalf("resumed, the run read back %v", res.State["mine"])
			}
			it, err := m.GetMemory(ctx, "", ns, "dies", time.Now())
			if err != nil || !strings.Contains(string(it.Value), "lost with its step") {
				t.Fatalf("the document once its step is committed: %+v (%v)", it, err)
			}
			if hist, err := st.History(ctx, "dies", store.HistoryOptions{Node: "remember"}); err != nil || len(hist) != 1 {
				t.Fatalf("the thread holds %d checkpoints of remember (%v), want 1", len(hist), err)
			}
		})
	}
}

// twoAtOnce puts a document beside a node that fails until the document
// it reads is mended.
const twoAtOnce = `version: 1
name: two_at_once
input: [go]
state:
  schema:
    type: object
    properties:
      go: {type: boolean, default: false}
      written_at: {type: string, default: ""}
      mine: {type: ["string", "null"], default: null}
nodes:
  remember:
    kind: memory
    action: put
    namespace: "['notes']"
    key: "'kept'"
    value: "{text: 'kept with its step'}"
    index: false
    writes:
      written_at: output.updated
  check:
    kind: memory
    action: get
    namespace: "['other']"
    key: "'read'"
    schema: {type: object, required: [text], properties: {text: {type: string}}}
    writes:
      mine: "output?.value.text"
edges:
  - {from: START, to: [remember, check]}
  - {from: remember, to: END}
  - {from: check, to: END}
`

// A node that completed in a step that failed keeps its update and the
// documents it put as a pending write: none is written until the step
// commits, and the step resumed writes the same document with the
// update it takes, without running the node again, put as the node put
// it (unindexed: listed, never found by its words).
func TestPutKeptWithSavedUpdate(t *testing.T) {
	g := load(t, twoAtOnce)
	for name, url := range storetest.URLs(t) {
		t.Run(name, func(t *testing.T) {
			st, err := store.Open(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			m, _ := store.MemoryOf(st)
			now := time.Now()
			if err := m.PutMemory(ctx, "", &store.MemoryItem{Namespace: []string{"other"}, Key: "read", Value: []byte(`{"nope": 1}`), Updated: now}); err != nil {
				t.Fatal(err)
			}
			_, err = engine.New(st).Run(ctx, g, engine.Request{Thread: "both", Input: map[string]any{"go": true}})
			if err == nil || !strings.Contains(err.Error(), "check") {
				t.Fatalf("the step whose check fails: %v", err)
			}
			if it, err := m.GetMemory(ctx, "", []string{"notes"}, "kept", time.Now()); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("the document put in a step that failed: %+v (%v), want none yet", it, err)
			}
			head, err := st.Head(ctx, "both")
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := head.Pending["remember"]; !ok {
				t.Fatalf("the update of remember was not kept: pending %v", head.Pending)
			}
			if err := m.PutMemory(ctx, "", &store.MemoryItem{Namespace: []string{"other"}, Key: "read", Value: []byte(`{"text": "mended"}`), Updated: now}); err != nil {
				t.Fatal(err)
			}
			res, err := engine.New(st).Run(ctx, g, engine.Request{Thread: "both", Resume: true})
			if err != nil {
				t.Fatal(err)
			}
			it, err := m.GetMemory(ctx, "", []string{"notes"}, "kept", time.Now())
			if err != nil {
				t.Fatalf("the document once its step is committed: %v", err)
			}
			if at := it.Updated.UTC().Format(time.RFC3339Nano); at != res.State["written_at"] || res.State["mine"] != "mended" {
				t.Fatalf("the document was written at %s, the kept update says %v (mine %v): the node ran again", at, res.State["written_at"], res.State["mine"])
			}
			later := time.Now().Add(time.Minute)
			if found, err := m.SearchMemory(ctx, "", store.MemoryQuery{Prefix: []string{"notes"}, Text: "kept", Now: later}); err != nil || len(found) != 0 {
				t.Fatalf("the document put with index: false is found by its words: %d (%v)", len(found), err)
			}
			if listed, err := m.SearchMemory(ctx, "", store.MemoryQuery{Prefix: []string{"notes"}, Now: later}); err != nil || len(listed) != 1 {
				t.Fatalf("the document put with index: false is not listed: %d (%v)", len(listed), err)
			}
		})
	}
}
