package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A revision to compare with is a commit of the repository, never an
// option of the git commands that export it.
func TestBuildRevisionTakesOnlyCommits(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out.tar")
	for _, rev := range []string{"--output=" + out, "no-such-revision"} {
		_, err := buildRevision(context.Background(), rev, dir)
		if err == nil || !strings.Contains(err.Error(), "not a commit") {
			t.Errorf("%s: %v", rev, err)
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("an option given as the revision wrote a file")
	}
}
