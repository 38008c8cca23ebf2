package voice

import (
	"errors"
	"net"
	"os"
	"time"

	"github.com/pion/webrtc/v4"

	"github.com/trellisflow/trellis/cmd/trellis/internal/audio"
)

// listen hears a caller's microphone: it decodes the Opus packets, feeds
// the voice-activity detector, streams each utterance of the caller the
// agent serves to the transcription endpoint as it is spoken, hands each
// utterance to the loop, and stops the agent's reply when the caller
// speaks over it.
func (s *session) listen(track *webrtc.TrackRemote, identity string) {
	defer s.wg.Done()
	s.a.tracks.Add(1)
	defer s.a.tracks.Add(-1)
	const rate = 16000
	dec, err := audio.NewDecoder(rate)
	if err != nil {
		s.log.Warn("hearing the caller", "error", err.Error())
		return
	}
	defer dec.Close()
	vad := audio.NewVAD(rate, audio.VADConfig{Silence: s.a.cfg.Silence})
	silence := make([]int16, rate/50)
	var speechStart time.Time
	barged := false
	// the open utterance's transcription, fed as the caller speaks, and
	// how many of its samples it has
	var hear *hearing
	sent := 0
	defer func() {
		if hear != nil {
			hear.stop()
		}
	}()
	push := func(pcm []int16) {
		now := time.Now()
		switch vad.Push(pcm) {
		case audio.SpeechStart:
			speechStart, barged = now, false
			if s.serves(identity) && !s.whole.Load() {
				hear, sent = s.speech.hear(s.ctx, rate, &s.wg), 0
			}
		case audio.SpeechEnd:
			utt := vad.Utterance()
			ev := event{kind: evUtterance, identity: identity, pcm: utt, at: now, hearing: hear}
			if hear != nil {
				hear.add(utt.Samples[sent:])
				hear.end()
				hear = nil
			}
			s.post(ev)
		}
		if hear != nil && vad.Speaking() {
			// what the utterance keeps however it goes on is heard now
			settled := vad.Settled()
			hear.add(settled[sent:])
			sent = len(settled)
		}
		if vad.Speaking() && !barged && now.Sub(speechStart) >= s.a.cfg.BargeIn && s.isSpeaking() && s.serves(identity) {
			barged = true
			if s.interrupt() {
				s.a.metrics.bargeIns.Inc()
				s.send(Message{Type: MsgInterrupted})
			}
		}
	}
	var last uint16
	started := false
	quiet := time.Now()
	for s.ctx.Err() == nil {
		_ = track.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		pkt, _, err := track.ReadRTP()
		if err != nil {
			var ne net.Error
			if errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
				// no packets (the caller muted, or sends nothing in silence):
				// the time passes as silence, so an utterance still ends
				for now := time.Now(); now.Sub(quiet) >= frameDur; quiet = quiet.Add(frameDur) {
					push(silence)
				}
				continue
			}
			return
		}
		quiet = time.Now()
		if len(pkt.Payload) == 0 {
			continue
		}
		if started {
			// conceal a few lost packets, so the detector's clock keeps time
			for gap := pkt.SequenceNumber - last - 1; gap > 0 && gap < 5; gap-- {
				if pcm, err := dec.Decode(nil); err == nil {
					push(pcm)
				}
			}
		}
		started, last = true, pkt.SequenceNumber
		pcm, err := dec.Decode(pkt.Payload)
		if err != nil {
			continue
		}
		push(pcm)
	}
}
