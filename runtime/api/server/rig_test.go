package server

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/nodes/all/alltest"
	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/store"
)

// The lifecycle tests run servers on flows of the runtime's test kinds
// (kindtest: set, sleep, fail), whose steps take as long as they say.

// stepsFlow takes a turn in three steps of ms milliseconds each, which
// honour cancellation; n counts the steps done.
const stepsFlow = `version: 1
name: steps
state:
  schema:
    type: object
    properties:
      said: {type: string, default: ""}
      n: {type: integer, default: 0}
      log: {type: array, items: {type: string}, default: []}
  reducers: {log: append, n: add}
input: [said]
nodes:
  one:   {kind: set, sleep_ms: "MS", set: {n: "1"}}
  two:   {kind: set, sleep_ms: "MS", set: {n: "1"}}
  three: {kind: set, sleep_ms: "MS", set: {n: "1", log: "[input.said ?? '']"}}
edges:
  - {from: START, to: one}
  - {from: one, to: two}
  - {from: two, to: three}
  - {from: three, to: END}
`

// flowsWith writes flows (name to text) into a directory of their own.
func flowsWith(t testing.TB, flows map[string]string) string {
	dir := t.TempDir()
	for name, text := range flows {
		if err := os.WriteFile(filepath.Join(dir, name+".yaml"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// stepFlows is the steps flow with steps of ms milliseconds.
func stepFlows(t testing.TB, ms int) string {
	return flowsWith(t, map[string]string{"steps": strings.ReplaceAll(stepsFlow, `"MS"`, `"`+strconv.Itoa(ms)+`"`)})
}

// logBuffer keeps a server's log for a test to read.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// served is one server of a test, serving on a loopback port.
type served struct {
	t      *testing.T
	srv    *Server
	rt     *trellis.Runtime
	base   string
	acme   *api.Client
	log    *logBuffer
	stop   context.CancelFunc
	result chan error
	once   sync.Once
	took   time.Duration // how long Serve took to return once stopped
}

// serve starts a server over rt with the test kinds; key is acme's API
// key ("" makes one).
func serve(t *testing.T, rt *trellis.Runtime, flows, key string, opts ...func(*Config)) *served {
	t.Helper()
	logs := &logBuffer{}
	cfg := Config{Runtime: rt, FlowsDir: flows, Kinds: alltest.WithTestKinds(), Logger: slog.New(slog.NewTextHandler(logs, nil)),
		StopTimeout: 10 * time.Second, PollEvery: 50 * time.Millisecond, Studio: smallPage("studio")}
	for _, opt := range opts {
		opt(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(context.Background())
	s := &served{t: t, srv: srv, rt: rt, base: "http://" + ln.Addr().String(), log: logs, stop: stop, result: make(chan error, 1)}
	go func() { s.result <- srv.Serve(sctx, ln) }()
	if key == "" {
		if _, key, err = CreateKey(ctx, srv.cat, "acme", "", false); err != nil {
			t.Fatal(err)
		}
	}
	s.acme = api.NewClient(s.base, key)
	s.acme.HTTP = checkedClient(t) // every answer is one the document gives
	t.Cleanup(func() { s.shutdown(time.Minute) })
	return s
}

// shutdown stops the server as SIGTERM does and waits for Serve to
// return, at most limit.
func (s *served) shutdown(limit time.Duration) {
	s.t.Helper()
	s.once.Do(func() {
		start := time.Now()
		s.stop()
		select {
		case err := <-s.result:
			s.took = time.Since(start)
			if err != nil {
				s.t.Errorf("serve: %v", err)
			}
		case <-time.After(limit):
			s.took = limit
			s.t.Errorf("Serve did not return within %s of its shutdown", limit)
		}
	})
}

// openRuntime opens a runtime on a store of backend kind, closed with the
// test.
func openRuntime(t *testing.T, addr string) *trellis.Runtime {
	t.Helper()
	rt, err := trellis.Open(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	return rt
}

// full is what a store of the built-in kinds is: checkpoints, a catalog
// and a node cache.
type full interface {
	store.Store
	store.Catalog
	store.Cache
}

// eventually waits for cond, failing the test after limit. The limit is a
// bound against a hang, never a verdict: a loaded machine takes many
// times what an idle one does, so it is a minute at least.
func eventually(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	limit = max(limit, time.Minute)
	for deadline := time.Now().Add(limit); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s", what, limit)
		}
	}
}

// discard is a logger that drops everything.
func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
