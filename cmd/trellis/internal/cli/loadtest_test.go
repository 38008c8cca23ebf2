package cli

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// A revision to compare with is a commit of the repository, never an
// option of the git commands that export it.
func TestBuildRevisionTakesOnlyCommits(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out.tar")
	for _, rev := range []string{"--output=" + out, "no-such-revision"} {
		_, _, err := buildRevision(context.Background(), rev, dir)
		if err == nil || !strings.Contains(err.Error(), "not a commit") {
			t.Errorf("%s: %v", rev, err)
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("an option given as the revision wrote a file")
	}
}

// Each simulated person is another candidate: the ids the values hold
// become the thread's, and the values given are left as they were.
func TestEachThreadIsAnotherPerson(t *testing.T) {
	values := map[string]any{"user_id": "ada", "interview_id": "demo-001", "resume_id": "r1"}
	got := person(values, "load-7")
	want := map[string]any{"user_id": "load-7", "interview_id": "load-7", "resume_id": "r1"}
	if !reflect.DeepEqual(got, want) || values["user_id"] != "ada" {
		t.Fatalf("person: %v (values now %v)", got, values)
	}
	if got := person(map[string]any{"name": "x"}, "load-1"); !reflect.DeepEqual(got, map[string]any{"name": "x"}) {
		t.Fatalf("values without the ids: %v", got)
	}
}

// A revision compared with serves its own copy of the flows and values
// named: the same path inside its source tree, when it has one; a path
// outside the checkout, or one the revision lacks, is taken as given.
func TestTheRevisionServesItsOwnFlows(t *testing.T) {
	src := t.TempDir()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	top := filepath.Dir(filepath.Dir(filepath.Dir(filepath.Dir(wd)))) // the checkout, above cmd/trellis/internal/cli
	rel, err := filepath.Rel(top, wd)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(src, rel, "then"), 0o755); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	for path, want := range map[string]string{
		"then":                           filepath.Join(src, rel, "then"),
		filepath.Join(wd, "then"):        filepath.Join(src, rel, "then"),
		"not-then":                       "not-then",
		outside:                          outside,
		filepath.Join(wd, "../../../.."): src,
	} {
		if got := revisionPath(src, path); got != want {
			t.Errorf("revisionPath(%s) = %s, want %s", path, got, want)
		}
	}
}

// A turn's model time counts calls side by side once: the time their
// spans cover together.
func TestModelTimeCountsOverlapsOnce(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond) }
	for _, c := range []struct {
		spans []span
		want  time.Duration
	}{
		{nil, 0},
		{[]span{{at(0), at(200)}}, 200 * time.Millisecond},
		{[]span{{at(0), at(200)}, {at(250), at(450)}}, 400 * time.Millisecond},
		{[]span{{at(300), at(500)}, {at(0), at(200)}, {at(100), at(250)}}, 450 * time.Millisecond},
		{[]span{{at(0), at(500)}, {at(100), at(200)}, {at(500), at(600)}}, 600 * time.Millisecond},
	} {
		if got := covered(c.spans); got != c.want {
			t.Errorf("%v: %s, want %s", c.spans, got, c.want)
		}
	}
}
