package voice

import (
	"context"
	"errors"
	"io"
	"strings"
	"time"

	"github.com/pion/webrtc/v4/pkg/media"

	"github.com/trellisflow/trellis/cmd/trellis/internal/audio"
)

// sayable is what the agent says for a reply: with goodbye at the end.
func (s *session) sayable(reply string, over bool) string {
	if over {
		return strings.TrimSpace(reply + " " + s.a.cfg.Goodbye)
	}
	return reply
}

// speaker is one reply being spoken.
type speaker struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// interrupt stops the reply being spoken, if any; it reports whether
// there was one.
func (s *session) interrupt() bool {
	s.mu.Lock()
	sp := s.speaking
	s.speaking = nil
	s.mu.Unlock()
	if sp == nil {
		return false
	}
	sp.cancel()
	<-sp.done
	return true
}

// isSpeaking reports whether a reply is being spoken.
func (s *session) isSpeaking() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.speaking != nil
}

// say speaks pcm, or text synthesised, on the agent's track in real
// time, replacing what was being said; first, when set, hears when the
// first packet went out. The returned channel is closed when it is done.
func (s *session) say(pcm *audio.PCM, text string, since time.Time, first func(time.Time)) <-chan struct{} {
	s.interrupt()
	ctx, cancel := context.WithCancel(s.ctx)
	sp := &speaker{cancel: cancel, done: make(chan struct{})}
	s.mu.Lock()
	s.speaking = sp
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(sp.done)
		defer cancel()
		defer func() {
			s.mu.Lock()
			if s.speaking == sp {
				s.speaking = nil
			}
			s.mu.Unlock()
		}()
		s.send(Message{Type: MsgState, State: Speaking})
		var err error
		if pcm != nil {
			err = s.play(ctx, &pcmSource{pcm: *pcm}, pcm.Rate, first)
		} else {
			var wr *audio.WAVReader
			var body io.Closer
			wr, body, err = s.speech.synthesize(ctx, text)
			if err == nil {
				err = s.play(ctx, wr, wr.Rate, first)
				body.Close()
			}
		}
		if err != nil && ctx.Err() == nil {
			s.log.Warn("speaking a reply", "error", err.Error())
			if errors.Is(err, errNoSpeech) {
				s.send(Message{Type: MsgNotice, Text: "no speech engine is available: replies come as text"})
			}
		}
		if ctx.Err() == nil {
			s.send(Message{Type: MsgState, State: Listening})
		}
	}()
	return sp.done
}

// sampleSource gives audio samples as they come.
type sampleSource interface {
	Read(buf []int16) (int, error)
}

type pcmSource struct {
	pcm audio.PCM
	at  int
}

func (p *pcmSource) Read(buf []int16) (int, error) {
	if p.at >= len(p.pcm.Samples) {
		return 0, io.EOF
	}
	n := copy(buf, p.pcm.Samples[p.at:])
	p.at += n
	return n, nil
}

// play encodes audio at rate into Opus packets and writes them on the
// agent's track in real time, until it ends or ctx does.
func (s *session) play(ctx context.Context, src sampleSource, rate int, first func(time.Time)) error {
	enc, err := s.encoder(audio.OpusRate(rate))
	if err != nil {
		return err
	}
	in := rate * int(frameDur/time.Millisecond) / 1000 // samples per frame at the source's rate
	frame := make([]int16, 0, in)
	buf := make([]int16, in)
	start := time.Now()
	sent := 0
	flush := func(pad bool) error {
		if len(frame) == 0 {
			return nil
		}
		if pad {
			frame = append(frame, make([]int16, in-len(frame))...)
		}
		samples := frame
		if enc.Rate() != rate {
			samples = audio.Resample(frame, rate, enc.Rate())
			want := enc.Rate() * int(frameDur/time.Millisecond) / 1000
			samples = append(samples, make([]int16, max(0, want-len(samples)))...)[:want]
		}
		pkt, err := enc.Encode(samples)
		if err != nil {
			return err
		}
		// packets go out at the pace they play: the frame's time, not the
		// moment it was ready
		at := start.Add(time.Duration(sent) * frameDur)
		if d := time.Until(at); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if err := s.voice.WriteSample(media.Sample{Data: append([]byte(nil), pkt...), Duration: frameDur}, nil); err != nil {
			return err
		}
		if sent == 0 && first != nil {
			first(time.Now())
		}
		sent++
		frame = frame[:0]
		return nil
	}
	for {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		n, err := src.Read(buf[:in-len(frame)])
		frame = append(frame, buf[:n]...)
		if len(frame) == in {
			if ferr := flush(false); ferr != nil {
				return ferr
			}
		}
		if err == io.EOF {
			return flush(true)
		}
		if err != nil {
			return err
		}
	}
}

// encoder returns the session's Opus encoder for rate.
func (s *session) encoder(rate int) (*audio.Encoder, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.encoders == nil {
		return nil, errors.New("the session is over")
	}
	if e := s.encoders[rate]; e != nil {
		return e, nil
	}
	e, err := audio.NewEncoder(rate, 32000)
	if err != nil {
		return nil, err
	}
	s.encoders[rate] = e
	return e, nil
}

// synthesizeAll speaks text into memory.
func (s *session) synthesizeAll(ctx context.Context, text string) (audio.PCM, error) {
	wr, body, err := s.speech.synthesize(ctx, text)
	if err != nil {
		return audio.PCM{}, err
	}
	defer body.Close()
	out := audio.PCM{Rate: wr.Rate}
	buf := make([]int16, 4096)
	for {
		n, err := wr.Read(buf)
		out.Samples = append(out.Samples, buf[:n]...)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
	}
}
