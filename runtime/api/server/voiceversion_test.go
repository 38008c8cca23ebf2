package server

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/runtime/api"
)

// talkFlow is a conversation over chatFlow's turns, over after one turn;
// version 2 (chatFlow) has no conversation block, so that a voice session or an end
// decided with the version loaded now, not the thread's, shows.
var talkFlow = strings.Replace(chatFlow, "input: [message]", `input: [message]
conversation:
  input: message
  output: answer
  until: "state.turns >= 1"`, 1)

// A thread's conversation is judged by the version of its flow it is
// pinned to: its state says it is over by that version's until, its
// voice session opens although the version loaded now is no conversation,
// and the flow's route gives that version's conversation block.
func TestConversationJudgedByTheThreadsVersion(t *testing.T) {
	dir := t.TempDir()
	writeChatFlow(t, dir, talkFlow, chatPrompt("one"))
	rt, err := trellis.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "trellis.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	h := newHarness(t, "memory", nil, withVoice(deadLiveKit(t)), func(c *Config) {
		c.Runtime, c.FlowsDir, c.Kinds = rt, filepath.Join(dir, "flows"), all.Offline()
	})
	v1 := versionOf(t, h.acme)
	if _, err := h.acme.CreateThread(ctx, api.CreateThread{ID: "talk", Flow: "chat"}); err != nil {
		t.Fatal(err)
	}
	say(t, h.acme, "talk", "hello")

	writeChatFlow(t, dir, chatFlow, chatPrompt("two"))
	if _, err := h.admin.ReloadAndPromote(ctx); err != nil {
		t.Fatal(err)
	}
	v2 := versionOf(t, h.acme)
	if v2 == v1 {
		t.Fatal("the reload did not change the version")
	}
	st, err := h.acme.State(ctx, "talk", 0)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Finished {
		t.Error("the thread's state is not finished by its version's conversation.until")
	}
	// the rooms' server is not there: the route gets as far as asking it
	if _, err := h.acme.Voice(ctx, "talk", api.VoiceRequest{Mode: api.VoiceText}); !api.IsCode(err, api.CodeLiveKitFailed) {
		t.Errorf("a voice session on a thread whose version is a conversation: %v", err)
	}
	// a new thread runs version 2, which is no conversation
	if _, err := h.acme.CreateThread(ctx, api.CreateThread{ID: "plain", Flow: "chat"}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.acme.Voice(ctx, "plain", api.VoiceRequest{Mode: api.VoiceText}); !api.IsCode(err, api.CodeNotConversational) {
		t.Errorf("a voice session on a thread whose version is no conversation: %v", err)
	}
	f, err := h.acme.FlowAt(ctx, "chat", v1)
	if err != nil {
		t.Fatal(err)
	}
	if f.Version != v1 || f.Conversation == nil || f.Conversation.Output != "answer" {
		t.Errorf("flow chat at version 1: %+v", f)
	}
	if f, err := h.acme.FlowAt(ctx, "chat", v2); err != nil || f.Version != v2 || f.Conversation != nil {
		t.Errorf("flow chat at version 2: %+v %v", f, err)
	}
	if _, err := h.acme.FlowAt(ctx, "chat", "0123456789abcdef"); !api.IsCode(err, api.CodeNotFound) {
		t.Errorf("flow chat at no version: %v", err)
	}
}
