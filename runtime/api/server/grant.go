package server

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/store"
)

// A voice agent acts for a thread with a grant: "trv_" + its claims in
// base64 + "." + their HMAC-SHA256 under the server's signing key, a
// random key kept in the store (servers sharing the store verify each
// other's grants; it is never derived from LiveKit's secret, which every
// agent host holds). A grant belongs to a voice session in the store,
// and is checked against it on every use: it is good while the session
// lives (until it expires, renewed by its agent up to a deadline, or is
// ended), the API key that opened it is not revoked, its thread is the
// same thread (not one deleted and created again under its name), and
// its signing key is the current one.
type grantClaims struct {
	Tenant     string `json:"t"`
	Thread     string `json:"th"` // the thread's key
	Flow       string `json:"f"`
	Session    string `json:"s"`
	SigningKey string `json:"kid"`
	Issued     int64  `json:"iat"`
	Expiry     int64  `json:"exp"`
}

const grantPrefix = "trv_"

// grantRenewEvery is how often an agent renews its grant: often enough
// that a session whose agent died lapses within ttl.
func grantRenewEvery(ttl time.Duration) time.Duration {
	return min(max(ttl/6, time.Second), 10*time.Second)
}

func signGrant(key *store.SigningKeyRecord, c grantClaims) string {
	body, _ := json.Marshal(c)
	payload := base64.RawURLEncoding.EncodeToString(body)
	return grantPrefix + payload + "." + base64.RawURLEncoding.EncodeToString(grantMAC(key.Secret, payload))
}

func grantMAC(secret []byte, payload string) []byte {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(grantPrefix + payload))
	return mac.Sum(nil)
}

// grantError is why a grant is refused: one code (unauthorized) and a
// reason the agent can act on (api.GrantEnded and the others).
func grantError(reason, why string) error {
	return &api.Error{Code: api.CodeUnauthorized, Message: "this voice agent's grant is not valid: " + why,
		Details: map[string]string{"reason": reason}}
}

var errNoVoiceStore = &api.Error{Code: api.CodeVoiceNotConfigured, Message: "this server's store keeps no voice sessions"}

func storeUnavailable() error {
	return &api.Error{Code: api.CodeUnavailable, Message: "cannot check the grant: the store does not answer"}
}

// checkGrant checks a grant against the store and returns who it acts
// for.
func (s *Server) checkGrant(ctx context.Context, token string, now time.Time) (*caller, error) {
	if s.voiceCat == nil {
		return nil, grantError(api.GrantInvalid, "this server keeps no voice sessions")
	}
	rest, _ := strings.CutPrefix(token, grantPrefix)
	payload, sig, ok := strings.Cut(rest, ".")
	body, err1 := base64.RawURLEncoding.DecodeString(payload)
	mac, err2 := base64.RawURLEncoding.DecodeString(sig)
	var c grantClaims
	if !ok || err1 != nil || err2 != nil || json.Unmarshal(body, &c) != nil || c.Session == "" || c.Tenant == "" || c.Thread == "" {
		return nil, grantError(api.GrantInvalid, "it is not a grant")
	}
	key, err := s.voiceCat.VoiceSigningKey(ctx, nil)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, grantError(api.GrantInvalid, "it was not signed by this server")
	case err != nil:
		return nil, storeUnavailable()
	case !hmac.Equal(mac, grantMAC(key.Secret, payload)):
		// a key rotated out, or never this server's
		return nil, grantError(api.GrantInvalid, "it was not signed with this server's current key")
	case c.SigningKey != key.ID:
		return nil, grantError(api.GrantInvalid, "it was not signed with this server's current key")
	}
	sess, err := s.voiceCat.VoiceSession(ctx, c.Session)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, grantError(api.GrantEnded, "its session has ended")
	case err != nil:
		return nil, storeUnavailable()
	case sess.Tenant != c.Tenant || sess.Thread != c.Thread || sess.SigningKey != c.SigningKey:
		return nil, grantError(api.GrantInvalid, "it does not match its session")
	case c.Expiry > sess.Deadline.Unix() || c.Expiry-c.Issued > int64(s.grantMax()/time.Second):
		return nil, grantError(api.GrantInvalid, "its expiry is past what this server allows")
	case !sess.Ended.IsZero():
		return nil, grantError(api.GrantEnded, "its session has ended")
	case !now.Before(sess.Expires) || now.Unix() >= c.Expiry:
		return nil, grantError(api.GrantExpired, "its session expired")
	}
	k, err := s.cat.KeyByHash(ctx, sess.KeyHash)
	switch {
	case errors.Is(err, store.ErrNotFound) || err == nil && !k.Revoked.IsZero():
		return nil, grantError(api.GrantRevoked, "the key that opened its session was revoked")
	case err != nil:
		return nil, storeUnavailable()
	}
	th, err := s.cat.Thread(ctx, c.Tenant, c.Thread)
	switch {
	case errors.Is(err, store.ErrNotFound) || err == nil && !th.Created.Equal(sess.ThreadCreated):
		return nil, grantError(api.GrantRevoked, "its thread was deleted")
	case err != nil:
		return nil, storeUnavailable()
	}
	return &caller{key: &store.KeyRecord{ID: "voice-session:" + sess.ID, Tenant: c.Tenant}, tenant: c.Tenant,
		scope: c.Thread, scopeFlow: c.Flow, session: sess.ID}, nil
}

func (s *Server) grantTTL() time.Duration {
	if s.livekit != nil {
		return s.livekit.cfg.GrantTTL
	}
	return defaultGrantTTL
}

func (s *Server) grantMax() time.Duration {
	if s.livekit != nil {
		return s.livekit.cfg.SessionMax
	}
	return defaultSessionMax
}

// signingKey is the current signing key, made if there is none.
func (s *Server) signingKey(ctx context.Context) (*store.SigningKeyRecord, error) {
	return s.voiceCat.VoiceSigningKey(ctx, newSigningKey())
}

func newSigningKey() *store.SigningKeyRecord {
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	return &store.SigningKeyRecord{ID: newID("sk"), Secret: secret, Created: time.Now().UTC()}
}

// openSession opens the thread's voice session for c, in place of the
// live session replace (if any), and returns the session and whether it
// is new; a session another server opened just now is returned instead.
func (s *Server) openSession(ctx context.Context, c *caller, rec *store.ThreadRecord, identity, replace string, now time.Time) (*store.VoiceSessionRecord, bool, error) {
	if s.voiceCat == nil {
		return nil, false, errNoVoiceStore
	}
	key, err := s.signingKey(ctx)
	if err != nil {
		return nil, false, err
	}
	now = now.UTC()
	v := &store.VoiceSessionRecord{ID: newID("vs"), Tenant: c.tenant, Thread: rec.ID, ThreadCreated: rec.Created, KeyHash: c.key.Hash,
		SigningKey: key.ID, Created: now, Expires: now.Add(s.grantTTL()), Deadline: now.Add(s.grantMax()).Truncate(time.Second),
		Caller: identity, CallerAt: now, CallerKey: c.key.ID}
	return s.voiceCat.OpenVoiceSession(ctx, v, replace)
}

// grantOf is the grant of a session.
func (s *Server) grantOf(ctx context.Context, v *store.VoiceSessionRecord, flow string) (string, error) {
	key, err := s.signingKey(ctx)
	if err != nil {
		return "", err
	}
	if key.ID != v.SigningKey {
		return "", errors.New("the signing key was rotated while the session opened")
	}
	return signGrant(key, grantClaims{Tenant: v.Tenant, Thread: v.Thread, Flow: flow, Session: v.ID, SigningKey: key.ID,
		Issued: v.Created.Unix(), Expiry: v.Deadline.Unix()}), nil
}

// grantReach lists the routes a grant may call, on its own thread and
// flow: the thread's state, its runs (started and waited on), the speech
// routes, and its own renewal. Nothing else: no deleting, forking or
// updating the thread, no voice session, no other thread.
var grantReach = map[string]bool{
	"GET /v1/flows/{name}":                   true,
	"GET /v1/threads/{id}":                   true,
	"GET /v1/threads/{id}/state":             true,
	"POST /v1/threads/{id}/runs":             true,
	"POST /v1/threads/{id}/runs/wait":        true,
	"POST /v1/threads/{id}/runs/stream":      true,
	"GET /v1/threads/{id}/runs":              true,
	"GET /v1/threads/{id}/runs/{run}":        true,
	"GET /v1/threads/{id}/runs/{run}/wait":   true,
	"GET /v1/threads/{id}/runs/{run}/stream": true,
	"POST /v1/audio/speech":                  true,
	"POST /v1/audio/transcriptions":          true,
	"POST /v1/threads/{id}/voice/grant":      true,
	"DELETE /v1/threads/{id}/voice/grant":    true,
}

// reach refuses a route to a caller whose credential does not reach it:
// a grant beyond grantReach or its thread and flow, a key on a route
// only grants take.
func reach(c *caller, rt route, r *http.Request) error {
	if c.session == "" {
		if rt.access == agent {
			return &api.Error{Code: api.CodeForbidden, Message: "this route takes a voice agent's grant"}
		}
		return nil
	}
	ok := grantReach[rt.method+" "+rt.path]
	if ok && strings.Contains(rt.path, "{id}") {
		ok = threadKey(c, r.PathValue("id")) == c.scope
	}
	if ok && strings.Contains(rt.path, "{name}") {
		ok = r.PathValue("name") == c.scopeFlow
	}
	if !ok {
		return &api.Error{Code: api.CodeForbidden, Message: "a voice agent's grant reaches only its thread's state and runs, its flow and the speech routes"}
	}
	return nil
}

// renewGrant is the agent's heartbeat: its session lives on for the
// grant's lifetime (never past its deadline).
func (s *Server) renewGrant(w http.ResponseWriter, r *http.Request, c *caller) error {
	now := time.Now().UTC()
	v, err := s.voiceCat.RenewVoiceSession(r.Context(), c.session, now, now.Add(s.grantTTL()))
	if errors.Is(err, store.ErrNotFound) {
		return grantError(api.GrantEnded, "its session has ended")
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.VoiceGrant{Session: v.ID, Expires: v.Expires, Deadline: v.Deadline,
		RenewSeconds: int(grantRenewEvery(s.grantTTL()) / time.Second)})
	return nil
}

// endGrant is the agent giving its grant up as it leaves: its session
// ends, so the next request for the thread's voice session dispatches an
// agent at once.
func (s *Server) endGrant(w http.ResponseWriter, r *http.Request, c *caller) error {
	if err := s.voiceCat.EndVoiceSession(r.Context(), c.session, time.Now().UTC()); err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// rotateSigningKey replaces the key grants are signed with: every grant
// signed before stops working at once (their agents leave, and the next
// request for a thread's voice session dispatches another).
func (s *Server) rotateSigningKey(w http.ResponseWriter, r *http.Request, _ *caller) error {
	if s.voiceCat == nil {
		return errNoVoiceStore
	}
	k := newSigningKey()
	if err := s.voiceCat.RotateVoiceSigningKey(r.Context(), k); err != nil {
		return err
	}
	s.log.Info("the voice grants' signing key was rotated", "key", k.ID)
	writeJSON(w, http.StatusOK, api.SigningKey{ID: k.ID, Created: k.Created})
	return nil
}
