// Package audio is the voice agent's signal processing: mono 16-bit PCM
// in WAV files, resampling, the Opus codec (the system's libopus) and a
// voice-activity detector that finds where an utterance ends.
package audio

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
)

// PCM is mono 16-bit audio at a sample rate.
type PCM struct {
	Rate    int
	Samples []int16
}

// Duration is how long the audio lasts.
func (p PCM) Duration() time.Duration {
	if p.Rate == 0 {
		return 0
	}
	return time.Duration(len(p.Samples)) * time.Second / time.Duration(p.Rate)
}

// WAV returns the audio as a WAV file.
func (p PCM) WAV() []byte {
	b := make([]byte, 44+2*len(p.Samples))
	copy(b, "RIFF")
	binary.LittleEndian.PutUint32(b[4:], uint32(36+2*len(p.Samples)))
	copy(b[8:], "WAVEfmt ")
	binary.LittleEndian.PutUint32(b[16:], 16)
	binary.LittleEndian.PutUint16(b[20:], 1) // PCM
	binary.LittleEndian.PutUint16(b[22:], 1) // mono
	binary.LittleEndian.PutUint32(b[24:], uint32(p.Rate))
	binary.LittleEndian.PutUint32(b[28:], uint32(2*p.Rate))
	binary.LittleEndian.PutUint16(b[32:], 2)
	binary.LittleEndian.PutUint16(b[34:], 16)
	copy(b[36:], "data")
	binary.LittleEndian.PutUint32(b[40:], uint32(2*len(p.Samples)))
	for i, s := range p.Samples {
		binary.LittleEndian.PutUint16(b[44+2*i:], uint16(s))
	}
	return b
}

// WAVReader reads the samples of a 16-bit PCM WAV stream as they arrive,
// mixing channels down to mono.
type WAVReader struct {
	r        *bufio.Reader
	Rate     int
	Channels int
	left     int64 // bytes of the data chunk not yet read (-1: to the end)
	frame    []byte
}

// ErrNotWAV is returned for a stream that is not 16-bit PCM WAV.
var ErrNotWAV = errors.New("not a 16-bit PCM WAV stream")

// NewWAVReader reads a WAV stream's header.
func NewWAVReader(r io.Reader) (*WAVReader, error) {
	br := bufio.NewReaderSize(r, 8192)
	var head [12]byte
	if _, err := io.ReadFull(br, head[:]); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotWAV, err)
	}
	if string(head[0:4]) != "RIFF" || string(head[8:12]) != "WAVE" {
		return nil, ErrNotWAV
	}
	w := &WAVReader{r: br}
	for {
		var ch [8]byte
		if _, err := io.ReadFull(br, ch[:]); err != nil {
			return nil, fmt.Errorf("%w: no data chunk", ErrNotWAV)
		}
		size := int64(binary.LittleEndian.Uint32(ch[4:]))
		switch string(ch[:4]) {
		case "fmt ":
			if size < 16 || size > 1<<16 {
				return nil, ErrNotWAV
			}
			f := make([]byte, size+size%2)
			if _, err := io.ReadFull(br, f); err != nil {
				return nil, ErrNotWAV
			}
			format, bits := binary.LittleEndian.Uint16(f[0:]), binary.LittleEndian.Uint16(f[14:])
			if format == 0xFFFE && size >= 26 { // WAVE_FORMAT_EXTENSIBLE: the subformat's first two bytes
				format = binary.LittleEndian.Uint16(f[24:])
			}
			if format != 1 || bits != 16 {
				return nil, fmt.Errorf("%w: format %d with %d bits", ErrNotWAV, format, bits)
			}
			w.Channels = int(binary.LittleEndian.Uint16(f[2:]))
			w.Rate = int(binary.LittleEndian.Uint32(f[4:]))
		case "data":
			if w.Rate == 0 || w.Channels == 0 {
				return nil, fmt.Errorf("%w: data before format", ErrNotWAV)
			}
			w.left = size
			// a streamed WAV whose length was unknown says 0 or the most
			if size == 0 || size >= 0x7FFFFFF0 {
				w.left = -1
			}
			w.frame = make([]byte, 2*w.Channels)
			return w, nil
		default:
			if _, err := br.Discard(int(size + size%2)); err != nil {
				return nil, ErrNotWAV
			}
		}
	}
}

// Read reads mono samples into buf and returns how many: at least one,
// and no more than have arrived; io.EOF at the end.
func (w *WAVReader) Read(buf []int16) (int, error) {
	n := 0
	for n < len(buf) {
		if w.left == 0 || n > 0 && w.r.Buffered() < len(w.frame) {
			break // the end, or what has arrived of a stream
		}
		if _, err := io.ReadFull(w.r, w.frame); err != nil {
			if n > 0 {
				return n, nil
			}
			if err == io.ErrUnexpectedEOF {
				err = io.EOF
			}
			return 0, err
		}
		if w.left > 0 {
			w.left -= int64(len(w.frame))
		}
		var sum int
		for c := 0; c < w.Channels; c++ {
			sum += int(int16(binary.LittleEndian.Uint16(w.frame[2*c:])))
		}
		buf[n] = int16(sum / w.Channels)
		n++
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

// ReadWAV reads a whole WAV file.
func ReadWAV(r io.Reader) (PCM, error) {
	w, err := NewWAVReader(r)
	if err != nil {
		return PCM{}, err
	}
	out := PCM{Rate: w.Rate}
	buf := make([]int16, 4096)
	for {
		n, err := w.Read(buf)
		out.Samples = append(out.Samples, buf[:n]...)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
	}
}

// Resample converts samples from one rate to another by linear
// interpolation, averaging neighbours first when the rate goes down so
// that what the new rate cannot hold does not fold back as noise. Speech
// survives it intact enough to be recognised.
func Resample(in []int16, from, to int) []int16 {
	if from == to || len(in) == 0 {
		return in
	}
	src := in
	if to < from {
		k := from / to
		if k > 1 {
			src = make([]int16, len(in))
			for i := range in {
				var sum, cnt int
				for j := i - k/2; j <= i+k/2; j++ {
					if j >= 0 && j < len(in) {
						sum += int(in[j])
						cnt++
					}
				}
				src[i] = int16(sum / cnt)
			}
		}
	}
	n := int(int64(len(src)) * int64(to) / int64(from))
	out := make([]int16, n)
	for i := range out {
		pos := float64(i) * float64(from) / float64(to)
		j := int(pos)
		frac := pos - float64(j)
		a := float64(src[j])
		b := a
		if j+1 < len(src) {
			b = float64(src[j+1])
		}
		out[i] = int16(a + (b-a)*frac)
	}
	return out
}

// OpusRate is the rate nearest to rate that Opus encodes directly, so that
// the common speech rates (8, 16, 24 and 48 kHz) need no resampling.
func OpusRate(rate int) int {
	for _, r := range []int{8000, 12000, 16000, 24000, 48000} {
		if rate == r {
			return r
		}
	}
	return 48000
}
