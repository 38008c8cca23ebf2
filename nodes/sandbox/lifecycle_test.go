package sandbox_test

import (
	"syscall"
	"testing"
	"time"

	"github.com/trellisflow/trellis/nodes/sandbox"
	"github.com/trellisflow/trellis/nodes/sandbox/sandboxtest"
)

func ownedBy(t *testing.T, pid int) []string { return sandboxtest.Owned(t, "", pid) }

// A process killed (SIGKILL) mid-execution leaves what it was running;
// the next backend made on the machine removes it all, and a Docker
// container ends itself at its wall time even when no backend is made.
func TestWhatAKilledOwnerLeavesIsReaped(t *testing.T) {
	for _, backend := range []string{"local", "docker"} {
		t.Run(backend, func(t *testing.T) {
			h := sandboxtest.Helper(t, "hang", backend, 2)
			if l := h.Next(t); l != "running" {
				t.Fatalf("the helper said %q", l)
			}
			pid := h.Cmd.Process.Pid
			if left := ownedBy(t, pid); len(left) == 0 {
				t.Fatal("the helper's execution left no trace to find")
			}
			_ = h.Cmd.Process.Signal(syscall.SIGKILL)
			_ = h.Cmd.Wait()
			var reaped []string
			switch backend {
			case "local":
				// bubblewrap and the sandbox die with their owner; the
				// execution's cgroups are the next backend's to remove
				l, err := sandbox.NewLocal()
				if err != nil {
					t.Fatal(err)
				}
				reaped = l.Reaped()
			case "docker":
				d, err := sandbox.NewDocker("")
				if err != nil {
					t.Fatal(err)
				}
				reaped = d.Reaped()
				d.Close()
			}
			if len(reaped) == 0 {
				t.Error("the new backend removed nothing")
			}
			if left := ownedBy(t, pid); len(left) > 0 {
				t.Errorf("left behind after the restart: %v", left)
			}
		})
	}
	// with no restart, the container of an execution ends itself at its
	// wall time (4 s) and the engine's time (10 s in the helper), and
	// warm ones as soon as their owner is gone
	t.Run("docker without a restart", func(t *testing.T) {
		h := sandboxtest.Helper(t, "hang", "docker", 2)
		if l := h.Next(t); l != "running" {
			t.Fatalf("the helper said %q", l)
		}
		pid := h.Cmd.Process.Pid
		_ = h.Cmd.Process.Signal(syscall.SIGKILL)
		_ = h.Cmd.Wait()
		// (a bound against a hang: the container of a dead owner would
		// stay for ever, its code sleeping)
		deadline := time.Now().Add(3 * time.Minute)
		for len(ownedBy(t, pid)) > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("still there 3 minutes after the owner died, past a 4 s wall and 10 s for the engine: %v", ownedBy(t, pid))
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
}

// With trellis as a subreaper (or PID 1, as a container's entrypoint) no
// zombie of an execution is left, however the execution ends.
func TestNoZombieUnderASubreaper(t *testing.T) {
	h := sandboxtest.Helper(t, "subreaper", "local", 0)
	if n := h.Next(t); n != "0" {
		t.Errorf("%s zombies left among the subreaper's children", n)
	}
}
