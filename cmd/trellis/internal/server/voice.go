package server

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/livekit/protocol/auth"
	"github.com/livekit/protocol/livekit"
	lksdk "github.com/livekit/server-sdk-go/v2"

	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/store"
)

// VoiceConfig is the LiveKit server that a thread's voice session runs on.
type VoiceConfig struct {
	// URL is the LiveKit server (ws:// or wss://), and APIKey and
	// APISecret the key the server signs tokens and calls its API with.
	URL, APIKey, APISecret string
	// PublicURL is the LiveKit address given to callers, when they reach
	// it by another name than the server does (default URL).
	PublicURL string
	// AgentName is the name the voice agents register under (default
	// DefaultAgentName).
	AgentName string
	// TokenTTL is how long a caller's token may be used to join (default
	// 10 minutes); a joined caller's connection is kept up by LiveKit.
	TokenTTL time.Duration
	// GrantTTL is how long the voice agent may run the thread's turns
	// (default 6 hours).
	GrantTTL time.Duration
}

// DefaultAgentName is the name voice agents register under.
const DefaultAgentName = "trellis-voice"

// VoiceConfigFromEnv reads LIVEKIT_URL, LIVEKIT_API_KEY, LIVEKIT_API_SECRET
// (and LIVEKIT_PUBLIC_URL, LIVEKIT_AGENT_NAME); nil when LIVEKIT_URL is
// unset.
func VoiceConfigFromEnv(getenv func(string) string) (*VoiceConfig, error) {
	url := getenv("LIVEKIT_URL")
	if url == "" {
		return nil, nil
	}
	c := &VoiceConfig{URL: url, APIKey: getenv("LIVEKIT_API_KEY"), APISecret: getenv("LIVEKIT_API_SECRET"),
		PublicURL: getenv("LIVEKIT_PUBLIC_URL"), AgentName: getenv("LIVEKIT_AGENT_NAME")}
	if c.APIKey == "" || c.APISecret == "" {
		return nil, errors.New("LIVEKIT_URL is set but LIVEKIT_API_KEY or LIVEKIT_API_SECRET is not")
	}
	return c, nil
}

func (c *VoiceConfig) defaults() {
	if c.PublicURL == "" {
		c.PublicURL = c.URL
	}
	if c.AgentName == "" {
		c.AgentName = DefaultAgentName
	}
	if c.TokenTTL == 0 {
		c.TokenTTL = 10 * time.Minute
	}
	if c.GrantTTL == 0 {
		c.GrantTTL = 6 * time.Hour
	}
}

// livekitRooms is what the voice route asks of LiveKit.
type livekitRooms struct {
	cfg      VoiceConfig
	rooms    *lksdk.RoomServiceClient
	dispatch *lksdk.AgentDispatchClient
	// grantKey signs the agents' grants: derived from the LiveKit secret,
	// which every server and agent of a deployment shares, so that any
	// server accepts a grant another made.
	grantKey []byte
}

func newLiveKitRooms(cfg VoiceConfig) *livekitRooms {
	cfg.defaults()
	mac := hmac.New(sha256.New, []byte(cfg.APISecret))
	mac.Write([]byte("trellis voice agent grant v1"))
	return &livekitRooms{cfg: cfg, rooms: lksdk.NewRoomServiceClient(cfg.URL, cfg.APIKey, cfg.APISecret),
		dispatch: lksdk.NewAgentDispatchServiceClient(cfg.URL, cfg.APIKey, cfg.APISecret), grantKey: mac.Sum(nil)}
}

// roomName is a thread's room: a digest of its tenant and id, so that
// names never collide across tenants and reveal neither.
func roomName(threadKey string) string {
	sum := sha256.Sum256([]byte("trellis thread\x00" + threadKey))
	return "trellis-" + hex.EncodeToString(sum[:12])
}

// A grant lets the voice agent act for one thread of one tenant: it is
// "trv_" + the claims in base64 + "." + their HMAC.
type grantClaims struct {
	Tenant string `json:"t"`
	Thread string `json:"th"`
	Flow   string `json:"f"`
	Expiry int64  `json:"exp"`
}

const grantPrefix = "trv_"

func (lk *livekitRooms) mintGrant(tenant, thread, flow string, exp time.Time) string {
	body, _ := json.Marshal(grantClaims{Tenant: tenant, Thread: thread, Flow: flow, Expiry: exp.Unix()})
	payload := base64.RawURLEncoding.EncodeToString(body)
	mac := hmac.New(sha256.New, lk.grantKey)
	mac.Write([]byte(payload))
	return grantPrefix + payload + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

func (lk *livekitRooms) checkGrant(token string, now time.Time) (*grantClaims, bool) {
	rest, ok := strings.CutPrefix(token, grantPrefix)
	if !ok {
		return nil, false
	}
	payload, sig, ok := strings.Cut(rest, ".")
	if !ok {
		return nil, false
	}
	want := hmac.New(sha256.New, lk.grantKey)
	want.Write([]byte(payload))
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, want.Sum(nil)) {
		return nil, false
	}
	body, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		return nil, false
	}
	var c grantClaims
	if json.Unmarshal(body, &c) != nil || c.Tenant == "" || c.Thread == "" || now.Unix() >= c.Expiry {
		return nil, false
	}
	return &c, true
}

// grantAllows reports whether a grant's caller may call the route: its
// thread's routes, its flow's description and the speech routes.
func grantAllows(c *caller, rt route, r *http.Request) bool {
	switch {
	case strings.HasPrefix(rt.path, "/v1/audio/"):
		return true
	case rt.path == "/v1/flows/{name}":
		return rt.method == http.MethodGet && r.PathValue("name") == c.scopeFlow
	}
	return strings.HasPrefix(rt.path, "/v1/threads/{id}") && threadKey(c, r.PathValue("id")) == c.scope
}

var identityFormat = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// voiceRequest reads the route's optional body.
func voiceRequest(r *http.Request) (api.VoiceRequest, error) {
	var in api.VoiceRequest
	if r.ContentLength != 0 {
		if err := readJSON(r, &in); err != nil {
			return in, err
		}
	}
	if in.Identity == "" {
		in.Identity = "caller"
	}
	if !identityFormat.MatchString(in.Identity) || strings.HasPrefix(in.Identity, "agent") {
		return in, &api.Error{Code: api.CodeInvalidInput, Message: "identity is 1 to 64 letters, digits, '.', '_' or '-', not starting with \"agent\""}
	}
	if len(in.Name) > 128 {
		return in, &api.Error{Code: api.CodeInvalidInput, Message: "name is at most 128 characters"}
	}
	switch in.Mode {
	case "":
		in.Mode = api.VoiceAudio
	case api.VoiceAudio, api.VoiceText:
	default:
		return in, &api.Error{Code: api.CodeInvalidInput, Message: "mode is audio or text"}
	}
	return in, nil
}

// voice opens a thread's voice session: it creates the thread's room (or
// finds it), dispatches the voice agent to it unless an agent is there,
// and mints the caller a token that may join it and publish only a
// microphone and data.
func (s *Server) voice(w http.ResponseWriter, r *http.Request, c *caller) error {
	rec, err := s.thread(r, c)
	if err != nil {
		return err
	}
	in, err := voiceRequest(r)
	if err != nil {
		return err
	}
	lk := s.livekit
	if lk == nil {
		return &api.Error{Code: api.CodeVoiceNotConfigured, Message: "voice is not configured on this server: set LIVEKIT_URL, LIVEKIT_API_KEY and LIVEKIT_API_SECRET"}
	}
	l, err := s.flows.get(rec.Flow)
	if err != nil {
		return err
	}
	if l.flow.Conversation() == nil {
		return &api.Error{Code: api.CodeNotConversational, Message: fmt.Sprintf("flow %q has no conversation block: nothing tells a voice agent what to say and where a reply goes", rec.Flow)}
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	id := publicID(rec.ID)
	room := roomName(rec.ID)
	meta, _ := json.Marshal(map[string]string{"thread": id, "flow": rec.Flow, "topic": api.VoiceTopic})
	if _, err := lk.rooms.CreateRoom(ctx, &livekit.CreateRoomRequest{Name: room, EmptyTimeout: 300, DepartureTimeout: 30, Metadata: string(meta)}); err != nil {
		return livekitError("creating the room", err)
	}
	agent, err := lk.ensureAgent(ctx, room, func() api.VoiceDispatch {
		exp := time.Now().Add(lk.cfg.GrantTTL).UTC().Truncate(time.Second)
		return api.VoiceDispatch{Thread: id, Flow: rec.Flow, Mode: in.Mode, Grant: lk.mintGrant(c.tenant, rec.ID, rec.Flow, exp), Expires: exp}
	})
	if err != nil {
		return err
	}
	exp := time.Now().Add(lk.cfg.TokenTTL).UTC().Truncate(time.Second)
	// a caller publishes a microphone (none in text mode) and data
	yes, no, audio := true, false, in.Mode == api.VoiceAudio
	grant := &auth.VideoGrant{RoomJoin: true, Room: room, CanSubscribe: &yes, CanPublish: &audio, CanPublishData: &yes, CanUpdateOwnMetadata: &no}
	if audio {
		grant.SetCanPublishSources([]livekit.TrackSource{livekit.TrackSource_MICROPHONE})
	}
	tok, err := auth.NewAccessToken(lk.cfg.APIKey, lk.cfg.APISecret).SetIdentity(in.Identity).SetName(in.Name).
		SetValidFor(lk.cfg.TokenTTL).SetVideoGrant(grant).ToJWT()
	if err != nil {
		return err
	}
	s.metrics.voice.WithLabelValues(agent).Inc()
	writeJSON(w, http.StatusOK, api.VoiceSession{Thread: id, URL: lk.cfg.PublicURL, Room: room, Identity: in.Identity,
		Token: tok, Expires: exp, Mode: in.Mode, Agent: agent, Topic: api.VoiceTopic})
	return nil
}

// AliveAttribute is the participant attribute in which a voice agent
// beats its heartbeat (Unix seconds), every AliveEvery: an agent whose
// process died stays in the room until LiveKit notices its connection is
// gone (some 20 seconds), and the heartbeat tells it from a live one.
const (
	AliveAttribute = "trellis.alive"
	AliveEvery     = 2 * time.Second
	aliveFor       = 4 * AliveEvery
)

// ensureAgent dispatches the voice agent to room unless a live agent is in
// it: "present" or "dispatched". An agent whose heartbeat stopped is
// removed from the room, and dispatches that no agent answered (their
// agent left or died) are removed, so that a room has one agent at a time.
func (lk *livekitRooms) ensureAgent(ctx context.Context, room string, dispatch func() api.VoiceDispatch) (string, error) {
	ps, err := lk.rooms.ListParticipants(ctx, &livekit.ListParticipantsRequest{Room: room})
	if err != nil {
		return "", livekitError("listing the room's participants", err)
	}
	now := time.Now()
	for _, p := range ps.Participants {
		if p.Kind != livekit.ParticipantInfo_AGENT {
			continue
		}
		beat, err := strconv.ParseInt(p.Attributes[AliveAttribute], 10, 64)
		if err != nil || now.Sub(time.Unix(beat, 0)) < aliveFor {
			return "present", nil // alive, or not ours to judge
		}
		if _, err := lk.rooms.RemoveParticipant(ctx, &livekit.RoomParticipantIdentity{Room: room, Identity: p.Identity}); err != nil {
			return "", livekitError("removing an agent that stopped", err)
		}
	}
	old, err := lk.dispatch.ListDispatch(ctx, &livekit.ListAgentDispatchRequest{Room: room})
	if err != nil {
		return "", livekitError("listing the room's agent dispatches", err)
	}
	for _, d := range old.AgentDispatches {
		if d.AgentName == lk.cfg.AgentName {
			if _, err := lk.dispatch.DeleteDispatch(ctx, &livekit.DeleteAgentDispatchRequest{DispatchId: d.Id, Room: room}); err != nil {
				return "", livekitError("removing a stale agent dispatch", err)
			}
		}
	}
	meta, _ := json.Marshal(dispatch())
	if _, err := lk.dispatch.CreateDispatch(ctx, &livekit.CreateAgentDispatchRequest{AgentName: lk.cfg.AgentName, Room: room, Metadata: string(meta)}); err != nil {
		return "", livekitError("dispatching the voice agent", err)
	}
	return "dispatched", nil
}

func livekitError(doing string, err error) error {
	return &api.Error{Code: api.CodeLiveKitFailed, Message: fmt.Sprintf("the LiveKit server failed %s: %v", doing, err)}
}

// finished reports whether a thread's conversation is over in values.
func (s *Server) finished(rec *store.ThreadRecord, values map[string]any) bool {
	l, err := s.flows.get(rec.Flow)
	if err != nil {
		return false
	}
	done, err := l.flow.Finished(values)
	return err == nil && done
}

func (s *Server) speak(w http.ResponseWriter, r *http.Request, _ *caller) error {
	if s.cfg.Speech == nil {
		return errNoSpeech
	}
	return s.cfg.Speech.Speak(w, r)
}

func (s *Server) transcribe(w http.ResponseWriter, r *http.Request, _ *caller) error {
	if s.cfg.Speech == nil {
		return errNoSpeech
	}
	return s.cfg.Speech.Transcribe(w, r)
}

var errNoSpeech = &api.Error{Code: api.CodeSpeechUnavailable, Message: "this server serves no speech engine"}

// page serves the voice page and its script.
func (s *Server) page(w http.ResponseWriter, r *http.Request, _ *caller) error {
	if s.cfg.Page == nil {
		return &api.Error{Code: api.CodeNotFound, Message: "this server serves no voice page"}
	}
	s.cfg.Page.ServeHTTP(w, r)
	return nil
}
