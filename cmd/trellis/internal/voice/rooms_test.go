package voice_test

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/trellisflow/trellis/cmd/trellis/internal/voice"
	"github.com/trellisflow/trellis/cmd/trellis/internal/voice/voicetest"
	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/api/server"
)

// TestManyRoomsOneAgent: one agent serves rooms up to its capacity at
// once, reports itself full to LiveKit (which then offers it no room)
// and exports both in its metrics; a room it left frees a place.
func TestManyRoomsOneAgent(t *testing.T) {
	r := newRig(t)
	// (the agent leaves a room its caller left after the idle timeout;
	// its callers, joining as it does, come well within it)
	agent, _ := r.agent(voice.Config{Capacity: 2, IdleTimeout: 10 * time.Second})
	ctx := voicetest.Context(t, 2*time.Minute)
	var callers []*voicetest.Participant
	for _, id := range []string{"room-a", "room-b", "room-c"} {
		r.interview(ctx, id, 3)
		s := r.voice(ctx, id, api.VoiceRequest{Mode: api.VoiceText})
		callers = append(callers, voicetest.Join(t, s.URL, s.Token))
	}
	for _, c := range callers[:2] {
		if _, _, err := c.Message(ctx, 0, voice.MsgReply); err != nil {
			t.Fatal(err)
		}
	}
	if n := agent.Sessions(); n != 2 {
		t.Fatalf("the agent is in %d rooms, want 2", n)
	}
	metrics := scrape(t, agent)
	for _, want := range []string{"trellis_voice_capacity 2", "trellis_voice_sessions 2", "trellis_voice_load 1"} {
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("the metrics lack %q:\n%s", want, metrics)
		}
	}
	// the third room waits: the agent is full
	waitCtx := voicetest.Context(t, 3*time.Second)
	if m, _, err := callers[2].Message(waitCtx, 0, voice.MsgReply); err == nil {
		t.Fatalf("a full agent served a third room: %v", m)
	}
	// one caller leaves; the agent leaves that room, and the third is
	// served once asked again
	callers[0].Leave()
	waitFor(t, 20*time.Second, "the agent to leave the first room", func() bool { return agent.Sessions() == 1 })
	s := r.voice(ctx, "room-c", api.VoiceRequest{Mode: api.VoiceText})
	if s.Agent != "dispatched" {
		t.Fatalf("asked again: %+v", s)
	}
	if _, _, err := callers[2].Message(ctx, 0, voice.MsgReply); err != nil {
		t.Fatal(err)
	}
	if n := agent.Sessions(); n != 2 {
		t.Fatalf("the agent is in %d rooms, want 2", n)
	}
}

func scrape(t *testing.T, a *voice.Agent) string {
	t.Helper()
	w := httptest.NewRecorder()
	a.Metrics().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	b, _ := io.ReadAll(w.Body)
	return string(b)
}

// TestTextWithoutSpeechEngine: a server with no speech engine still has
// voice rooms: the agent finds it cannot speak, says so, and the
// conversation goes on in text messages.
func TestTextWithoutSpeechEngine(t *testing.T) {
	r := newRig(t, func(c *server.Config) { c.Speech = nil })
	r.agent(voiceConfigPatient())
	ctx := voicetest.Context(t, 2*time.Minute)
	r.interview(ctx, "mute", 3)
	s := r.voice(ctx, "mute", api.VoiceRequest{}) // audio asked for
	caller := voicetest.Join(t, s.URL, s.Token)
	notice, _, err := caller.Message(ctx, 0, voice.MsgNotice)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(notice["text"].(string), "no speech engine") {
		t.Fatalf("notice: %v", notice)
	}
	_, at, err := caller.Message(ctx, 0, voice.MsgReply)
	if err != nil {
		t.Fatal(err)
	}
	if err := caller.Send(api.VoiceTopic, voice.Message{Type: voice.MsgText, Text: "I build databases."}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := caller.Message(ctx, at, voice.MsgReply); err != nil {
		t.Fatal(err)
	}
	if heard, _ := caller.Heard(); heard.Duration() > 0 {
		t.Fatalf("heard %v of audio from an agent with no speech engine", heard.Duration())
	}
}

// TestSessionThatCannotStartSaysWhy: an agent that cannot prepare a
// session (here its grant has expired on arrival) joins to say why and
// ends the session, so the caller is not left waiting.
func TestSessionThatCannotStartSaysWhy(t *testing.T) {
	r := newRig(t, func(c *server.Config) { c.Voice.GrantTTL = time.Nanosecond })
	agent, _ := r.agent(voiceConfigPatient())
	ctx := voicetest.Context(t, time.Minute)
	r.interview(ctx, "refused", 3)
	s := r.voice(ctx, "refused", api.VoiceRequest{Mode: api.VoiceText})
	caller := voicetest.Join(t, s.URL, s.Token)
	msg, at, err := caller.Message(ctx, 0, voice.MsgError)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(msg["text"].(string), "could not start") || !strings.Contains(msg["text"].(string), "grant") {
		t.Fatalf("error: %v", msg)
	}
	if _, _, err := caller.Message(ctx, at, voice.MsgEnd); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the agent to leave", func() bool { return agent.Sessions() == 0 })
	if runs, err := r.client.Runs(ctx, "refused"); err != nil || len(runs) != 0 {
		t.Fatalf("runs of a session that never started: %v %v", runs, err)
	}
}
