package main

import (
	"strings"
	"testing"
)

// TestVoiceAgentNeedsLiveKit: the agent says what it needs when it is not
// configured, as a usage error; trellis serve refuses half a LiveKit
// configuration the same way.
func TestVoiceAgentNeedsLiveKit(t *testing.T) {
	for _, name := range []string{"LIVEKIT_URL", "LIVEKIT_API_KEY", "LIVEKIT_API_SECRET"} {
		t.Setenv(name, "")
	}
	_, stderr, code := trellis(t, "voice-agent", "--metrics-addr", "")
	if code != 2 || !strings.Contains(stderr, "LIVEKIT_URL") {
		t.Fatalf("voice-agent with no LiveKit: exit %d: %s", code, stderr)
	}
	t.Setenv("LIVEKIT_URL", "ws://127.0.0.1:7880")
	_, stderr, code = trellis(t, "serve", "--flows", "../../flows", "--store", "memory", "--addr", "127.0.0.1:0")
	if code != 2 || !strings.Contains(stderr, "LIVEKIT_API_KEY") {
		t.Fatalf("serve with half a LiveKit configuration: exit %d: %s", code, stderr)
	}
}
