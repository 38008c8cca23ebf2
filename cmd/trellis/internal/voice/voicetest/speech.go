package voicetest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/cmd/trellis/internal/audio"
)

// Say speaks text with flite's voice (kal16, rms, slt, awb) and returns
// the recording at 16 kHz.
func Say(t testing.TB, voice, text string) audio.PCM {
	t.Helper()
	flite := Need(t, "flite", "flite")
	out := filepath.Join(t.TempDir(), "say.wav")
	if b, err := exec.Command(flite, "-voice", voice, "-t", text, "-o", out).CombinedOutput(); err != nil {
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
	pcm.Samples = audio.Resample(pcm.Samples, pcm.Rate, 16000)
	pcm.Rate = 16000
	return pcm
}

// Recognize transcribes audio with pocketsphinx, as words in lower case.
func Recognize(t testing.TB, pcm audio.PCM) string {
	t.Helper()
	ps := Need(t, "pocketsphinx_continuous", "pocketsphinx pocketsphinx-en-us")
	in := filepath.Join(t.TempDir(), "heard.wav")
	pcm.Samples = audio.Resample(pcm.Samples, pcm.Rate, 16000)
	pcm.Rate = 16000
	if err := os.WriteFile(in, pcm.WAV(), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	cmd := exec.Command(ps, "-infile", in, "-logfn", "/dev/null")
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("pocketsphinx: %v: %s", err, errb.String())
	}
	return strings.Join(strings.Fields(out.String()), " ")
}

var wordRE = regexp.MustCompile(`[a-z0-9']+`)

// Words splits text into lower-case words.
func Words(text string) []string { return wordRE.FindAllString(strings.ToLower(text), -1) }

// Overlap is the share of want's words found in got (each counted once).
func Overlap(want, got string) float64 {
	w := Words(want)
	if len(w) == 0 {
		return 0
	}
	have := map[string]int{}
	for _, g := range Words(got) {
		have[g]++
	}
	n := 0
	for _, x := range w {
		if have[x] > 0 {
			have[x]--
			n++
		}
	}
	return float64(n) / float64(len(w))
}
