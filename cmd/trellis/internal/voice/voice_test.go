package voice_test

import (
	"context"
	"net/http"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/trellisflow/trellis/cmd/trellis/internal/speech"
	"github.com/trellisflow/trellis/cmd/trellis/internal/voice"
	"github.com/trellisflow/trellis/cmd/trellis/internal/voice/voicetest"
	"github.com/trellisflow/trellis/nodes/llm"
	"github.com/trellisflow/trellis/runtime/api"
)

// TestSpokenInterview is the interview spoken end to end through a real
// LiveKit server: the caller joins with a token from the API, speaks
// over the greeting (the agent stops), answers the first question aloud
// (flite's kal16 voice, recognised by pocketsphinx through the API's
// speech route), hears the next question spoken back (it transcribes to
// the reply's words), answers the last by text, hears the closing and
// goodbye, and the agent leaves, leaving no session, track or goroutine
// behind. The thread's history holds every turn, with both sides'
// words.
func TestSpokenInterview(t *testing.T) {
	voicetest.Need(t, "flite", "flite")
	voicetest.Need(t, "pocketsphinx_continuous", "pocketsphinx pocketsphinx-en-us")
	if err := speech.CheckRecognizer(context.Background()); err != nil {
		t.Fatalf("%v (make deps installs it)", err)
	}
	r := newRig(t)
	var turns []voice.TurnTiming
	timings := make(chan voice.TurnTiming, 8)
	agent, _ := r.agent(voice.Config{IdleTimeout: voiceConfigPatient().IdleTimeout, OnTurn: func(tt voice.TurnTiming) { timings <- tt }})
	baseline := settledGoroutines(0)
	ctx := voicetest.Context(t, 3*time.Minute)

	r.interview(ctx, "spoken", 1)
	sess := r.voice(ctx, "spoken", api.VoiceRequest{})
	if sess.Agent != "dispatched" || sess.Mode != api.VoiceAudio || sess.Topic != api.VoiceTopic || sess.Token == "" {
		t.Fatalf("voice session: %+v", sess)
	}
	caller := voicetest.Join(t, sess.URL, sess.Token)

	// the greeting, prepared before the agent joined, starts at once
	greeting, at, err := caller.Message(ctx, 0, voice.MsgReply)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(greeting["text"].(string), "thanks for joining") {
		t.Fatalf("greeting: %v", greeting)
	}
	waitSound(t, caller)

	// speaking over it stops it, and is heard as the first answer
	answer := "I built a compiler for a small language in Go."
	if err := caller.Speak(ctx, voicetest.Say(t, "kal16", answer), 1500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if _, _, err := caller.Message(ctx, at, voice.MsgInterrupted); err != nil {
		t.Fatal(err)
	}
	heardGreeting, _ := caller.Heard()
	if d := heardGreeting.Duration(); d > 9*time.Second {
		t.Errorf("heard %v of the greeting: it was not stopped", d)
	}
	transcript, at, err := caller.Message(ctx, at, voice.MsgTranscript)
	if err != nil {
		t.Fatal(err)
	}
	if o := voicetest.Overlap(answer, transcript["text"].(string)); o < 0.4 {
		t.Errorf("the answer %q was transcribed as %q", answer, transcript["text"])
	}
	caller.ForgetAudio()
	question, at, err := caller.Message(ctx, at, voice.MsgReply)
	if err != nil {
		t.Fatal(err)
	}
	spoken, err := caller.WaitSpoken(ctx, 1500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	heard := voicetest.Recognize(t, spoken)
	if o := voicetest.Overlap(question["text"].(string), heard); o < 0.5 {
		t.Fatalf("the question %q was heard as %q (%.0f%% of its words)", question["text"], heard, o*100)
	}
	select {
	case tt := <-timings:
		turns = append(turns, tt)
		if tt.Transcribe <= 0 || tt.Reply <= 0 || tt.FirstAudio <= 0 {
			t.Errorf("turn timing: %+v", tt)
		}
	case <-ctx.Done():
		t.Fatal("no turn timing")
	}

	// the last answer typed; the closing and goodbye end the conversation
	if err := caller.Send(api.VoiceTopic, voice.Message{Type: voice.MsgText, Text: "I would shard the index by time and replicate it."}); err != nil {
		t.Fatal(err)
	}
	closing, at, err := caller.Message(ctx, at, voice.MsgReply)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(closing["text"].(string), "feedback") {
		t.Errorf("closing: %v", closing)
	}
	if _, _, err := caller.Message(ctx, at, voice.MsgEnd); err != nil {
		t.Fatal(err)
	}
	goodbye, _ := caller.Heard()
	if got := voicetest.Recognize(t, goodbye); !strings.Contains(got, "good") {
		t.Errorf("the closing was heard as %q: no goodbye", got)
	}

	// the thread holds the three turns, the spoken one's transcript as its input
	runs, err := r.client.Runs(ctx, "spoken")
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 3 {
		t.Fatalf("%d runs, want 3 (greeting, spoken answer, typed answer)", len(runs))
	}
	if in := runs[1].Input["last_response"]; in != transcript["text"] {
		t.Errorf("the spoken turn's input is %v, want the transcript %q", in, transcript["text"])
	}
	st, err := r.client.State(ctx, "spoken", 0)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Finished {
		t.Error("the thread's conversation is not finished")
	}
	history, _ := st.Values["conversation_history"].([]any)
	var said []string
	for _, h := range history {
		m, _ := h.(map[string]any)
		said = append(said, strings.ToLower(strings.Join([]string{str(m["role"]), str(m["content"])}, ": ")))
	}
	all := strings.Join(said, "\n")
	if !strings.Contains(all, strings.ToLower(transcript["text"].(string))) || !strings.Contains(all, "shard the index") ||
		!strings.Contains(all, strings.ToLower(question["text"].(string))) {
		t.Errorf("the conversation history lacks a side of the conversation:\n%s", all)
	}

	// the agent left the room: nothing of the session stays
	waitFor(t, 10*time.Second, "the session to end", func() bool { return agent.Sessions() == 0 })
	if n := agent.Tracks(); n != 0 {
		t.Errorf("%d audio tracks still open", n)
	}
	caller.Leave()
	if n := settledGoroutines(baseline); n > baseline {
		var b strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
		t.Errorf("%d goroutines after the room ended, %d before it:\n%s", n, baseline, b.String())
	}
	_ = turns
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// waitSound waits for the caller to hear the agent.
func waitSound(t *testing.T, p *voicetest.Participant) {
	t.Helper()
	waitFor(t, 20*time.Second, "the agent's voice", func() bool {
		_, first := p.Heard()
		return !first.IsZero()
	})
}

func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	// (a bound against a hang: a loaded machine takes many times what
	// an idle one does)
	d = max(d, time.Minute)
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// settledGoroutines waits (up to 10s) for the number of goroutines to
// fall to at most want (0: to stop changing) and returns it.
// Idle keep-alive connections to the API are closed first: they are the
// HTTP client's, not the session's.
func settledGoroutines(want int) int {
	idle := func() {
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
		llm.CloseIdleConnections()
	}
	idle()
	n := runtime.NumGoroutine()
	for i := 0; i < 100; i++ {
		time.Sleep(100 * time.Millisecond)
		idle()
		m := runtime.NumGoroutine()
		if want > 0 && m <= want || want == 0 && m == n && i >= 5 {
			return m
		}
		n = m
	}
	return n
}
