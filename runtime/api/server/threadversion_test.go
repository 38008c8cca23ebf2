package server

import (
	"testing"

	"github.com/trellisflow/trellis/runtime/api"
)

// The thread routes say which version of its flow each thread is pinned
// to: the one it was created on, across a reload, until it is moved.
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
			if _, err := h.admin.ReloadFlows(ctx); err != nil {
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
