// Package speech serves OpenAI-compatible speech routes from Debian's
// offline engines: POST /v1/audio/speech speaks with flite, and POST
// /v1/audio/transcriptions recognises with pocketsphinx (US English),
// its decoder kept loaded between requests. A voice session then works
// on a machine with no hosted speech service, and the voice tests
// exercise real recognition. Anything that speaks
// OpenAI's audio API (go-openai's CreateSpeech and CreateTranscription,
// say) is a client; a hosted service is the same code pointed elsewhere.
package speech

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/trellisflow/trellis/cmd/trellis/internal/audio"
	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/api/server"
)

// Offline is the offline engines, found on PATH. Its recognisers stay
// loaded between requests; Close stops them.
type Offline struct {
	flite, python, sox string
	// voices and ears bound the syntheses and the recognitions at work
	// at once (one per core each): a synthesis is CPU-bound, and so is a
	// recognition sent whole; one streamed as it is spoken holds its
	// place while the speaker speaks, and must not hold up a reply's
	// synthesis meanwhile.
	voices, ears chan struct{}

	mu     sync.Mutex
	idle   []*recognizer // loaded, waiting for an utterance
	live   map[*recognizer]struct{}
	closed bool
}

// NewOffline finds the engines; Available says what is missing. A
// recogniser is loaded at the first transcription, and as many as are
// at work at once are kept.
func NewOffline() *Offline {
	n := max(1, runtime.NumCPU())
	o := &Offline{voices: make(chan struct{}, n), ears: make(chan struct{}, n), live: map[*recognizer]struct{}{}}
	o.flite, _ = exec.LookPath("flite")
	o.python = python()
	o.sox, _ = exec.LookPath("sox")
	return o
}

// Available reports whether both engines are installed, and how to
// install what is not.
func (o *Offline) Available() error {
	var missing []string
	if o.flite == "" {
		missing = append(missing, "flite")
	}
	if o.python == "" {
		missing = append(missing, "python3 python3-pocketsphinx pocketsphinx-en-us")
	}
	if len(missing) > 0 {
		return &api.Error{Code: api.CodeSpeechUnavailable, Message: "the offline speech engine is not installed: apt-get install " + strings.Join(missing, " ")}
	}
	return nil
}

// Voices maps OpenAI's voice names onto flite's; flite's own names
// (kal16, awb, rms, slt, kal) are taken as they are. awb and rms are the
// voices pocketsphinx recognises best.
var Voices = map[string]string{
	"alloy": "awb", "ash": "rms", "ballad": "rms", "coral": "slt", "echo": "rms", "fable": "awb",
	"nova": "slt", "onyx": "kal16", "sage": "slt", "shimmer": "slt", "verse": "awb",
	"awb": "awb", "rms": "rms", "slt": "slt", "kal16": "kal16", "kal": "kal",
}

// SpeechRequest is OpenAI's speech request.
type SpeechRequest struct {
	Model          string  `json:"model"`
	Input          string  `json:"input"`
	Voice          string  `json:"voice"`
	ResponseFormat string  `json:"response_format,omitempty"`
	Speed          float64 `json:"speed,omitempty"`
	Instructions   string  `json:"instructions,omitempty"`
}

func invalid(format string, args ...any) error {
	return &api.Error{Code: api.CodeInvalidInput, Message: fmt.Sprintf(format, args...)}
}

// Speak synthesises the request's input: a WAV file of 16 kHz mono
// speech (response_format wav, or none), or raw 24 kHz 16-bit samples
// (pcm, as OpenAI sends them).
func (o *Offline) Speak(w http.ResponseWriter, r *http.Request) error {
	var in SpeechRequest
	if err := server.ReadJSON(r, &in); err != nil {
		return err
	}
	text := strings.TrimSpace(in.Input)
	switch {
	case text == "":
		return invalid("input is empty: there is nothing to say")
	case len(in.Input) > 4096:
		return invalid("input is longer than 4096 characters")
	}
	voice := Voices["alloy"]
	if in.Voice != "" {
		var ok bool
		if voice, ok = Voices[strings.ToLower(in.Voice)]; !ok {
			return invalid("voice %q is not one of the offline engine's (alloy, ash, ballad, coral, echo, fable, nova, onyx, sage, shimmer, verse, awb, rms, slt, kal16 or kal)", in.Voice)
		}
	}
	format := in.ResponseFormat
	if format == "" {
		format = "wav"
	}
	if format != "wav" && format != "pcm" {
		return invalid("response_format %q is not one the offline engine makes: wav or pcm", in.ResponseFormat)
	}
	if in.Speed != 0 && (in.Speed < 0.25 || in.Speed > 4) {
		return invalid("speed is between 0.25 and 4")
	}
	if o.flite == "" {
		return o.Available()
	}
	pcm, err := o.say(r.Context(), voice, text, in.Speed)
	if err != nil {
		return err
	}
	if format == "pcm" {
		samples := audio.Resample(pcm.Samples, pcm.Rate, 24000)
		b := make([]byte, 2*len(samples))
		for i, s := range samples {
			binary.LittleEndian.PutUint16(b[2*i:], uint16(s))
		}
		w.Header().Set("Content-Type", "audio/pcm")
		_, _ = w.Write(b)
		return nil
	}
	w.Header().Set("Content-Type", "audio/wav")
	_, _ = w.Write(pcm.WAV())
	return nil
}

// acquire takes a place of slots; a context already ended takes none
// (a free place and the end both ready, select would pick either).
func acquire(ctx context.Context, slots chan struct{}) (func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	select {
	case slots <- struct{}{}:
		return func() { <-slots }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// say runs flite; its text goes through a file so that nothing in it is
// taken as an option.
func (o *Offline) say(ctx context.Context, voice, text string, speed float64) (audio.PCM, error) {
	release, err := acquire(ctx, o.voices)
	if err != nil {
		return audio.PCM{}, err
	}
	defer release()
	dir, err := os.MkdirTemp("", "trellis-speech-")
	if err != nil {
		return audio.PCM{}, err
	}
	defer os.RemoveAll(dir)
	in, out := filepath.Join(dir, "in.txt"), filepath.Join(dir, "out.wav")
	if err := os.WriteFile(in, []byte(text), 0o600); err != nil {
		return audio.PCM{}, err
	}
	args := []string{"-voice", voice, "-f", in, "-o", out}
	if speed != 0 && speed != 1 {
		args = append(args, "--setf", "duration_stretch="+strconv.FormatFloat(1/speed, 'f', 3, 64))
	}
	cmd := exec.CommandContext(ctx, o.flite, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return audio.PCM{}, fmt.Errorf("flite: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	f, err := os.Open(out)
	if err != nil {
		return audio.PCM{}, err
	}
	defer f.Close()
	return audio.ReadWAV(f)
}

// Transcription is OpenAI's transcription answer (response_format json
// and verbose_json).
type Transcription struct {
	Text     string  `json:"text"`
	Language string  `json:"language,omitempty"`
	Duration float64 `json:"duration,omitempty"`
}

// maxUpload bounds an uploaded recording (OpenAI's limit).
const maxUpload = 25 << 20

// Transcribe recognises the speech of an uploaded recording (a
// multipart form's file field): 16-bit PCM WAV at any rate, or, with sox
// installed, any format sox reads. It answers json (the default), text
// or verbose_json. A 16 kHz mono WAV recording is heard as it arrives: a
// client that streams it while it is spoken (a chunked upload) waits at
// its end only for the decoding of its last piece.
func (o *Offline) Transcribe(w http.ResponseWriter, r *http.Request) error {
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt != "multipart/form-data" {
		return &api.Error{Code: api.CodeUnsupportedMedia, Message: "send multipart/form-data with the recording in the file field"}
	}
	if o.python == "" {
		return o.Available()
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxUpload)
	mr, err := r.MultipartReader()
	if err != nil {
		return formError(err)
	}
	fields := map[string]string{}
	field := func(name string) string {
		if v, ok := fields[name]; ok {
			return v
		}
		return r.URL.Query().Get(name)
	}
	var heard *Transcription
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return formError(err)
		}
		name := part.FormName()
		switch {
		case name == "file" && heard == nil:
			// the fields before the recording are checked before it is heard
			if err := checkFields(field); err != nil {
				return err
			}
			tr, err := o.hearPart(r.Context(), part)
			if err != nil {
				return err
			}
			heard = &tr
		case name != "" && name != "file":
			v, err := io.ReadAll(io.LimitReader(part, 1<<16))
			if err != nil {
				return formError(err)
			}
			if _, ok := fields[name]; !ok {
				fields[name] = string(v)
			}
		}
		part.Close()
	}
	if heard == nil {
		return invalid("the form has no file field with the recording")
	}
	if err := checkFields(field); err != nil {
		return err
	}
	switch field("response_format") {
	case "text":
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, heard.Text+"\n")
	case "verbose_json":
		writeJSON(w, Transcription{Text: heard.Text, Language: "english", Duration: heard.Duration})
	default:
		writeJSON(w, Transcription{Text: heard.Text})
	}
	return nil
}

// checkFields checks a transcription's response_format and language.
func checkFields(field func(string) string) error {
	switch format := field("response_format"); format {
	case "", "json", "text", "verbose_json":
	default:
		return invalid("response_format %q is not one the offline engine makes: json, text or verbose_json", format)
	}
	if lang := field("language"); lang != "" && lang != "en" && !strings.HasPrefix(lang, "en-") {
		return invalid("language %q: the offline engine recognises English (en) only", lang)
	}
	return nil
}

// formError says why reading the form failed.
func formError(err error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return &api.Error{Code: api.CodeTooLarge, Message: fmt.Sprintf("the recording is larger than %d bytes", mbe.Limit)}
	}
	return &api.Error{Code: api.CodeBadRequest, Message: "the body is not a multipart form with the recording in its file field (a form cut short, or without its boundary)"}
}

// recorder keeps what is read through it until it is stopped.
type recorder struct {
	r    io.Reader
	read []byte
	stop bool
}

func (c *recorder) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if !c.stop {
		c.read = append(c.read, p[:n]...)
	}
	return n, err
}

// hearPart recognises the recording in a form's file part: a 16 kHz
// mono WAV stream as it arrives, anything else once it has all come.
func (o *Offline) hearPart(ctx context.Context, part *multipart.Part) (Transcription, error) {
	rec := &recorder{r: part}
	wr, err := audio.NewWAVReader(rec)
	rec.stop = true
	var pcm audio.PCM
	switch {
	case err == nil && wr.Rate == 16000 && wr.Channels == 1:
		first := make([]int16, 1024)
		n, err := wr.Read(first)
		if err == io.EOF {
			return Transcription{}, invalid("the recording is empty")
		}
		if err != nil {
			return Transcription{}, formError(err)
		}
		first = first[:n]
		// (counted by the goroutine hear reads with, read once hear has
		// returned: atomic, as hear may return before that goroutine's
		// last read is handed over)
		var total atomic.Int64
		total.Add(int64(n))
		text, err := o.hear(ctx, func(buf []int16) (int, error) {
			if len(first) > 0 {
				n := copy(buf, first)
				first = first[n:]
				return n, nil
			}
			n, err := wr.Read(buf)
			total.Add(int64(n))
			if err != nil && err != io.EOF {
				err = formError(err)
			}
			return n, err
		})
		return Transcription{Text: text, Duration: float64(total.Load()) / 16000}, err
	case err == nil:
		pcm.Rate = wr.Rate
		buf := make([]int16, 4096)
		for {
			n, err := wr.Read(buf)
			pcm.Samples = append(pcm.Samples, buf[:n]...)
			if err == io.EOF {
				break
			}
			if err != nil {
				return Transcription{}, formError(err)
			}
		}
		if len(pcm.Samples) == 0 {
			return Transcription{}, invalid("the recording is empty")
		}
		pcm = audio.PCM{Rate: 16000, Samples: audio.Resample(pcm.Samples, pcm.Rate, 16000)}
	default:
		rest, err := io.ReadAll(part)
		if err != nil {
			return Transcription{}, formError(err)
		}
		if pcm, err = o.decode(ctx, append(rec.read, rest...), filepath.Ext(part.FileName())); err != nil {
			return Transcription{}, err
		}
	}
	text, err := o.recognize(ctx, pcm)
	return Transcription{Text: text, Duration: pcm.Duration().Seconds()}, err
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// decode reads a recording into 16 kHz mono samples: WAV directly,
// anything else through sox.
func (o *Offline) decode(ctx context.Context, data []byte, ext string) (audio.PCM, error) {
	pcm, err := audio.ReadWAV(bytes.NewReader(data))
	if err == nil {
		if len(pcm.Samples) == 0 {
			return pcm, invalid("the recording is empty")
		}
		return audio.PCM{Rate: 16000, Samples: audio.Resample(pcm.Samples, pcm.Rate, 16000)}, nil
	}
	if o.sox == "" {
		return pcm, invalid("the recording is not 16-bit PCM WAV, the one format this server reads")
	}
	dir, err := os.MkdirTemp("", "trellis-speech-")
	if err != nil {
		return pcm, err
	}
	defer os.RemoveAll(dir)
	if ext == "" || len(ext) > 8 || strings.ContainsAny(ext, "/\\") {
		ext = ".audio"
	}
	in, out := filepath.Join(dir, "in"+ext), filepath.Join(dir, "out.wav")
	if err := os.WriteFile(in, data, 0o600); err != nil {
		return pcm, err
	}
	cmd := exec.CommandContext(ctx, o.sox, in, "-r", "16000", "-c", "1", "-b", "16", out)
	if err := cmd.Run(); err != nil {
		// what the converter said names its files: it is not the caller's
		return pcm, invalid("the recording cannot be read: it is not audio in a format this server reads (WAV, FLAC, Ogg, MP3...)")
	}
	f, err := os.Open(out)
	if err != nil {
		return pcm, err
	}
	defer f.Close()
	return audio.ReadWAV(f)
}
