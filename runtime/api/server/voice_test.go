package server

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/schemas"
)

// deadRooms is a rooms' server that is not there: every call dials its
// address, a closed port, and fails as a LiveKit server that is not
// there fails (the command's LiveKit rooms are tested against a real
// LiveKit server, and a dead one, in cmd/trellis/internal/rooms).
type deadRooms struct{ addr string }

func deadLiveKit(t *testing.T) Rooms {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return deadRooms{addr: addr}
}

func (d deadRooms) call(doing string) error {
	c, err := net.DialTimeout("tcp", d.addr, time.Second)
	if err == nil {
		c.Close()
		return &RoomsError{Doing: doing, Err: errors.New("a server answered at a closed port")}
	}
	return &RoomsError{Doing: doing, Err: err}
}

func (d deadRooms) Addr() string  { return "ws://" + d.addr }
func (d deadRooms) URL() string   { return "ws://" + d.addr }
func (d deadRooms) Agent() string { return "trellis-voice" }
func (d deadRooms) Ensure(context.Context, string, string) ([]Participant, []Dispatch, error) {
	return nil, nil, d.call("creating the room")
}
func (d deadRooms) Dispatch(context.Context, string, string) error {
	return d.call("dispatching the voice agent")
}
func (d deadRooms) Undispatch(context.Context, string, string) error {
	return d.call("removing a dispatch of no live session")
}
func (d deadRooms) Remove(context.Context, string, string) error {
	return d.call("removing an agent of no live session")
}
func (d deadRooms) Close(context.Context, string) error { return d.call("closing the room") }
func (d deadRooms) CallerToken(string, string, api.VoiceRequest, map[string]string) (string, time.Time, error) {
	return "", time.Time{}, errors.New("no token: the rooms' server is not there")
}
func (d deadRooms) Check(context.Context) error { return d.call("checking") }
func (d deadRooms) Reason(err error) string {
	var ne net.Error
	if errors.As(err, &ne) {
		return "it does not answer"
	}
	return "it answered with an error"
}

func withVoice(rooms Rooms) func(*Config) {
	return func(c *Config) {
		c.Voice = &VoiceConfig{Rooms: rooms}
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
