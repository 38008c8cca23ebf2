package audio

import (
	"bytes"
	"math"
	"slices"
	"testing"
	"time"
)

// tone is f Hz at amplitude amp for d, at rate.
func tone(rate int, f float64, amp float64, d time.Duration) []int16 {
	n := int(d.Seconds() * float64(rate))
	out := make([]int16, n)
	for i := range out {
		out[i] = int16(amp * 32767 * math.Sin(2*math.Pi*f*float64(i)/float64(rate)))
	}
	return out
}

func silence(rate int, d time.Duration) []int16 { return make([]int16, int(d.Seconds()*float64(rate))) }

func TestWAVRoundTrip(t *testing.T) {
	in := PCM{Rate: 16000, Samples: tone(16000, 440, 0.5, 100*time.Millisecond)}
	out, err := ReadWAV(bytes.NewReader(in.WAV()))
	if err != nil {
		t.Fatal(err)
	}
	if out.Rate != 16000 || len(out.Samples) != len(in.Samples) || out.Samples[17] != in.Samples[17] {
		t.Fatalf("got rate %d, %d samples", out.Rate, len(out.Samples))
	}
	if _, err := ReadWAV(bytes.NewReader([]byte("RIFF....WAVEjunk"))); err == nil {
		t.Fatal("a truncated WAV was read")
	}
}

func TestResample(t *testing.T) {
	in := tone(48000, 300, 0.5, time.Second)
	out := Resample(in, 48000, 16000)
	if len(out) != 16000 {
		t.Fatalf("48k→16k gave %d samples", len(out))
	}
	if l := Level(out); l < -12 || l > -6 {
		t.Fatalf("a 300 Hz tone lost its level: %.1f dBFS", l)
	}
	if up := Resample(out, 16000, 24000); len(up) != 24000 {
		t.Fatalf("16k→24k gave %d samples", len(up))
	}
}

// TestOpusRoundTrip encodes and decodes with the system's libopus; it
// fails (as every voice test does) when the library is not installed.
func TestOpusRoundTrip(t *testing.T) {
	if err := OpusAvailable(); err != nil {
		t.Fatal(err)
	}
	for _, rate := range []int{16000, 48000} {
		enc, err := NewEncoder(rate, 32000)
		if err != nil {
			t.Fatal(err)
		}
		dec, err := NewDecoder(16000)
		if err != nil {
			t.Fatal(err)
		}
		in := tone(rate, 400, 0.4, time.Second)
		var out []int16
		frame := rate / 50
		for i := 0; i+frame <= len(in); i += frame {
			pkt, err := enc.Encode(in[i : i+frame])
			if err != nil {
				t.Fatal(err)
			}
			pcm, err := dec.Decode(pkt)
			if err != nil {
				t.Fatal(err)
			}
			if len(pcm) != 320 {
				t.Fatalf("a 20 ms packet decoded to %d samples at 16 kHz", len(pcm))
			}
			out = append(out, pcm...)
		}
		if lost, err := dec.Decode(nil); err != nil || len(lost) != 320 {
			t.Fatalf("concealing a lost frame: %d samples, %v", len(lost), err)
		}
		// the codec's delay aside, the tone comes back at its level
		if l := Level(out[1600:]); l < -13 || l > -7 {
			t.Fatalf("rate %d: decoded level %.1f dBFS, want about -10", rate, l)
		}
		enc.Close()
		dec.Close()
		enc.Close() // twice is harmless
		if _, err := enc.Encode(in[:frame]); err == nil {
			t.Fatal("a closed encoder encoded")
		}
	}
}

func TestVADFindsUtterances(t *testing.T) {
	const rate = 16000
	var stream []int16
	stream = append(stream, silence(rate, 500*time.Millisecond)...)
	stream = append(stream, tone(rate, 200, 0.3, 40*time.Millisecond)...) // a click
	stream = append(stream, silence(rate, 500*time.Millisecond)...)
	// speech with a short pause inside it: one utterance
	stream = append(stream, tone(rate, 220, 0.3, 800*time.Millisecond)...)
	stream = append(stream, silence(rate, 300*time.Millisecond)...)
	stream = append(stream, tone(rate, 330, 0.3, 600*time.Millisecond)...)
	stream = append(stream, silence(rate, time.Second)...)
	// a second utterance over background noise
	noise := tone(rate, 3000, 0.003, 2*time.Second)
	speech := tone(rate, 250, 0.2, 700*time.Millisecond)
	for i := range speech {
		speech[i] += noise[i]
	}
	stream = append(stream, noise[:rate/2]...)
	stream = append(stream, speech...)
	stream = append(stream, noise...)

	v := NewVAD(rate, VADConfig{Silence: 500 * time.Millisecond})
	var starts []time.Duration
	var utts []PCM
	for i := 0; i+320 <= len(stream); i += 320 {
		switch v.Push(stream[i : i+320]) {
		case SpeechStart:
			starts = append(starts, time.Duration(i)*time.Second/rate)
		case SpeechEnd:
			utts = append(utts, v.Utterance())
		}
	}
	if len(utts) != 2 || len(starts) != 2 {
		t.Fatalf("found %d starts (%v) and %d utterances, want 2 of each", len(starts), starts, len(utts))
	}
	if d := utts[0].Duration(); d < 1700*time.Millisecond || d > 2300*time.Millisecond {
		t.Errorf("first utterance lasts %v, want about 2s (its speech and pre-roll)", d)
	}
	if starts[0] < 1040*time.Millisecond || starts[0] > 1200*time.Millisecond {
		t.Errorf("speech started at %v, want just after 1.04s", starts[0])
	}
}

// TestVADSettled: what the detector says an open utterance keeps only
// grows, is always the start of the utterance that ends, and is all of
// it at the end, so a recogniser fed it as it grows hears the utterance
// exactly; a long pause that speech follows is kept.
func TestVADSettled(t *testing.T) {
	const rate = 16000
	var stream []int16
	stream = append(stream, silence(rate, 300*time.Millisecond)...)
	stream = append(stream, tone(rate, 220, 0.3, 800*time.Millisecond)...)
	stream = append(stream, silence(rate, 600*time.Millisecond)...) // short of the threshold
	stream = append(stream, tone(rate, 330, 0.3, 500*time.Millisecond)...)
	stream = append(stream, silence(rate, time.Second)...)
	v := NewVAD(rate, VADConfig{Silence: 700 * time.Millisecond})
	var fed []int16
	var utts []PCM
	for i := 0; i+320 <= len(stream); i += 320 {
		ev := v.Push(stream[i : i+320])
		if v.Speaking() || ev == SpeechEnd {
			s := v.Settled()
			if len(s) < len(fed) || !slices.Equal(s[:len(fed)], fed) {
				t.Fatalf("at %v the settled utterance (%d samples) does not continue what was settled (%d)", time.Duration(i)*time.Second/rate, len(s), len(fed))
			}
			fed = append(fed, s[len(fed):]...)
		}
		if ev == SpeechEnd {
			utts = append(utts, v.Utterance())
		}
	}
	if len(utts) != 1 {
		t.Fatalf("%d utterances, want 1", len(utts))
	}
	if !slices.Equal(fed, utts[0].Samples) {
		t.Errorf("settled as it grew: %d samples; the utterance: %d", len(fed), len(utts[0].Samples))
	}
	// pre-roll, 800ms, the pause, 500ms and 200ms of the silence after
	if d := utts[0].Duration(); d < 2000*time.Millisecond || d > 2500*time.Millisecond {
		t.Errorf("the utterance lasts %v, want its speech, its pause and 200ms of silence", d)
	}
}
