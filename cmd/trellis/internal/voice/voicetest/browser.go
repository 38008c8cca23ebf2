package voicetest

import (
	"testing"

	"github.com/trellisflow/trellis/cmd/trellis/internal/browser"
)

// Chromium starts Debian's chromium, headless, with loopback allowed in
// WebRTC (the only interface the tests' namespace has) and a fake
// microphone that needs no permission.
func Chromium(t testing.TB) *browser.Browser {
	t.Helper()
	Need(t, "chromium", "chromium")
	return browser.Chromium(t, 1280, 800,
		"--allow-loopback-in-peer-connection", "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
		"--autoplay-policy=no-user-gesture-required")
}
