package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/livekit/protocol/auth"
	"github.com/livekit/protocol/livekit"
	lksdk "github.com/livekit/server-sdk-go/v2"
	"github.com/twitchtv/twirp"

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
	// GrantTTL is how long a voice agent's grant lives unless the agent
	// renews it (default 1 minute; the agent renews it while it lives),
	// and SessionMax how long a session lasts at most (default 6 hours):
	// no grant is good past it.
	GrantTTL, SessionMax time.Duration
}

// DefaultAgentName is the name voice agents register under.
const DefaultAgentName = "trellis-voice"

const (
	defaultGrantTTL   = time.Minute
	defaultSessionMax = 6 * time.Hour
	// A room's timeouts: how long it waits for its first participant, and
	// how long it stays after the last one left.
	roomEmptyTimeout     = 300
	roomDepartureTimeout = 30
	// joinWindow is how long a caller given a token holds the session's
	// caller place before it is seen in the room.
	joinWindow = 15 * time.Second
	// acceptWindow is how long a dispatch no agent has answered is
	// waited for.
	acceptWindow = 3 * time.Second
)

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

// DevelopmentKey reports whether key and secret are the pair `livekit-server
// --dev` runs with, which is published: whoever reaches that LiveKit
// server can use it.
func DevelopmentKey(key, secret string) bool { return key == "devkey" && secret == "secret" }

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
		c.GrantTTL = defaultGrantTTL
	}
	if c.SessionMax == 0 {
		c.SessionMax = defaultSessionMax
	}
}

// livekitRooms is what the voice routes ask of LiveKit.
type livekitRooms struct {
	cfg      VoiceConfig
	rooms    *lksdk.RoomServiceClient
	dispatch *lksdk.AgentDispatchClient
	// locks serialise this server's requests on one room (a hash of its
	// name picks the lock); across servers, the store opens one session
	// per thread.
	locks [64]sync.Mutex
	// health is LiveKit's state as last checked, for /readyz.
	healthMu  sync.Mutex
	healthAt  time.Time
	healthErr error
}

func newLiveKitRooms(cfg VoiceConfig) *livekitRooms {
	cfg.defaults()
	return &livekitRooms{cfg: cfg, rooms: lksdk.NewRoomServiceClient(cfg.URL, cfg.APIKey, cfg.APISecret),
		dispatch: lksdk.NewAgentDispatchServiceClient(cfg.URL, cfg.APIKey, cfg.APISecret)}
}

func (lk *livekitRooms) lock(room string) func() {
	h := fnv.New32a()
	h.Write([]byte(room))
	mu := &lk.locks[h.Sum32()%uint32(len(lk.locks))]
	mu.Lock()
	return mu.Unlock
}

// roomName is a thread's room: a digest of its tenant and id, so that
// names never collide across tenants and reveal neither.
func roomName(threadKey string) string {
	sum := sha256.Sum256([]byte("trellis thread\x00" + threadKey))
	return "trellis-" + hex.EncodeToString(sum[:12])
}

// roomConfig is how a thread's room is made, by the API or by a caller's
// token (a caller reconnecting after LiveKit restarted makes the room
// again before anyone asks the API): its metadata and timeouts, and a
// dispatch of the Trellis agent that names no session, which keeps
// LiveKit from giving the room its default dispatch (an unnamed agent,
// which any automatically dispatched agent of the LiveKit project
// answers) and which Trellis agents decline.
func (lk *livekitRooms) roomConfig(room, meta string) *livekit.RoomConfiguration {
	return &livekit.RoomConfiguration{Name: room, EmptyTimeout: roomEmptyTimeout, DepartureTimeout: roomDepartureTimeout, Metadata: meta,
		Agents: []*livekit.RoomAgentDispatch{{AgentName: lk.cfg.AgentName}}}
}

var identityFormat = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// voiceRequest reads the route's optional body; the caller's identity is
// by default its key's.
func voiceRequest(r *http.Request, c *caller) (api.VoiceRequest, error) {
	var in api.VoiceRequest
	if r.ContentLength != 0 {
		if err := readJSON(r, &in); err != nil {
			return in, err
		}
	}
	if in.Identity == "" {
		in.Identity = "caller-" + c.key.ID
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

var errVoiceBusy = &api.Error{Code: api.CodeVoiceBusy, Message: "another caller is in this thread's voice session (or was let in moments ago): a session takes one caller at a time"}

// voice opens a thread's voice session, or lets its caller in again: it
// makes the thread's room (or finds it, and puts its metadata and
// timeouts right), dispatches the voice agent to it with a grant of a new
// session unless the session's agent is there or on its way, and mints
// the caller a token that may join it and publish only a microphone and
// data. A session takes one caller at a time (see api.VoiceRequest).
func (s *Server) voice(w http.ResponseWriter, r *http.Request, c *caller) error {
	rec, err := s.thread(r, c)
	if err != nil {
		return err
	}
	in, err := voiceRequest(r, c)
	if err != nil {
		return err
	}
	lk := s.livekit
	if lk == nil {
		return &api.Error{Code: api.CodeVoiceNotConfigured, Message: "voice is not configured on this server: set LIVEKIT_URL, LIVEKIT_API_KEY and LIVEKIT_API_SECRET"}
	}
	if s.voiceCat == nil {
		return errNoVoiceStore
	}
	l, err := s.flows.get(rec.Flow)
	if err != nil {
		return err
	}
	if l.flow.Graph().Conversation == nil {
		return &api.Error{Code: api.CodeNotConversational, Message: fmt.Sprintf("flow %q has no conversation block: nothing tells a voice agent what to say and where a reply goes", rec.Flow)}
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	id := publicID(rec.ID)
	room := roomName(rec.ID)
	metaJSON, _ := json.Marshal(map[string]string{"thread": id, "flow": rec.Flow, "topic": api.VoiceTopic})
	meta := string(metaJSON)
	defer lk.lock(room)()
	ps, ds, err := s.ensureRoom(ctx, room, meta)
	if err != nil {
		return err
	}
	now := time.Now().UTC()
	live, err := s.voiceCat.LiveVoiceSession(ctx, c.tenant, rec.ID, now)
	if errors.Is(err, store.ErrNotFound) {
		live = nil
	} else if err != nil {
		return err
	}
	if callerBusy(in.Identity, ps, live, now) {
		return errVoiceBusy
	}
	agent, sess, err := s.ensureAgent(ctx, c, rec, room, live, ps, ds, in, now)
	if err != nil {
		return err
	}
	if sess != live && callerBusy(in.Identity, ps, sess, now) {
		return errVoiceBusy // another server let another caller in just now
	}
	if err := s.voiceCat.AdmitVoiceCaller(ctx, sess.ID, sess.Caller, in.Identity, now); err != nil {
		if errors.Is(err, store.ErrVoiceCallerChanged) {
			return errVoiceBusy
		}
		return err
	}
	tok, exp, err := lk.callerToken(room, meta, in)
	if err != nil {
		return err
	}
	s.metrics.voice.WithLabelValues(agent).Inc()
	writeJSON(w, http.StatusOK, api.VoiceSession{Thread: id, URL: lk.cfg.PublicURL, Room: room, Identity: in.Identity,
		Token: tok, Expires: exp, Mode: in.Mode, Agent: agent, Topic: api.VoiceTopic})
	return nil
}

// callerToken mints a caller's token: it may join the room (making it,
// as roomConfig says, if LiveKit lost it) and publish a microphone (none
// in text mode) and data.
func (lk *livekitRooms) callerToken(room, meta string, in api.VoiceRequest) (string, time.Time, error) {
	exp := time.Now().Add(lk.cfg.TokenTTL).UTC().Truncate(time.Second)
	yes, no, audio := true, false, in.Mode == api.VoiceAudio
	grant := &auth.VideoGrant{RoomJoin: true, Room: room, CanSubscribe: &yes, CanPublish: &audio, CanPublishData: &yes, CanUpdateOwnMetadata: &no}
	if audio {
		grant.SetCanPublishSources([]livekit.TrackSource{livekit.TrackSource_MICROPHONE})
	}
	tok, err := auth.NewAccessToken(lk.cfg.APIKey, lk.cfg.APISecret).SetIdentity(in.Identity).SetName(in.Name).
		SetKind(livekit.ParticipantInfo_STANDARD).SetValidFor(lk.cfg.TokenTTL).SetVideoGrant(grant).
		SetRoomConfig(lk.roomConfig(room, meta)).ToJWT()
	return tok, exp, err
}

// callerBusy reports whether the session's caller place is held by
// another than identity: another caller is in the room, or the caller
// let in last was let in moments ago and may be joining.
func callerBusy(identity string, ps []*livekit.ParticipantInfo, live *store.VoiceSessionRecord, now time.Time) bool {
	inRoom := false
	for _, p := range ps {
		if p.Kind == livekit.ParticipantInfo_AGENT {
			continue
		}
		if p.Identity != identity {
			return true
		}
		inRoom = true
	}
	if live == nil || inRoom || live.Caller == identity || live.Caller == "" {
		return false
	}
	for _, p := range ps {
		if p.Identity == live.Caller {
			return true
		}
	}
	return now.Sub(live.CallerAt) < joinWindow
}

// ensureRoom makes the thread's room, or finds it and puts it right: its
// metadata, its timeouts (an empty room made otherwise is made again; a
// room someone is in keeps its timeouts until it closes, and says so in
// the log), and no unnamed dispatch. It returns the room's participants
// and its agent dispatches.
func (s *Server) ensureRoom(ctx context.Context, room, meta string) ([]*livekit.ParticipantInfo, []*livekit.AgentDispatch, error) {
	lk := s.livekit
	cfg := lk.roomConfig(room, meta)
	create := &livekit.CreateRoomRequest{Name: room, EmptyTimeout: cfg.EmptyTimeout, DepartureTimeout: cfg.DepartureTimeout,
		Metadata: meta, Agents: cfg.Agents}
	rm, err := lk.rooms.CreateRoom(ctx, create)
	if err != nil {
		return nil, nil, s.livekitError(ctx, "creating the room", err)
	}
	ps, err := lk.rooms.ListParticipants(ctx, &livekit.ListParticipantsRequest{Room: room})
	if err != nil {
		return nil, nil, s.livekitError(ctx, "listing the room's participants", err)
	}
	if rm.EmptyTimeout != cfg.EmptyTimeout || rm.DepartureTimeout != cfg.DepartureTimeout {
		if len(ps.Participants) == 0 {
			s.log.Info("making a voice room again: it was made with other timeouts", "room", room,
				"empty_timeout", rm.EmptyTimeout, "departure_timeout", rm.DepartureTimeout)
			if _, err := lk.rooms.DeleteRoom(ctx, &livekit.DeleteRoomRequest{Room: room}); err != nil {
				return nil, nil, s.livekitError(ctx, "removing a room made with other timeouts", err)
			}
			if rm, err = lk.rooms.CreateRoom(ctx, create); err != nil {
				return nil, nil, s.livekitError(ctx, "creating the room", err)
			}
		} else {
			s.log.Warn("a voice room was made with other timeouts, and has participants: it keeps them until it closes", "room", room,
				"empty_timeout", rm.EmptyTimeout, "departure_timeout", rm.DepartureTimeout)
		}
	}
	if rm.Metadata != meta {
		if _, err := lk.rooms.UpdateRoomMetadata(ctx, &livekit.UpdateRoomMetadataRequest{Room: room, Metadata: meta}); err != nil {
			return nil, nil, s.livekitError(ctx, "setting the room's metadata", err)
		}
	}
	ds, err := lk.dispatch.ListDispatch(ctx, &livekit.ListAgentDispatchRequest{Room: room})
	if err != nil {
		return nil, nil, s.livekitError(ctx, "listing the room's agent dispatches", err)
	}
	var kept []*livekit.AgentDispatch
	for _, d := range ds.AgentDispatches {
		if d.AgentName != "" {
			kept = append(kept, d)
			continue
		}
		// LiveKit's default dispatch, of a room made without Trellis's configuration
		if _, err := lk.dispatch.DeleteDispatch(ctx, &livekit.DeleteAgentDispatchRequest{DispatchId: d.Id, Room: room}); err != nil && !notFound(err) {
			return nil, nil, s.livekitError(ctx, "removing the room's default dispatch", err)
		}
	}
	return ps.Participants, kept, nil
}

// AliveAttribute is the participant attribute in which a voice agent
// beats its heartbeat (Unix seconds), every AliveEvery: an agent whose
// process died stays in the room until LiveKit notices its connection is
// gone (some 20 seconds), and the heartbeat tells it from a live one.
// SessionAttribute names the voice session the agent serves.
const (
	AliveAttribute   = "trellis.alive"
	SessionAttribute = "trellis.session"
	AliveEvery       = 2 * time.Second
	aliveFor         = 4 * AliveEvery
)

func alive(p *livekit.ParticipantInfo, now time.Time) bool {
	beat, err := strconv.ParseInt(p.Attributes[AliveAttribute], 10, 64)
	return err != nil || now.Sub(time.Unix(beat, 0)) < aliveFor // no beat yet: it has just joined
}

// ensureAgent finds the live session's agent in the room ("present") or
// on its way ("dispatched": dispatched moments ago, or preparing the
// session, as its renewals say), or else opens a new session in place of
// the live one and dispatches an agent with its grant ("dispatched").
// Agents of no live session (dead ones, agents of sessions replaced,
// agents that are not Trellis's) are removed from the room, and the
// dispatches of no live session are deleted (which ends their jobs), so
// that a room has one agent at a time.
func (s *Server) ensureAgent(ctx context.Context, c *caller, rec *store.ThreadRecord, room string, live *store.VoiceSessionRecord,
	ps []*livekit.ParticipantInfo, ds []*livekit.AgentDispatch, in api.VoiceRequest, now time.Time) (string, *store.VoiceSessionRecord, error) {
	lk := s.livekit
	state, answered := "", false
	if live != nil {
		for _, d := range ds {
			if dispatchSession(d) == live.ID && len(d.GetState().GetJobs()) > 0 {
				answered = true
			}
		}
		state = "gone"
		seen := false
		for _, p := range ps {
			if p.Kind == livekit.ParticipantInfo_AGENT && p.Attributes[SessionAttribute] == live.ID {
				seen = true
				if alive(p, now) {
					state = "present"
				}
			}
		}
		renewEvery := grantRenewEvery(s.grantTTL())
		switch {
		case seen:
		case !live.Renewed.IsZero() && now.Sub(live.Renewed) < 3*renewEvery,
			live.Renewed.IsZero() && answered && now.Sub(live.Created) < 3*renewEvery,
			live.Renewed.IsZero() && now.Sub(live.Created) < acceptWindow:
			state = "dispatched" // on its way
		}
	}
	sess := live
	if state == "" || state == "gone" {
		replace := ""
		if live != nil {
			replace = live.ID
		}
		opened, created, err := s.openSession(ctx, c, rec, in.Identity, replace, now)
		if err != nil {
			return "", nil, err
		}
		sess = opened
		if !created {
			return "dispatched", sess, nil // another server opened it just now
		}
		state = "dispatched"
	}
	// what belongs to no live session goes
	for _, p := range ps {
		if p.Kind == livekit.ParticipantInfo_AGENT && (p.Attributes[SessionAttribute] != sess.ID || !alive(p, now)) {
			if _, err := lk.rooms.RemoveParticipant(ctx, &livekit.RoomParticipantIdentity{Room: room, Identity: p.Identity}); err != nil && !notFound(err) {
				return "", nil, s.livekitError(ctx, "removing an agent of no live session", err)
			}
		}
	}
	for _, d := range ds {
		if d.AgentName == lk.cfg.AgentName && dispatchSession(d) != sess.ID {
			if _, err := lk.dispatch.DeleteDispatch(ctx, &livekit.DeleteAgentDispatchRequest{DispatchId: d.Id, Room: room}); err != nil && !notFound(err) {
				return "", nil, s.livekitError(ctx, "removing a dispatch of no live session", err)
			}
		}
	}
	if sess == live {
		return state, sess, nil
	}
	grant, err := s.grantOf(ctx, sess, rec.Flow)
	if err == nil {
		meta, _ := json.Marshal(api.VoiceDispatch{Thread: publicID(rec.ID), Flow: rec.Flow, Mode: in.Mode, Session: sess.ID, Grant: grant,
			Expires: sess.Expires, RenewSeconds: int(grantRenewEvery(s.grantTTL()) / time.Second)})
		_, err = lk.dispatch.CreateDispatch(ctx, &livekit.CreateAgentDispatchRequest{AgentName: lk.cfg.AgentName, Room: room, Metadata: string(meta)})
		if err != nil {
			err = s.livekitError(ctx, "dispatching the voice agent", err)
		}
	}
	if err != nil {
		// no agent is coming: the session ends, and the next request tries again
		_ = s.voiceCat.EndVoiceSession(context.WithoutCancel(ctx), sess.ID, time.Now().UTC())
		return "", nil, err
	}
	return state, sess, nil
}

// dispatchSession is the voice session a dispatch's metadata names ("":
// none, or not a Trellis dispatch).
func dispatchSession(d *livekit.AgentDispatch) string {
	var v struct {
		Session string `json:"session"`
	}
	_ = json.Unmarshal([]byte(d.Metadata), &v)
	return v.Session
}

// endVoice ends a thread's voice session: its grant stops working, and
// its room is closed with whoever is in it.
func (s *Server) endVoice(w http.ResponseWriter, r *http.Request, c *caller) error {
	rec, err := s.thread(r, c)
	if err != nil {
		return err
	}
	lk := s.livekit
	if lk == nil {
		return &api.Error{Code: api.CodeVoiceNotConfigured, Message: "voice is not configured on this server: set LIVEKIT_URL, LIVEKIT_API_KEY and LIVEKIT_API_SECRET"}
	}
	if s.voiceCat == nil {
		return errNoVoiceStore
	}
	now := time.Now().UTC()
	for {
		live, err := s.voiceCat.LiveVoiceSession(r.Context(), c.tenant, rec.ID, now)
		if errors.Is(err, store.ErrNotFound) {
			break
		}
		if err != nil {
			return err
		}
		if err := s.voiceCat.EndVoiceSession(r.Context(), live.ID, now); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	if _, err := lk.rooms.DeleteRoom(ctx, &livekit.DeleteRoomRequest{Room: roomName(rec.ID)}); err != nil && !notFound(err) {
		return s.livekitError(ctx, "closing the room", err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func notFound(err error) bool {
	var te twirp.Error
	return errors.As(err, &te) && te.Code() == twirp.NotFound
}

// livekitReason says, in words fit for a tenant, why LiveKit failed:
// never its error's text, which names internal addresses.
func livekitReason(err error) string {
	var te twirp.Error
	var ne net.Error
	switch {
	case errors.As(err, &te) && (te.Code() == twirp.Unauthenticated || te.Code() == twirp.PermissionDenied):
		return "it refused the server's credentials (LIVEKIT_API_KEY, LIVEKIT_API_SECRET)"
	case errors.Is(err, context.DeadlineExceeded):
		return "it did not answer in time"
	case errors.As(err, &ne):
		return "it does not answer"
	case errors.As(err, &te) && te.Code() == twirp.Unavailable:
		return "it is unavailable"
	}
	return "it answered with an error"
}

// livekitError logs what LiveKit said, with the request's id, and
// answers the tenant with a stable code and a message that reveals
// nothing of the deployment.
func (s *Server) livekitError(ctx context.Context, doing string, err error) error {
	reason := livekitReason(err)
	s.log.Warn("the LiveKit server failed", "id", ctx.Value(requestIDKey), "doing", doing, "error", err.Error())
	return &api.Error{Code: api.CodeLiveKitFailed, Message: fmt.Sprintf("the LiveKit server failed %s: %s", doing, reason)}
}

// checkLiveKit asks the LiveKit server something that needs valid
// credentials; nil when it answers.
func (lk *livekitRooms) checkLiveKit(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err := lk.rooms.ListRooms(ctx, &livekit.ListRoomsRequest{Names: []string{"trellis-health"}})
	return err
}

// voiceHealth is LiveKit's state for /readyz, checked at most every few
// seconds.
func (s *Server) voiceHealth(ctx context.Context) error {
	lk := s.livekit
	lk.healthMu.Lock()
	defer lk.healthMu.Unlock()
	if time.Since(lk.healthAt) < 5*time.Second {
		return lk.healthErr
	}
	err := lk.checkLiveKit(ctx)
	if err != nil && (lk.healthErr == nil || lk.healthAt.IsZero()) {
		s.log.Warn("voice is unavailable: the LiveKit server failed", "url", lk.cfg.URL, "reason", livekitReason(err), "error", err.Error())
	} else if err == nil && lk.healthErr != nil {
		s.log.Info("voice is available again: the LiveKit server answers", "url", lk.cfg.URL)
	}
	lk.healthAt, lk.healthErr = time.Now(), err
	return err
}

// startVoice checks, as the server starts, that the LiveKit server
// answers to its credentials, and warns of a development key.
func (s *Server) startVoice() {
	lk := s.livekit
	if DevelopmentKey(lk.cfg.APIKey, lk.cfg.APISecret) {
		s.log.Warn("LiveKit's development key (devkey, secret) is in use: it is published, so whoever reaches the LiveKit server can join and manage every room; set a key of your own")
	}
	if err := s.voiceHealth(context.Background()); err == nil {
		s.log.Info("voice: the LiveKit server answers", "url", lk.cfg.URL)
	}
}

// finished reports whether a thread's conversation is over in values.
func (s *Server) finished(rec *store.ThreadRecord, values map[string]any) bool {
	l, err := s.flows.get(rec.Flow)
	if err != nil {
		return false
	}
	done, err := l.flow.Graph().Finished(values)
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
