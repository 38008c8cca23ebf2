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
	quiet := newQuietClock(time.Now(), s.a.cfg.Silence, rate)
	for s.ctx.Err() == nil {
		_ = track.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		pkt, _, err := track.ReadRTP()
		if err != nil {
			var ne net.Error
			if errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
				for range quiet.idle(time.Now()) {
					push(silence)
				}
				continue
			}
			return
		}
		if len(pkt.Payload) == 0 {
			continue
		}
		lost := 0
		if started {
			// conceal a few lost packets, so the detector's clock keeps time
			for gap := pkt.SequenceNumber - last - 1; gap > 0 && gap < 5; gap-- {
				if pcm, err := dec.Decode(nil); err == nil {
					push(pcm)
					lost += len(pcm)
				}
			}
		}
		for range quiet.arrived(time.Now(), pkt.Timestamp, lost) {
			push(silence)
		}
		started, last = true, pkt.SequenceNumber
		pcm, err := dec.Decode(pkt.Payload)
		if err != nil {
			continue
		}
		quiet.decoded(len(pcm))
		push(pcm)
	}
}

// quietClock tells how much silence passed between a caller's packets,
// in frames of frameDur. A caller sends nothing while it is muted, or in
// silence (DTX); a loaded machine holds its packets up. Once no packet
// has come for as long as the silence that ends an utterance, the time
// passes as silence, and goes on passing as it lasts, so that an
// utterance still ends; a shorter pause is told by the packets' own
// timestamps when they come (the sender's clock), so packets that were
// only late add no silence to what the caller said.
type quietClock struct {
	silence time.Duration // what ends an utterance
	rate    int           // the samples a second of what is pushed
	// since is when the caller's sound stopped coming: the last packet,
	// or the end of the silence passed since; passed says silence was
	since  time.Time
	passed bool
	// stamp is the last packet's RTP timestamp (48 kHz for Opus), and
	// samples what it decoded to (0: nothing yet)
	stamp   uint32
	samples int
}

func newQuietClock(now time.Time, silence time.Duration, rate int) *quietClock {
	return &quietClock{silence: silence, rate: rate, since: now}
}

// idle says how many frames of silence to push now that no packet came
// for a while.
func (q *quietClock) idle(now time.Time) int {
	if !q.passed && now.Sub(q.since) < q.silence {
		return 0
	}
	q.passed = true
	n := 0
	for ; now.Sub(q.since) >= frameDur; q.since = q.since.Add(frameDur) {
		n++
	}
	return n
}

// arrived says how many frames of silence to push before a packet with
// RTP timestamp stamp, lost samples of concealment pushed before it:
// the time the sender's clock went on beyond what the packets since the
// last account for, which it sent nothing for (none when idle has passed
// the time already).
func (q *quietClock) arrived(now time.Time, stamp uint32, lost int) int {
	n := 0
	if !q.passed && q.samples > 0 {
		frame := q.rate * int(frameDur/time.Millisecond) / 1000
		since := int(int32(stamp-q.stamp)) / (48000 / q.rate) // (negative: out of order)
		// (more than ends an utterance tells nothing more)
		quiet := min(since-q.samples-lost, int(q.silence.Seconds()*float64(q.rate))+frame)
		n = max(quiet, 0) / frame
	}
	q.since, q.passed, q.stamp, q.samples = now, false, stamp, 0
	return n
}

// decoded records what the last packet decoded to.
func (q *quietClock) decoded(samples int) { q.samples = samples }
