package voice_test

import (
	"slices"
	"testing"
	"time"

	"github.com/trellisflow/trellis/cmd/trellis/internal/voice"
	"github.com/trellisflow/trellis/cmd/trellis/internal/voice/voicetest"
	"github.com/trellisflow/trellis/runtime/api"
)

// BenchmarkSpokenTurn measures a spoken turn of the interview through a
// real LiveKit server, the offline speech engines and the API on SQLite,
// in its three stages: the end of the caller's utterance (detected after
// the silence threshold, 700ms, reported as silence-ms) to its
// transcript, the transcript to the flow's reply (the turn through the
// API), and the reply's text to its first audio packet published. The
// first is split in two: the end to the last of the utterance's audio
// handed to the recogniser (handover-ms), and that to the transcript
// (decode-ms, the recogniser's work left at the end and its answer).
// Each iteration speaks an answer and waits for the reply to be spoken.
// make bench-voice runs it.
func BenchmarkSpokenTurn(b *testing.B) {
	r := newRig(b)
	timings := make(chan voice.TurnTiming, 4)
	const silence = 700 * time.Millisecond
	r.agent(voice.Config{Silence: silence, OnTurn: func(tt voice.TurnTiming) { timings <- tt }})
	ctx := voicetest.Context(b, 30*time.Minute)
	r.interview(ctx, "bench", 100)
	sess := r.voice(ctx, "bench", api.VoiceRequest{})
	caller := voicetest.Join(b, sess.URL, sess.Token)
	if _, _, err := caller.Message(ctx, 0, voice.MsgReply); err != nil {
		b.Fatal(err)
	}
	if _, err := caller.WaitSpoken(ctx, 1500*time.Millisecond); err != nil {
		b.Fatal(err)
	}
	const said = "I built a compiler for a small language in Go, and I tested it well."
	answer := voicetest.Say(b, "kal16", said)
	var stt, handover, decode, reply, first []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		caller.ForgetAudio()
		if err := caller.Speak(ctx, answer, 1200*time.Millisecond); err != nil {
			b.Fatal(err)
		}
		var tt voice.TurnTiming
		select {
		case tt = <-timings:
		case <-ctx.Done():
			b.Fatal("no turn")
		}
		if o := voicetest.Overlap(said, tt.Transcript); o < 0.5 {
			b.Fatalf("%q was transcribed as %q", said, tt.Transcript)
		}
		if tt.Handover <= 0 {
			b.Fatalf("the utterance was not streamed to the recogniser: %+v", tt)
		}
		stt, reply, first = append(stt, tt.Transcribe), append(reply, tt.Reply), append(first, tt.FirstAudio)
		handover, decode = append(handover, tt.Handover), append(decode, tt.Transcribe-tt.Handover)
		if _, err := caller.WaitSpoken(ctx, 1200*time.Millisecond); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	for _, m := range []struct {
		name string
		d    []time.Duration
	}{{"silence", []time.Duration{silence}}, {"transcript", stt}, {"handover", handover}, {"decode", decode}, {"reply", reply}, {"first-audio", first}} {
		b.ReportMetric(ms(median(m.d)), m.name+"-ms")
	}
	b.Logf("per turn (median, max): end of speech (after %v of silence) → transcript %v %v (audio handed over %v %v, then decoded %v %v); transcript → reply %v %v; reply → first audio packet %v %v",
		silence, median(stt), slices.Max(stt), median(handover), slices.Max(handover), median(decode), slices.Max(decode),
		median(reply), slices.Max(reply), median(first), slices.Max(first))
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2].Round(10 * time.Microsecond)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
