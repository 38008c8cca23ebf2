package voice_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/livekit/protocol/auth"

	"github.com/trellisflow/trellis/cmd/trellis/internal/voice"
	"github.com/trellisflow/trellis/cmd/trellis/internal/voice/voicetest"
	"github.com/trellisflow/trellis/runtime/api"
)

// TestPageInChromium: a person's browser (headless Chromium) opens the
// page that trellis serve serves, joins the thread's room in text mode
// with the bundled LiveKit JS client, reads the greeting, types an
// answer and reads the next question; the thread holds the turn.
func TestPageInChromium(t *testing.T) {
	r := newRig(t)
	r.agent(voiceConfigPatient())
	ctx := voicetest.Context(t, 2*time.Minute)
	r.interview(ctx, "paged", 2)
	b := voicetest.Chromium(t)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("chromium:\n%s", b.Log())
		}
	})
	if err := b.Navigate(ctx, r.base+"/voice#thread=paged&mode=text&join=1&key="+r.client.Key); err != nil {
		t.Fatal(err)
	}
	agentSaid := func(n int) string {
		return `window.trellisVoice && window.trellisVoice.messages.filter(m => m.kind === 'agent').length >= ` + string(rune('0'+n))
	}
	if err := b.WaitTrue(ctx, agentSaid(1)); err != nil {
		var status string
		_ = b.Eval(ctx, "document.getElementById('status').textContent", &status)
		t.Fatalf("%v; the page says %q", err, status)
	}
	const answer = "I maintain a Go service that indexes logs."
	if err := b.Eval(ctx, `document.getElementById('text').value = '`+answer+`'; document.querySelector('#say button').click(); true`, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitTrue(ctx, agentSaid(2)); err != nil {
		t.Fatal(err)
	}
	var lines []string
	if err := b.Eval(ctx, `[...document.querySelectorAll('#log .msg')].map(p => p.textContent)`, &lines); err != nil {
		t.Fatal(err)
	}
	page := strings.Join(lines, "\n")
	if !strings.Contains(page, "thanks for joining") || !strings.Contains(page, answer) {
		t.Fatalf("the page shows:\n%s", page)
	}
	runs, err := r.client.Runs(ctx, "paged")
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 || runs[0].Input["last_response"] != answer {
		t.Fatalf("the thread's runs: %+v", runs)
	}
}

// TestPageHeedsOnlyTheAgent: in Chromium, the page shows and acts on the
// data messages of the agent alone: another participant of the room
// (here one with a token made straight from the LiveKit key) that sends
// a reply and the end is ignored, and the conversation goes on.
func TestPageHeedsOnlyTheAgent(t *testing.T) {
	r := newRig(t)
	r.agent(voiceConfigPatient())
	ctx := voicetest.Context(t, 2*time.Minute)
	r.interview(ctx, "heeds", 3)
	b := voicetest.Chromium(t)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("chromium:\n%s", b.Log())
		}
	})
	if err := b.Navigate(ctx, r.base+"/voice#thread=heeds&mode=text&join=1&key="+r.client.Key); err != nil {
		t.Fatal(err)
	}
	agentSaid := func(n int) string {
		return `window.trellisVoice && window.trellisVoice.messages.filter(m => m.kind === 'agent').length >= ` + strconv.Itoa(n)
	}
	if err := b.WaitTrue(ctx, agentSaid(1)); err != nil {
		t.Fatal(err)
	}
	var room string
	if err := b.Eval(ctx, `window.trellisVoice.session.room`, &room); err != nil || room == "" {
		t.Fatalf("the page's room: %q %v", room, err)
	}
	tok, err := auth.NewAccessToken(r.lk.Key, r.lk.Secret).SetIdentity("intruder").SetValidFor(time.Minute).
		SetVideoGrant(&auth.VideoGrant{RoomJoin: true, Room: room}).ToJWT()
	if err != nil {
		t.Fatal(err)
	}
	intruder := voicetest.Join(t, r.lk.URL, tok)
	for _, m := range []voice.Message{{Type: voice.MsgReply, Text: "FORGED reply", Turn: 9}, {Type: voice.MsgEnd, Text: "FORGED end"}} {
		if err := intruder.Send(api.VoiceTopic, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.WaitTrue(ctx, `window.trellisVoice.ignored >= 2`); err != nil {
		var shown []string
		_ = b.Eval(ctx, `window.trellisVoice.messages.map(m => m.who + ': ' + m.text)`, &shown)
		t.Fatalf("%v; the page shows %q", err, shown)
	}
	const answer = "I keep a search index fresh."
	if err := b.Eval(ctx, `document.getElementById('text').value = '`+answer+`'; document.querySelector('#say button').click(); true`, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitTrue(ctx, agentSaid(2)); err != nil {
		t.Fatal(err)
	}
	var shown []string
	if err := b.Eval(ctx, `window.trellisVoice.messages.map(m => m.who + ': ' + m.text)`, &shown); err != nil {
		t.Fatal(err)
	}
	var ended bool
	if err := b.Eval(ctx, `window.trellisVoice.ended`, &ended); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(strings.Join(shown, "\n"), "FORGED") || ended {
		t.Fatalf("the page heeded another participant (ended %v):\n%s", ended, strings.Join(shown, "\n"))
	}
}
