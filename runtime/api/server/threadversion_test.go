package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/runtime/api"
)

// The thread routes say which version of its flow each thread is pinned
// to: the one it was created on, across a reload that promotes another,
// until it is moved.
func TestThreadSaysItsVersion(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			dir := t.TempDir()
			writeChatFlow(t, dir, chatFlow, chatPrompt("one"))
			h := chatServer(t, storeAddr(t, b.addr), dir)
			v1 := versionOf(t, h.acme)
			created, err := h.acme.CreateThread(ctx, api.CreateThread{ID: "old", Flow: "chat"})
			if err != nil || created.Version != v1 {
				t.Fatalf("created: %+v %v, want version %s", created, err, v1)
			}
			src, prompt := chatV2()
			writeChatFlow(t, dir, src, prompt)
			if _, err := h.admin.ReloadAndPromote(ctx); err != nil {
				t.Fatal(err)
			}
			v2 := versionOf(t, h.acme)
			if _, err := h.acme.CreateThread(ctx, api.CreateThread{ID: "new", Flow: "chat"}); err != nil {
				t.Fatal(err)
			}
			for id, want := range map[string]string{"old": v1, "new": v2} {
				if th, err := h.acme.Thread(ctx, id); err != nil || th.Version != want {
					t.Errorf("thread %s: %+v %v, want version %s", id, th, err, want)
				}
			}
			list, err := h.acme.Threads(ctx, api.ThreadQuery{})
			if err != nil || len(list.Threads) != 2 {
				t.Fatalf("list: %+v %v", list, err)
			}
			for _, th := range list.Threads {
				if want := map[string]string{"old": v1, "new": v2}[th.ID]; th.Version != want {
					t.Errorf("listed thread %s: version %q, want %s", th.ID, th.Version, want)
				}
			}
			if _, err := h.acme.MoveThread(ctx, "old", api.MoveThread{To: v2}); err != nil {
				t.Fatal(err)
			}
			if th, err := h.acme.Thread(ctx, "old"); err != nil || th.Version != v2 {
				t.Errorf("moved: %+v %v, want version %s", th, err, v2)
			}
			fork, err := h.acme.Fork(ctx, "old", api.Fork{ID: "fork", At: 1})
			if err != nil || fork.Version != v1 {
				t.Errorf("a fork of the first checkpoint: %+v %v, want version %s", fork, err, v1)
			}
		})
	}
}

// A thread with a run running, and a newer one queued and cancelled, is
// not moved (thread_busy) and keeps its version; once its runs are done
// it moves.
func TestMoveRefusedWhileARunIsRunning(t *testing.T) {
	dir := stepFlows(t, 700)
	s := serve(t, openRuntime(t, "sqlite:"+filepath.Join(t.TempDir(), "s.db")), dir, "")
	_, adminKey, err := CreateKey(ctx, s.srv.cat, "ops", "", true)
	if err != nil {
		t.Fatal(err)
	}
	admin := api.NewClient(s.base, adminKey)
	th, err := s.acme.CreateThread(ctx, api.CreateThread{ID: "busy", Flow: "steps"})
	if err != nil {
		t.Fatal(err)
	}
	v1 := th.Version
	src := strings.ReplaceAll(stepsFlow, `"MS"`, `"700"`)
	src = strings.Replace(src, `said: {type: string, default: ""}`, `said: {type: string, default: ""}`+"\n      note: {type: string, default: \"\"}", 1)
	if err := os.WriteFile(filepath.Join(dir, "steps.yaml"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ReloadFlows(ctx); err != nil {
		t.Fatal(err)
	}
	f, err := s.acme.Flow(ctx, "steps")
	if err != nil || f.Version == v1 {
		t.Fatalf("the reload: %+v %v", f, err)
	}
	v2 := f.Version
	first, err := s.acme.StartRun(ctx, "busy", api.StartRun{Input: map[string]any{"said": "one"}})
	if err != nil {
		t.Fatal(err)
	}
	second, err := s.acme.StartRun(ctx, "busy", api.StartRun{Input: map[string]any{"said": "two"}, OnBusy: api.OnBusyEnqueue})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.acme.Cancel(ctx, "busy", second.ID); err != nil {
		t.Fatal(err)
	}
	for _, dry := range []bool{true, false} {
		if _, err := s.acme.MoveThread(ctx, "busy", api.MoveThread{To: v2, DryRun: dry}); !api.IsCode(err, api.CodeThreadBusy) {
			t.Fatalf("a move (dry run %v) with a run running: %v", dry, err)
		}
	}
	if th, err := s.acme.Thread(ctx, "busy"); err != nil || th.Version != v1 {
		t.Fatalf("the refused move: %+v %v", th, err)
	}
	if run, err := s.acme.Join(ctx, "busy", first.ID); err != nil || run.Status != api.RunSucceeded {
		t.Fatalf("the run: %+v %v", run, err)
	}
	if moved, err := s.acme.MoveThread(ctx, "busy", api.MoveThread{To: v2}); err != nil || !moved.Moved {
		t.Fatalf("a move once the runs are done: %+v %v", moved, err)
	}
}
