package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/store"
)

// VoiceConfig is how a thread's voice session runs: the rooms' server
// (LiveKit's), and how long the voice agent's grant lives.
type VoiceConfig struct {
	// Rooms is the server of the sessions' rooms (required).
	Rooms Rooms
	// GrantTTL is how long a voice agent's grant lives unless the agent
	// renews it (default 1 minute; the agent renews it while it lives),
	// and SessionMax how long a session lasts at most (default 6 hours):
	// no grant is good past it.
	GrantTTL, SessionMax time.Duration
}

// Rooms is the real-time media server that threads' voice sessions run
// on, as the voice routes use it: LiveKit's API (the trellis command
// gives one over LiveKit's server SDK). A thread's room holds its caller
// and the voice agent dispatched to it. A failed call returns a
// *RoomsError, or any error; Reason tells the tenant why, in words that
// reveal nothing of the deployment, and the error itself goes to the
// log.
type Rooms interface {
	// Addr names the server in the log.
	Addr() string
	// URL is the address callers join rooms at.
	URL() string
	// Agent is the name the voice agents register under.
	Agent() string
	// Ensure makes room, with meta as its metadata, or finds it and puts
	// it right; it returns the room's participants and the dispatches of
	// agents to it.
	Ensure(ctx context.Context, room, meta string) ([]Participant, []Dispatch, error)
	// Dispatch sends the voice agent to room, with meta.
	Dispatch(ctx context.Context, room, meta string) error
	// Undispatch deletes a dispatch of room, Remove a participant of it,
	// and Close the room with whoever is in it; what is gone already is
	// no error.
	Undispatch(ctx context.Context, room, id string) error
	Remove(ctx context.Context, room, identity string) error
	Close(ctx context.Context, room string) error
	// CallerToken mints a caller's token: it may join room (making it,
	// with meta, if the server lost it) as in.Identity with attrs as its
	// attributes, which it may not change, and publish a microphone (none
	// in text mode) and data.
	CallerToken(room, meta string, in api.VoiceRequest, attrs map[string]string) (token string, expires time.Time, err error)
	// Check asks the server something that needs valid credentials; nil
	// when it answers.
	Check(ctx context.Context) error
	// Reason says why a call failed, in words fit for a tenant.
	Reason(err error) string
}

// Participant is one participant of a room.
type Participant struct {
	Identity string
	// Agent marks an agent (a voice agent), not a caller.
	Agent      bool
	Attributes map[string]string
}

// Dispatch is an agent dispatched to a room.
type Dispatch struct {
	ID, Agent, Metadata string
	// Jobs counts the jobs of the dispatch that agents took.
	Jobs int
}

// RoomsError is a call to the rooms' server that failed: what it was
// doing, and its error.
type RoomsError struct {
	Doing string
	Err   error
}

func (e *RoomsError) Error() string { return e.Doing + ": " + e.Err.Error() }
func (e *RoomsError) Unwrap() error { return e.Err }

const (
	defaultGrantTTL   = time.Minute
	defaultSessionMax = 6 * time.Hour
	// joinWindow is how long a caller given a token holds the session's
	// caller place before it is seen in the room.
	joinWindow = 15 * time.Second
	// acceptWindow is how long a dispatch no agent has answered is
	// waited for.
	acceptWindow = 3 * time.Second
)

func (c *VoiceConfig) defaults() {
	if c.GrantTTL == 0 {
		c.GrantTTL = defaultGrantTTL
	}
	if c.SessionMax == 0 {
		c.SessionMax = defaultSessionMax
	}
}

// voiceRooms is the voice sessions' rooms, as this server uses them.
type voiceRooms struct {
	cfg   VoiceConfig
	rooms Rooms
	// locks serialise this server's requests on one room (a hash of its
	// name picks the lock); across servers, the store opens one session
	// per thread.
	locks [64]sync.Mutex
	// health is the rooms' server's state as last checked, for /readyz.
	healthMu  sync.Mutex
	healthAt  time.Time
	healthErr error
}

func newVoiceRooms(cfg VoiceConfig) *voiceRooms {
	cfg.defaults()
	return &voiceRooms{cfg: cfg, rooms: cfg.Rooms}
}

func (lk *voiceRooms) lock(room string) func() {
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

var identityFormat = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// callerPrefix starts a key's own identity, "caller-" and the key's id.
const callerPrefix = "caller-"

// voiceRequest reads the route's optional body; the caller's identity is
// by default its key's, and another key's own identity is not to be had.
func voiceRequest(r *http.Request, c *caller) (api.VoiceRequest, error) {
	var in api.VoiceRequest
	if r.ContentLength != 0 {
		if err := readJSON(r, &in); err != nil {
			return in, err
		}
	}
	if in.Identity == "" {
		in.Identity = callerPrefix + c.key.ID
	}
	if !identityFormat.MatchString(in.Identity) || strings.HasPrefix(in.Identity, "agent") {
		return in, &api.Error{Code: api.CodeInvalidInput, Message: "identity is 1 to 64 letters, digits, '.', '_' or '-', not starting with \"agent\""}
	}
	if strings.HasPrefix(in.Identity, callerPrefix) && in.Identity != callerPrefix+c.key.ID {
		return in, errIdentityTaken(in.Identity)
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

// CallerKeyAttribute is the participant attribute naming the id of the
// API key a caller's token was minted for: the identity it joined as is
// that key's while it is in the room.
const CallerKeyAttribute = "trellis.key"

// errIdentityTaken refuses an identity that is another key's.
func errIdentityTaken(identity string) error {
	return &api.Error{Code: api.CodeForbidden, Details: map[string]string{"field": "identity"},
		Message: fmt.Sprintf("the identity %q belongs to another key's caller: ask with an identity of your own, or none (your key's)", identity)}
}

// identityTaken reports whether identity is another key's than key: a
// caller in the room joined as it with another key's token, or it holds
// the session's caller place for another key.
func identityTaken(identity, key string, ps []Participant, sess *store.VoiceSessionRecord) bool {
	for _, p := range ps {
		if !p.Agent && p.Identity == identity && p.Attributes[CallerKeyAttribute] != key {
			return true
		}
	}
	return sess != nil && sess.Caller == identity && sess.CallerKey != "" && sess.CallerKey != key
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
	// the thread's version of its flow decides, not the one loaded now
	l, err := s.threadFlow(r.Context(), c.tenant, rec.ID, rec.Flow)
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
	ps, ds, err := lk.rooms.Ensure(ctx, room, meta)
	if err != nil {
		return s.livekitError(ctx, err)
	}
	now := time.Now().UTC()
	live, err := s.voiceCat.LiveVoiceSession(ctx, c.tenant, rec.ID, now)
	if errors.Is(err, store.ErrNotFound) {
		live = nil
	} else if err != nil {
		return err
	}
	if identityTaken(in.Identity, c.key.ID, ps, live) {
		return errIdentityTaken(in.Identity)
	}
	if callerBusy(in.Identity, ps, live, now) {
		return errVoiceBusy
	}
	agent, sess, err := s.ensureAgent(ctx, c, rec, l.version, room, live, ps, ds, in, now)
	if err != nil {
		return err
	}
	if sess != live && identityTaken(in.Identity, c.key.ID, nil, sess) {
		return errIdentityTaken(in.Identity) // another server let it in for another key just now
	}
	if sess != live && callerBusy(in.Identity, ps, sess, now) {
		return errVoiceBusy // another server let another caller in just now
	}
	// the place moves only from the holder read, so of two keys asking
	// for one identity at once one is let in
	if err := s.voiceCat.AdmitVoiceCaller(ctx, sess.ID, sess.Caller, in.Identity, c.key.ID, now); err != nil {
		if errors.Is(err, store.ErrVoiceCallerChanged) {
			return errVoiceBusy
		}
		return err
	}
	tok, exp, err := lk.rooms.CallerToken(room, meta, in, map[string]string{CallerKeyAttribute: c.key.ID})
	if err != nil {
		return err
	}
	s.metrics.voice.WithLabelValues(agent).Inc()
	writeJSON(w, http.StatusOK, api.VoiceSession{Thread: id, URL: lk.rooms.URL(), Room: room, Identity: in.Identity,
		Token: tok, Expires: exp, Mode: in.Mode, Agent: agent, Topic: api.VoiceTopic})
	return nil
}

// callerBusy reports whether the session's caller place is held by
// another than identity: another caller is in the room, or the caller
// let in last was let in moments ago and may be joining.
func callerBusy(identity string, ps []Participant, live *store.VoiceSessionRecord, now time.Time) bool {
	inRoom := false
	for _, p := range ps {
		if p.Agent {
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

func alive(p Participant, now time.Time) bool {
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
func (s *Server) ensureAgent(ctx context.Context, c *caller, rec *store.ThreadRecord, version, room string, live *store.VoiceSessionRecord,
	ps []Participant, ds []Dispatch, in api.VoiceRequest, now time.Time) (string, *store.VoiceSessionRecord, error) {
	lk := s.livekit
	state, answered := "", false
	if live != nil {
		for _, d := range ds {
			if dispatchSession(d) == live.ID && d.Jobs > 0 {
				answered = true
			}
		}
		state = "gone"
		seen := false
		for _, p := range ps {
			if p.Agent && p.Attributes[SessionAttribute] == live.ID {
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
		if p.Agent && (p.Attributes[SessionAttribute] != sess.ID || !alive(p, now)) {
			if err := lk.rooms.Remove(ctx, room, p.Identity); err != nil {
				return "", nil, s.livekitError(ctx, err)
			}
		}
	}
	for _, d := range ds {
		if d.Agent == lk.rooms.Agent() && dispatchSession(d) != sess.ID {
			if err := lk.rooms.Undispatch(ctx, room, d.ID); err != nil {
				return "", nil, s.livekitError(ctx, err)
			}
		}
	}
	if sess == live {
		return state, sess, nil
	}
	grant, err := s.grantOf(ctx, sess, rec.Flow)
	if err == nil {
		meta, _ := json.Marshal(api.VoiceDispatch{Thread: publicID(rec.ID), Flow: rec.Flow, Version: version, Mode: in.Mode, Session: sess.ID, Grant: grant,
			Expires: sess.Expires, RenewSeconds: int(grantRenewEvery(s.grantTTL()) / time.Second)})
		if err = lk.rooms.Dispatch(ctx, room, string(meta)); err != nil {
			err = s.livekitError(ctx, err)
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
func dispatchSession(d Dispatch) string {
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
	if err := lk.rooms.Close(ctx, roomName(rec.ID)); err != nil {
		return s.livekitError(ctx, err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// livekitError logs what LiveKit said, with the request's id, and
// answers the tenant with a stable code and a message that reveals
// nothing of the deployment.
func (s *Server) livekitError(ctx context.Context, err error) error {
	reason := s.livekit.rooms.Reason(err)
	doing, cause := "answering", err
	var re *RoomsError
	if errors.As(err, &re) {
		doing, cause = re.Doing, re.Err
	}
	s.log.Warn("the LiveKit server failed", "id", ctx.Value(requestIDKey), "doing", doing, "error", cause.Error())
	return &api.Error{Code: api.CodeLiveKitFailed, Message: fmt.Sprintf("the LiveKit server failed %s: %s", doing, reason)}
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
	err := lk.rooms.Check(ctx)
	if err != nil && (lk.healthErr == nil || lk.healthAt.IsZero()) {
		s.log.Warn("voice is unavailable: the LiveKit server failed", "url", lk.rooms.Addr(), "reason", lk.rooms.Reason(err), "error", err.Error())
	} else if err == nil && lk.healthErr != nil {
		s.log.Info("voice is available again: the LiveKit server answers", "url", lk.rooms.Addr())
	}
	lk.healthAt, lk.healthErr = time.Now(), err
	return err
}

// startVoice checks, as the server starts, that the LiveKit server
// answers to its credentials.
func (s *Server) startVoice() {
	if err := s.voiceHealth(context.Background()); err == nil {
		s.log.Info("voice: the LiveKit server answers", "url", s.livekit.rooms.Addr())
	}
}

// finished reports whether a conversation of l is over in values.
func finished(l *loaded, values map[string]any) bool {
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
