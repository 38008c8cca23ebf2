package sandbox_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trellisflow/trellis/nodes/sandbox"
	"github.com/trellisflow/trellis/nodes/sandbox/sandboxtest"
)

// ownedBy lists what a process left on this machine: containers labelled
// with it, cgroups named after it, bubblewrap processes whose environment
// names it.
func ownedBy(t *testing.T, pid int) []string {
	t.Helper()
	var left []string
	owner := strconv.Itoa(pid) + "."
	out, err := exec.Command("docker", "ps", "-a", "--filter", "label=trellis.sandbox", "--format", `{{.ID}} {{.Label "trellis.sandbox.owner"}}`).Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if id, o, ok := strings.Cut(l, " "); ok && strings.Contains(o, "/"+owner) {
			left = append(left, "container "+id)
		}
	}
	for _, ctl := range []string{"memory", "pids", "cpuacct", ""} {
		entries, _ := os.ReadDir(filepath.Join("/sys/fs/cgroup", ctl, "trellis-sandbox"))
		for _, e := range entries {
			if e.IsDir() && strings.HasPrefix(e.Name(), owner) {
				left = append(left, "cgroup "+filepath.Join(ctl, e.Name()))
			}
		}
	}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		env, err := os.ReadFile(filepath.Join("/proc", p.Name(), "environ"))
		if err == nil && strings.Contains(string(env), "TRELLIS_SANDBOX_OWNER="+owner) {
			left = append(left, "process "+p.Name())
		}
	}
	return left
}

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
	// wall time (4 s), and the first process of a warm one would when it
	// has waited Idle
	t.Run("docker without a restart", func(t *testing.T) {
		h := sandboxtest.Helper(t, "hang", "docker", 0)
		if l := h.Next(t); l != "running" {
			t.Fatalf("the helper said %q", l)
		}
		pid := h.Cmd.Process.Pid
		_ = h.Cmd.Process.Signal(syscall.SIGKILL)
		_ = h.Cmd.Wait()
		deadline := time.Now().Add(20 * time.Second)
		for len(ownedBy(t, pid)) > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("still there 20 s after the owner died, past a 4 s wall: %v", ownedBy(t, pid))
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
