package voice

import (
	"testing"
	"time"
)

// The silence between a caller's packets is what the sender's clock
// says, not how late they came: packets a loaded machine held up for
// less than the silence that ends an utterance add none; a pause the
// sender sent nothing for (DTX) is pushed when the next packet comes;
// and a caller silent for longer than an utterance's end passes as
// silence as the time goes, so the utterance ends.
func TestQuietClock(t *testing.T) {
	const rate = 16000
	frame := rate / 50 // 20 ms
	stamp := func(ms int) uint32 { return uint32(ms * 48) }
	at := time.Unix(1000, 0)
	ms := func(n int) time.Time { return at.Add(time.Duration(n) * time.Millisecond) }

	q := newQuietClock(at, 700*time.Millisecond, rate)
	if n := q.arrived(ms(0), stamp(0), 0); n != 0 {
		t.Fatalf("the first packet: %d frames of silence", n)
	}
	q.decoded(frame)
	// a packet 20 ms of the sender's clock later, held up 600 ms
	for _, idle := range []int{100, 300, 500, 600} {
		if n := q.idle(ms(idle)); n != 0 {
			t.Fatalf("idle %d ms, packets late: %d frames of silence", idle, n)
		}
	}
	if n := q.arrived(ms(620), stamp(20), 0); n != 0 {
		t.Fatalf("a late packet: %d frames of silence before it", n)
	}
	q.decoded(frame)
	// the sender sent nothing for 300 ms (DTX), and the packet came late
	if n := q.arrived(ms(1000), stamp(340), 0); n != 15 {
		t.Fatalf("300 ms the sender sent nothing for: %d frames of silence, want 15", n)
	}
	q.decoded(frame)
	// two packets lost and concealed: no silence for them
	if n := q.arrived(ms(1060), stamp(400), 2*frame); n != 0 {
		t.Fatalf("concealed packets: %d frames of silence", n)
	}
	q.decoded(frame)
	// out of order: no silence
	if n := q.arrived(ms(1080), stamp(380), 0); n != 0 {
		t.Fatalf("a packet out of order: %d frames of silence", n)
	}
	q.decoded(frame)
	// the caller goes quiet: nothing before the silence that ends an
	// utterance, then the time passes as silence as it goes
	if n := q.idle(ms(1080 + 699)); n != 0 {
		t.Fatalf("quiet for less than an utterance's end: %d frames", n)
	}
	if n := q.idle(ms(1080 + 700)); n != 35 {
		t.Fatalf("quiet for an utterance's end: %d frames, want 35", n)
	}
	if n := q.idle(ms(1080 + 760)); n != 3 {
		t.Fatalf("60 ms more: %d frames, want 3", n)
	}
	// when the caller comes back, the silence passed is not pushed twice
	if n := q.arrived(ms(2000), stamp(2000), 0); n != 0 {
		t.Fatalf("after silence passed as time went: %d frames more", n)
	}
}
