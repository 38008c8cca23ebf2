package voice

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gorilla/websocket"
	"github.com/livekit/protocol/livekit"
)

// TestJobOfferedTwiceHoldsOnePlace: a job the LiveKit server offers
// twice (its first answer lost, or the offer repeated) holds one place,
// which its assignment (or its expiry) gives back: the agent's capacity
// does not shrink for good.
func TestJobOfferedTwiceHoldsOnePlace(t *testing.T) {
	// the worker connection's far end: it reads and drops what the agent says
	up := websocket.Upgrader{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		for {
			if _, _, err := ws.ReadMessage(); err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	c := &workerConn{ws: ws}
	a, err := New(Config{URL: "ws://127.0.0.1:1", APIKey: "k", APISecret: "s", API: "http://127.0.0.1:1", Capacity: 2,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	held := func() int {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.reserved
	}
	job := &livekit.Job{Id: "AJ_twice", Room: &livekit.Room{Name: "r"}, Metadata: `{"thread": "t", "session": "vs_1", "grant": "trv_x"}`}
	a.availability(c, &livekit.AvailabilityRequest{Job: job})
	a.availability(c, &livekit.AvailabilityRequest{Job: job})
	if n := held(); n != 1 {
		t.Errorf("a job offered twice holds %d places", n)
	}
	a.unreserve(job.Id)
	if n := held(); n != 0 {
		t.Fatalf("%d places still held after the job's place was given back: the agent serves %d rooms at most now, not 2", n, 2-n)
	}
}

// TestAgentWarnsOfDevelopmentKey: the agent warns when it runs with
// LiveKit's published development key, and only then.
func TestAgentWarnsOfDevelopmentKey(t *testing.T) {
	for _, tc := range []struct {
		key, secret string
		warned      bool
	}{
		{"devkey", "secret", true},
		{"devkey", "trellis-voice-tests-secret-0123456789abcdef", false},
	} {
		var log strings.Builder
		if _, err := New(Config{URL: "ws://127.0.0.1:1", APIKey: tc.key, APISecret: tc.secret, API: "http://127.0.0.1:1",
			Logger: slog.New(slog.NewTextHandler(&log, nil))}); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(log.String(), "development key"); got != tc.warned {
			t.Errorf("key %s, secret %s: warned %v, want %v", tc.key, tc.secret, got, tc.warned)
		}
	}
}
