package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	trellisrt "github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/cmd/trellis/internal/audio"
	"github.com/trellisflow/trellis/cmd/trellis/internal/cli"
	"github.com/trellisflow/trellis/cmd/trellis/internal/page"
	"github.com/trellisflow/trellis/cmd/trellis/internal/speech"
	"github.com/trellisflow/trellis/cmd/trellis/internal/studio"
	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/nodes/sandbox"
	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/api/server"
	"github.com/trellisflow/trellis/runtime/store"
)

// pageServed is the API server with the command's pages and speech
// engine (sp; nil: none), as `trellis serve` mounts them, and a key.
type pageServed struct {
	base string
	acme *api.Client
	http *http.Client
}

func pageServer(t *testing.T, sp server.Speech, opts ...func(*server.Config)) *pageServed {
	t.Helper()
	ctx := context.Background()
	rt, err := trellisrt.Open(ctx, "sqlite:"+t.TempDir()+"/store.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	cfg := server.Config{Runtime: rt, FlowsDir: "../../flows", Kinds: all.Offline(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Page: page.Handler(), Studio: studio.Handler()}
	if sp != nil {
		cfg.Speech = sp
	}
	for _, opt := range opts {
		opt(&cfg)
	}
	srv, err := server.New(cfg)
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
	return &pageServed{base: hs.URL, acme: api.NewClient(hs.URL, key), http: hs.Client()}
}

// TestSpeechRoutes speaks and recognises with the real offline engines,
// through the API server as the command serves them, and refuses what they cannot do.
func TestSpeechRoutes(t *testing.T) {
	if _, err := exec.LookPath("flite"); err != nil {
		t.Fatal("flite is not installed: apt-get install flite (make deps installs it)")
	}
	if err := speech.CheckRecognizer(context.Background()); err != nil {
		t.Fatalf("%v (make deps installs it)", err)
	}
	sp := speech.NewOffline()
	t.Cleanup(func() { sp.Close() })
	h := pageServer(t, sp)
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
		{"not an mp3", "/v1/audio/transcriptions", "mp3", []byte("ID3 this is not a recording either"), api.CodeInvalidInput},
		{"a form cut short", "/v1/audio/transcriptions", "cut", nil, api.CodeBadRequest},
		{"French", "/v1/audio/transcriptions", "fr", wav, api.CodeInvalidInput},
		{"a voice past 2^63", "/v1/audio/speech", "application/json", []byte(`{"input": "hi", "voice": 9223372036854775808}`), api.CodeBadRequest},
		{"a speed past a float's range", "/v1/audio/speech", "application/json", []byte(`{"input": "hi", "speed": 1e400}`), api.CodeBadRequest},
		{"an unknown field", "/v1/audio/speech", "application/json", []byte(`{"input": "hi", "pitch": 2}`), api.CodeBadRequest},
	} {
		ct, body := tc.ct, tc.body
		switch tc.ct {
		case "":
			ct, body = form(map[string]string{"model": "whisper-1"}, nil)
		case "file":
			ct, body = form(nil, tc.body)
		case "fr":
			ct, body = form(map[string]string{"language": "fr"}, tc.body)
		case "mp3":
			var b bytes.Buffer
			mw := multipart.NewWriter(&b)
			fw, _ := mw.CreateFormFile("file", "speech.mp3")
			_, _ = fw.Write(tc.body)
			mw.Close()
			ct, body = mw.FormDataContentType(), b.Bytes()
		case "cut":
			ct, body = form(map[string]string{"model": "whisper-1"}, wav)
			body = body[:len(body)/2]
		}
		resp, out := post(tc.path, ct, body)
		var eb api.ErrorBody
		if json.Unmarshal(out, &eb) != nil || eb.Error == nil || eb.Error.Code != tc.code || resp.StatusCode != tc.code.Status() {
			t.Errorf("%s: %d %s, want %s", tc.name, resp.StatusCode, out, tc.code)
			continue
		}
		// the tenant reads plain words: not the converter's name, its
		// files, nor a parser's or Go's
		for _, leak := range []string{os.TempDir(), "/tmp", "sox", "flite", "pocketsphinx", "python", "json:", "multipart:", "Go struct", "Go value", "int64", "float64", "strconv", "EOF"} {
			if strings.Contains(eb.Error.Message, leak) {
				t.Errorf("%s: the message shows %q: %s", tc.name, leak, eb.Error.Message)
			}
		}
	}
	// a server with no speech engine says so
	none := pageServer(t, nil)
	req, _ := http.NewRequest("POST", none.base+"/v1/audio/speech", strings.NewReader(`{"input": "hi"}`))
	req.Header.Set("Authorization", "Bearer "+none.acme.Key)
	if resp, err := none.http.Do(req); err != nil || resp.StatusCode != 503 {
		t.Errorf("speech with no engine: %v %v", resp, err)
	}
}

// TestVoicePage serves the page and its bundled script, which carries
// the LiveKit client (no CDN).
func TestVoicePage(t *testing.T) {
	h := pageServer(t, nil)
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

// TestStudioPage serves the studio's page, its script and the flow
// format's schema at the paths the command mounts them.
func TestStudioPage(t *testing.T) {
	h := pageServer(t, nil)
	for path, want := range map[string]string{"/studio": "<script", "/studio/app.js": "function", "/studio/flow.schema.json": `"$schema"`} {
		resp, err := h.http.Get(h.base + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), want) {
			t.Errorf("%s: %d, %d bytes", path, resp.StatusCode, len(b))
		}
	}
}

// A scrape of /metrics reads the sandbox's statistics without making the
// process's sandbox: a server that never runs code opens no backend (one
// made by a scrape would never be closed).
func TestMetricsDoNotOpenTheSandbox(t *testing.T) {
	t.Setenv("TRELLIS_SANDBOX", "local")
	if err := sandbox.CloseEnv(); err != nil {
		t.Fatal(err)
	}
	h := pageServer(t, nil, func(c *server.Config) { c.Metrics = cli.SandboxMetrics() })
	resp, err := h.http.Get(h.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, line := range []string{"trellis_sandbox_running 0", "trellis_sandbox_queued 0"} {
		if !strings.Contains("\n"+string(b), "\n"+line+"\n") {
			t.Errorf("no %q in the metrics", line)
		}
	}
	if sandbox.EnvOpen() {
		t.Error("a scrape of /metrics made the process's sandbox")
	}
}
