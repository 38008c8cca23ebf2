package trellis_test

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

// chatV1 is a flow that answers through a prompt (offline: its
// fallback) and counts its turns; the versions below change it.
const chatV1 = `version: 1
name: chat
state:
  schema:
    type: object
    properties:
      message: {type: string, default: ""}
      answer: {type: string, default: ""}
      turns: {type: integer, default: 0}
      mood: {type: string, default: "calm"}
input: [message]
nodes:
  reply: {kind: llm, prompt: chat/reply, writes: {answer: output}}
  count: {kind: assign, set: {turns: "state.turns + 1"}}
edges:
  - {from: START, to: reply}
  - {from: reply, to: count}
  - {from: count, to: END}
`

const replyV1 = "---\nfallback: answered by version one\n---\nAnswer {{.state.message}}\n"

// writeChat writes a flow directory: the flow file and its prompt.
func writeChat(t *testing.T, dir, flowSrc, prompt string) string {
	t.Helper()
	for name, data := range map[string]string{"flows/chat.yaml": flowSrc, "prompts/chat/reply.prompt": prompt} {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "flows", "chat.yaml")
}

func load(t *testing.T, path string) *trellis.Flow {
	t.Helper()
	f, err := trellis.Load(path, trellis.Offline())
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// versionStores are the stores that keep flow versions.
func versionStores(t *testing.T) map[string]string {
	return map[string]string{
		"sqlite":   "sqlite:" + filepath.Join(t.TempDir(), "s.db"),
		"postgres": storetest.Postgres(t),
	}
}

func TestFlowVersionIsItsFilesWhereverTheyLie(t *testing.T) {
	a := load(t, writeChat(t, t.TempDir(), chatV1, replyV1))
	b := load(t, writeChat(t, t.TempDir(), chatV1, replyV1))
	va, vb := a.Version(), b.Version()
	if va.Version != vb.Version || va.Path != "flows/chat.yaml" || len(va.Files) != 2 || string(va.Files["prompts/chat/reply.prompt"]) != replyV1 {
		t.Fatalf("one set of files in two places: %s %s, path %q, files %d", va.Version, vb.Version, va.Path, len(va.Files))
	}
	c := load(t, writeChat(t, t.TempDir(), chatV1, strings.Replace(replyV1, "one", "two", 1)))
	if c.Version().Version == va.Version {
		t.Fatal("a changed prompt is the same version")
	}
	// compiled from its files alone, it is the same version
	again, err := trellis.LoadVersion(va, trellis.Offline())
	if err != nil {
		t.Fatal(err)
	}
	if again.Version().Version != va.Version || again.Name() != "chat" {
		t.Fatalf("reloaded as %s", again.Version().Version)
	}
}

// A thread started on version 1 runs version 1's nodes and prompts when
// version 2 is the flow loaded now; a compatible move succeeds, a
// breaking one is refused with its reason and succeeds with a migration,
// each recorded in the thread's history.
func TestThreadsStayOnTheirVersionUntilMoved(t *testing.T) {
	for name, addr := range versionStores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			rt, err := trellis.Open(ctx, addr)
			if err != nil {
				t.Fatal(err)
			}
			defer rt.Close()
			vs, err := trellis.NewVersions(rt.Store(), trellis.Offline())
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			v1 := load(t, writeChat(t, dir, chatV1, replyV1))
			if err := vs.Keep(ctx, v1); err != nil {
				t.Fatal(err)
			}
			if _, err := rt.Run(ctx, v1, "t1", map[string]any{"message": "hi"}); err != nil {
				t.Fatal(err)
			}
			// version 2: another prompt, a new node, a new field with a default
			v2src := strings.Replace(chatV1, "      mood:", "      tone: {type: string, default: \"plain\"}\n      mood:", 1)
			v2src = strings.Replace(v2src, "  count: {kind: assign, set: {turns: \"state.turns + 1\"}}",
				"  count: {kind: assign, set: {turns: \"state.turns + 10\"}}\n  sign: {kind: assign, set: {tone: \"'signed'\"}}", 1)
			v2src = strings.Replace(v2src, "  - {from: count, to: END}", "  - {from: count, to: sign}\n  - {from: sign, to: END}", 1)
			v2 := load(t, writeChat(t, dir, v2src, strings.Replace(replyV1, "one", "two", 1)))
			if err := vs.Keep(ctx, v2); err != nil {
				t.Fatal(err)
			}

			// a server that never loaded version 1 compiles it from the store
			other, err := trellis.NewVersions(rt.Store(), trellis.Offline())
			if err != nil {
				t.Fatal(err)
			}
			v1again, err := other.Flow(ctx, "chat", v1.Version().Version)
			if err != nil {
				t.Fatal(err)
			}
			res, err := rt.Run(ctx, v1again, "t1", map[string]any{"message": "again"})
			if err != nil {
				t.Fatal(err)
			}
			if res.State["answer"] != "answered by version one" || res.State["turns"] != 2 || res.State["tone"] != nil {
				t.Fatalf("the second turn on version 1: %v", res.State)
			}
			list, err := vs.List(ctx, "chat")
			if err != nil || len(list) != 2 {
				t.Fatalf("versions %v %v", list, err)
			}

			// compatible: moves as it is, and runs version 2 after
			effects, err := trellis.CheckMove(v1, v2, trellis.Migration{})
			if err != nil || len(effects) == 0 {
				t.Fatalf("a compatible change: %v %v", effects, err)
			}
			var recorded bool
			snap, _, err := rt.Move(ctx, v1, v2, "t1", trellis.Migration{}, func(context.Context) error { recorded = true; return nil })
			if err != nil || !recorded {
				t.Fatalf("compatible move: %v (recorded %v)", err, recorded)
			}
			res, err = rt.Run(ctx, v2, "t1", map[string]any{"message": "three"})
			if err != nil {
				t.Fatal(err)
			}
			if res.State["answer"] != "answered by version two" || res.State["turns"] != 12 || res.State["tone"] != "signed" {
				t.Fatalf("the turn after the move: %v", res.State)
			}
			hist, err := rt.History(ctx, "t1", trellis.HistoryOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var moves int
			for _, cp := range hist {
				if cp.Source == trellis.SourceMigrate {
					moves++
					if cp.Seq != snap.Seq || cp.Config["from_version"] != v1.Version().Version || cp.Config["to_version"] != v2.Version().Version {
						t.Fatalf("the move's checkpoint %+v", cp)
					}
				}
			}
			if moves != 1 {
				t.Fatalf("%d moves in the history", moves)
			}

			// breaking: mood becomes an integer and a required field appears
			v3src := strings.Replace(v2src, `mood: {type: string, default: "calm"}`, "mood: {type: integer, default: 0}\n      level: {type: integer}\n    required: [level]", 1)
			v3 := load(t, writeChat(t, dir, v3src, replyV1))
			if err := vs.Keep(ctx, v3); err != nil {
				t.Fatal(err)
			}
			_, _, err = rt.Move(ctx, v2, v3, "t1", trellis.Migration{}, nil)
			var me *trellis.MoveError
			if !errors.As(err, &me) || len(me.Breaking) != 2 || !strings.Contains(err.Error(), `field "mood" is retyped from string to integer`) ||
				!strings.Contains(err.Error(), `field "level" is new, required and has no default`) {
				t.Fatalf("a breaking move: %v", err)
			}
			// a migration that does not type-check is refused too
			_, _, err = rt.Move(ctx, v2, v3, "t1", trellis.Migration{Set: map[string]string{"mood": "state.mood", "level": "state.nope"}}, nil)
			if !errors.As(err, &me) || len(me.Problems) != 2 || !strings.Contains(err.Error(), `migration of "mood"`) || !strings.Contains(err.Error(), "nope") {
				t.Fatalf("a migration that does not type-check: %v", err)
			}
			if head, _ := rt.State(ctx, "t1"); head.Values["mood"] != "calm" {
				t.Fatalf("a refused move changed the state: %v", head.Values)
			}
			_, _, err = rt.Move(ctx, v2, v3, "t1", trellis.Migration{Set: map[string]string{
				"mood":  "state.mood == 'calm' ? 1 : 0",
				"level": "state.turns * 2",
			}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			head, err := rt.State(ctx, "t1")
			if err != nil || head.Values["mood"] != 1 || head.Values["level"] != 24 {
				t.Fatalf("after the migration: %v %v", head.Values, err)
			}
			if _, err := rt.Run(ctx, v3, "t1", map[string]any{"message": "four"}); err != nil {
				t.Fatalf("a turn on version 3: %v", err)
			}
		})
	}
}

// A thread paused at a node moves to a version that has the node, and
// resumes there; it cannot move to one without it. A removed field is
// dropped only when the migration says so.
func TestMovesCheckWhatTheThreadHolds(t *testing.T) {
	for name, addr := range versionStores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			rt, err := trellis.Open(ctx, addr)
			if err != nil {
				t.Fatal(err)
			}
			defer rt.Close()
			src, err := os.ReadFile("flows/examples/approval.yaml")
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			write := func(name, text string) *trellis.Flow {
				p := filepath.Join(dir, name)
				if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
				return load(t, p)
			}
			v1 := write("v1.yaml", string(src))
			if _, err := rt.Run(ctx, v1, "t", map[string]any{"candidate": "Ada", "score": 82}); err != nil {
				t.Fatal(err)
			}
			if head, _ := rt.State(ctx, "t"); len(head.Next) != 1 || head.Next[0] != "recruiter" {
				t.Fatalf("the thread does not wait on the recruiter: %+v", head)
			}
			renamed := write("renamed.yaml", strings.ReplaceAll(string(src), "recruiter", "reviewer"))
			_, _, err = rt.Move(ctx, v1, renamed, "t", trellis.Migration{}, nil)
			var ie *trellis.InputError
			if !errors.As(err, &ie) || !strings.Contains(err.Error(), `waits to run node "recruiter"`) {
				t.Fatalf("a move to a version without the node the thread waits on: %v", err)
			}
			kinder := write("kinder.yaml", strings.Replace(string(src), "thank you for your time", "thank you warmly for your time", 1))
			if _, _, err := rt.Move(ctx, v1, kinder, "t", trellis.Migration{}, nil); err != nil {
				t.Fatal(err)
			}
			res, err := rt.Resume(ctx, kinder, "t", trellis.WithAnswers(map[string]any{"recruiter": map[string]any{"approve": false}}))
			if err != nil {
				t.Fatal(err)
			}
			if letter, _ := res.State["letter"].(string); !strings.Contains(letter, "thank you warmly") {
				t.Fatalf("the resumed run did not run the version moved to: %v", res.State)
			}

			// note is removed: breaking until dropped
			without := write("without.yaml", strings.NewReplacer(`      note: {type: string, default: ""}`+"\n", "",
				`      note: "type(answer) == 'map' && answer.note != nil ? string(answer.note) : ''"`+"\n", "",
				`{{with .state.note}} ({{.}}){{end}}`, "").Replace(string(src)))
			_, _, err = rt.Move(ctx, kinder, without, "t", trellis.Migration{}, nil)
			if err == nil || !strings.Contains(err.Error(), `field "note" is removed`) {
				t.Fatalf("a removed field: %v", err)
			}
			if _, _, err := rt.Move(ctx, kinder, without, "t", trellis.Migration{Drop: []string{"note"}}, nil); err != nil {
				t.Fatal(err)
			}
			head, err := rt.State(ctx, "t")
			if err != nil {
				t.Fatal(err)
			}
			if v, had := head.Values["note"]; had && v != nil {
				t.Fatalf("the dropped field is still %v", v)
			}
			if _, err := rt.Run(ctx, without, "t", map[string]any{"candidate": "Grace", "score": 90}); err != nil {
				t.Fatalf("a run after the drop: %v", err)
			}
		})
	}
}

// A server runs a thread's version compiled once: the compiled version
// at hand, against compiling it from the store's files (the first turn
// of a version a server never loaded).
//
//	go test -run '^$' -bench VersionsFlow .
func BenchmarkVersionsFlow(b *testing.B) {
	ctx := context.Background()
	rt, err := trellis.Open(ctx, "sqlite:"+filepath.Join(b.TempDir(), "s.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close()
	f, err := trellis.Load("flows/interview.yaml", trellis.Offline())
	if err != nil {
		b.Fatal(err)
	}
	vs, err := trellis.NewVersions(rt.Store(), trellis.Offline())
	if err != nil {
		b.Fatal(err)
	}
	if err := vs.Keep(ctx, f); err != nil {
		b.Fatal(err)
	}
	v := f.Version()
	b.Run("cached", func(b *testing.B) {
		for b.Loop() {
			if _, err := vs.Flow(ctx, v.Flow, v.Version); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("from-store", func(b *testing.B) {
		for b.Loop() {
			fresh, err := trellis.NewVersions(rt.Store(), trellis.Offline())
			if err != nil {
				b.Fatal(err)
			}
			if _, err := fresh.Flow(ctx, v.Flow, v.Version); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// Every flow of the repository compiles from its version's files alone:
// the version holds every file compiling it read, the schemas a schema
// refers to ($ref) among them.
func TestTheFlowsCompileFromTheirVersions(t *testing.T) {
	files, err := trellis.FindFlows("flows")
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range files {
		f := load(t, file)
		v := f.Version()
		again, err := trellis.LoadVersion(v, trellis.Offline())
		if err != nil {
			t.Errorf("%s: %v", file, err)
			continue
		}
		if again.Version().Version != v.Version {
			t.Errorf("%s: compiled again as version %s, not %s", file, again.Version().Version, v.Version)
		}
		if f.Name() == "interview" && v.Files["schemas/resume.json"] == nil {
			t.Errorf("the interview's version lacks the schema its state schema refers to: %v", slices.Sorted(maps.Keys(v.Files)))
		}
	}
}
