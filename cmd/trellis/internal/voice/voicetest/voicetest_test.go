package voicetest

import (
	"os"
	"testing"
	"time"

	"github.com/livekit/protocol/auth"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

func token(t *testing.T, lk *LiveKitServer, room, identity string) string {
	t.Helper()
	tok, err := auth.NewAccessToken(lk.Key, lk.Secret).SetIdentity(identity).SetValidFor(time.Minute).
		SetVideoGrant(&auth.VideoGrant{RoomJoin: true, Room: room}).ToJWT()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestMediaPath checks the harness itself: speech one participant
// publishes through a real LiveKit server reaches another as audio that
// still transcribes to its words.
func TestMediaPath(t *testing.T) {
	lk := LiveKit(t)
	NoLeaks(t)
	ctx := Context(t, time.Minute)
	a := Join(t, lk.URL, token(t, lk, "media", "a"))
	b := Join(t, lk.URL, token(t, lk, "media", "b"))
	const text = "What was the hardest technical challenge in your last project?"
	if err := a.Speak(ctx, Say(t, "kal16", text), 500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	heard, err := b.WaitSpoken(ctx, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	got := Recognize(t, heard)
	if o := Overlap(text, got); o < 0.5 {
		t.Fatalf("heard %v of audio that transcribes to %q (%.0f%% of the words)", heard.Duration(), got, o*100)
	}
	if err := a.Send("test", map[string]any{"type": "hello"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Message(ctx, 0, "hello"); err != nil {
		t.Fatal(err)
	}
}
