package audio

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"
)

// The Opus codec is the system's libopus, loaded when first used. Loading
// it at run time (rather than linking it through cgo) keeps the trellis
// command buildable anywhere with the Go toolchain alone: only the voice
// agent needs the library (Debian's libopus0), and says so when it is
// missing. No complete Opus implementation in Go exists to use instead.

// ErrNoOpus is returned when libopus cannot be loaded.
var ErrNoOpus = errors.New("the Opus codec (libopus) is not installed: apt-get install libopus0")

// libopus's constants (opus_defines.h).
const (
	opusOK              = 0
	opusApplicationVoIP = 2048
	opusSetBitrate      = 4002
)

var libopus struct {
	once sync.Once
	err  error

	encoderCreate, encode, encoderDestroy, encoderCtl uintptr
	decoderCreate, decode, decoderDestroy             uintptr
}

func loadOpus() error {
	libopus.once.Do(func() {
		var h uintptr
		var err error
		for _, name := range []string{"libopus.so.0", "libopus.so", "libopus.0.dylib", "libopus.dylib"} {
			if h, err = dlopen(name); err == nil {
				break
			}
		}
		if err != nil {
			libopus.err = fmt.Errorf("%w (%v)", ErrNoOpus, err)
			return
		}
		for _, s := range []struct {
			name string
			fn   *uintptr
		}{
			{"opus_encoder_create", &libopus.encoderCreate},
			{"opus_encode", &libopus.encode},
			{"opus_encoder_destroy", &libopus.encoderDestroy},
			{"opus_encoder_ctl", &libopus.encoderCtl},
			{"opus_decoder_create", &libopus.decoderCreate},
			{"opus_decode", &libopus.decode},
			{"opus_decoder_destroy", &libopus.decoderDestroy},
		} {
			if *s.fn, err = dlsym(h, s.name); err != nil {
				libopus.err = fmt.Errorf("%w (%v)", ErrNoOpus, err)
				return
			}
		}
	})
	return libopus.err
}

// OpusAvailable reports whether libopus can be loaded, and why not.
func OpusAvailable() error { return loadOpus() }

// opusErrors are libopus's error codes' meanings (opus_strerror's).
var opusErrors = map[int32]string{-1: "invalid argument", -2: "buffer too small", -3: "internal error",
	-4: "corrupted stream", -5: "request not implemented", -6: "invalid state", -7: "memory allocation failed"}

func opusError(code int32) error {
	if msg, ok := opusErrors[code]; ok {
		return fmt.Errorf("opus: %s", msg)
	}
	return fmt.Errorf("opus: error %d", code)
}

// Encoder encodes mono 16-bit PCM into Opus packets. It is not safe for
// concurrent use.
type Encoder struct {
	st   uintptr
	rate int
	buf  []byte
}

// NewEncoder returns an encoder of mono audio at rate (8000, 12000, 16000,
// 24000 or 48000), tuned for speech, at bitrate bits per second (0: the
// codec's default for the rate).
func NewEncoder(rate, bitrate int) (*Encoder, error) {
	if err := loadOpus(); err != nil {
		return nil, err
	}
	var code int32
	st, _, _ := syscallN(libopus.encoderCreate, uintptr(rate), 1, opusApplicationVoIP, uintptr(unsafe.Pointer(&code)))
	if code != opusOK || st == 0 {
		return nil, opusError(code)
	}
	e := &Encoder{st: st, rate: rate, buf: make([]byte, 1500)}
	if bitrate > 0 {
		// opus_encoder_ctl is variadic; its one integer argument is passed
		// as any other on the platforms purego supports
		if r, _, _ := syscallN(libopus.encoderCtl, st, opusSetBitrate, uintptr(bitrate)); int32(r) != opusOK {
			e.Close()
			return nil, opusError(int32(r))
		}
	}
	return e, nil
}

// Rate is the sample rate the encoder takes.
func (e *Encoder) Rate() int { return e.rate }

// Encode encodes one frame (2.5, 5, 10, 20, 40 or 60 ms of samples) and
// returns the packet, valid until the next call.
func (e *Encoder) Encode(pcm []int16) ([]byte, error) {
	if e.st == 0 {
		return nil, errors.New("opus: encoder closed")
	}
	if len(pcm) == 0 {
		return nil, errors.New("opus: empty frame")
	}
	n, _, _ := syscallN(libopus.encode, e.st, uintptr(unsafe.Pointer(&pcm[0])), uintptr(len(pcm)),
		uintptr(unsafe.Pointer(&e.buf[0])), uintptr(len(e.buf)))
	if int32(n) < 0 {
		return nil, opusError(int32(n))
	}
	return e.buf[:int32(n)], nil
}

// Close frees the encoder.
func (e *Encoder) Close() {
	if e.st != 0 {
		syscallN(libopus.encoderDestroy, e.st)
		e.st = 0
	}
}

// Decoder decodes Opus packets into mono 16-bit PCM. It is not safe for
// concurrent use.
type Decoder struct {
	st   uintptr
	rate int
	pcm  []int16
}

// NewDecoder returns a decoder to mono audio at rate.
func NewDecoder(rate int) (*Decoder, error) {
	if err := loadOpus(); err != nil {
		return nil, err
	}
	var code int32
	st, _, _ := syscallN(libopus.decoderCreate, uintptr(rate), 1, uintptr(unsafe.Pointer(&code)))
	if code != opusOK || st == 0 {
		return nil, opusError(code)
	}
	// 120 ms is the longest packet
	return &Decoder{st: st, rate: rate, pcm: make([]int16, rate*120/1000)}, nil
}

// Rate is the sample rate the decoder produces.
func (d *Decoder) Rate() int { return d.rate }

// Decode decodes a packet and returns its samples, valid until the next
// call. A nil packet conceals one lost 20 ms frame.
func (d *Decoder) Decode(packet []byte) ([]int16, error) {
	if d.st == 0 {
		return nil, errors.New("opus: decoder closed")
	}
	var data, size uintptr
	frame := len(d.pcm)
	if len(packet) > 0 {
		data, size = uintptr(unsafe.Pointer(&packet[0])), uintptr(len(packet))
	} else {
		frame = d.rate / 50
	}
	n, _, _ := syscallN(libopus.decode, d.st, data, size, uintptr(unsafe.Pointer(&d.pcm[0])), uintptr(frame), 0)
	if int32(n) < 0 {
		return nil, opusError(int32(n))
	}
	return d.pcm[:int32(n)], nil
}

// Close frees the decoder.
func (d *Decoder) Close() {
	if d.st != 0 {
		syscallN(libopus.decoderDestroy, d.st)
		d.st = 0
	}
}
