package speech

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/trellisflow/trellis/cmd/trellis/internal/audio"
	"github.com/trellisflow/trellis/runtime/api"
)

// recognizerScript keeps pocketsphinx's decoder loaded in a Python
// process (Debian's python3-pocketsphinx), so that an utterance costs its
// decoding and not the loading of the model, dictionary and language
// model (about as long again as decoding a sentence).
//
//go:embed recognizer.py
var recognizerScript string

// installRecognizer is how to install what the recogniser needs.
const installRecognizer = "apt-get install python3-pocketsphinx pocketsphinx-en-us"

// errClosed is the answer of an engine that was closed.
var errClosed = errors.New("the speech engine is closed")

// recognizer is one decoder process: it answers one utterance at a time.
type recognizer struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
	stderr *os.File // what Python says when it fails (an unlinked file)
	stop   sync.Once
	said   string // stderr's start, once stopped
	// mu orders a kill after close: once the decoder is reaped its
	// number, and its group's, may be another's
	mu      sync.Mutex
	closing bool
}

// python finds the interpreter Debian's python3-pocketsphinx installs
// into, else whichever python3 is on PATH.
func python() string {
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		return "/usr/bin/python3"
	}
	p, _ := exec.LookPath("python3")
	return p
}

// CheckRecognizer reports whether the recogniser can load: Python, the
// pocketsphinx module and the US English model.
func CheckRecognizer(ctx context.Context) error {
	o := NewOffline()
	defer o.Close()
	release, err := acquire(ctx, o.ears)
	if err != nil {
		return err
	}
	defer release()
	r, err := o.take(ctx)
	if err != nil {
		return err
	}
	o.put(r)
	return nil
}

// recognize decodes 16 kHz audio with a loaded decoder.
func (o *Offline) recognize(ctx context.Context, pcm audio.PCM) (string, error) {
	rest := pcm.Samples
	return o.hear(ctx, func(buf []int16) (int, error) {
		if len(rest) == 0 {
			return 0, io.EOF
		}
		n := copy(buf, rest)
		rest = rest[n:]
		return n, nil
	})
}

// sourceError is a failure to read the audio, not the decoder's.
type sourceError struct{ err error }

func (e sourceError) Error() string { return e.err.Error() }
func (e sourceError) Unwrap() error { return e.err }

// pause is how long the audio of an utterance may stop coming before
// the decoder is asked to finish it as it stands, in case it ended
// there: a streamed utterance comes in pieces of 20 to 60 ms, and a
// speaker's pause that may end it lasts hundreds.
const pause = 100 * time.Millisecond

// hear decodes 16 kHz audio as next reads it (io.EOF at its end), with a
// loaded decoder, loading one when none is free: each piece is decoded
// as it comes, so that at the end only the last is left, and the search
// is finished at each pause in case the utterance ended there. A decoder
// that died while it waited, or while it decoded, is replaced once, and
// what it was sent sent again. An error of next is returned as it is.
func (o *Offline) hear(ctx context.Context, next func([]int16) (int, error)) (string, error) {
	release, err := acquire(ctx, o.ears)
	if err != nil {
		return "", err
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	f := &feed{pieces: make(chan chunk, 16)}
	quit := make(chan struct{})
	defer close(quit)
	// next is read apart, so that a pause in the audio is seen
	go func() {
		for {
			buf := make([]int16, 1024)
			n, err := next(buf)
			select {
			case f.pieces <- chunk{buf[:n], err}:
			case <-quit:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	for retried := false; ; retried = true {
		o.mu.Lock()
		var r *recognizer
		if n := len(o.idle); n > 0 {
			r, o.idle = o.idle[n-1], o.idle[:n-1]
		}
		o.mu.Unlock()
		fresh := r == nil
		if fresh {
			if r, err = o.take(ctx); err != nil {
				return "", err
			}
		}
		text, err := r.decode(ctx, f)
		if err == nil {
			o.put(r)
			return text, nil
		}
		o.discard(r)
		var se sourceError
		if errors.As(err, &se) {
			return "", se.err
		}
		if ctx.Err() != nil || fresh || retried {
			return "", err
		}
	}
}

// chunk is what one read of the audio gave.
type chunk struct {
	samples []int16
	err     error
}

// feed is an utterance on its way to a decoder: what was read of it
// (sent to a decoder that replaces one that died), and what comes next.
type feed struct {
	pieces chan chunk
	read   []byte // the samples read so far, as sent
	done   bool   // the audio ended
}

// paused, as a piece's length, says the audio paused.
const paused = 0xFFFFFFFF

// piece frames samples as the recogniser reads them.
func piece(samples []byte) []byte {
	b := make([]byte, 4, 4+len(samples))
	binary.LittleEndian.PutUint32(b, uint32(len(samples)))
	return append(b, samples...)
}

// take starts a decoder process and waits until it has loaded.
func (o *Offline) take(ctx context.Context) (*recognizer, error) {
	if o.python == "" {
		return nil, &api.Error{Code: api.CodeSpeechUnavailable, Message: "the offline speech engine is not installed: python3 is missing: " + installRecognizer}
	}
	stderr, err := os.CreateTemp("", "trellis-recognizer-")
	if err != nil {
		return nil, fmt.Errorf("starting the recognizer: %w", err)
	}
	_ = os.Remove(stderr.Name())
	cmd := exec.Command(o.python, "-I", "-c", recognizerScript)
	// its own process group: stopping it stops the decoding it forked
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stderr = stderr
	r := &recognizer{cmd: cmd, stderr: stderr}
	stdin, err := cmd.StdinPipe()
	if err == nil {
		var stdout io.ReadCloser
		stdout, err = cmd.StdoutPipe()
		r.stdin, r.stdout = stdin, bufio.NewReader(stdout)
	}
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		stderr.Close()
		return nil, fmt.Errorf("starting the recognizer: %w", err)
	}
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		r.close()
		return nil, errClosed
	}
	o.live[r] = struct{}{}
	o.mu.Unlock()
	line, err := r.answer(ctx)
	switch {
	case err != nil:
		o.discard(r)
		return nil, fmt.Errorf("starting the recognizer: %w", err)
	case strings.HasPrefix(line, "missing "):
		o.discard(r)
		return nil, &api.Error{Code: api.CodeSpeechUnavailable, Message: "the offline speech engine is not installed: " + strings.TrimPrefix(line, "missing ") + ": " + installRecognizer}
	case line != "ready":
		o.discard(r)
		return nil, fmt.Errorf("starting the recognizer: it said %q", line)
	}
	return r, nil
}

// put keeps a decoder for the next utterance.
func (o *Offline) put(r *recognizer) {
	o.mu.Lock()
	if !o.closed {
		o.idle = append(o.idle, r)
		o.mu.Unlock()
		return
	}
	o.mu.Unlock()
	o.discard(r)
}

// discard stops a decoder and forgets it.
func (o *Offline) discard(r *recognizer) {
	r.close()
	o.mu.Lock()
	delete(o.live, r)
	o.mu.Unlock()
}

// Close stops the engine's decoder processes, any decoding included;
// a recognition after Close fails.
func (o *Offline) Close() error {
	o.mu.Lock()
	o.closed = true
	o.idle = nil
	live := make([]*recognizer, 0, len(o.live))
	for r := range o.live {
		live = append(live, r)
	}
	o.mu.Unlock()
	for _, r := range live {
		o.discard(r)
	}
	return nil
}

// decode sends an utterance, piece by piece as it is read, and reads
// its words; a pause in the audio is told.
func (r *recognizer) decode(ctx context.Context, f *feed) (string, error) {
	stop := context.AfterFunc(ctx, r.kill)
	defer stop()
	if len(f.read) > 0 {
		if _, err := r.stdin.Write(piece(f.read)); err != nil {
			return "", r.failed(ctx, err)
		}
	}
	wait := time.NewTimer(pause)
	defer wait.Stop()
	told := false
	for !f.done {
		select {
		case c := <-f.pieces:
			if len(c.samples) > 0 {
				b := make([]byte, 2*len(c.samples))
				for i, s := range c.samples {
					binary.LittleEndian.PutUint16(b[2*i:], uint16(s))
				}
				f.read = append(f.read, b...)
				if _, err := r.stdin.Write(piece(b)); err != nil {
					return "", r.failed(ctx, err)
				}
				told = false
				wait.Reset(pause)
			}
			if c.err == io.EOF {
				f.done = true
			} else if c.err != nil {
				return "", sourceError{c.err}
			}
		case <-wait.C:
			if !told && len(f.read) > 0 {
				told = true
				var b [4]byte
				binary.LittleEndian.PutUint32(b[:], paused)
				if _, err := r.stdin.Write(b[:]); err != nil {
					return "", r.failed(ctx, err)
				}
			}
		case <-ctx.Done():
			return "", r.failed(ctx, ctx.Err())
		}
	}
	if _, err := r.stdin.Write(piece(nil)); err != nil {
		return "", r.failed(ctx, err)
	}
	line, err := r.answer(ctx)
	if err != nil {
		return "", err
	}
	if text, ok := strings.CutPrefix(line, "ok"); ok {
		return strings.TrimSpace(text), nil
	}
	return "", fmt.Errorf("pocketsphinx: %s", strings.TrimPrefix(line, "error "))
}

// answer reads the decoder's next line; the context's end stops the
// decoder.
func (r *recognizer) answer(ctx context.Context) (string, error) {
	stop := context.AfterFunc(ctx, r.kill)
	defer stop()
	line, err := r.stdout.ReadString('\n')
	if err != nil {
		return "", r.failed(ctx, err)
	}
	return strings.TrimSuffix(line, "\n"), nil
}

// failed says why talking to the decoder failed: the context's end, or
// its death and what it wrote.
func (r *recognizer) failed(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("pocketsphinx: %w", ctx.Err())
	}
	r.close()
	if r.said != "" {
		return fmt.Errorf("pocketsphinx: %w: %s", err, r.said)
	}
	return fmt.Errorf("pocketsphinx: %w (%s)", err, r.cmd.ProcessState)
}

// kill stops the decoder and the decoding it forked, unless close has
// already (a context's end may come after).
func (r *recognizer) kill() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closing {
		_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
	}
}

// close stops the decoder and the decoding it forked, and reaps the
// decoder, once: when it returns, the decoder's process is gone.
func (r *recognizer) close() {
	r.stop.Do(func() {
		r.kill()
		r.mu.Lock()
		r.closing = true // no kill after this one: Wait frees the number
		r.mu.Unlock()
		_ = r.cmd.Wait()
		b := make([]byte, 2048)
		n, _ := r.stderr.ReadAt(b, 0)
		r.said = strings.TrimSpace(string(b[:n]))
		r.stderr.Close()
	})
}
