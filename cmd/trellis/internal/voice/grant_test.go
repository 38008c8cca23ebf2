package voice_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/livekit/protocol/livekit"

	"github.com/trellisflow/trellis/cmd/trellis/internal/voice/voicetest"
	"github.com/trellisflow/trellis/runtime/api"
)

// grantOf is the grant the API handed the agent in the room's dispatch
// (the newest of the Trellis agent's dispatches), read as LiveKit shows
// it to whoever holds its API key.
func (r *rig) grantOf(room string) string {
	r.t.Helper()
	_, dispatch := r.livekit()
	ds, err := dispatch.ListDispatch(voicetest.Context(r.t, 10*time.Second), &livekit.ListAgentDispatchRequest{Room: room})
	if err != nil {
		r.t.Fatal(err)
	}
	var newest *livekit.AgentDispatch
	for _, d := range ds.AgentDispatches {
		if d.AgentName == "trellis-voice" && d.Metadata != "" && (newest == nil || d.State.GetCreatedAt() > newest.State.GetCreatedAt()) {
			newest = d
		}
	}
	if newest == nil {
		r.t.Fatalf("the room has no dispatch of the Trellis agent: %v", ds.AgentDispatches)
	}
	var d api.VoiceDispatch
	if err := json.Unmarshal([]byte(newest.Metadata), &d); err != nil || d.Grant == "" {
		r.t.Fatalf("the dispatch carries no grant: %q", newest.Metadata)
	}
	return d.Grant
}

// call makes a request with a bearer token and returns the status and
// the error code (if any).
func (r *rig) call(token, method, path, body string) (int, api.Code) {
	r.t.Helper()
	req, _ := http.NewRequest(method, r.base+path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var eb api.ErrorBody
	if json.Unmarshal(b, &eb) == nil && eb.Error != nil {
		return resp.StatusCode, eb.Error.Code
	}
	return resp.StatusCode, ""
}

// opened opens a voice session on a new interview thread with a key of
// its own, and returns that client and the agent's grant.
func (r *rig) opened(thread string) (*api.Client, string) {
	r.t.Helper()
	c, _ := r.newClient("acme", false)
	ctx := voicetest.Context(r.t, time.Minute)
	r.interviewAs(ctx, c, thread, 3)
	s, err := c.Voice(ctx, thread, api.VoiceRequest{Mode: api.VoiceText})
	if err != nil {
		r.t.Fatal(err)
	}
	grant := r.grantOf(s.Room)
	if status, code := r.call(grant, "GET", "/v1/threads/"+thread+"/state", ""); status != 200 {
		r.t.Fatalf("a fresh grant reads its thread's state: %d %s", status, code)
	}
	return c, grant
}

// refused checks that a grant no longer reads its thread.
func (r *rig) refused(grant, thread, after string) {
	r.t.Helper()
	if status, code := r.call(grant, "GET", "/v1/threads/"+thread+"/state", ""); status != 401 || code != api.CodeUnauthorized {
		r.t.Errorf("the grant after %s: %d %s, want 401 unauthorized", after, status, code)
	}
}

// TestGrantEnds: an agent's grant stops working at once when the key
// that opened its session is revoked, its thread is deleted (and a
// thread of the same name created again is not its thread), its
// session is ended, or the server's signing key is rotated.
func TestGrantEnds(t *testing.T) {
	r := newRig(t)
	admin, _ := r.newClient("acme", true)
	ctx := voicetest.Context(t, 2*time.Minute)

	t.Run("key revoked", func(t *testing.T) {
		c, grant := r.opened("g-key")
		keys, err := admin.Keys(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if strings.HasPrefix(c.Key, "trk_"+k.ID+"_") {
				if err := admin.RevokeKey(ctx, k.ID); err != nil {
					t.Fatal(err)
				}
			}
		}
		r.refused(grant, "g-key", "its key was revoked")
		if status, _ := r.call(grant, "POST", "/v1/threads/g-key/voice", `{"mode": "text"}`); status < 400 {
			t.Errorf("the grant of a revoked key opens a voice session: %d", status)
		}
	})
	t.Run("thread deleted and created again", func(t *testing.T) {
		c, grant := r.opened("g-thread")
		if err := c.DeleteThread(ctx, "g-thread"); err != nil {
			t.Fatal(err)
		}
		r.refused(grant, "g-thread", "its thread was deleted")
		r.interviewAs(ctx, c, "g-thread", 3)
		r.refused(grant, "g-thread", "its thread was deleted and another made under its name")
	})
	t.Run("session ended", func(t *testing.T) {
		c, grant := r.opened("g-session")
		if status, code := r.call(c.Key, "DELETE", "/v1/threads/g-session/voice", ""); status != 204 {
			t.Fatalf("ending the session: %d %s", status, code)
		}
		r.refused(grant, "g-session", "its session ended")
	})
	t.Run("signing key rotated", func(t *testing.T) {
		_, grant := r.opened("g-rotate")
		if status, code := r.call(admin.Key, "POST", "/v1/voice/signing-key", ""); status != 200 {
			t.Fatalf("rotating the signing key: %d %s", status, code)
		}
		r.refused(grant, "g-rotate", "the signing key was rotated")
		// a session opened since has a grant that works
		r.opened("g-rotated")
	})
}

// TestGrantNotForgedWithLiveKitSecret: whoever holds the LiveKit
// server's secret (every agent host) cannot mint a grant: grants are
// signed with a key of the Trellis server's own.
func TestGrantNotForgedWithLiveKitSecret(t *testing.T) {
	r := newRig(t)
	r.opened("forged")
	claims, _ := json.Marshal(map[string]any{"t": "acme", "th": "acme/forged", "f": "interview", "exp": time.Now().Add(time.Hour).Unix()})
	payload := base64.RawURLEncoding.EncodeToString(claims)
	derived := hmac.New(sha256.New, []byte(r.lk.Secret))
	derived.Write([]byte("trellis voice agent grant v1"))
	for name, key := range map[string][]byte{"the LiveKit secret": []byte(r.lk.Secret), "a key derived from it": derived.Sum(nil)} {
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(payload))
		forged := "trv_" + payload + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
		if status, code := r.call(forged, "GET", "/v1/threads/forged/state", ""); status != 401 {
			t.Errorf("a grant signed with %s: %d %s", name, status, code)
		}
	}
}

// interviewAs creates an interview thread with c.
func (r *rig) interviewAs(ctx context.Context, c *api.Client, id string, questions int) {
	r.t.Helper()
	saved := r.client
	r.client = c
	defer func() { r.client = saved }()
	r.interview(ctx, id, questions)
}
