package server

import (
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/schemas"
)

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

func withVoice(url string) func(*Config) {
	return func(c *Config) {
		c.Voice = &VoiceConfig{URL: url, APIKey: "devkey", APISecret: "a-secret-of-the-tests-0123456789abcdef"}
		c.Speech = smallSpeech{}
		c.Page = smallPage("voice")
	}
}

func errorCode(t *testing.T, w *httptest.ResponseRecorder) api.Code {
	t.Helper()
	var eb api.ErrorBody
	if err := json.Unmarshal(w.Body.Bytes(), &eb); err != nil || eb.Error == nil {
		t.Fatalf("%d without the error shape: %s", w.Code, w.Body.String())
	}
	return eb.Error.Code
}

// TestVoiceRouteErrors: what the voice route refuses, each with its
// stable code, before (or without) reaching LiveKit.
func TestVoiceRouteErrors(t *testing.T) {
	plain := newHarness(t, "sqlite", nil)
	voiced := newHarness(t, "sqlite", nil, withVoice(deadLiveKit(t)))
	for _, h := range []*harness{plain, voiced} {
		if _, err := h.acme.CreateThread(ctx, api.CreateThread{ID: "iv", Flow: "interview", Values: map[string]any{"interview_id": "i1", "user_id": "ada"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := h.acme.CreateThread(ctx, api.CreateThread{ID: "gr", Flow: "greet"}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name   string
		h      *harness
		c      func(*harness) *api.Client
		thread string
		req    api.VoiceRequest
		code   api.Code
	}{
		{"no LiveKit configured", plain, func(h *harness) *api.Client { return h.acme }, "iv", api.VoiceRequest{}, api.CodeVoiceNotConfigured},
		{"another tenant's thread", voiced, func(h *harness) *api.Client { return h.globex }, "iv", api.VoiceRequest{}, api.CodeNotFound},
		{"no such thread", voiced, func(h *harness) *api.Client { return h.acme }, "nope", api.VoiceRequest{}, api.CodeNotFound},
		{"a flow that does not converse", voiced, func(h *harness) *api.Client { return h.acme }, "gr", api.VoiceRequest{}, api.CodeNotConversational},
		{"an unknown mode", voiced, func(h *harness) *api.Client { return h.acme }, "iv", api.VoiceRequest{Mode: "video"}, api.CodeInvalidInput},
		{"the agent's identity", voiced, func(h *harness) *api.Client { return h.acme }, "iv", api.VoiceRequest{Identity: "agent-1"}, api.CodeInvalidInput},
		{"a LiveKit server that does not answer", voiced, func(h *harness) *api.Client { return h.acme }, "iv", api.VoiceRequest{}, api.CodeLiveKitFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.c(tc.h).Voice(ctx, tc.thread, tc.req)
			if !api.IsCode(err, tc.code) {
				t.Fatalf("got %v, want %s", err, tc.code)
			}
			if ae := err.(*api.Error); ae.Status != tc.code.Status() {
				t.Fatalf("status %d, want %d", ae.Status, tc.code.Status())
			}
		})
	}
	w := do(voiced.srv, keyOf(voiced.acme), "POST", "/v1/threads/iv/voice", `{"mode": "audio", "extra": 1}`)
	if w.Code != http.StatusBadRequest || errorCode(t, w) != api.CodeBadRequest {
		t.Fatalf("an unknown field: %d %s", w.Code, w.Body.String())
	}
}

func keyOf(c *api.Client) string { return c.Key }

// grantFor opens a voice session on thread for cl's key, as the voice
// route does, and returns its agent's grant (no LiveKit server needed).
func grantFor(t *testing.T, h *harness, cl *api.Client, thread string) string {
	t.Helper()
	k, err := h.srv.cat.KeyByHash(ctx, HashKey(cl.Key))
	if err != nil {
		t.Fatal(err)
	}
	c := &caller{key: k, tenant: k.Tenant}
	rec, err := h.srv.cat.Thread(ctx, k.Tenant, threadKey(c, thread))
	if err != nil {
		t.Fatal(err)
	}
	sess, _, err := h.srv.openSession(ctx, c, rec, "caller-"+k.ID, "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	grant, err := h.srv.grantOf(ctx, sess, rec.Flow)
	if err != nil {
		t.Fatal(err)
	}
	return grant
}

// TestVoiceGrantReachesOnlyItsThread: the agent's grant acts for its
// thread's tenant on that thread's state and runs, its flow and the
// speech routes only, and stops working when it expires or is altered.
func TestVoiceGrantReachesOnlyItsThread(t *testing.T) {
	h := newHarness(t, "sqlite", nil, withVoice(deadLiveKit(t)))
	for _, id := range []string{"mine", "other"} {
		if _, err := h.acme.CreateThread(ctx, api.CreateThread{ID: id, Flow: "greet"}); err != nil {
			t.Fatal(err)
		}
	}
	grant := grantFor(t, h, h.acme, "mine")
	for _, tc := range []struct {
		method, path, body string
		status             int
	}{
		{"GET", "/v1/threads/mine/state", "", 200},
		{"GET", "/v1/threads/mine", "", 200},
		{"POST", "/v1/threads/mine/runs/wait", `{"input": {"name": "Ada"}}`, 200},
		{"GET", "/v1/threads/mine/runs", "", 200},
		{"GET", "/v1/flows/greet", "", 200},
		{"POST", "/v1/threads/mine/voice/grant", "", 200},
		{"POST", "/v1/audio/speech", `{"input": ""}`, 422},
		{"GET", "/v1/threads/other/state", "", 403},
		{"GET", "/v1/flows/interview", "", 403},
		{"GET", "/v1/flows", "", 403},
		{"GET", "/v1/threads", "", 403},
		{"POST", "/v1/threads", `{"flow": "greet"}`, 403},
		{"GET", "/v1/keys", "", 403},
		{"GET", "/v1/threads/mine/history", "", 403},
		{"POST", "/v1/threads/mine/fork", `{"at": 1}`, 403},
		{"POST", "/v1/threads/mine/update", `{"as": "greet", "values": {"greeting": "hi"}}`, 403},
		{"POST", "/v1/threads/mine/voice", `{}`, 403},
		{"DELETE", "/v1/threads/mine/voice", "", 403},
		{"POST", "/v1/voice/signing-key", "", 403},
		{"DELETE", "/v1/threads/mine", "", 403},
	} {
		w := do(h.srv, grant, tc.method, tc.path, tc.body)
		if w.Code != tc.status {
			t.Errorf("%s %s with the grant: %d %s, want %d", tc.method, tc.path, w.Code, w.Body.String(), tc.status)
		}
	}
	if _, err := h.acme.Thread(ctx, "mine"); err != nil {
		t.Fatalf("the thread after the grant tried to delete it: %v", err)
	}
	// a key takes no route that only grants take
	if w := do(h.srv, h.acme.Key, "POST", "/v1/threads/mine/voice/grant", ""); w.Code != 403 {
		t.Errorf("a key renewing a grant: %d", w.Code)
	}
	forged := grant[:len(grant)-6] + "AAAAAA"
	other := newHarness(t, "sqlite", nil, withVoice(deadLiveKit(t)))
	if _, err := other.acme.CreateThread(ctx, api.CreateThread{ID: "mine", Flow: "greet"}); err != nil {
		t.Fatal(err)
	}
	otherKey := grantFor(t, other, other.acme, "mine")
	for name, g := range map[string]string{"altered": forged, "of another server's store": otherKey, "cut short": grant[:20]} {
		if w := do(h.srv, g, "GET", "/v1/threads/mine/state", ""); w.Code != 401 || errorCode(t, w) != api.CodeUnauthorized {
			t.Errorf("a grant %s: %d %s", name, w.Code, w.Body.String())
		}
	}
	// the agent gives its grant up as it leaves
	if w := do(h.srv, grant, "DELETE", "/v1/threads/mine/voice/grant", ""); w.Code != 204 {
		t.Fatalf("giving the grant up: %d %s", w.Code, w.Body.String())
	}
	if w := do(h.srv, grant, "GET", "/v1/threads/mine/state", ""); w.Code != 401 {
		t.Errorf("a grant given up: %d", w.Code)
	}
	// a grant lapses when its agent does not renew it
	short := newHarness(t, "sqlite", nil, withVoice(deadLiveKit(t)), func(c *Config) { c.Voice.GrantTTL = 50 * time.Millisecond })
	if _, err := short.acme.CreateThread(ctx, api.CreateThread{ID: "mine", Flow: "greet"}); err != nil {
		t.Fatal(err)
	}
	lapsing := grantFor(t, short, short.acme, "mine")
	time.Sleep(100 * time.Millisecond)
	if w := do(short.srv, lapsing, "GET", "/v1/threads/mine/state", ""); w.Code != 401 || !strings.Contains(w.Body.String(), "expired") {
		t.Errorf("a grant not renewed: %d %s", w.Code, w.Body.String())
	}
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

func logTo(l *lockedLog) func(*Config) {
	return func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(l, nil)) }
}

// TestLiveKitErrorsStayInTheLog: a LiveKit failure answers the tenant
// with its stable code and a reason in plain words, never LiveKit's own
// error (which names internal addresses); that goes to the server's log,
// with the request's id.
func TestLiveKitErrorsStayInTheLog(t *testing.T) {
	dead := deadLiveKit(t)
	var log lockedLog
	h := newHarness(t, "sqlite", nil, withVoice(dead), logTo(&log))
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
		newHarness(t, "memory", nil, withVoice(deadLiveKit(t)), logTo(&log), func(c *Config) {
			c.Voice.APIKey, c.Voice.APISecret = tc.key, tc.secret
		})
		if got := strings.Contains(log.String(), "development key"); got != tc.warned {
			t.Errorf("key %s, secret %s: warned %v, want %v:\n%s", tc.key, tc.secret, got, tc.warned, log.String())
		}
	}
}

// TestGrantReachDocumented: the operations schemas/openapi.yaml marks
// x-grant are the routes a grant reaches.
func TestGrantReachDocumented(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(schemas.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for path, ops := range doc.Paths {
		for method, op := range ops {
			if m, ok := op.(map[string]any); ok && m["x-grant"] == true {
				documented[strings.ToUpper(method)+" "+path] = true
			}
		}
	}
	for _, rt := range (&Server{}).routes() {
		pattern := rt.method + " " + rt.path
		if documented[pattern] != grantReach[pattern] {
			t.Errorf("%s: x-grant %v in schemas/openapi.yaml, reached by a grant %v", pattern, documented[pattern], grantReach[pattern])
		}
	}
}
