package voice

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/trellisflow/trellis/cmd/trellis/internal/audio"
	offline "github.com/trellisflow/trellis/cmd/trellis/internal/speech"
	"github.com/trellisflow/trellis/cmd/trellis/internal/voice/voicetest"
)

// TestHearingStreamed: an utterance streamed to the offline engine in
// 20ms pieces, as a caller speaks it, is heard word for word as
// pocketsphinx_continuous hears it whole, and its audio was handed over
// as a stream; an endpoint that refuses a streamed upload (one that
// wants its length first) is sent the utterance whole, and hears the
// same, and the session's next utterances are sent whole; a hearing
// abandoned part way ends.
func TestHearingStreamed(t *testing.T) {
	eng := offline.NewOffline()
	defer eng.Close()
	if err := offline.CheckRecognizer(context.Background()); err != nil {
		t.Fatalf("%v (make deps installs it)", err)
	}
	transcribe := func(w http.ResponseWriter, r *http.Request) {
		if err := eng.Transcribe(w, r); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /stream/audio/transcriptions", transcribe)
	mux.HandleFunc("POST /whole/audio/transcriptions", func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength < 0 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusLengthRequired)
			_, _ = w.Write([]byte(`{"error": {"message": "a length is required", "type": "invalid_request_error"}}`))
			return
		}
		transcribe(w, r)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	said := voicetest.Say(t, "kal16", "I built a compiler for a small language in Go.")
	pcm := audio.PCM{Rate: 16000, Samples: audio.Resample(said.Samples, said.Rate, 16000)}
	want := voicetest.Recognize(t, pcm)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := Config{STTModel: "whisper-1"}
	for _, tc := range []struct {
		name, path string
		streamed   bool
	}{{"streamed", "/stream", true}, {"refused", "/whole", false}} {
		var wg sync.WaitGroup
		sp := newSpeech(srv.URL+tc.path, "", nil, &cfg)
		s := &session{log: slog.New(slog.DiscardHandler), speech: sp}
		h := sp.hear(ctx, pcm.Rate, &wg)
		for rest := pcm.Samples; len(rest) > 0; rest = rest[min(len(rest), 320):] {
			h.add(rest[:min(len(rest), 320)])
		}
		ev := event{kind: evUtterance, pcm: pcm, hearing: h, at: time.Now()}
		h.end()
		var timing TurnTiming
		text, err := s.hear(ctx, ev, &timing)
		if err != nil || text != want {
			t.Errorf("%s: heard %q, %v; pocketsphinx_continuous hears %q", tc.name, text, err, want)
		}
		if streamed := timing.Handover > 0; streamed != tc.streamed {
			t.Errorf("%s: handed over as a stream: %v, want %v", tc.name, streamed, tc.streamed)
		}
		if s.whole.Load() == tc.streamed {
			t.Errorf("%s: the session sends its next utterances whole: %v", tc.name, s.whole.Load())
		}
		wg.Wait()
	}

	var wg sync.WaitGroup
	h := newSpeech(srv.URL+"/stream", "", nil, &cfg).hear(ctx, pcm.Rate, &wg)
	h.add(pcm.Samples[:len(pcm.Samples)/2])
	h.stop()
	if _, _, err := h.result(ctx); err == nil {
		t.Error("an abandoned hearing gave a transcript")
	}
	wg.Wait()
}
