package sqlite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/store"
)

// smallDisk mounts a tmpfs of size (as mount's size= takes it) for the
// test, and returns its directory and a function that resizes it; it is
// unmounted when the test ends. Mounting needs root: without it the test
// is skipped, saying so.
func smallDisk(t *testing.T, size string) (string, func(size string)) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a full disk is a small tmpfs, and mounting one needs root")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount a tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("unmount the tmpfs: %v: %s", err, out)
		}
	})
	return dir, func(size string) {
		t.Helper()
		if out, err := exec.Command("mount", "-o", "remount,size="+size, dir).CombinedOutput(); err != nil {
			t.Fatalf("resize the tmpfs: %v: %s", err, out)
		}
	}
}

// A full disk fails a commit as Full, with nothing of it committed (the
// thread's head stays where it was, and the database stays whole); once
// space is given back, the same store commits again, by itself.
func TestAFullDiskFailsWritesUntilSpaceReturns(t *testing.T) {
	ctx := context.Background()
	dir, resize := smallDisk(t, "3m")
	s, err := Open(ctx, filepath.Join(dir, "full.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	big := strings.Repeat("x", 64<<10)
	cp := &store.Checkpoint{Thread: "t", Seq: 1, Source: store.SourceCreate, Time: time.Now(),
		Writes: []store.Write{{Field: "n", Version: 1, Value: ""}}}
	if err := s.Commit(ctx, cp); err != nil {
		t.Fatal(err)
	}
	var full error
	seq := uint64(1)
	for i := 0; i < 200 && full == nil; i++ {
		err := s.Commit(ctx, &store.Checkpoint{Thread: "t", Seq: seq + 1, Parent: seq, Source: store.SourceStep, Time: time.Now(),
			Writes: []store.Write{{Field: "n", Version: seq + 1, Value: fmt.Sprint(i, big)}}})
		switch {
		case err == nil:
			seq++
		case store.Classify(err) == store.Full:
			full = err
		default:
			t.Fatalf("commit %d: %v (%s), want it to succeed or find the disk full", seq+1, err, store.Classify(err))
		}
	}
	if full == nil {
		t.Fatal("200 commits of 64 KiB and the disk is not full")
	}
	t.Logf("after %d commits: %v", seq, full)
	// nothing of the failed commit is there, and reads go on
	head, err := s.Head(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if head.Seq != seq {
		t.Fatalf("the head is %d after the failed commit, want %d", head.Seq, seq)
	}
	// a run's record, a write of the catalog's, fails the same way
	if err := s.CreateThread(ctx, &store.ThreadRecord{ID: "t", Tenant: "a", Flow: "f", Created: time.Now(), Metadata: map[string]string{"pad": big}}); store.Classify(err) != store.Full {
		t.Fatalf("a thread's record on a full disk: %v, want it found full", err)
	}
	resize("64m")
	cp = &store.Checkpoint{Thread: "t", Seq: seq + 1, Parent: seq, Source: store.SourceStep, Time: time.Now(),
		Writes: []store.Write{{Field: "n", Version: seq + 1, Value: "back"}}}
	if err := s.Commit(ctx, cp); err != nil {
		t.Fatalf("a commit once space is back: %v", err)
	}
	if err := s.CreateThread(ctx, &store.ThreadRecord{ID: "t", Tenant: "a", Flow: "f", Created: time.Now()}); err != nil && !errors.Is(err, store.ErrExists) {
		t.Fatalf("a thread's record once space is back: %v", err)
	}
	head, err = s.Head(ctx, "t")
	if err != nil || head.Values["n"] != "back" {
		t.Fatalf("the head once space is back: %v %v", head, err)
	}
	var ok string
	if err := s.db.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&ok); err != nil || ok != "ok" {
		t.Fatalf("integrity_check: %q %v", ok, err)
	}
}
