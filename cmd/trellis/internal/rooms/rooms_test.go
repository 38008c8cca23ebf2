package rooms

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/api/server"
	"github.com/trellisflow/trellis/runtime/store"
)

var ctx = context.Background()

// deadLiveKit is the address of a LiveKit server that is not there.
func deadLiveKit(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "ws://" + addr
}

// served is the API server with voice on rooms, and a key of tenant acme.
type served struct {
	srv  *server.Server
	acme *api.Client
}

func newServer(t *testing.T, rooms server.Rooms, log *slog.Logger) *served {
	t.Helper()
	rt, err := trellis.Open(ctx, "sqlite:"+t.TempDir()+"/store.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	srv, err := server.New(server.Config{Runtime: rt, FlowsDir: "../../../../flows", Kinds: all.Offline(), Logger: log,
		Voice: &server.VoiceConfig{Rooms: rooms}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		hs.Close()
		srv.Shutdown(context.Background())
	})
	cat, err := store.CatalogOf(rt.Store())
	if err != nil {
		t.Fatal(err)
	}
	_, key, err := server.CreateKey(ctx, cat, "acme", "", false)
	if err != nil {
		t.Fatal(err)
	}
	return &served{srv: srv, acme: api.NewClient(hs.URL, key)}
}

// do sends a request with a bearer token to srv's handler.
func do(srv *server.Server, token, method, path, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	w := httptest.NewRecorder()
	srv.Handler().ServeHTTP(w, req)
	return w
}

func errorCode(t *testing.T, w *httptest.ResponseRecorder) api.Code {
	t.Helper()
	var eb api.ErrorBody
	if err := json.Unmarshal(w.Body.Bytes(), &eb); err != nil || eb.Error == nil {
		t.Fatalf("%d without the error shape: %s", w.Code, w.Body.String())
	}
	return eb.Error.Code
}

// lockedLog is a log a server writes from many goroutines.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestLiveKitErrorsStayInTheLog: a LiveKit failure answers the tenant
// with its stable code and a reason in plain words, never LiveKit's own
// error (which names internal addresses); that goes to the server's log,
// with the request's id.
func TestLiveKitErrorsStayInTheLog(t *testing.T) {
	dead := deadLiveKit(t)
	var log lockedLog
	logger := slog.New(slog.NewTextHandler(&log, nil))
	h := newServer(t, New(Config{URL: dead, APIKey: "devkey", APISecret: "a-secret-of-the-tests-0123456789abcdef"}, logger), logger)
	if _, err := h.acme.CreateThread(ctx, api.CreateThread{ID: "iv", Flow: "interview", Values: map[string]any{"interview_id": "i1", "user_id": "ada"}}); err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(dead, "ws://"))
	w := do(h.srv, h.acme.Key, "POST", "/v1/threads/iv/voice", `{}`)
	if w.Code != 502 || errorCode(t, w) != api.CodeLiveKitFailed {
		t.Fatalf("%d %s", w.Code, w.Body.String())
	}
	body := w.Body.String()
	if strings.Contains(body, "127.0.0.1") || strings.Contains(body, port) || strings.Contains(body, "dial") || !strings.Contains(body, "does not answer") {
		t.Errorf("the tenant is told %s", body)
	}
	id := w.Header().Get("X-Request-Id")
	var logged bool
	for _, line := range strings.Split(log.String(), "\n") {
		if strings.Contains(line, "the LiveKit server failed") && strings.Contains(line, id) && strings.Contains(line, port) {
			logged = true
		}
	}
	if !logged {
		t.Errorf("the log lacks LiveKit's error with request %s:\n%s", id, log.String())
	}
}

// TestDevelopmentKeyWarned: the server warns when it signs with
// LiveKit's published development key, and only then.
func TestDevelopmentKeyWarned(t *testing.T) {
	for _, tc := range []struct {
		key, secret string
		warned      bool
	}{
		{"devkey", "secret", true},
		{"devkey", "a-secret-of-the-tests-0123456789abcdef", false},
		{"APIxyz", "secret-of-a-real-deployment-0123456789", false},
	} {
		var log lockedLog
		logger := slog.New(slog.NewTextHandler(&log, nil))
		newServer(t, New(Config{URL: deadLiveKit(t), APIKey: tc.key, APISecret: tc.secret}, logger), logger)
		if got := strings.Contains(log.String(), "development key"); got != tc.warned {
			t.Errorf("key %s, secret %s: warned %v, want %v:\n%s", tc.key, tc.secret, got, tc.warned, log.String())
		}
	}
}
