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
	release, err := o.acquire(ctx)
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

// recognize decodes 16 kHz audio with a loaded decoder, loading one when
// none is free. A decoder that died while it waited is replaced once.
func (o *Offline) recognize(ctx context.Context, pcm audio.PCM) (string, error) {
	release, err := o.acquire(ctx)
	if err != nil {
		return "", err
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	frame := make([]byte, 4+2*len(pcm.Samples))
	binary.LittleEndian.PutUint32(frame, uint32(2*len(pcm.Samples)))
	for i, s := range pcm.Samples {
		binary.LittleEndian.PutUint16(frame[4+2*i:], uint16(s))
	}
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
		text, err := r.decode(ctx, frame)
		if err == nil {
			o.put(r)
			return text, nil
		}
		o.discard(r)
		if ctx.Err() != nil || fresh || retried {
			return "", err
		}
	}
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

// decode sends an utterance and reads its words.
func (r *recognizer) decode(ctx context.Context, frame []byte) (string, error) {
	stop := context.AfterFunc(ctx, r.kill)
	defer stop()
	if _, err := r.stdin.Write(frame); err != nil {
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

// kill stops the decoder and the decoding it forked.
func (r *recognizer) kill() { _ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL) }

// close stops the decoder and waits for it, once.
func (r *recognizer) close() {
	r.stop.Do(func() {
		r.kill()
		_ = r.cmd.Wait()
		b := make([]byte, 2048)
		n, _ := r.stderr.ReadAt(b, 0)
		r.said = strings.TrimSpace(string(b[:n]))
		r.stderr.Close()
	})
}
