package server

import (
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/runtime/api"
)

// chatFlow is version 1 of a flow that answers through a prompt (the
// server runs offline: the prompt's fallback) and counts its turns.
const chatFlow = `version: 1
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

// chatV2 is a compatible change: another prompt, a step of 10, a new
// node writing a new field with a default.
func chatV2() (string, string) {
	src := strings.Replace(chatFlow, "      mood:", "      tone: {type: string, default: \"plain\"}\n      mood:", 1)
	src = strings.Replace(src, `turns: "state.turns + 1"}}`, `turns: "state.turns + 10"}}`+"\n  sign: {kind: assign, set: {tone: \"'signed'\"}}", 1)
	src = strings.Replace(src, "  - {from: count, to: END}", "  - {from: count, to: sign}\n  - {from: sign, to: END}", 1)
	return src, chatPrompt("two")
}

// chatV3 breaks v2's threads: mood becomes an integer, and a required
// field without a default appears.
func chatV3() (string, string) {
	src, prompt := chatV2()
	src = strings.Replace(src, `mood: {type: string, default: "calm"}`, "mood: {type: integer, default: 0}\n      level: {type: integer}\n    required: [level]", 1)
	return src, prompt
}

func chatPrompt(version string) string {
	return "---\nfallback: answered by version " + version + "\n---\nAnswer {{.state.message}}\n"
}

func writeChatFlow(t *testing.T, dir, src, prompt string) {
	t.Helper()
	for name, data := range map[string]string{"flows/chat.yaml": src, "prompts/chat/reply.prompt": prompt} {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// chatServer serves dir's flows offline over the store at addr (shared
// with other servers when addr is one's).
func chatServer(t *testing.T, addr, dir string) *harness {
	rt, err := trellis.Open(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	return newHarness(t, "memory", nil, func(c *Config) {
		c.Runtime, c.FlowsDir, c.Kinds = rt, filepath.Join(dir, "flows"), all.Offline()
	})
}

func say(t *testing.T, c *api.Client, thread, message string) *api.Run {
	t.Helper()
	run, err := c.RunWait(ctx, thread, api.StartRun{Input: map[string]any{"message": message}})
	if err != nil {
		t.Fatal(err)
	}
	if run.Status != "succeeded" {
		t.Fatalf("run %+v", run)
	}
	return run
}

func versionOf(t *testing.T, c *api.Client) string {
	t.Helper()
	f, err := c.Flow(ctx, "chat")
	if err != nil {
		t.Fatal(err)
	}
	return f.Version
}

// A served thread keeps the version it started on across a reload of its
// flow, until it is moved through the API: a compatible move at once, a
// breaking one only with a migration; the API lists the versions with
// the threads on each. A reload keeps the new version without promoting
// it (new threads still start on the first) unless asked to.
func TestThreadsKeepTheirFlowVersionAcrossAReload(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			dir := t.TempDir()
			writeChatFlow(t, dir, chatFlow, chatPrompt("one"))
			h := chatServer(t, storeAddr(t, b.addr), dir)
			v1 := versionOf(t, h.acme)
			if _, err := h.acme.CreateThread(ctx, api.CreateThread{ID: "old", Flow: "chat"}); err != nil {
				t.Fatal(err)
			}
			say(t, h.acme, "old", "hello")

			src, prompt := chatV2()
			writeChatFlow(t, dir, src, prompt)
			reload, err := h.admin.ReloadFlows(ctx)
			if err != nil {
				t.Fatal(err)
			}
			v2 := versionOf(t, h.acme)
			if v2 == v1 {
				t.Fatal("the reload did not change the version")
			}
			if len(reload.Flows) != 1 || reload.Flows[0].Version != v2 || reload.Flows[0].Promoted != v1 {
				t.Fatalf("the reload: %+v, want version %s loaded and %s promoted", reload.Flows, v2, v1)
			}
			// not promoted: a new thread still starts on version 1
			if _, err := h.acme.CreateThread(ctx, api.CreateThread{ID: "kept", Flow: "chat"}); err != nil {
				t.Fatal(err)
			}
			if run := say(t, h.acme, "kept", "hi"); run.FlowVersion != v1 || run.State["answer"] != "answered by version one" {
				t.Fatalf("a new thread after a reload that promotes nothing ran %s: %v", run.FlowVersion, run.State)
			}
			if reload, err = h.admin.ReloadAndPromote(ctx); err != nil || reload.Flows[0].Promoted != v2 {
				t.Fatalf("a reload that promotes: %+v %v", reload, err)
			}
			// the next turn runs version 1's nodes and prompt
			run := say(t, h.acme, "old", "again")
			if run.FlowVersion != v1 || run.State["answer"] != "answered by version one" || run.State["turns"] != 2 || run.State["tone"] != nil {
				t.Fatalf("the turn after the reload ran %s: %v", run.FlowVersion, run.State)
			}
			// a new thread starts on version 2
			if _, err := h.acme.CreateThread(ctx, api.CreateThread{ID: "new", Flow: "chat"}); err != nil {
				t.Fatal(err)
			}
			if run := say(t, h.acme, "new", "hi"); run.FlowVersion != v2 || run.State["answer"] != "answered by version two" || run.State["tone"] != "signed" {
				t.Fatalf("a new thread ran %s: %v", run.FlowVersion, run.State)
			}
			list, err := h.acme.FlowVersions(ctx, "chat")
			if err != nil {
				t.Fatal(err)
			}
			if len(list.Versions) != 2 || list.Versions[0].Version != v2 || !list.Versions[0].Loaded || !list.Versions[0].Promoted || list.Versions[0].Threads != 1 ||
				list.Versions[1].Version != v1 || list.Versions[1].Loaded || list.Versions[1].Promoted || list.Versions[1].Threads != 2 {
				t.Fatalf("versions %+v", list.Versions)
			}
			on1, err := h.acme.VersionThreads(ctx, "chat", v1, "")
			if err != nil || len(on1.Threads) != 2 || on1.Threads[1].Thread != "old" {
				t.Fatalf("threads on version 1: %+v %v", on1, err)
			}
			if other, err := h.globex.FlowVersions(ctx, "chat"); err != nil || other.Versions[0].Threads+other.Versions[1].Threads != 0 {
				t.Fatalf("another tenant sees threads: %+v %v", other, err)
			}

			// a dry run classifies the change and moves nothing
			dry, err := h.acme.MoveThread(ctx, "old", api.MoveThread{To: v2, DryRun: true})
			if err != nil || dry.Moved || dry.From != v1 || len(dry.Effects) == 0 {
				t.Fatalf("dry run %+v %v", dry, err)
			}
			moved, err := h.acme.MoveThread(ctx, "old", api.MoveThread{To: v2})
			if err != nil || !moved.Moved || moved.Checkpoint == 0 {
				t.Fatalf("compatible move %+v %v", moved, err)
			}
			hist, err := h.acme.History(ctx, "old", url.Values{"source": {"migrate"}})
			if err != nil || len(hist) != 1 || hist[0].Seq != moved.Checkpoint {
				t.Fatalf("the move in the history: %+v %v", hist, err)
			}
			if run := say(t, h.acme, "old", "three"); run.FlowVersion != v2 || run.State["answer"] != "answered by version two" || run.State["turns"] != 12 {
				t.Fatalf("after the move the thread ran %s: %v", run.FlowVersion, run.State)
			}

			// a fork runs the version its checkpoint was made by
			if _, err := h.acme.Fork(ctx, "old", api.Fork{ID: "before", At: moved.Checkpoint - 1}); err != nil {
				t.Fatal(err)
			}
			if run := say(t, h.acme, "before", "forked"); run.FlowVersion != v1 || run.State["answer"] != "answered by version one" {
				t.Fatalf("a fork from before the move ran %s: %v", run.FlowVersion, run.State)
			}
			head, err := h.acme.State(ctx, "old", 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := h.acme.Fork(ctx, "old", api.Fork{ID: "after", At: head.Checkpoint}); err != nil {
				t.Fatal(err)
			}
			if run := say(t, h.acme, "after", "forked"); run.FlowVersion != v2 {
				t.Fatalf("a fork from after the move ran %s", run.FlowVersion)
			}

			src, prompt = chatV3()
			writeChatFlow(t, dir, src, prompt)
			if _, err := h.admin.ReloadFlows(ctx); err != nil {
				t.Fatal(err)
			}
			v3 := versionOf(t, h.acme)
			_, err = h.acme.MoveThread(ctx, "old", api.MoveThread{To: v3})
			var ae *api.Error
			if !api.IsCode(err, api.CodeMoveRefused) || !strings.Contains(err.Error(), `field "mood" is retyped`) || !strings.Contains(err.Error(), `field "level" is new, required`) {
				t.Fatalf("a breaking move: %v", err)
			}
			if errors.As(err, &ae); ae.Status != 409 {
				t.Fatalf("status %d", ae.Status)
			}
			moved, err = h.acme.MoveThread(ctx, "old", api.MoveThread{To: v3, Migration: &api.Migration{Set: map[string]string{
				"mood": "state.mood == 'calm' ? 1 : 0", "level": "state.turns",
			}}})
			if err != nil || !moved.Moved {
				t.Fatalf("a breaking move with a migration: %+v %v", moved, err)
			}
			st, err := h.acme.State(ctx, "old", 0)
			if err != nil || st.Values["mood"] != 1 || st.Values["level"] != 12 {
				t.Fatalf("the migrated state: %+v %v", st, err)
			}
			if run := say(t, h.acme, "old", "four"); run.FlowVersion != v3 {
				t.Fatalf("after the migration the thread ran %s", run.FlowVersion)
			}
			if _, err := h.acme.MoveThread(ctx, "old", api.MoveThread{To: "0123456789abcdef"}); !api.IsCode(err, api.CodeNotFound) {
				t.Fatalf("a move to no version: %v", err)
			}
		})
	}
}

// Two servers share a store: a thread made on one that loaded version 1
// runs version 1 on the other, which only ever loaded version 2.
func TestAReplicaRunsAVersionItNeverLoaded(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			addr := storeAddr(t, b.addr)
			dir1, dir2 := t.TempDir(), t.TempDir()
			writeChatFlow(t, dir1, chatFlow, chatPrompt("one"))
			src, prompt := chatV2()
			writeChatFlow(t, dir2, src, prompt)
			one := chatServer(t, addr, dir1)
			two := chatServer(t, addr, dir2)
			v1 := versionOf(t, one.acme)
			if _, err := one.acme.CreateThread(ctx, api.CreateThread{ID: "t", Flow: "chat"}); err != nil {
				t.Fatal(err)
			}
			run := say(t, two.acme, "t", "hello")
			if run.FlowVersion != v1 || run.State["answer"] != "answered by version one" || run.State["turns"] != 1 || run.State["tone"] != nil {
				t.Fatalf("the other server ran %s (v1 %s): %v", run.FlowVersion, v1, run.State)
			}
			if versionOf(t, two.acme) == v1 {
				t.Fatal("both servers loaded one version")
			}
		})
	}
}

// A version promoted through one server is what new threads start on
// through every server sharing the store, whatever each loaded from its
// flow directory: a server that never loaded it compiles it from the
// store; threads under way keep theirs. Before it, the first server's
// first load is what both start new threads on.
func TestPromotedVersionStartsNewThreadsEverywhere(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			addr := storeAddr(t, b.addr)
			dirA, dirB := t.TempDir(), t.TempDir()
			writeChatFlow(t, dirA, chatFlow, chatPrompt("one"))
			src, prompt := chatV2()
			writeChatFlow(t, dirB, src, prompt)
			a := chatServer(t, addr, dirA) // the flow's first load: version 1 promoted
			bsrv := chatServer(t, addr, dirB)
			v1, v2 := versionOf(t, a.acme), versionOf(t, bsrv.acme)
			if v1 == v2 {
				t.Fatal("the two flow directories make one version")
			}
			f, err := bsrv.acme.Flow(ctx, "chat")
			if err != nil || f.Version != v2 || f.Promoted != v1 {
				t.Fatalf("the flow on B before the promotion: %+v %v, want %s loaded and %s promoted", f, err, v2, v1)
			}
			newThread := func(h *harness, id, wantVersion, wantAnswer string) {
				t.Helper()
				th, err := h.acme.CreateThread(ctx, api.CreateThread{ID: id, Flow: "chat"})
				if err != nil || th.Version != wantVersion {
					t.Fatalf("thread %s: %+v %v, want version %s", id, th, err, wantVersion)
				}
				if run := say(t, h.acme, id, "hi"); run.FlowVersion != wantVersion || run.State["answer"] != wantAnswer {
					t.Fatalf("thread %s ran %s: %v, want %s", id, run.FlowVersion, run.State, wantVersion)
				}
			}
			newThread(bsrv, "b-before", v1, "answered by version one")

			// promoted through A, which never loaded version 2
			if _, err := a.acme.PromoteVersion(ctx, "chat", v2); !api.IsCode(err, api.CodeForbidden) {
				t.Fatalf("a tenant's key promoting: %v, want forbidden", err)
			}
			if _, err := a.admin.PromoteVersion(ctx, "chat", "0123456789abcdef"); !api.IsCode(err, api.CodeNotFound) {
				t.Fatalf("promoting no version: %v, want not_found", err)
			}
			p, err := a.admin.PromoteVersion(ctx, "chat", v2)
			if err != nil || p.Version != v2 || p.Previous != v1 || p.By == "" {
				t.Fatalf("promote: %+v %v", p, err)
			}
			newThread(bsrv, "b-after", v2, "answered by version two")
			newThread(a, "a-after", v2, "answered by version two")
			// the thread under way stays on its version
			if run := say(t, bsrv.acme, "b-before", "again"); run.FlowVersion != v1 {
				t.Fatalf("a thread made before the promotion ran %s", run.FlowVersion)
			}
			list, err := a.acme.FlowVersions(ctx, "chat")
			if err != nil || len(list.Versions) != 2 {
				t.Fatalf("versions: %+v %v", list, err)
			}
			for _, v := range list.Versions {
				if v.Promoted != (v.Version == v2) || v.Loaded != (v.Version == v1) {
					t.Errorf("version %s on A: promoted %v, loaded %v", v.Version, v.Promoted, v.Loaded)
				}
			}
			// A reloading its own directory (version 1) leaves version 2
			// promoted: nothing asked otherwise
			if r, err := a.admin.ReloadFlows(ctx); err != nil || r.Flows[0].Promoted != v2 {
				t.Fatalf("a reload after the promotion: %+v %v", r, err)
			}
			newThread(a, "a-reloaded", v2, "answered by version two")
		})
	}
}

// A move's dry run makes the move's own checks over the thread's state:
// a migration whose value the new field refuses (too short) is refused by
// the dry run as by the move. A dropped field is taken out of the state,
// not left null, and the move's checkpoint in the history names the
// versions it left and moved to, and the field it removed.
func TestMoveDryRunChecksAndDropRemoves(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			dir := t.TempDir()
			writeChatFlow(t, dir, chatFlow, chatPrompt("one"))
			h := chatServer(t, storeAddr(t, b.addr), dir)
			v1 := versionOf(t, h.acme)
			if _, err := h.acme.CreateThread(ctx, api.CreateThread{ID: "t", Flow: "chat"}); err != nil {
				t.Fatal(err)
			}
			say(t, h.acme, "t", "hello")
			// version 2: mood is gone, label is new and at least 5 long
			src := strings.Replace(chatFlow, `      mood: {type: string, default: "calm"}`, `      label: {type: string, minLength: 5, default: "plain"}`, 1)
			writeChatFlow(t, dir, src, chatPrompt("two"))
			if _, err := h.admin.ReloadFlows(ctx); err != nil {
				t.Fatal(err)
			}
			v2 := versionOf(t, h.acme)
			short := &api.Migration{Set: map[string]string{"label": "state.mood"}, Drop: []string{"mood"}}
			for _, dry := range []bool{true, false} {
				_, err := h.acme.MoveThread(ctx, "t", api.MoveThread{To: v2, Migration: short, DryRun: dry})
				if !api.IsCode(err, api.CodeInvalidInput) || !strings.Contains(err.Error(), "label") {
					t.Fatalf("a migration to a value too short (dry run %v): %v, want invalid_input on label", dry, err)
				}
			}
			if th, err := h.acme.Thread(ctx, "t"); err != nil || th.Version != v1 {
				t.Fatalf("after the refused moves: %+v %v", th, err)
			}
			ok := &api.Migration{Set: map[string]string{"label": "state.mood + '-mood'"}, Drop: []string{"mood"}}
			dry, err := h.acme.MoveThread(ctx, "t", api.MoveThread{To: v2, Migration: ok, DryRun: true})
			if err != nil || dry.Moved {
				t.Fatalf("a dry run that passes: %+v %v", dry, err)
			}
			moved, err := h.acme.MoveThread(ctx, "t", api.MoveThread{To: v2, Migration: ok})
			if err != nil || !moved.Moved {
				t.Fatalf("the move: %+v %v", moved, err)
			}
			st, err := h.acme.State(ctx, "t", 0)
			if err != nil {
				t.Fatal(err)
			}
			if v, has := st.Values["mood"]; has {
				t.Fatalf("the dropped field is in the state: mood = %v (%v)", v, st.Values)
			}
			if st.Values["label"] != "calm-mood" {
				t.Fatalf("the migrated state: %v", st.Values)
			}
			hist, err := h.acme.History(ctx, "t", url.Values{"source": {"migrate"}})
			if err != nil || len(hist) != 1 {
				t.Fatalf("the move's checkpoint: %+v %v", hist, err)
			}
			cp := hist[0]
			if cp.Move == nil || cp.Move.From != v1 || cp.Move.To != v2 || cp.Move.Flow != "chat" {
				t.Fatalf("the move's checkpoint names no versions: %+v", cp.Move)
			}
			removed := false
			for _, w := range cp.Writes {
				if w.Field == "mood" {
					removed = w.Removed && w.Value == nil
				}
			}
			if !removed {
				t.Fatalf("the move's checkpoint does not say mood was removed: %+v", cp.Writes)
			}
			// and a turn on the new version runs with no mood
			run := say(t, h.acme, "t", "again")
			if _, has := run.State["mood"]; run.FlowVersion != v2 || has {
				t.Fatalf("a turn after the move: %s %v", run.FlowVersion, run.State)
			}
		})
	}
}
