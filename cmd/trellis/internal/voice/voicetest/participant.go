package voicetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/livekit/protocol/livekit"
	lksdk "github.com/livekit/server-sdk-go/v2"
	"github.com/pion/webrtc/v4"
	"github.com/pion/webrtc/v4/pkg/media"

	"github.com/trellisflow/trellis/cmd/trellis/internal/audio"
)

// Participant is a caller in a room: it publishes recorded speech as an
// Opus microphone track, hears the other participants' audio (decoded to
// 16 kHz) and exchanges data messages.
type Participant struct {
	t    testing.TB
	Room *lksdk.Room

	mu         sync.Mutex
	heard      []int16
	firstAudio time.Time
	lastAudio  time.Time
	messages   []json.RawMessage
	changed    chan struct{}
	readers    sync.WaitGroup

	mic *lksdk.LocalTrack
	enc *audio.Encoder
}

// Join connects to the room at url with token.
func Join(t testing.TB, url, token string) *Participant {
	t.Helper()
	p := &Participant{t: t, changed: make(chan struct{})}
	cb := lksdk.NewRoomCallback()
	cb.OnTrackSubscribed = p.onTrack
	cb.OnDataPacket = func(data lksdk.DataPacket, params lksdk.DataReceiveParams) {
		if u, ok := data.(*lksdk.UserDataPacket); ok {
			p.mu.Lock()
			p.messages = append(p.messages, json.RawMessage(u.Payload))
			p.notify()
			p.mu.Unlock()
		}
	}
	room, err := lksdk.ConnectToRoomWithToken(url, token, cb, lksdk.WithAutoSubscribe(true), lksdk.WithConnectTimeout(20*time.Second))
	if err != nil {
		t.Fatalf("joining the room: %v", err)
	}
	p.Room = room
	t.Cleanup(p.Leave)
	return p
}

// notify wakes those waiting for a change; p.mu is held.
func (p *Participant) notify() {
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *Participant) onTrack(track *webrtc.TrackRemote, _ *lksdk.RemoteTrackPublication, _ *lksdk.RemoteParticipant) {
	if track.Kind() != webrtc.RTPCodecTypeAudio {
		return
	}
	dec, err := audio.NewDecoder(16000)
	if err != nil {
		p.t.Errorf("decoding the room's audio: %v", err)
		return
	}
	p.readers.Add(1)
	go func() {
		defer p.readers.Done()
		defer dec.Close()
		for {
			pkt, _, err := track.ReadRTP()
			if err != nil {
				return
			}
			if len(pkt.Payload) == 0 {
				continue
			}
			pcm, err := dec.Decode(pkt.Payload)
			if err != nil {
				continue
			}
			now := time.Now()
			p.mu.Lock()
			if audio.Level(pcm) > -50 {
				if p.firstAudio.IsZero() {
					p.firstAudio = now
				}
				p.lastAudio = now
			}
			p.heard = append(p.heard, pcm...)
			p.notify()
			p.mu.Unlock()
		}
	}()
}

// Heard returns the audio heard so far (16 kHz) and when sound first came.
func (p *Participant) Heard() (audio.PCM, time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return audio.PCM{Rate: 16000, Samples: append([]int16(nil), p.heard...)}, p.firstAudio
}

// ForgetAudio drops the audio heard so far.
func (p *Participant) ForgetAudio() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.heard, p.firstAudio, p.lastAudio = nil, time.Time{}, time.Time{}
}

// WaitSpoken waits until sound has come and then stayed quiet for quiet,
// and returns what was heard.
func (p *Participant) WaitSpoken(ctx context.Context, quiet time.Duration) (audio.PCM, error) {
	for {
		p.mu.Lock()
		done := !p.lastAudio.IsZero() && time.Since(p.lastAudio) > quiet
		ch := p.changed
		p.mu.Unlock()
		if done {
			pcm, _ := p.Heard()
			return pcm, nil
		}
		select {
		case <-ch:
		case <-time.After(quiet / 4):
		case <-ctx.Done():
			pcm, _ := p.Heard()
			return pcm, fmt.Errorf("waiting for speech: %w (heard %v)", ctx.Err(), pcm.Duration())
		}
	}
}

// Message waits for the next data message (in order of arrival, from
// index from) whose "type" is typ and returns it and the index after it.
func (p *Participant) Message(ctx context.Context, from int, typ string) (map[string]any, int, error) {
	for {
		p.mu.Lock()
		msgs := p.messages
		ch := p.changed
		p.mu.Unlock()
		for i := from; i < len(msgs); i++ {
			var m map[string]any
			if json.Unmarshal(msgs[i], &m) == nil && m["type"] == typ {
				return m, i + 1, nil
			}
		}
		select {
		case <-ch:
		case <-ctx.Done():
			var seen []string
			for _, m := range msgs {
				seen = append(seen, string(m))
			}
			return nil, 0, fmt.Errorf("waiting for a %q message: %w; got: %s", typ, ctx.Err(), strings.Join(seen, " "))
		}
	}
}

// Messages returns the data messages received so far.
func (p *Participant) Messages() []json.RawMessage {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]json.RawMessage(nil), p.messages...)
}

// Send publishes a data message (JSON) to the room on topic.
func (p *Participant) Send(topic string, msg any) error {
	b, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	return p.Room.LocalParticipant.PublishDataPacket(&lksdk.UserDataPacket{Payload: b, Topic: topic}, lksdk.WithDataPublishReliable(true))
}

// Publish publishes the participant's microphone track (once).
func (p *Participant) Publish(ctx context.Context) error {
	if p.mic != nil {
		return nil
	}
	enc, err := audio.NewEncoder(16000, 32000)
	if err != nil {
		return err
	}
	track, err := lksdk.NewLocalTrack(webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeOpus})
	if err != nil {
		enc.Close()
		return err
	}
	bound := make(chan struct{})
	var once sync.Once
	track.OnBind(func() { once.Do(func() { close(bound) }) })
	if _, err := p.Room.LocalParticipant.PublishTrack(track, &lksdk.TrackPublicationOptions{Name: "microphone", Source: livekit.TrackSource_MICROPHONE}); err != nil {
		enc.Close()
		return err
	}
	select {
	case <-bound:
	case <-ctx.Done():
		enc.Close()
		return errors.New("the microphone track was never bound")
	}
	p.mic, p.enc = track, enc
	return nil
}

// Speak publishes pcm (16 kHz) on the microphone in real time, 20 ms a
// packet, followed by trail of silence.
func (p *Participant) Speak(ctx context.Context, pcm audio.PCM, trail time.Duration) error {
	if err := p.Publish(ctx); err != nil {
		return err
	}
	samples := audio.Resample(pcm.Samples, pcm.Rate, 16000)
	samples = append(samples, make([]int16, int(trail.Seconds()*16000))...)
	const frame = 320
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for i := 0; i < len(samples); i += frame {
		chunk := make([]int16, frame)
		copy(chunk, samples[i:min(i+frame, len(samples))])
		pkt, err := p.enc.Encode(chunk)
		if err != nil {
			return err
		}
		if err := p.mic.WriteSample(media.Sample{Data: append([]byte(nil), pkt...), Duration: 20 * time.Millisecond}, nil); err != nil {
			return err
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Leave disconnects and waits for the audio readers to stop.
func (p *Participant) Leave() {
	if p.Room == nil {
		return
	}
	p.Room.Disconnect()
	p.readers.Wait()
	if p.enc != nil {
		p.enc.Close()
		p.enc = nil
	}
	p.Room = nil
}
