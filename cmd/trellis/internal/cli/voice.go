package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/trellisflow/trellis/cmd/trellis/internal/voice"
)

func cmdVoiceAgent(ctx context.Context, env *Env, args []string) int {
	fs := flags(env, "voice-agent")
	apiURL := fs.String("api", envOr("TRELLIS_API_URL", "http://127.0.0.1:8080"), "the Trellis API that dispatches the agent and runs the turns (TRELLIS_API_URL)")
	agentName := fs.String("agent-name", envOr("LIVEKIT_AGENT_NAME", "trellis-voice"), "the name the API dispatches to (LIVEKIT_AGENT_NAME; as trellis serve's)")
	capacity := fs.Int("capacity", 8, "rooms served at once; a full agent is offered no room")
	speechURL := fs.String("speech-url", os.Getenv("TRELLIS_SPEECH_URL"), "an OpenAI-compatible speech endpoint up to /v1, keyed by TRELLIS_SPEECH_KEY or OPENAI_API_KEY (default: the API's own offline speech)")
	stt := fs.String("stt-model", "whisper-1", "the transcription model")
	tts := fs.String("tts-model", "tts-1", "the speech model")
	voiceName := fs.String("voice", "alloy", "the voice replies are spoken in")
	silence := fs.Duration("silence", 700*time.Millisecond, "how long the caller is quiet before an utterance ends")
	bargeIn := fs.Duration("barge-in", 300*time.Millisecond, "how long the caller speaks over a reply before it stops")
	goodbye := fs.String("goodbye", "Goodbye.", "said after the flow's last reply")
	idle := fs.Duration("idle-timeout", 2*time.Minute, "how long the agent stays in a room with no caller")
	metricsAddr := fs.String("metrics-addr", "127.0.0.1:9464", "serve Prometheus metrics (capacity, sessions, turn latencies) and /readyz (registered with LiveKit) on this address; empty: none")
	if _, code, ok := parse(fs, args); !ok {
		return code
	}
	key := os.Getenv("TRELLIS_SPEECH_KEY")
	if key == "" && *speechURL != "" {
		key = os.Getenv("OPENAI_API_KEY")
	}
	log := slog.New(slog.NewJSONHandler(env.Stderr, nil))
	a, err := voice.New(voice.Config{URL: os.Getenv("LIVEKIT_URL"), APIKey: os.Getenv("LIVEKIT_API_KEY"), APISecret: os.Getenv("LIVEKIT_API_SECRET"),
		AgentName: *agentName, API: *apiURL, SpeechURL: *speechURL, SpeechKey: key, STTModel: *stt, TTSModel: *tts, Voice: *voiceName,
		Capacity: *capacity, Silence: *silence, BargeIn: *bargeIn, Goodbye: *goodbye, IdleTimeout: *idle, Logger: log})
	if err != nil {
		fmt.Fprintf(env.Stderr, "trellis voice-agent: %v\n", err)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *metricsAddr != "" {
		ln, err := net.Listen("tcp", *metricsAddr)
		if err != nil {
			return fail(env, "voice-agent", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", a.Metrics())
		mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
			// ready while registered with the LiveKit server
			if err := a.Ready(); err != nil {
				http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
			_, _ = io.WriteString(w, "ok\n")
		})
		hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Warn("serving metrics", "error", err.Error())
			}
		}()
		defer hs.Close()
		log.Info("serving metrics", "addr", ln.Addr().String())
	}
	if err := a.Run(ctx); err != nil {
		return fail(env, "voice-agent", err)
	}
	return 0
}

// envOr is the environment's value of name, or def.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
