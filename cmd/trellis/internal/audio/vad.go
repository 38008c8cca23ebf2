package audio

import (
	"math"
	"time"
)

// VADConfig tunes the voice-activity detector.
type VADConfig struct {
	// Silence is how long the voice must stay quiet for an utterance to
	// end (default 700ms).
	Silence time.Duration
	// MinSpeech is how long the voice must sound for speech to start
	// (default 100ms): clicks and breaths are shorter.
	MinSpeech time.Duration
	// Threshold is how far above the noise floor a frame must be, in
	// decibels, to count as voiced (default 12).
	Threshold float64
	// Floor is the quietest level taken for the noise floor, in dBFS
	// (default -60): digital silence does not make every breath speech.
	Floor float64
	// PreRoll is the audio kept from before speech started (default
	// 300ms), so an utterance's first syllable is not cut.
	PreRoll time.Duration
	// MaxUtterance ends an utterance that goes on without a pause
	// (default 30s).
	MaxUtterance time.Duration
}

func (c *VADConfig) defaults() {
	if c.Silence <= 0 {
		c.Silence = 700 * time.Millisecond
	}
	if c.MinSpeech <= 0 {
		c.MinSpeech = 100 * time.Millisecond
	}
	if c.Threshold <= 0 {
		c.Threshold = 12
	}
	if c.Floor == 0 {
		c.Floor = -60
	}
	if c.PreRoll <= 0 {
		c.PreRoll = 300 * time.Millisecond
	}
	if c.MaxUtterance <= 0 {
		c.MaxUtterance = 30 * time.Second
	}
}

// VAD finds utterances in a stream of frames: speech starts once enough
// voiced frames come close together, and the utterance ends once the
// voice has been quiet for the silence threshold. A frame is voiced when
// its level is well above the noise floor, which follows the quietest
// recent frames (see floorWindow). It is driven by the frames alone (no clock), so the same
// audio always gives the same utterances.
type VAD struct {
	cfg  VADConfig
	rate int

	floor    float64 // dBFS
	levels   []float64
	at       int
	voiced   time.Duration
	quiet    time.Duration
	speaking bool
	pre      []int16 // the last PreRoll of audio while not speaking
	utt      []int16
	quietN   int // the utterance's trailing unvoiced samples
	length   time.Duration
}

// VADEvent is what a frame changed.
type VADEvent int

const (
	// None: nothing changed.
	None VADEvent = iota
	// SpeechStart: speech began with this frame (an utterance is open).
	SpeechStart
	// SpeechEnd: the utterance ended; Utterance returns it.
	SpeechEnd
)

// NewVAD returns a detector of audio at rate.
func NewVAD(rate int, cfg VADConfig) *VAD {
	cfg.defaults()
	return &VAD{cfg: cfg, rate: rate, floor: cfg.Floor}
}

// Level is a frame's loudness in dBFS (-96 for silence).
func Level(frame []int16) float64 {
	if len(frame) == 0 {
		return -96
	}
	var sum float64
	for _, s := range frame {
		sum += float64(s) * float64(s)
	}
	rms := math.Sqrt(sum / float64(len(frame)))
	if rms < 1 {
		return -96
	}
	return 20 * math.Log10(rms/32768)
}

// floorWindow is how far back the noise floor looks: the quietest frame
// of the last two seconds, which in speech is a pause between words, and
// in a noisy room the noise.
const floorWindow = 2 * time.Second

// track keeps the levels of the last floorWindow and the floor they give.
func (v *VAD) track(level float64, d time.Duration) {
	n := max(1, int(floorWindow/max(d, time.Millisecond)))
	if len(v.levels) < n {
		v.levels = append(v.levels, level)
	} else {
		v.levels[v.at%len(v.levels)] = level
		v.at++
	}
	low := level
	for _, l := range v.levels {
		low = min(low, l)
	}
	v.floor = max(low, v.cfg.Floor)
}

// Speaking reports whether an utterance is open.
func (v *VAD) Speaking() bool { return v.speaking }

// Push takes the next frame (10 to 30 ms of audio) and says what changed.
func (v *VAD) Push(frame []int16) VADEvent {
	d := time.Duration(len(frame)) * time.Second / time.Duration(v.rate)
	level := Level(frame)
	v.track(level, d)
	voiced := level > v.floor+v.cfg.Threshold
	if !v.speaking {
		v.pre = append(v.pre, frame...)
		if keep := int(v.cfg.PreRoll.Seconds() * float64(v.rate)); len(v.pre) > keep {
			v.pre = v.pre[len(v.pre)-keep:]
		}
		if voiced {
			v.voiced += d
		} else if v.voiced > 0 {
			v.voiced = max(0, v.voiced-d)
		}
		if v.voiced >= v.cfg.MinSpeech {
			v.speaking, v.quiet = true, 0
			v.utt = append(v.utt[:0], v.pre...)
			v.length, v.quietN = v.Duration(v.utt), 0
			v.pre = v.pre[:0]
			return SpeechStart
		}
		return None
	}
	v.utt = append(v.utt, frame...)
	v.length += d
	if voiced {
		v.quiet, v.quietN = 0, 0
	} else {
		v.quiet += d
		v.quietN += len(frame)
	}
	if v.quiet >= v.cfg.Silence || v.length >= v.cfg.MaxUtterance {
		v.speaking, v.voiced, v.quiet = false, 0, 0
		return SpeechEnd
	}
	return None
}

// keepQuiet is the trailing silence an utterance keeps: enough for a
// recogniser to hear its last word end, no more.
const keepQuiet = 200 * time.Millisecond

// Settled returns the start of the open utterance that it keeps however
// it goes on: all of it but what trails beyond keepQuiet of silence
// (which is dropped if the utterance ends there). It only grows while
// the utterance is open, and is the whole utterance once it ends, so a
// recogniser can hear an utterance as it is spoken. The slice is the
// detector's: valid until the next Push.
func (v *VAD) Settled() []int16 {
	return v.utt[:len(v.utt)-max(0, v.quietN-int(keepQuiet.Seconds()*float64(v.rate)))]
}

// Utterance returns the utterance that just ended, without the trailing
// silence beyond keepQuiet, and forgets it.
func (v *VAD) Utterance() PCM {
	out := PCM{Rate: v.rate, Samples: append([]int16(nil), v.Settled()...)}
	v.utt, v.quietN = v.utt[:0], 0
	return out
}

// Duration is how long n samples last at the detector's rate.
func (v *VAD) Duration(s []int16) time.Duration {
	return time.Duration(len(s)) * time.Second / time.Duration(v.rate)
}

// Reset forgets any open utterance (the agent spoke over it, say).
func (v *VAD) Reset() {
	v.speaking, v.voiced, v.quiet, v.quietN = false, 0, 0, 0
	v.utt, v.pre = v.utt[:0], v.pre[:0]
}
