package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/trellisflow/trellis/cmd/trellis/internal/audio"
	"github.com/trellisflow/trellis/cmd/trellis/internal/page"
	"github.com/trellisflow/trellis/cmd/trellis/internal/speech"
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
		c.Speech = speech.NewOffline()
		c.Page = page.Handler()
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

// TestSpeechRoutes speaks and recognises with the real offline engines,
// through the OpenAPI-checked client, and refuses what they cannot do.
func TestSpeechRoutes(t *testing.T) {
	if _, err := exec.LookPath("flite"); err != nil {
		t.Fatal("flite is not installed: apt-get install flite (make deps installs it)")
	}
	if err := speech.CheckRecognizer(context.Background()); err != nil {
		t.Fatalf("%v (make deps installs it)", err)
	}
	h := newHarness(t, "sqlite", nil, withVoice(deadLiveKit(t)))
	t.Cleanup(func() { h.srv.cfg.Speech.(*speech.Offline).Close() })
	post := func(path, ct string, body []byte) (*http.Response, []byte) {
		req, _ := http.NewRequest("POST", h.base+path, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+h.acme.Key)
		req.Header.Set("Content-Type", ct)
		resp, err := h.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	const text = "Tell me about the hardest bug you fixed."
	resp, wav := post("/v1/audio/speech", "application/json", []byte(`{"model": "tts-1", "input": "`+text+`", "voice": "alloy"}`))
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "audio/wav" {
		t.Fatalf("speech: %d %s", resp.StatusCode, wav)
	}
	pcm, err := audio.ReadWAV(bytes.NewReader(wav))
	if err != nil || pcm.Rate != 16000 || pcm.Duration() < time.Second {
		t.Fatalf("speech: %v, %d Hz, %v", err, pcm.Rate, pcm.Duration())
	}
	resp, raw := post("/v1/audio/speech", "application/json", []byte(`{"input": "Hello.", "voice": "rms", "response_format": "pcm", "speed": 1.5}`))
	if resp.StatusCode != 200 || len(raw) == 0 || len(raw)%2 != 0 {
		t.Fatalf("pcm speech: %d, %d bytes", resp.StatusCode, len(raw))
	}
	form := func(fields map[string]string, file []byte) (string, []byte) {
		var b bytes.Buffer
		mw := multipart.NewWriter(&b)
		for k, v := range fields {
			_ = mw.WriteField(k, v)
		}
		if file != nil {
			fw, _ := mw.CreateFormFile("file", "speech.wav")
			_, _ = fw.Write(file)
		}
		mw.Close()
		return mw.FormDataContentType(), b.Bytes()
	}
	ct, body := form(map[string]string{"model": "whisper-1"}, wav)
	resp, out := post("/v1/audio/transcriptions", ct, body)
	var tr speech.Transcription
	if resp.StatusCode != 200 || json.Unmarshal(out, &tr) != nil {
		t.Fatalf("transcription: %d %s", resp.StatusCode, out)
	}
	// recognition of synthetic speech is good, not perfect
	want := strings.Fields(strings.ToLower(strings.Trim(text, ".")))
	found := 0
	for _, w := range want {
		if strings.Contains(" "+tr.Text+" ", " "+w+" ") {
			found++
		}
	}
	if found*2 < len(want) {
		t.Errorf("%q was transcribed as %q", text, tr.Text)
	}
	ct, body = form(map[string]string{"response_format": "text"}, wav)
	if resp, out := post("/v1/audio/transcriptions", ct, body); resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") || len(out) < 5 {
		t.Errorf("text transcription: %d %q", resp.StatusCode, out)
	}
	for _, tc := range []struct {
		name, path, ct string
		body           []byte
		code           api.Code
	}{
		{"nothing to say", "/v1/audio/speech", "application/json", []byte(`{"input": "  "}`), api.CodeInvalidInput},
		{"an unknown voice", "/v1/audio/speech", "application/json", []byte(`{"input": "hi", "voice": "hal"}`), api.CodeInvalidInput},
		{"mp3", "/v1/audio/speech", "application/json", []byte(`{"input": "hi", "response_format": "mp3"}`), api.CodeInvalidInput},
		{"too fast", "/v1/audio/speech", "application/json", []byte(`{"input": "hi", "speed": 9}`), api.CodeInvalidInput},
		{"not JSON", "/v1/audio/speech", "application/json", []byte(`{`), api.CodeBadRequest},
		{"not multipart", "/v1/audio/transcriptions", "application/json", []byte(`{}`), api.CodeUnsupportedMedia},
		{"no file", "/v1/audio/transcriptions", "", nil, api.CodeInvalidInput},
		{"not audio", "/v1/audio/transcriptions", "file", []byte("this is not a recording"), api.CodeInvalidInput},
		{"French", "/v1/audio/transcriptions", "fr", wav, api.CodeInvalidInput},
	} {
		ct, body := tc.ct, tc.body
		switch tc.ct {
		case "":
			ct, body = form(map[string]string{"model": "whisper-1"}, nil)
		case "file":
			ct, body = form(nil, tc.body)
		case "fr":
			ct, body = form(map[string]string{"language": "fr"}, tc.body)
		}
		resp, out := post(tc.path, ct, body)
		var eb api.ErrorBody
		if json.Unmarshal(out, &eb) != nil || eb.Error == nil || eb.Error.Code != tc.code || resp.StatusCode != tc.code.Status() {
			t.Errorf("%s: %d %s, want %s", tc.name, resp.StatusCode, out, tc.code)
		}
	}
	// a server with no speech engine says so
	none := newHarness(t, "sqlite", nil)
	req, _ := http.NewRequest("POST", none.base+"/v1/audio/speech", strings.NewReader(`{"input": "hi"}`))
	req.Header.Set("Authorization", "Bearer "+none.acme.Key)
	if resp, err := none.http.Do(req); err != nil || resp.StatusCode != 503 {
		t.Errorf("speech with no engine: %v %v", resp, err)
	}
}

// TestVoicePage serves the page and its bundled script, which carries
// the LiveKit client (no CDN).
func TestVoicePage(t *testing.T) {
	h := newHarness(t, "sqlite", nil, withVoice(deadLiveKit(t)))
	get := func(path string, header http.Header) (*http.Response, string) {
		req, _ := http.NewRequest("GET", h.base+path, nil)
		for k, v := range header {
			req.Header[k] = v
		}
		resp, err := h.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	resp, html := get("/voice", nil)
	if resp.StatusCode != 200 || !strings.Contains(html, `<script src="/voice/app.js">`) || strings.Contains(html, "https://") {
		t.Fatalf("page: %d %s", resp.StatusCode, html)
	}
	resp, js := get("/voice/app.js", nil)
	if resp.StatusCode != 200 || !strings.Contains(js, "trellisVoice") || !strings.Contains(js, "livekit") || len(js) < 100_000 {
		t.Fatalf("script: %d, %d bytes", resp.StatusCode, len(js))
	}
	if resp, _ := get("/voice/app.js", http.Header{"If-None-Match": {resp.Header.Get("ETag")}}); resp.StatusCode != 304 {
		t.Errorf("a cached script: %d", resp.StatusCode)
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
