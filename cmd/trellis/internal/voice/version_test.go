package voice_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trellisflow/trellis/cmd/trellis/internal/voice"
	"github.com/trellisflow/trellis/cmd/trellis/internal/voice/voicetest"
	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/api/server"
)

// talkFlow is a conversation that replies through a prompt (its fallback,
// offline) in answer and is over after two turns; talkV2 replies in note
// and is never over.
const talkFlow = `version: 1
name: talk
state:
  schema:
    type: object
    properties:
      message: {type: string, default: ""}
      answer: {type: string, default: ""}
      note: {type: string, default: ""}
      turns: {type: integer, default: 0}
input: [message]
conversation:
  input: message
  output: answer
  until: "state.turns >= 2"
nodes:
  reply: {kind: llm, prompt: talk/reply, writes: {answer: output}}
  count: {kind: assign, set: {turns: "state.turns + 1"}}
edges:
  - {from: START, to: reply}
  - {from: reply, to: count}
  - {from: count, to: END}
`

func talkV2() string {
	src := strings.Replace(talkFlow, "output: answer", "output: note", 1)
	src = strings.Replace(src, `until: "state.turns >= 2"`, `until: "false"`, 1)
	return strings.Replace(src, "writes: {answer: output}", "writes: {note: output}", 1)
}

func writeTalk(t *testing.T, dir, src, version string) {
	t.Helper()
	files := map[string]string{"flows/talk.yaml": src, "prompts/talk/reply.prompt": "---\nfallback: answered by version " + version + "\n---\nAnswer {{.state.message}}\n"}
	for name, data := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSessionSpeaksTheThreadsVersion: a voice session on a thread started
// on version 1 of its flow, opened after a reload to version 2 (which
// replies in another field and never ends), speaks version 1's replies
// and ends when version 1 says the conversation is over.
func TestSessionSpeaksTheThreadsVersion(t *testing.T) {
	dir := t.TempDir()
	writeTalk(t, dir, talkFlow, "one")
	r := newRig(t, func(c *server.Config) { c.FlowsDir = filepath.Join(dir, "flows") })
	admin, _ := r.newClient("acme", true)
	r.agent(voiceConfigPatient())
	ctx := voicetest.Context(t, 2*time.Minute)
	if _, err := r.client.CreateThread(ctx, api.CreateThread{ID: "pinned", Flow: "talk"}); err != nil {
		t.Fatal(err)
	}
	writeTalk(t, dir, talkV2(), "two")
	if _, err := admin.ReloadFlows(ctx); err != nil {
		t.Fatal(err)
	}
	if f, err := r.client.Flow(ctx, "talk"); err != nil || f.Conversation == nil || f.Conversation.Output != "note" {
		t.Fatalf("the reload did not load version 2: %+v %v", f, err)
	}

	s := r.voice(ctx, "pinned", api.VoiceRequest{Mode: api.VoiceText})
	caller := voicetest.Join(t, s.URL, s.Token)
	greeting, at, err := caller.Message(ctx, 0, voice.MsgReply)
	if err != nil {
		t.Fatal(err)
	}
	if greeting["text"] != "answered by version one" {
		t.Fatalf("the greeting: %v", greeting)
	}
	if err := caller.Send(api.VoiceTopic, voice.Message{Type: voice.MsgText, Text: "I build databases."}); err != nil {
		t.Fatal(err)
	}
	// version 1 is over after two turns; version 2 never is
	end, _, err := caller.Message(ctx, at, voice.MsgEnd)
	if err != nil {
		t.Fatal(err)
	}
	var replies []string
	for _, m := range caller.Messages() {
		if strings.Contains(string(m), `"type":"reply"`) {
			replies = append(replies, string(m))
		}
	}
	if len(replies) != 2 || !strings.Contains(replies[1], "answered by version one") {
		t.Fatalf("the replies: %v (end %v)", replies, end)
	}
}
