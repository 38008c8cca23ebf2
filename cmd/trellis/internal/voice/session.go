package voice

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/livekit/protocol/livekit"
	lksdk "github.com/livekit/server-sdk-go/v2"
	"github.com/pion/webrtc/v4"

	"github.com/trellisflow/trellis/cmd/trellis/internal/audio"
	"github.com/trellisflow/trellis/runtime/api"
)

// session is the agent in one room.
type session struct {
	a          *Agent
	job        *livekit.Job
	url, token string
	log        *slog.Logger

	ctx    context.Context
	cancel context.CancelCauseFunc

	// from the bootstrap
	d        api.VoiceDispatch
	api      *api.Client
	conv     *api.Conversation
	version  string  // the flow's version conv is of
	speech   *speech // nil: text only
	over     bool    // the conversation had ended before the agent came
	greeting string
	greetPCM *audio.PCM

	room  *lksdk.Room
	voice *lksdk.LocalTrack // the agent's audio (audio mode)
	heard chan struct{}     // closed once a caller subscribes to it
	// events reach the session's loop from the room's callbacks and the
	// callers' listeners
	events chan event
	wg     sync.WaitGroup // listeners and speakers

	// lost is closed when the session's grant is refused: the session
	// ended, or its key or thread went.
	lost     chan struct{}
	lostOnce sync.Once

	mu       sync.Mutex
	speaking *speaker // the reply being spoken, if any
	turn     int
	encoders map[int]*audio.Encoder
	// served is the caller the agent talks with: one at a time, the first
	// in the room ("": none yet); others are told the session is busy.
	served  string
	lostErr error
	// whole: the speech endpoint failed a streamed transcription, and
	// utterances are sent to it whole
	whole atomic.Bool
}

// event is something that happened in the room.
type event struct {
	kind     eventKind
	identity string
	text     string
	pcm      audio.PCM
	hearing  *hearing  // the utterance's transcription under way, if any
	at       time.Time // when the utterance ended
}

type eventKind int

const (
	evJoined eventKind = iota
	evLeft
	evUtterance
	evText
)

func newSession(a *Agent, job *livekit.Job, url, token string) *session {
	ctx, cancel := context.WithCancelCause(a.ctx)
	room := ""
	if job.Room != nil {
		room = job.Room.Name
	}
	return &session{a: a, job: job, url: url, token: token, ctx: ctx, cancel: cancel,
		log:    a.log.With("job", job.Id, "room", room),
		events: make(chan event, 64), heard: make(chan struct{}), encoders: map[int]*audio.Encoder{}, lost: make(chan struct{})}
}

// stop ends the session.
func (s *session) stop(why string) { s.cancel(errors.New(why)) }

// run is the session's whole life: bootstrap, connect, converse, leave;
// its grant is renewed all the while, and given up at the end.
func (s *session) run() error {
	defer s.cancel(nil)
	if err := json.Unmarshal([]byte(s.job.Metadata), &s.d); err != nil || s.d.Thread == "" || s.d.Grant == "" {
		err := errors.New("preparing the session: the job carries no voice dispatch from the Trellis API (a thread and a grant)")
		s.refuse(err)
		return err
	}
	s.log = s.log.With("thread", s.d.Thread, "session", s.d.Session)
	s.api = &api.Client{BaseURL: s.a.cfg.API, Key: s.d.Grant, HTTP: s.a.cfg.HTTP}
	s.wg.Add(1)
	go s.keepGrant()
	defer s.giveUp()
	if err := s.bootstrap(); err != nil {
		if api.GrantRefusal(err) == api.GrantEnded {
			// replaced by another agent's session, or its room closed
			s.log.Info("the session ended before the agent joined", "error", err.Error())
			return nil
		}
		err = fmt.Errorf("preparing the session: %w", err)
		s.refuse(err)
		return err
	}
	if err := s.join(); err != nil {
		return err
	}
	defer s.leave()
	return s.converse()
}

// keepGrant renews the session's grant while the agent serves it (the
// agent's heartbeat to the API: a session whose agent died lapses), and
// reports a grant refused.
func (s *session) keepGrant() {
	defer s.wg.Done()
	every := time.Duration(max(s.d.RenewSeconds, 1)) * time.Second
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(s.ctx, max(every, 5*time.Second))
		g, err := s.api.RenewVoiceGrant(ctx, s.d.Thread)
		cancel()
		switch {
		case api.GrantRefusal(err) != "":
			s.lose(err)
			return
		case err != nil && s.ctx.Err() == nil:
			s.log.Warn("renewing the session's grant; trying again", "error", err.Error())
		case err == nil && g.RenewSeconds > 0:
			every = time.Duration(g.RenewSeconds) * time.Second
		}
		t.Reset(every)
	}
}

// lose records that the session's grant was refused.
func (s *session) lose(err error) {
	s.lostOnce.Do(func() {
		s.mu.Lock()
		s.lostErr = err
		s.mu.Unlock()
		close(s.lost)
	})
}

// giveUp ends the session's grant as the agent leaves (unless it was
// refused already), so that the next request for the thread's voice
// session dispatches an agent at once.
func (s *session) giveUp() {
	s.cancel(nil)
	s.wg.Wait()
	select {
	case <-s.lost:
		return
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.api.EndVoiceGrant(ctx, s.d.Thread); err != nil && api.GrantRefusal(err) == "" {
		s.log.Warn("giving the session's grant up", "error", err.Error())
	}
}

// bootstrap is the first phase: everything the session needs, made ready
// before the agent shows itself in the room.
func (s *session) bootstrap() error {
	ctx, cancel := context.WithTimeout(s.ctx, 2*time.Minute)
	defer cancel()
	if err := s.conversation(ctx, s.d.Version); err != nil {
		return err
	}
	if s.d.Mode != api.VoiceText {
		if err := audio.OpusAvailable(); err != nil {
			s.log.Warn("speaking in text only", "error", err.Error())
		} else if s.a.cfg.SpeechURL != "" {
			s.speech = newSpeech(s.a.cfg.SpeechURL, s.a.cfg.SpeechKey, s.a.cfg.HTTP, &s.a.cfg)
		} else {
			s.speech = newSpeech(s.a.cfg.API+"/v1", s.d.Grant, s.a.cfg.HTTP, &s.a.cfg)
		}
	}
	st, err := s.api.State(ctx, s.d.Thread, 0)
	if err != nil {
		return fmt.Errorf("reading the thread's state: %w", err)
	}
	if st.Finished {
		s.over = true
		return nil
	}
	if len(st.Next) > 0 {
		// a turn stopped part way (its server died): finish it first
		if _, err := s.api.RunWait(ctx, s.d.Thread, api.StartRun{Resume: true, OnBusy: api.OnBusyEnqueue}); err != nil {
			return fmt.Errorf("finishing the thread's unfinished turn: %w", err)
		}
		return nil
	}
	runs, err := s.api.Runs(ctx, s.d.Thread)
	if err != nil {
		return fmt.Errorf("reading the thread's runs: %w", err)
	}
	if out, _ := st.Values[s.conv.Output].(string); len(runs) > 0 || out != "" {
		return nil // a conversation under way: no second greeting
	}
	// a new thread: the flow speaks first, with no message
	reply, over, err := s.runTurn(ctx, nil)
	if err != nil {
		return fmt.Errorf("the greeting turn: %w", err)
	}
	s.greeting, s.over = reply, over
	if s.speech != nil && reply != "" {
		pcm, err := s.synthesizeAll(ctx, s.sayable(reply, over))
		if errors.Is(err, errNoSpeech) {
			s.log.Warn("speaking in text only", "error", err.Error())
			s.speech = nil
		} else if err != nil {
			return err
		} else {
			s.greetPCM = &pcm
		}
	}
	return nil
}

// conversation reads the conversation block of a version of the
// thread's flow: the one the thread runs, as the dispatch or a run names
// it (a server that names none gives the version it has loaded).
func (s *session) conversation(ctx context.Context, version string) error {
	var fl *api.Flow
	var err error
	if version == "" {
		fl, err = s.api.Flow(ctx, s.d.Flow)
	} else {
		fl, err = s.api.FlowAt(ctx, s.d.Flow, version)
	}
	if err != nil {
		return fmt.Errorf("reading flow %q: %w", s.d.Flow, err)
	}
	if fl.Conversation == nil || fl.Conversation.Output == "" {
		return fmt.Errorf("flow %q version %s declares no conversation output", s.d.Flow, fl.Version)
	}
	s.conv, s.version = fl.Conversation, fl.Version
	return nil
}

// refuse tells the caller that the session cannot start, and why, and
// ends it (said as the end, so the page does not ask for another agent).
func (s *session) refuse(err error) {
	if s.ctx.Err() != nil {
		return
	}
	s.speech = nil
	if s.join() != nil {
		return
	}
	defer s.leave()
	s.send(Message{Type: MsgError, Text: "the voice session could not start: " + err.Error()})
	s.send(Message{Type: MsgEnd})
	select {
	case <-time.After(500 * time.Millisecond):
	case <-s.ctx.Done():
	}
}

// join is the second phase: connect, and publish the agent's voice.
func (s *session) join() error {
	cb := lksdk.NewRoomCallback()
	cb.OnParticipantConnected = func(rp *lksdk.RemoteParticipant) {
		if rp.Kind() != lksdk.ParticipantAgent {
			s.post(event{kind: evJoined, identity: rp.Identity()})
		}
	}
	cb.OnParticipantDisconnected = func(rp *lksdk.RemoteParticipant) {
		if rp.Kind() != lksdk.ParticipantAgent {
			s.post(event{kind: evLeft, identity: rp.Identity()})
		}
	}
	cb.OnTrackSubscribed = func(track *webrtc.TrackRemote, _ *lksdk.RemoteTrackPublication, rp *lksdk.RemoteParticipant) {
		if track.Kind() == webrtc.RTPCodecTypeAudio && rp.Kind() != lksdk.ParticipantAgent && s.speech != nil {
			s.wg.Add(1)
			go s.listen(track, rp.Identity())
		}
	}
	cb.OnDataPacket = func(data lksdk.DataPacket, params lksdk.DataReceiveParams) {
		u, ok := data.(*lksdk.UserDataPacket)
		if !ok || u.Topic != api.VoiceTopic {
			return
		}
		var m Message
		if json.Unmarshal(u.Payload, &m) == nil && m.Type == MsgText && strings.TrimSpace(m.Text) != "" {
			s.post(event{kind: evText, identity: params.SenderIdentity, text: strings.TrimSpace(m.Text)})
		}
	}
	var heardOnce sync.Once
	cb.OnLocalTrackSubscribed = func(*lksdk.LocalTrackPublication, *lksdk.LocalParticipant) {
		heardOnce.Do(func() { close(s.heard) })
	}
	cb.OnDisconnected = func() { s.stop("disconnected from the room") }
	room, err := lksdk.ConnectToRoomWithToken(s.url, s.token, cb, lksdk.WithAutoSubscribe(true), lksdk.WithConnectTimeout(20*time.Second))
	if err != nil {
		return fmt.Errorf("joining the room: %w", err)
	}
	s.room = room
	if s.speech != nil {
		track, err := lksdk.NewLocalTrack(webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeOpus})
		if err == nil {
			_, err = room.LocalParticipant.PublishTrack(track, &lksdk.TrackPublicationOptions{Name: "agent", Source: livekit.TrackSource_MICROPHONE})
		}
		if err != nil {
			s.leave()
			return fmt.Errorf("publishing the agent's voice: %w", err)
		}
		s.voice = track
		s.a.tracks.Add(1)
	}
	for _, rp := range room.GetRemoteParticipants() {
		if rp.Kind() != lksdk.ParticipantAgent {
			s.post(event{kind: evJoined, identity: rp.Identity()})
		}
	}
	s.wg.Add(1)
	go s.beat()
	s.log.Info("joined the room", "mode", s.mode())
	return nil
}

// beat keeps the agent's heartbeat attribute fresh, which tells the API
// (and the page) that the agent is alive, not a dead process LiveKit has
// not yet noticed.
func (s *session) beat() {
	defer s.wg.Done()
	t := time.NewTicker(AliveEvery)
	defer t.Stop()
	for {
		s.room.LocalParticipant.SetAttributes(map[string]string{AliveAttribute: strconv.FormatInt(time.Now().Unix(), 10)})
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *session) mode() string {
	if s.speech == nil {
		return api.VoiceText
	}
	return api.VoiceAudio
}

// leave disconnects and waits for everything the session started.
func (s *session) leave() {
	s.interrupt()
	if s.room != nil {
		s.room.Disconnect()
	}
	s.cancel(nil)
	s.wg.Wait()
	if s.voice != nil {
		_ = s.voice.Close()
		s.voice = nil
		s.a.tracks.Add(-1)
	}
	s.mu.Lock()
	for _, e := range s.encoders {
		e.Close()
	}
	s.encoders = nil
	s.mu.Unlock()
	s.log.Info("left the room")
}

// post hands an event to the loop, unless the session is over.
func (s *session) post(ev event) {
	select {
	case s.events <- ev:
	case <-s.ctx.Done():
	}
}

// send publishes a data message to the caller the agent serves (to the
// room while it serves none).
func (s *session) send(m Message) {
	s.mu.Lock()
	to := s.served
	s.mu.Unlock()
	s.sendTo(to, m)
}

// sendTo publishes a data message to one participant ("": to the room).
func (s *session) sendTo(identity string, m Message) {
	if s.room == nil {
		return
	}
	b, _ := json.Marshal(m)
	opts := []lksdk.DataPublishOption{lksdk.WithDataPublishReliable(true)}
	if identity != "" {
		opts = append(opts, lksdk.WithDataPublishDestination([]string{identity}))
	}
	if err := s.room.LocalParticipant.PublishDataPacket(&lksdk.UserDataPacket{Payload: b, Topic: api.VoiceTopic}, opts...); err != nil && s.ctx.Err() == nil {
		s.log.Warn("sending a data message", "error", err.Error())
	}
}

// converse is the session's loop: it greets the first caller, runs a
// turn per utterance or text, in order, and ends when the conversation
// does, or when no caller has been in the room for the idle timeout.
func (s *session) converse() error {
	callers := map[string]bool{}
	greeted := false
	idle := time.NewTimer(s.a.cfg.IdleTimeout)
	defer idle.Stop()
	for {
		select {
		case <-s.ctx.Done():
			if cause := context.Cause(s.ctx); cause != nil && !errors.Is(cause, context.Canceled) {
				s.log.Info("session ends", "why", cause.Error())
			}
			return nil
		case <-s.lost:
			s.mu.Lock()
			err := s.lostErr
			s.mu.Unlock()
			s.log.Info("session ends: its grant was refused", "error", err.Error())
			if api.GrantRefusal(err) != api.GrantEnded {
				// ended on purpose (the room closes) or replaced: nothing to say
				s.send(Message{Type: MsgError, Text: "the voice session was ended: " + refusal(err)})
				s.send(Message{Type: MsgEnd})
				select {
				case <-time.After(500 * time.Millisecond):
				case <-s.ctx.Done():
				}
			}
			return nil
		case <-idle.C:
			s.log.Info("session ends", "why", "no caller in the room")
			return nil
		case ev := <-s.events:
			switch ev.kind {
			case evJoined:
				callers[ev.identity] = true
				idle.Stop()
				if !s.serve(ev.identity) {
					s.sendTo(ev.identity, Message{Type: MsgError, Text: "another caller is in this voice session"})
					continue
				}
				if !greeted {
					greeted = true
					if done := s.greet(); done {
						return nil
					}
				}
			case evLeft:
				delete(callers, ev.identity)
				s.mu.Lock()
				if s.served == ev.identity {
					s.served = ""
				}
				s.mu.Unlock()
				if len(callers) == 0 {
					idle.Reset(s.a.cfg.IdleTimeout)
				}
			case evUtterance, evText:
				if !s.serve(ev.identity) {
					if ev.hearing != nil {
						ev.hearing.stop()
					}
					continue // another caller's: the agent talks with one at a time
				}
				if s.converseTurn(ev) {
					return nil
				}
			}
		}
	}
}

// serve reports whether the agent talks with identity: the caller it
// serves, or the first to come when it serves none.
func (s *session) serve(identity string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.served == "" {
		s.served = identity
	}
	return s.served == identity
}

// serves reports whether identity is the caller the agent serves (or it
// serves none yet), without making it so.
func (s *session) serves(identity string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.served == "" || s.served == identity
}

// refusal is why a grant was refused, in words for the caller.
func refusal(err error) string {
	switch api.GrantRefusal(err) {
	case api.GrantExpired:
		return "it expired"
	case api.GrantRevoked:
		return "the key that opened it was revoked, or its thread deleted"
	}
	return "its grant is not valid"
}

// greet says the greeting the bootstrap prepared, or, for a conversation
// that had ended, goodbye; it reports whether the session is done.
func (s *session) greet() bool {
	if s.speech == nil && s.d.Mode != api.VoiceText {
		s.send(Message{Type: MsgNotice, Text: "no speech engine is available: type your messages"})
	}
	switch {
	case s.over && s.greeting == "":
		s.finish("")
		return true
	case s.greeting != "":
		s.turn++
		s.send(Message{Type: MsgReply, Text: s.greeting, Turn: s.turn})
		if s.over {
			s.finish(s.greeting)
			return true
		}
		if s.greetPCM != nil {
			s.waitHeard()
			s.say(s.greetPCM, "", time.Time{}, nil)
		}
	}
	s.send(Message{Type: MsgState, State: Listening})
	return false
}

// waitHeard waits (briefly) for a caller to subscribe to the agent's
// voice, so that the first words are not lost.
func (s *session) waitHeard() {
	select {
	case <-s.heard:
	case <-time.After(5 * time.Second):
		s.log.Info("no caller subscribed to the agent's voice within 5s; speaking all the same")
	case <-s.ctx.Done():
	}
}

// converseTurn runs the turn of an utterance or a text message; it
// reports whether the conversation is over.
func (s *session) converseTurn(ev event) bool {
	input := "text"
	var timing TurnTiming
	text := ev.text
	if ev.kind == evUtterance {
		input = "audio"
		ctx, cancel := context.WithTimeout(s.ctx, time.Minute)
		var err error
		text, err = s.hear(ctx, ev, &timing)
		cancel()
		timing.Transcribe = time.Since(ev.at)
		if err != nil {
			if s.ctx.Err() == nil {
				s.log.Warn("transcribing an utterance", "error", err.Error())
				s.send(Message{Type: MsgError, Text: "the speech could not be transcribed"})
				s.a.metrics.turns.WithLabelValues(input, "failed").Inc()
			}
			return false
		}
		if text == "" {
			s.a.metrics.turns.WithLabelValues(input, "empty").Inc()
			return false // noise
		}
		s.send(Message{Type: MsgTranscript, Text: text, Identity: ev.identity})
	}
	timing.Transcript = text
	s.send(Message{Type: MsgState, State: Thinking})
	started := time.Now()
	ctx, cancel := context.WithTimeout(s.ctx, 5*time.Minute)
	reply, over, err := s.runTurn(ctx, map[string]any{s.conv.Input: text})
	cancel()
	if api.GrantRefusal(err) != "" {
		s.lose(err) // the loop ends the session
		return false
	}
	if err != nil {
		if s.ctx.Err() == nil {
			s.log.Warn("running a turn", "error", err.Error())
			s.send(Message{Type: MsgError, Text: "the turn failed: " + err.Error()})
			s.send(Message{Type: MsgState, State: Listening})
			s.a.metrics.turns.WithLabelValues(input, "failed").Inc()
		}
		return false
	}
	timing.Reply = time.Since(started)
	timing.ReplyText = reply
	s.a.metrics.turns.WithLabelValues(input, "ok").Inc()
	s.turn++
	s.send(Message{Type: MsgReply, Text: reply, Turn: s.turn})
	if over {
		s.finish(reply)
		s.report(timing)
		return true
	}
	if s.speech != nil && reply != "" {
		replied := time.Now()
		s.say(nil, reply, replied, func(first time.Time) {
			timing.FirstAudio = first.Sub(replied)
			s.report(timing)
		})
	} else {
		s.report(timing)
	}
	s.send(Message{Type: MsgState, State: Listening})
	return false
}

// hear is an utterance's transcript: from its transcription under way,
// or, if there is none or it failed (an endpoint that refuses a streamed
// upload, say), from the utterance sent whole, as the session's next
// utterances are then.
func (s *session) hear(ctx context.Context, ev event, timing *TurnTiming) (string, error) {
	if ev.hearing != nil {
		text, handed, err := ev.hearing.result(ctx)
		if err == nil {
			if handed.After(ev.at) {
				timing.Handover = handed.Sub(ev.at)
			}
			return text, nil
		}
		if errors.Is(err, errNoSpeech) || ctx.Err() != nil {
			return "", err
		}
		s.log.Info("the streamed transcription failed; sending utterances whole", "error", err.Error())
		s.whole.Store(true)
	}
	return s.speech.transcribe(ctx, ev.pcm)
}

func (s *session) report(t TurnTiming) {
	s.a.metrics.timing(t)
	if s.a.cfg.OnTurn != nil {
		s.a.cfg.OnTurn(t)
	}
}

// runTurn runs one turn of the thread through the API, waiting for it,
// and returns the reply and whether the conversation is over.
func (s *session) runTurn(ctx context.Context, input map[string]any) (string, bool, error) {
	run, err := s.api.RunWait(ctx, s.d.Thread, api.StartRun{Input: input, OnBusy: api.OnBusyEnqueue})
	if api.IsCode(err, api.CodeUnfinished) {
		// a turn stopped part way (its server died): finish it, then this
		if _, err = s.api.RunWait(ctx, s.d.Thread, api.StartRun{Resume: true, OnBusy: api.OnBusyEnqueue}); err == nil {
			run, err = s.api.RunWait(ctx, s.d.Thread, api.StartRun{Input: input, OnBusy: api.OnBusyEnqueue})
		}
	}
	if err != nil {
		return "", false, err
	}
	if run.Status != api.RunSucceeded {
		return "", false, fmt.Errorf("the run %s: %s", run.Status, run.Error)
	}
	if run.FlowVersion != "" && run.FlowVersion != s.version {
		// the thread moved to another version between turns
		if err := s.conversation(ctx, run.FlowVersion); err != nil {
			return "", false, err
		}
	}
	reply, _ := run.State[s.conv.Output].(string)
	st, err := s.api.State(ctx, s.d.Thread, 0)
	if err != nil {
		return reply, false, err
	}
	return reply, st.Finished, nil
}

// finish ends the conversation: the last reply and goodbye spoken in
// full, the end said, and the room left.
func (s *session) finish(reply string) {
	text := s.sayable(reply, true)
	if s.speech != nil {
		var pre *audio.PCM
		if reply == s.greeting && s.greetPCM != nil {
			pre = s.greetPCM
		}
		s.waitHeard()
		done := s.say(pre, text, time.Now(), nil)
		select {
		case <-done:
		case <-s.ctx.Done():
		}
	}
	s.send(Message{Type: MsgEnd, Text: s.a.cfg.Goodbye})
	// the end message is sent before the agent leaves
	select {
	case <-time.After(500 * time.Millisecond):
	case <-s.ctx.Done():
	}
	s.log.Info("the conversation is over")
}

// frameDur is the length of the agent's Opus packets.
const frameDur = 20 * time.Millisecond
