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

	"github.com/trellisflow/trellis/cmd/trellis/internal/voice"
	"github.com/trellisflow/trellis/cmd/trellis/internal/voice/voicetest"
	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/api/server"
	"github.com/trellisflow/trellis/runtime/store"
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

// TestGrantExpiryCapped: a grant is good no longer than its session's
// deadline, whatever its claims say: one re-signed with the server's own
// signing key (read from the store) and an expiry in 2100 is refused.
func TestGrantExpiryCapped(t *testing.T) {
	r := newRig(t)
	_, grant := r.opened("capped")
	payload, _, _ := strings.Cut(strings.TrimPrefix(grant, "trv_"), ".")
	body, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		t.Fatal(err)
	}
	var claims map[string]any
	if err := json.Unmarshal(body, &claims); err != nil {
		t.Fatal(err)
	}
	vc, ok := store.VoiceCatalogOf(r.st)
	if !ok {
		t.Fatal("the store keeps no voice sessions")
	}
	key, err := vc.VoiceSigningKey(voicetest.Context(t, 10*time.Second), nil)
	if err != nil {
		t.Fatal(err)
	}
	sign := func(claims map[string]any) string {
		b, _ := json.Marshal(claims)
		p := base64.RawURLEncoding.EncodeToString(b)
		mac := hmac.New(sha256.New, key.Secret)
		mac.Write([]byte("trv_" + p))
		return "trv_" + p + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
	}
	// the same claims signed again work: the test signs as the server does
	if status, code := r.call(sign(claims), "GET", "/v1/threads/capped/state", ""); status != 200 {
		t.Fatalf("the grant's own claims signed again: %d %s", status, code)
	}
	claims["exp"] = time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	if status, code := r.call(sign(claims), "GET", "/v1/threads/capped/state", ""); status != 401 || code != api.CodeUnauthorized {
		t.Fatalf("a grant that expires in 2100: %d %s", status, code)
	}
}

// TestGrantLivesWhileItsAgentDoes: a grant lives a short while unless its
// agent renews it; the agent renews it while it serves the session (a
// conversation outlives the grant's lifetime), and once the agent is
// killed, its grant lapses within that lifetime. A grant refused while
// the agent serves (its key revoked) ends the session: the agent tells
// the caller and leaves.
func TestGrantLivesWhileItsAgentDoes(t *testing.T) {
	const ttl = 6 * time.Second // renewed every second
	r := newRig(t, func(c *server.Config) { c.Voice.GrantTTL = ttl })
	ctx := voicetest.Context(t, 2*time.Minute)
	child := r.agentProcess()
	c, keyID := r.newClient("acme", false)
	r.interviewAs(ctx, c, "lives", 5)
	s, err := c.Voice(ctx, "lives", api.VoiceRequest{Mode: api.VoiceText})
	if err != nil {
		t.Fatal(err)
	}
	grant := r.grantOf(s.Room)
	caller := voicetest.Join(t, s.URL, s.Token)
	_, at, err := caller.Message(ctx, 0, voice.MsgReply)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(ttl + 2*time.Second)
	if status, code := r.call(grant, "GET", "/v1/threads/lives/state", ""); status != 200 {
		t.Fatalf("the grant of a live agent after its lifetime: %d %s", status, code)
	}
	if err := caller.Send(api.VoiceTopic, voice.Message{Type: voice.MsgText, Text: "I tune databases."}); err != nil {
		t.Fatal(err)
	}
	if _, at, err = caller.Message(ctx, at, voice.MsgReply); err != nil {
		t.Fatal(err)
	}
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	killed := time.Now()
	waitFor(t, ttl+5*time.Second, "the dead agent's grant to lapse", func() bool {
		status, _ := r.call(grant, "GET", "/v1/threads/lives/state", "")
		return status == 401
	})
	t.Logf("the grant lapsed %v after its agent was killed", time.Since(killed).Round(100*time.Millisecond))

	// another agent; the key that opens the session is revoked while it serves
	agent, _ := r.agent(voice.Config{IdleTimeout: 5 * time.Second})
	at = len(caller.Messages())
	if _, err := c.Voice(ctx, "lives", api.VoiceRequest{Mode: api.VoiceText}); err != nil {
		t.Fatal(err)
	}
	// the new agent is listening
	if _, at, err = caller.Message(ctx, at, voice.MsgState); err != nil {
		t.Fatal(err)
	}
	if err := r.cat.RevokeKey(ctx, keyID, time.Now()); err != nil {
		t.Fatal(err)
	}
	msg, at, err := caller.Message(ctx, at, voice.MsgError)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(msg["text"].(string), "ended") {
		t.Errorf("the agent said %q", msg["text"])
	}
	if _, _, err := caller.Message(ctx, at, voice.MsgEnd); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the agent to leave", func() bool { return agent.Sessions() == 0 })
}
