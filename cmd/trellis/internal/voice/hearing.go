package voice

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"sync"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/trellisflow/trellis/cmd/trellis/internal/audio"
)

// hearing is an utterance sent to the transcription endpoint while it
// is spoken: one request whose body, a WAV stream in a multipart form
// (OpenAI's transcription request), is written as the caller speaks. An
// endpoint that hears a stream as it arrives (the Trellis API's offline
// engine) has decoded all but the last piece when the utterance ends; a
// hosted one reads the same request as any upload.
type hearing struct {
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	pending []int16
	ended   bool
	wake    chan struct{} // a signal that pending or ended changed

	sent time.Time     // when the last of the audio was handed over
	done chan struct{} // closed once text and err are set
	text string
	err  error
}

// hear starts the transcription of an utterance at rate that add feeds
// and end ends; wg counts its goroutines.
func (s *speech) hear(ctx context.Context, rate int, wg *sync.WaitGroup) *hearing {
	ctx, cancel := context.WithCancel(ctx)
	h := &hearing{ctx: ctx, cancel: cancel, wake: make(chan struct{}, 1), done: make(chan struct{})}
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	wg.Add(2)
	go func() {
		defer wg.Done()
		pw.CloseWithError(h.write(mw, s.sttModel, rate))
	}()
	go func() {
		defer wg.Done()
		defer close(h.done)
		h.text, h.err = s.request(ctx, pr, mw.FormDataContentType())
		// the body is not read any further: its writer stops
		pr.CloseWithError(fmt.Errorf("transcribing: the request is over"))
	}()
	return h
}

// add hands samples of the utterance over (they are copied).
func (h *hearing) add(samples []int16) {
	if len(samples) == 0 {
		return
	}
	h.mu.Lock()
	h.pending = append(h.pending, samples...)
	h.mu.Unlock()
	h.signal()
}

// end says the utterance is whole.
func (h *hearing) end() {
	h.mu.Lock()
	h.ended = true
	h.mu.Unlock()
	h.signal()
}

func (h *hearing) signal() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// stop abandons the transcription.
func (h *hearing) stop() { h.cancel() }

// result waits for the transcript; handed is when the last of the
// utterance was handed over to the endpoint.
func (h *hearing) result(ctx context.Context) (text string, handed time.Time, err error) {
	defer h.cancel()
	select {
	case <-h.done:
		return h.text, h.sent, h.err
	case <-ctx.Done():
		return "", time.Time{}, ctx.Err()
	}
}

// write writes the request's body: the form's fields, then the WAV
// stream as its samples come.
func (h *hearing) write(mw *multipart.Writer, model string, rate int) error {
	for _, f := range [][2]string{{"model", model}, {"response_format", "json"}} {
		if err := mw.WriteField(f[0], f[1]); err != nil {
			return err
		}
	}
	fw, err := mw.CreateFormFile("file", "utterance.wav")
	if err != nil {
		return err
	}
	head := audio.PCM{Rate: rate}.WAV()
	// a stream: its lengths are unknown
	binary.LittleEndian.PutUint32(head[4:], 0xFFFFFFFF)
	binary.LittleEndian.PutUint32(head[40:], 0xFFFFFFFF)
	if _, err := fw.Write(head); err != nil {
		return err
	}
	var b []byte
	for {
		h.mu.Lock()
		samples, ended := h.pending, h.ended
		h.pending = nil
		h.mu.Unlock()
		if len(samples) > 0 {
			b = b[:0]
			for _, s := range samples {
				b = binary.LittleEndian.AppendUint16(b, uint16(s))
			}
			if _, err := fw.Write(b); err != nil {
				return err
			}
			continue
		}
		if ended {
			break
		}
		select {
		case <-h.wake:
		case <-h.ctx.Done():
			return h.ctx.Err()
		}
	}
	err = mw.Close()
	h.mu.Lock()
	h.sent = time.Now()
	h.mu.Unlock()
	return err
}

// request sends the transcription request whose body is body, and reads
// its transcript.
func (s *speech) request(ctx context.Context, body io.Reader, contentType string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.base+"/audio/transcriptions", body)
	if err != nil {
		return "", fmt.Errorf("transcribing: %w", err)
	}
	req.Header.Set("Content-Type", contentType)
	if s.key != "" {
		req.Header.Set("Authorization", "Bearer "+s.key)
	}
	res, err := s.http.Do(req)
	if err != nil {
		return "", fmt.Errorf("transcribing: %w", err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return "", fmt.Errorf("transcribing: %w", err)
	}
	if res.StatusCode != http.StatusOK {
		var er openai.ErrorResponse
		if json.Unmarshal(b, &er) == nil && er.Error != nil {
			er.Error.HTTPStatusCode = res.StatusCode
			return "", speechError("transcribing", er.Error)
		}
		return "", fmt.Errorf("transcribing: the endpoint answered %s: %.200s", res.Status, b)
	}
	var tr struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(b, &tr); err != nil {
		return "", fmt.Errorf("transcribing: the endpoint's answer: %w", err)
	}
	return strings.TrimSpace(tr.Text), nil
}
