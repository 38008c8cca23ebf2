package voice_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	lksdk "github.com/livekit/server-sdk-go/v2"

	"github.com/trellisflow/trellis/cmd/trellis/internal/voice"
	"github.com/trellisflow/trellis/cmd/trellis/internal/voice/voicetest"
	"github.com/trellisflow/trellis/runtime/api"
)

func agentIn(p *voicetest.Participant) bool {
	for _, rp := range p.Room.GetRemoteParticipants() {
		if rp.Kind() == lksdk.ParticipantAgent {
			return true
		}
	}
	return false
}

// agentAlive reports whether an agent in the room beat its heartbeat
// lately.
func agentAlive(p *voicetest.Participant) bool {
	for _, rp := range p.Room.GetRemoteParticipants() {
		if rp.Kind() != lksdk.ParticipantAgent {
			continue
		}
		if beat, err := strconv.ParseInt(rp.Attributes()[voice.AliveAttribute], 10, 64); err == nil &&
			time.Since(time.Unix(beat, 0)) < 4*voice.AliveEvery {
			return true
		}
	}
	return false
}

// TestAgentKilledAnotherCarriesOn kills the agent process mid-interview:
// the caller asks for the session again, as the page does when the agent
// leaves, another agent process joins and carries the interview on from
// the thread's checkpoint, without greeting again.
func TestAgentKilledAnotherCarriesOn(t *testing.T) {
	r := newRig(t)
	ctx := voicetest.Context(t, 3*time.Minute)
	first := r.agentProcess()
	r.interview(ctx, "replaced", 3)
	sess := r.voice(ctx, "replaced", api.VoiceRequest{Mode: api.VoiceText})
	if sess.Agent != "dispatched" {
		t.Fatalf("first session: agent %s", sess.Agent)
	}
	caller := voicetest.Join(t, sess.URL, sess.Token)
	greeting, at, err := caller.Message(ctx, 0, voice.MsgReply)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(greeting["text"].(string), "thanks for joining") {
		t.Fatalf("greeting: %v", greeting)
	}
	if err := caller.Send(api.VoiceTopic, voice.Message{Type: voice.MsgText, Text: "I have built log pipelines in Go for five years."}); err != nil {
		t.Fatal(err)
	}
	q1, at, err := caller.Message(ctx, at, voice.MsgReply)
	if err != nil {
		t.Fatal(err)
	}

	// the agent dies
	waitFor(t, 10*time.Second, "the caller to see the agent", func() bool { return agentIn(caller) })
	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	killed := time.Now()
	// another starts; its heartbeat stopped, the caller asks for the
	// session again (the page does so), and the API sees it dead
	r.agentProcess()
	waitFor(t, time.Minute, "the dead agent's heartbeat to stop", func() bool { return !agentAlive(caller) })
	again := r.voice(ctx, "replaced", api.VoiceRequest{Mode: api.VoiceText})
	if again.Agent != "dispatched" || again.Room != sess.Room {
		t.Fatalf("the session asked again: agent %s, room %s (first room %s)", again.Agent, again.Room, sess.Room)
	}
	waitFor(t, 30*time.Second, "another agent to join", func() bool { return agentAlive(caller) })
	t.Logf("another agent carries on %v after the first was killed", time.Since(killed).Round(100*time.Millisecond))
	if _, _, err := caller.Message(ctx, at, voice.MsgState); err != nil {
		t.Fatal(err)
	}
	// no second greeting: the next reply answers the next message
	if err := caller.Send(api.VoiceTopic, voice.Message{Type: voice.MsgText, Text: "The hardest part was back pressure; I added bounded queues."}); err != nil {
		t.Fatal(err)
	}
	q2, _, err := caller.Message(ctx, at, voice.MsgReply)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(q2["text"].(string), "thanks for joining") || q2["text"] == q1["text"] {
		t.Fatalf("the second agent's first reply: %v (the first's last: %v)", q2, q1)
	}
	runs, err := r.client.Runs(ctx, "replaced")
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 3 {
		t.Fatalf("%d runs, want 3: the greeting and two answers", len(runs))
	}
	greetings := 0
	st, err := r.client.State(ctx, "replaced", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range st.Values["conversation_history"].([]any) {
		if m := h.(map[string]any); m["node"] == "greeting" {
			greetings++
		}
	}
	if greetings != 1 {
		t.Fatalf("%d greetings in the conversation history", greetings)
	}
}
