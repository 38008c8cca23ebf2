package voice_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	lksdk "github.com/livekit/server-sdk-go/v2"
	"gopkg.in/yaml.v3"

	"github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/cmd/trellis/internal/page"
	"github.com/trellisflow/trellis/cmd/trellis/internal/rooms"
	"github.com/trellisflow/trellis/cmd/trellis/internal/speech"
	"github.com/trellisflow/trellis/cmd/trellis/internal/voice"
	"github.com/trellisflow/trellis/cmd/trellis/internal/voice/voicetest"
	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/api/server"
	"github.com/trellisflow/trellis/runtime/store"
)

// agentChild, when set, makes the test binary a voice agent (for the
// tests that kill one): the configuration comes in the environment.
const agentChild = "TRELLIS_VOICE_TEST_AGENT"

func TestMain(m *testing.M) {
	if os.Getenv(agentChild) != "" {
		os.Exit(runAgentChild())
	}
	os.Exit(voicetest.Main(m))
}

func runAgentChild() int {
	a, err := voice.New(voice.Config{URL: os.Getenv("LIVEKIT_URL"), APIKey: os.Getenv("LIVEKIT_API_KEY"), APISecret: os.Getenv("LIVEKIT_API_SECRET"),
		API: os.Getenv(agentChild), IdleTimeout: 5 * time.Second, Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))})
	if err != nil {
		return 1
	}
	if err := a.Run(context.Background()); err != nil {
		return 1
	}
	return 0
}

const flowsDir = "../../../../flows"

// rig is a Trellis server on loopback (SQLite store, offline models, the
// offline speech routes, voice on the test LiveKit server) and a tenant's
// client of it.
type rig struct {
	t      testing.TB
	lk     *voicetest.LiveKitServer
	base   string
	client *api.Client
	// keyID names client's key; cat and st are the server's store.
	keyID string
	cat   store.Catalog
	st    store.Store
	log   *logBuffer
}

// logBuffer keeps a test's logs, shown when it fails.
type logBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func newRig(t testing.TB, opts ...func(*server.Config)) *rig {
	t.Helper()
	lk := voicetest.LiveKit(t)
	voicetest.NoLeaks(t)
	r := &rig{t: t, lk: lk, log: &logBuffer{}}
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("TRELLIS_VOICE_TEST_LOGS") != "" {
			t.Logf("logs:\n%s", r.log.String())
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	rt, err := trellis.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "trellis.db"))
	if err != nil {
		t.Fatal(err)
	}
	sp := speech.NewOffline()
	log := slog.New(slog.NewTextHandler(r.log, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg := server.Config{Runtime: rt, FlowsDir: flowsDir, Kinds: all.Offline(), Logger: log, StopTimeout: 5 * time.Second,
		Voice:  &server.VoiceConfig{Rooms: rooms.New(rooms.Config{URL: lk.URL, APIKey: lk.Key, APISecret: lk.Secret}, log)},
		Speech: sp, Page: page.Handler()}
	for _, opt := range opts {
		opt(&cfg)
	}
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		<-served
		sp.Close()
		rt.Close()
	})
	r.base = "http://" + ln.Addr().String()
	cat, err := store.CatalogOf(rt.Store())
	if err != nil {
		t.Fatal(err)
	}
	k, key, err := server.CreateKey(ctx, cat, "acme", "voice tests", false)
	if err != nil {
		t.Fatal(err)
	}
	r.client = api.NewClient(r.base, key)
	r.keyID, r.cat, r.st = k.ID, cat, rt.Store()
	return r
}

// newClient is a client of the server with a new key of tenant's.
func (r *rig) newClient(tenant string, admin bool) (*api.Client, string) {
	r.t.Helper()
	k, key, err := server.CreateKey(context.Background(), r.cat, tenant, "voice tests", admin)
	if err != nil {
		r.t.Fatal(err)
	}
	return api.NewClient(r.base, key), k.ID
}

// livekit returns clients of the LiveKit server's room and dispatch
// services.
func (r *rig) livekit() (*lksdk.RoomServiceClient, *lksdk.AgentDispatchClient) {
	return lksdk.NewRoomServiceClient(r.lk.URL, r.lk.Key, r.lk.Secret), lksdk.NewAgentDispatchServiceClient(r.lk.URL, r.lk.Key, r.lk.Secret)
}

// agent starts a voice agent in this process; the returned function
// stops it and waits for it to leave its rooms.
func (r *rig) agent(cfg voice.Config) (*voice.Agent, func()) {
	r.t.Helper()
	cfg.URL, cfg.APIKey, cfg.APISecret, cfg.API = r.lk.URL, r.lk.Key, r.lk.Secret, r.base
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(r.log, nil))
	}
	a, err := voice.New(cfg)
	if err != nil {
		r.t.Fatal(err)
	}
	before := r.registrations()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = a.Run(ctx); close(done) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	r.t.Cleanup(stop)
	r.waitRegistered(before)
	return a, stop
}

// agentProcess starts a voice agent as a process of its own (this test
// binary, as agentChild says).
func (r *rig) agentProcess() *exec.Cmd {
	r.t.Helper()
	self, err := os.Executable()
	if err != nil {
		r.t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), agentChild+"="+r.base, "LIVEKIT_URL="+r.lk.URL, "LIVEKIT_API_KEY="+r.lk.Key, "LIVEKIT_API_SECRET="+r.lk.Secret)
	cmd.Stdout, cmd.Stderr = r.log, r.log
	before := r.registrations()
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	r.waitRegistered(before)
	return cmd
}

const registered = "registered with the LiveKit server"

// registrations counts the agents' registrations logged so far.
func (r *rig) registrations() int { return strings.Count(r.log.String(), registered) }

// waitRegistered waits for an agent's registration after before.
func (r *rig) waitRegistered(before int) {
	r.t.Helper()
	deadline := time.Now().Add(2 * time.Minute) // a bound against a hang
	for r.registrations() <= before {
		if time.Now().After(deadline) {
			r.t.Fatal("the voice agent did not register with the LiveKit server within 2 minutes")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// interview creates an interview thread for Ada with at most questions
// questions.
func (r *rig) interview(ctx context.Context, id string, questions int) {
	r.t.Helper()
	b, err := os.ReadFile(filepath.Join(flowsDir, "examples", "candidate.yaml"))
	if err != nil {
		r.t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(b, &values); err != nil {
		r.t.Fatal(err)
	}
	values["interview_id"] = id
	values["max_questions"] = questions
	if _, err := r.client.CreateThread(ctx, api.CreateThread{ID: id, Flow: "interview", Values: values}); err != nil {
		r.t.Fatal(err)
	}
}

// voice opens a voice session on a thread.
func (r *rig) voice(ctx context.Context, thread string, req api.VoiceRequest) *api.VoiceSession {
	r.t.Helper()
	s, err := r.client.Voice(ctx, thread, req)
	if err != nil {
		r.t.Fatal(err)
	}
	return s
}

// get fetches a path of the server.
func (r *rig) get(path string) (*http.Response, []byte) {
	r.t.Helper()
	resp, err := http.Get(r.base + path)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// voiceConfigPatient is an agent that waits for its caller as long as a
// loaded machine may take to bring one into the room (a browser most of
// all: Chromium took 5.9 s at load 25): the idle timeout is no verdict
// of the tests that use it, and one shorter than the caller's join says
// the greeting to an empty room, which the caller then never hears.
func voiceConfigPatient() voice.Config { return voice.Config{IdleTimeout: 2 * time.Minute} }
