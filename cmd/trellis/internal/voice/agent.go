// Package voice is `trellis voice-agent`: a LiveKit agent that voices any
// conversational flow served by the Trellis API.
//
// The API dispatches the agent to a thread's room (POST
// /v1/threads/{id}/voice) with the thread and a grant that reaches only
// that thread. A session then runs in two phases, as a voice agent must
// be ready before the caller sees it join: first everything is made
// ready — the conversation block of the version of its flow the thread
// runs read (read again when a turn ran another version: the thread was
// moved), the thread's state read, the greeting turn run and spoken into
// audio when the thread is new — and only then does the agent connect to
// the room. There it listens to
// the caller's microphone, cuts utterances with a voice-activity detector
// (an utterance ends after a silence threshold), transcribes each through
// an OpenAI-compatible transcription endpoint, runs one turn of the
// thread through the API (the same leased, checkpointed path as every
// run: the transcript goes to the conversation's input field, the reply
// comes from its output field), speaks the reply through an
// OpenAI-compatible speech endpoint as an Opus track, and stops speaking
// when the caller talks over it. Text typed as data messages takes the
// same path, which is all a text-only session uses. When the flow's
// conversation.until holds, the agent says the reply and goodbye and
// leaves. A thread that already has turns is continued where its
// checkpoint stands, without a second greeting, so an agent that dies is
// replaced by another with no trace in the conversation.
//
// One agent process serves many rooms at once, up to its capacity, which
// it reports to the LiveKit server (a full worker is offered no job) and
// exports as metrics.
package voice

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/livekit/protocol/livekit"
	protologger "github.com/livekit/protocol/logger"
	lksdk "github.com/livekit/server-sdk-go/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/trellisflow/trellis/runtime/api"
)

// AliveAttribute is the participant attribute the agent beats its
// heartbeat in (Unix seconds), every AliveEvery; the API takes an agent
// whose heartbeat stopped for dead (see server.AliveAttribute).
// SessionAttribute names the voice session the agent serves.
const (
	AliveAttribute   = "trellis.alive"
	SessionAttribute = "trellis.session"
	AliveEvery       = 2 * time.Second
)

// Config is how an agent runs.
type Config struct {
	// URL, APIKey and APISecret reach the LiveKit server (LIVEKIT_URL,
	// LIVEKIT_API_KEY, LIVEKIT_API_SECRET).
	URL, APIKey, APISecret string
	// AgentName is the name the API dispatches to (default
	// "trellis-voice"); ParticipantName is the agent's name in rooms.
	AgentName, ParticipantName string
	// API is the Trellis API the turns run through (its root URL).
	API string
	// SpeechURL is an OpenAI-compatible endpoint (up to /v1) for speech,
	// with SpeechKey; empty: the Trellis API's own speech routes, with the
	// session's grant.
	SpeechURL, SpeechKey string
	// STTModel, TTSModel and Voice name the speech models and voice
	// (defaults whisper-1, tts-1, alloy).
	STTModel, TTSModel, Voice string
	// Capacity is how many rooms the agent serves at once (default 8).
	Capacity int
	// Silence is how long the caller must be quiet for an utterance to
	// end (default 700ms); BargeIn how long the caller must speak over a
	// reply to stop it (default 300ms).
	Silence, BargeIn time.Duration
	// Goodbye is said after the flow's last reply (default "Goodbye.").
	Goodbye string
	// IdleTimeout is how long the agent waits in a room with no caller
	// before it leaves (default 2 minutes).
	IdleTimeout time.Duration
	// Logger receives the agent's logs (nil: JSON on stderr).
	Logger *slog.Logger
	// HTTP is the client for the API and the speech endpoint (nil: a
	// default client).
	HTTP *http.Client
	// OnTurn, when set, receives each turn's timing.
	OnTurn func(TurnTiming)
}

// TurnTiming is how long the stages of one spoken turn took.
type TurnTiming struct {
	// Transcribe: the utterance's end detected → its transcript.
	Transcribe time.Duration
	// Handover: the utterance's end detected → the last of its audio
	// handed to the transcription endpoint (part of Transcribe; 0 when
	// it was sent whole).
	Handover time.Duration
	// Reply: the transcript → the flow's reply text.
	Reply time.Duration
	// FirstAudio: the reply text → its first audio packet published.
	FirstAudio            time.Duration
	Transcript, ReplyText string
}

func (c *Config) defaults() error {
	if c.URL == "" || c.APIKey == "" || c.APISecret == "" {
		return errors.New("the agent needs a LiveKit server: LIVEKIT_URL, LIVEKIT_API_KEY and LIVEKIT_API_SECRET")
	}
	if c.API == "" {
		return errors.New("the agent needs the Trellis API it runs turns through (--api URL)")
	}
	c.API = strings.TrimRight(c.API, "/")
	if c.AgentName == "" {
		c.AgentName = "trellis-voice"
	}
	if c.ParticipantName == "" {
		c.ParticipantName = "Trellis"
	}
	if c.STTModel == "" {
		c.STTModel = "whisper-1"
	}
	if c.TTSModel == "" {
		c.TTSModel = "tts-1"
	}
	if c.Voice == "" {
		c.Voice = "alloy"
	}
	if c.Capacity <= 0 {
		c.Capacity = 8
	}
	if c.Silence <= 0 {
		c.Silence = 700 * time.Millisecond
	}
	if c.BargeIn <= 0 {
		c.BargeIn = 300 * time.Millisecond
	}
	if c.Goodbye == "" {
		c.Goodbye = "Goodbye."
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = 2 * time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	if c.HTTP == nil {
		c.HTTP = &http.Client{Timeout: 5 * time.Minute}
	}
	return nil
}

// Agent is a voice agent worker.
type Agent struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics
	// tracks counts the audio tracks open (the caller's being read, the
	// agent's being published), for the metrics and the leak tests.
	tracks atomic.Int64

	mu       sync.Mutex
	ctx      context.Context
	conn     *workerConn
	connErr  error // why the agent is not registered (nil: it is)
	sessions map[string]*session
	reserved int             // places held for jobs offered but not yet assigned
	pending  map[string]bool // those jobs
	stopping bool
	wg       sync.WaitGroup
}

// New returns an agent over cfg.
func New(cfg Config) (*Agent, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	a := &Agent{cfg: cfg, log: cfg.Logger, sessions: map[string]*session{}, connErr: errors.New("not registered with the LiveKit server yet")}
	a.metrics = newMetrics(a)
	sdkLogger(cfg.Logger)
	if cfg.APIKey == "devkey" && cfg.APISecret == "secret" {
		a.log.Warn("LiveKit's development key (devkey, secret) is in use: it is published, so whoever reaches the LiveKit server can join and manage every room; set a key of your own")
	}
	return a, nil
}

var sdkLoggerOnce sync.Once

// sdkLogger passes the LiveKit SDK's errors on to log, and nothing else:
// it reports every step of a connection at its lowest level.
func sdkLogger(log *slog.Logger) {
	sdkLoggerOnce.Do(func() {
		lksdk.SetLogger(protologger.LogRLogger(logr.New(errorSink{log: log.With("component", "livekit")})))
	})
}

type errorSink struct {
	log  *slog.Logger
	name string
}

func (errorSink) Init(logr.RuntimeInfo)    {}
func (errorSink) Enabled(int) bool         { return false }
func (errorSink) Info(int, string, ...any) {}
func (s errorSink) Error(err error, msg string, kv ...any) {
	if err != nil {
		kv = append(kv, "error", err.Error())
	}
	s.log.Warn(strings.TrimSpace(s.name+" "+msg), kv...)
}
func (s errorSink) WithValues(kv ...any) logr.LogSink {
	return errorSink{log: s.log.With(kv...), name: s.name}
}
func (s errorSink) WithName(name string) logr.LogSink { return errorSink{log: s.log, name: name} }

// Run serves rooms until ctx ends: it keeps a worker connection to the
// LiveKit server (reconnecting after a failure), then leaves every room
// it is in and returns. A LiveKit server that refuses the agent's
// credentials at the start is an error: no retry mends it.
func (a *Agent) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	a.mu.Lock()
	a.ctx = ctx
	a.mu.Unlock()
	a.checkAPI(ctx)
	wait := 500 * time.Millisecond
	registered := false
	for ctx.Err() == nil {
		c, id, err := a.connect(ctx)
		if err == nil {
			a.log.Info("registered with the LiveKit server", "worker", id, "agent", a.cfg.AgentName, "capacity", a.cfg.Capacity)
			registered, wait = true, 500*time.Millisecond
			a.setConnErr(nil)
			err = a.serve(ctx, c)
		}
		if ctx.Err() != nil {
			break
		}
		a.setConnErr(err)
		if !registered && errors.Is(err, errCredentials) {
			return err
		}
		a.log.Warn("the LiveKit worker connection failed; connecting again", "url", a.cfg.URL, "error", err.Error(), "in", wait.String())
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait = min(2*wait, 10*time.Second)
	}
	a.mu.Lock()
	a.stopping = true
	for _, s := range a.sessions {
		s.stop("the agent is stopping")
	}
	a.mu.Unlock()
	a.wg.Wait()
	return nil
}

func (a *Agent) setConnErr(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.connErr = err
}

// Ready is nil while the agent is registered with the LiveKit server,
// and otherwise why it is not.
func (a *Agent) Ready() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.connErr
}

// checkAPI says in the log whether the Trellis API the turns run through
// answers.
func (a *Agent) checkAPI(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := (&api.Client{BaseURL: a.cfg.API, HTTP: a.cfg.HTTP}).Ready(ctx); err != nil {
		a.log.Warn("the Trellis API does not answer as ready: sessions fail until it does", "api", a.cfg.API, "error", err.Error())
	}
}

// Sessions is how many rooms the agent is in.
func (a *Agent) Sessions() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.sessions)
}

// Tracks is how many audio tracks the agent has open.
func (a *Agent) Tracks() int64 { return a.tracks.Load() }

// Metrics serves the agent's Prometheus metrics.
func (a *Agent) Metrics() http.Handler { return a.metrics.handler }

// assigned starts the session of a job the server assigned.
func (a *Agent) assigned(asg *livekit.JobAssignment) {
	job := asg.Job
	url := a.cfg.URL
	if asg.Url != nil && *asg.Url != "" {
		url = *asg.Url
	}
	a.mu.Lock()
	if a.pending[job.Id] {
		delete(a.pending, job.Id)
		a.reserved--
	}
	if a.stopping || a.ctx == nil {
		a.mu.Unlock()
		a.jobStatus(job.Id, livekit.JobStatus_JS_FAILED, "the agent is stopping")
		return
	}
	s := newSession(a, job, url, asg.Token)
	a.sessions[job.Id] = s
	a.wg.Add(1)
	a.mu.Unlock()
	a.metrics.started.Inc()
	a.jobStatus(job.Id, livekit.JobStatus_JS_RUNNING, "")
	a.report()
	go func() {
		defer a.wg.Done()
		err := s.run()
		a.mu.Lock()
		delete(a.sessions, job.Id)
		a.mu.Unlock()
		outcome, status, text := "ok", livekit.JobStatus_JS_SUCCESS, ""
		if err != nil {
			outcome, status, text = "failed", livekit.JobStatus_JS_FAILED, err.Error()
			s.log.Warn("session failed", "error", text)
		}
		a.metrics.ended.WithLabelValues(outcome).Inc()
		a.jobStatus(job.Id, status, text)
		a.report()
	}()
}

// terminate ends a job's session: the room closed, or the server says so.
func (a *Agent) terminate(jobID string) {
	a.mu.Lock()
	s := a.sessions[jobID]
	a.mu.Unlock()
	if s != nil {
		s.stop("the LiveKit server ended the job")
	}
}

// metrics are the agent's Prometheus metrics.
type metrics struct {
	handler    http.Handler
	started    prometheus.Counter
	ended      *prometheus.CounterVec
	turns      *prometheus.CounterVec
	bargeIns   prometheus.Counter
	transcribe prometheus.Histogram
	reply      prometheus.Histogram
	firstAudio prometheus.Histogram
}

func newMetrics(a *Agent) *metrics {
	reg := prometheus.NewRegistry()
	latency := []float64{.05, .1, .25, .5, .75, 1, 1.5, 2, 3, 5, 10, 30}
	m := &metrics{
		started: prometheus.NewCounter(prometheus.CounterOpts{Name: "trellis_voice_sessions_started_total", Help: "Rooms the agent joined."}),
		ended: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_voice_sessions_ended_total",
			Help: "Rooms the agent left, by outcome (ok, failed)."}, []string{"outcome"}),
		turns: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_voice_turns_total",
			Help: "Turns run, by how the caller spoke (audio, text) and outcome (ok, failed, empty)."}, []string{"input", "outcome"}),
		bargeIns: prometheus.NewCounter(prometheus.CounterOpts{Name: "trellis_voice_barge_ins_total", Help: "Replies stopped because the caller spoke over them."}),
		transcribe: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "trellis_voice_transcribe_seconds",
			Help: "From the end of an utterance to its transcript.", Buckets: latency}),
		reply: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "trellis_voice_reply_seconds",
			Help: "From a transcript to the flow's reply (the turn through the API).", Buckets: latency}),
		firstAudio: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "trellis_voice_first_audio_seconds",
			Help: "From the reply's text to its first audio packet published.", Buckets: latency}),
	}
	capacity := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "trellis_voice_capacity", Help: "Rooms the agent serves at once at most."},
		func() float64 { return float64(a.cfg.Capacity) })
	sessions := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "trellis_voice_sessions", Help: "Rooms the agent is in."},
		func() float64 { return float64(a.Sessions()) })
	load := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "trellis_voice_load", Help: "Sessions over capacity, as reported to the LiveKit server."},
		func() float64 { return float64(a.Sessions()) / float64(a.cfg.Capacity) })
	tracks := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "trellis_voice_tracks", Help: "Audio tracks open: callers' being heard and the agent's own."},
		func() float64 { return float64(a.Tracks()) })
	reg.MustRegister(m.started, m.ended, m.turns, m.bargeIns, m.transcribe, m.reply, m.firstAudio, capacity, sessions, load, tracks,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	return m
}

func (m *metrics) timing(t TurnTiming) {
	if t.Transcribe > 0 {
		m.transcribe.Observe(t.Transcribe.Seconds())
	}
	if t.Reply > 0 {
		m.reply.Observe(t.Reply.Seconds())
	}
	if t.FirstAudio > 0 {
		m.firstAudio.Observe(t.FirstAudio.Seconds())
	}
}
