package speech

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/trellisflow/trellis/cmd/trellis/internal/audio"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// needEngines fails the test when the recogniser cannot load, or flite
// or pocketsphinx_continuous (what its words are checked against) is
// missing, saying how to install them.
func needEngines(t *testing.T) {
	t.Helper()
	for _, p := range []string{"flite", "pocketsphinx_continuous"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Fatalf("%s is not installed: apt-get install flite pocketsphinx pocketsphinx-en-us (make deps installs them)", p)
		}
	}
	if err := CheckRecognizer(context.Background()); err != nil {
		t.Fatalf("%v (make deps installs it)", err)
	}
}

var spoken sync.Map // by voice and text

// utterance speaks text with a flite voice, at 16 kHz.
func utterance(t *testing.T, voice, text string) audio.PCM {
	t.Helper()
	if pcm, ok := spoken.Load(voice + "\x00" + text); ok {
		return pcm.(audio.PCM)
	}
	out := filepath.Join(t.TempDir(), "say.wav")
	if b, err := exec.Command("flite", "-voice", voice, "-t", text, "-o", out).CombinedOutput(); err != nil {
		t.Fatalf("flite: %v: %s", err, b)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pcm, err := audio.ReadWAV(f)
	if err != nil {
		t.Fatal(err)
	}
	pcm = audio.PCM{Rate: 16000, Samples: audio.Resample(pcm.Samples, pcm.Rate, 16000)}
	spoken.Store(voice+"\x00"+text, pcm)
	return pcm
}

var heardAlone sync.Map // by the recording: what pocketsphinx_continuous hears

// continuous is what a new pocketsphinx_continuous process hears.
func continuous(t *testing.T, pcm audio.PCM) string {
	t.Helper()
	key := string(pcm.WAV())
	if s, ok := heardAlone.Load(key); ok {
		return s.(string)
	}
	in := filepath.Join(t.TempDir(), "in.wav")
	if err := os.WriteFile(in, pcm.WAV(), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("pocketsphinx_continuous", "-infile", in, "-logfn", os.DevNull).Output()
	if err != nil {
		t.Fatalf("pocketsphinx_continuous: %v", err)
	}
	s := strings.Join(strings.Fields(string(out)), " ")
	heardAlone.Store(key, s)
	return s
}

// children are the test process's child processes.
func children(t *testing.T) []int {
	t.Helper()
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var pids []int
	for _, s := range stats {
		b, err := os.ReadFile(s)
		if err != nil {
			continue // gone
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(os.Getpid()) {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(s)))
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids)
	return pids
}

// settled waits until the recogniser pid has reaped the fork that
// decoded its last utterance: the fork says the words before it ends, so
// a transcription returns while it may still be there, and a fork seen
// after settled is the next utterance's.
func settled(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) { // a bound against a hang
		if len(kids(pid)) == 0 {
			return
		}
	}
	t.Fatalf("the recogniser %d never reaped its last utterance's decoding: %v", pid, kids(pid))
}

// decoding waits until the recogniser pid has forked the decoding of
// an utterance (settled before it started), and returns that fork.
func decoding(t *testing.T, pid int) int {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		if k := kids(pid); len(k) > 0 {
			return k[0]
		}
	}
	t.Fatal("the recogniser never started decoding")
	return 0
}

var phrases = []struct{ voice, text string }{
	{"kal16", "I built a compiler for a small language in Go, and I tested it well."},
	{"rms", "Tell me about the hardest bug you fixed."},
	{"kal16", "I maintain a Go service that indexes logs."},
	{"awb", "I keep a search index fresh."},
}

// TestRecognizerStaysLoaded: one decoder process, started at the first
// transcription, hears utterance after utterance, each word for word as
// a new pocketsphinx_continuous process hears it (nothing of one
// utterance colours the next); Close stops it, and a transcription
// after Close fails.
func TestRecognizerStaysLoaded(t *testing.T) {
	needEngines(t)
	o := NewOffline()
	defer o.Close()
	if c := children(t); len(c) != 0 {
		t.Fatalf("a recogniser before any transcription: %v", c)
	}
	ctx := context.Background()
	var first []int
	for _, p := range phrases {
		pcm := utterance(t, p.voice, p.text)
		want := continuous(t, pcm)
		got, err := o.recognize(ctx, pcm)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s %q: the engine heard %q, pocketsphinx_continuous %q", p.voice, p.text, got, want)
		}
		c := children(t)
		if first == nil {
			first = c
		}
		if len(c) != 1 || !slices.Equal(c, first) {
			t.Fatalf("the recogniser's processes were %v and are %v: one, kept", first, c)
		}
	}
	if got, err := o.recognize(ctx, audio.PCM{Rate: 16000, Samples: make([]int16, 16000)}); err != nil || got != "" {
		t.Errorf("a second of silence: %q, %v", got, err)
	}
	o.Close()
	if c := children(t); len(c) != 0 {
		t.Errorf("processes left after Close: %v", c)
	}
	if _, err := o.recognize(ctx, utterance(t, "rms", "Hello.")); !errors.Is(err, errClosed) {
		t.Errorf("a transcription after Close: %v", err)
	}
	if c := children(t); len(c) != 0 {
		t.Errorf("a transcription after Close started %v", c)
	}
}

// TestRecognizerRestarts: a decoder killed while it waits is replaced
// at the next transcription, which is heard; one killed while it
// decodes is replaced, and the utterance decoded again.
func TestRecognizerRestarts(t *testing.T) {
	needEngines(t)
	o := NewOffline()
	defer o.Close()
	ctx := context.Background()
	pcm := utterance(t, "rms", phrases[1].text)
	want := continuous(t, pcm)
	if got, err := o.recognize(ctx, pcm); err != nil || got != want {
		t.Fatalf("heard %q, %v; want %q", got, err, want)
	}
	killed := children(t)
	if len(killed) != 1 {
		t.Fatalf("recognisers: %v", killed)
	}
	if err := syscall.Kill(killed[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if got, err := o.recognize(ctx, pcm); err != nil || got != want {
		t.Fatalf("after the recogniser was killed: heard %q, %v; want %q", got, err, want)
	}
	now := children(t)
	if len(now) != 1 || now[0] == killed[0] {
		t.Fatalf("recognisers were %v, are %v: one, new", killed, now)
	}

	// killed mid-decoding: the utterance is decoded again by a new one
	long := audio.PCM{Rate: 16000, Samples: slices.Concat(pcm.Samples, pcm.Samples)}
	wantLong := continuous(t, long)
	type heard struct {
		text string
		err  error
	}
	done := make(chan heard, 1)
	settled(t, now[0])
	go func() { text, err := o.recognize(ctx, long); done <- heard{text, err} }()
	decoding(t, now[0])
	if err := syscall.Kill(-now[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if h := <-done; h.err != nil || h.text != wantLong {
		t.Errorf("a transcription whose recogniser was killed decoding: heard %q, %v; want %q", h.text, h.err, wantLong)
	}
	if again := children(t); len(again) != 1 || again[0] == now[0] {
		t.Fatalf("recognisers were %v, are %v: one, new", now, again)
	}
}

// TestRecognizerConcurrent: transcriptions at once each get a decoder
// (no more than one per core) and are each heard as alone.
func TestRecognizerConcurrent(t *testing.T) {
	needEngines(t)
	o := NewOffline()
	defer o.Close()
	pcms := make([]audio.PCM, len(phrases))
	wants := make([]string, len(phrases))
	for i, p := range phrases {
		pcms[i] = utterance(t, p.voice, p.text)
		wants[i] = continuous(t, pcms[i])
	}
	var wg sync.WaitGroup
	for i := range pcms {
		wg.Go(func() {
			if got, err := o.recognize(context.Background(), pcms[i]); err != nil || got != wants[i] {
				t.Errorf("%q at once with others: heard %q, %v; want %q", phrases[i].text, got, err, wants[i])
			}
		})
	}
	wg.Wait()
	if c := children(t); len(c) < 1 || len(c) > runtime.NumCPU() {
		t.Errorf("recognisers: %v, for %d cores", c, runtime.NumCPU())
	}
}

// TestRecognizerCancelled: a transcription whose context ends while it
// decodes returns, and by then its decoder is killed and reaped (no
// process of it is left, not even a zombie), and the decoding it forked
// killed; the next is heard, by a new decoder.
func TestRecognizerCancelled(t *testing.T) {
	needEngines(t)
	o := NewOffline()
	defer o.Close()
	pcm := utterance(t, "kal16", phrases[0].text)
	want := continuous(t, pcm)
	if got, err := o.recognize(context.Background(), pcm); err != nil || got != want {
		t.Fatalf("heard %q, %v; want %q", got, err, want)
	}
	loaded := children(t)
	if len(loaded) != 1 {
		t.Fatalf("recognisers: %v", loaded)
	}
	// the context ends once the recogniser decodes this utterance: its
	// fork for the last one is gone first, so the fork seen is this one's
	settled(t, loaded[0])
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	forked := make(chan int, 1)
	go func() {
		forked <- decoding(t, loaded[0])
		cancel()
	}()
	long := audio.PCM{Rate: 16000, Samples: slices.Concat(pcm.Samples, pcm.Samples, pcm.Samples, pcm.Samples)}
	if _, err := o.recognize(ctx, long); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled transcription: %v", err)
	}
	// read at once: the recogniser is reaped before the call returns
	if c := children(t); len(c) != 0 {
		t.Errorf("the cancelled transcription's recogniser is left: %s", describe(c))
	}
	// its decoding (a child of the recogniser, now init's) was killed
	// with it: the kernel ends it (a bound only against a hang)
	fork := <-forked
	for deadline := time.Now().Add(30 * time.Second); alive(fork, loaded[0]); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the cancelled transcription's decoding %d is left: %s", fork, describe([]int{fork}))
		}
	}
	if got, err := o.recognize(context.Background(), pcm); err != nil || got != want {
		t.Fatalf("after a cancelled transcription: heard %q, %v; want %q", got, err, want)
	}
	if c := children(t); len(c) != 1 || c[0] == loaded[0] {
		t.Errorf("recognisers were %v, are %v: one, new", loaded, c)
	}
}

// alive reports whether pid runs in process group pgid: its /proc entry
// is there, not a zombie's, and of that group (not a later process given
// the number).
func alive(pid, pgid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) state ppid pgrp ...
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) > 2 && f[0] != "Z" && f[2] == strconv.Itoa(pgid)
}

// describe is each pid with its state and command line, for a failure.
func describe(pids []int) string {
	var out []string
	for _, pid := range pids {
		stat, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		out = append(out, fmt.Sprintf("%d (%s) %q", pid, strings.TrimSpace(string(stat)), strings.ReplaceAll(string(cmdline), "\x00", " ")))
	}
	return strings.Join(out, "; ")
}

// kids are a process's children.
func kids(pid int) []int {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(pid) + "/children")
	var out []int
	for _, f := range strings.Fields(string(b)) {
		n, _ := strconv.Atoi(f)
		out = append(out, n)
	}
	return out
}

// speculating waits until the recogniser pid's decoding has forked the
// finishing of its utterance, other than not, and returns that fork.
func speculating(t *testing.T, pid, not int) int {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		for _, d := range kids(pid) {
			if s := kids(d); len(s) == 1 && s[0] != not {
				return s[0]
			}
		}
	}
	t.Fatal("the decoding never finished its utterance at a pause")
	return 0
}

// TestRecognizerHearsAsSpoken: an utterance that comes in pieces, with
// pauses, is heard word for word as pocketsphinx_continuous hears it
// whole: at a pause the decoding finishes the utterance as it stands, in
// a fork, which the audio that follows drops and the end takes.
func TestRecognizerHearsAsSpoken(t *testing.T) {
	needEngines(t)
	o := NewOffline()
	defer o.Close()
	first := utterance(t, "rms", phrases[1].text)
	if _, err := o.recognize(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	loaded := children(t)
	if len(loaded) != 1 {
		t.Fatalf("recognisers: %v", loaded)
	}
	pcm := utterance(t, "kal16", phrases[0].text)
	want := continuous(t, pcm)
	pieces := make(chan []int16)
	type heard struct {
		text string
		err  error
	}
	done := make(chan heard, 1)
	go func() {
		var rest []int16
		text, err := o.hear(context.Background(), func(buf []int16) (int, error) {
			if len(rest) == 0 {
				var ok bool
				if rest, ok = <-pieces; !ok {
					return 0, io.EOF
				}
			}
			n := copy(buf, rest)
			rest = rest[n:]
			return n, nil
		})
		done <- heard{text, err}
	}()
	half := len(pcm.Samples) / 2
	for s := pcm.Samples[:half]; len(s) > 0; s = s[min(len(s), 320):] {
		pieces <- s[:min(len(s), 320)]
	}
	dropped := speculating(t, loaded[0], 0)
	for s := pcm.Samples[half:]; len(s) > 0; s = s[min(len(s), 320):] {
		pieces <- s[:min(len(s), 320)]
	}
	speculating(t, loaded[0], dropped)
	if _, err := os.Stat("/proc/" + strconv.Itoa(dropped)); err == nil {
		if b, _ := os.ReadFile("/proc/" + strconv.Itoa(dropped) + "/stat"); !strings.Contains(string(b), ") Z") {
			t.Errorf("the finishing at the first pause %d was not dropped when audio followed", dropped)
		}
	}
	close(pieces)
	if h := <-done; h.err != nil || h.text != want {
		t.Errorf("heard in pieces with pauses: %q, %v; whole, pocketsphinx_continuous hears %q", h.text, h.err, want)
	}
	if got, err := o.recognize(context.Background(), first); err != nil || got != continuous(t, first) {
		t.Errorf("the next utterance: %q, %v; want %q", got, err, continuous(t, first))
	}
}
