package voice

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	openai "github.com/sashabaranov/go-openai"

	"github.com/trellisflow/trellis/cmd/trellis/internal/audio"
	"github.com/trellisflow/trellis/runtime/api"
)

// speech turns speech into text and text into speech through an
// OpenAI-compatible endpoint: a hosted service, or the Trellis API's own
// offline routes.
type speech struct {
	client   *openai.Client
	base     string // the endpoint's URL, ending in /v1 or the like
	key      string
	http     *http.Client
	sttModel string
	ttsModel string
	voice    string
}

func newSpeech(baseURL, key string, hc *http.Client, cfg *Config) *speech {
	oc := openai.DefaultConfig(key)
	oc.BaseURL = strings.TrimRight(baseURL, "/")
	if hc != nil {
		oc.HTTPClient = hc
	}
	if hc == nil {
		hc = http.DefaultClient
	}
	return &speech{client: openai.NewClientWithConfig(oc), base: oc.BaseURL, key: key, http: hc, sttModel: cfg.STTModel, ttsModel: cfg.TTSModel, voice: cfg.Voice}
}

// errNoSpeech wraps an endpoint's answer that it has no speech engine.
var errNoSpeech = errors.New("no speech engine")

// speechError tells an endpoint without a speech engine from one that
// failed.
func speechError(doing string, err error) error {
	var ae *openai.APIError
	if errors.As(err, &ae) {
		if code, _ := ae.Code.(string); code == string(api.CodeSpeechUnavailable) || ae.HTTPStatusCode == http.StatusNotFound {
			return fmt.Errorf("%w: %s", errNoSpeech, ae.Message)
		}
	}
	return fmt.Errorf("%s: %w", doing, err)
}

// transcribe recognises an utterance.
func (s *speech) transcribe(ctx context.Context, pcm audio.PCM) (string, error) {
	res, err := s.client.CreateTranscription(ctx, openai.AudioRequest{Model: s.sttModel, FilePath: "utterance.wav",
		Reader: bytes.NewReader(pcm.WAV()), Format: openai.AudioResponseFormatJSON})
	if err != nil {
		return "", speechError("transcribing", err)
	}
	return strings.TrimSpace(res.Text), nil
}

// synthesize speaks text: a stream of WAV audio, read as it arrives.
func (s *speech) synthesize(ctx context.Context, text string) (*audio.WAVReader, io.Closer, error) {
	res, err := s.client.CreateSpeech(ctx, openai.CreateSpeechRequest{Model: openai.SpeechModel(s.ttsModel), Input: text,
		Voice: openai.SpeechVoice(s.voice), ResponseFormat: openai.SpeechResponseFormatWav})
	if err != nil {
		return nil, nil, speechError("synthesizing", err)
	}
	wr, err := audio.NewWAVReader(res)
	if err != nil {
		res.Close()
		return nil, nil, fmt.Errorf("synthesizing: the endpoint's audio: %w", err)
	}
	return wr, res, nil
}
