package voice_test

import (
	"strings"
	"testing"
	"time"

	"github.com/trellisflow/trellis/cmd/trellis/internal/voice/voicetest"
)

// TestPageInChromium: a person's browser (headless Chromium) opens the
// page that trellis serve serves, joins the thread's room in text mode
// with the bundled LiveKit JS client, reads the greeting, types an
// answer and reads the next question; the thread holds the turn.
func TestPageInChromium(t *testing.T) {
	r := newRig(t)
	r.agent(voiceConfigQuick())
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
