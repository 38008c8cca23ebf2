package sandboxtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/trellisflow/trellis/nodes/sandbox"
)

// A test binary whose TestMain calls Main can be started as a helper
// process that owns sandbox executions (a stand-in for trellis, to be
// killed or to be a subreaper): Helper starts it.
const helperEnv = "TRELLIS_SANDBOXTEST_HELPER"

// HelperProcess is a running helper.
type HelperProcess struct {
	Cmd *exec.Cmd
	// Out is what it printed, line by line.
	Out chan string
}

// Helper starts this test binary as a helper: mode is hang (start an
// execution that sleeps, print "running", wait to be killed) or
// subreaper (become a subreaper, run executions that end in every way,
// print the number of zombies left among its children); backend is local
// or docker, with warm spares for docker.
func Helper(t testing.TB, mode, backend string, warm int) *HelperProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s:%s:%d", helperEnv, mode, backend, warm),
		"TRELLIS_SANDBOXTEST_ROOT="+root, "TRELLIS_SANDBOXTEST_IMAGE="+image)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &HelperProcess{Cmd: cmd, Out: make(chan string, 16)}
	go func() {
		defer close(h.Out)
		var line []byte
		b := make([]byte, 1)
		for {
			if _, err := out.Read(b); err != nil {
				return
			}
			if b[0] == '\n' {
				h.Out <- string(line)
				line = line[:0]
				continue
			}
			line = append(line, b[0])
		}
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return h
}

// Next is the helper's next line (a minute at most).
func (h *HelperProcess) Next(t testing.TB) string {
	t.Helper()
	select {
	case l, ok := <-h.Out:
		if !ok {
			t.Fatal("the helper ended")
		}
		return l
	case <-time.After(time.Minute):
		t.Fatal("the helper said nothing for a minute")
	}
	return ""
}

// helper runs a helper process's part; it returns the exit status.
func helper(spec string) int {
	parts := strings.Split(spec, ":")
	if len(parts) != 3 {
		fmt.Fprintln(os.Stderr, "bad helper spec", spec)
		return 2
	}
	mode, backend := parts[0], parts[1]
	warm, _ := strconv.Atoi(parts[2])
	root, image = os.Getenv("TRELLIS_SANDBOXTEST_ROOT"), os.Getenv("TRELLIS_SANDBOXTEST_IMAGE")
	var b sandbox.Backend
	var err error
	switch backend {
	case "local":
		b, err = sandbox.NewLocal()
	case "docker":
		var d *sandbox.Docker
		if d, err = sandbox.NewDocker(""); err == nil {
			d.Warm = warm
			// a container outlives a dead owner by its wall time and the
			// engine's time: short here, for the test that waits for it
			d.EngineTimeout = 10 * time.Second
			b = d
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	started := &startNoter{Backend: b, started: make(chan struct{})}
	pool := sandbox.NewPool(started, 4, sandbox.Images{Image: image, Root: root})
	py := sandbox.Builtin()["python"]
	ctx := context.Background()
	switch mode {
	case "hang":
		go func() {
			_, _ = sandbox.Execute(ctx, pool, py, sandbox.Submission{Code: "import time\nwhile True:\n    time.sleep(1)\n",
				Limits: sandbox.Limits{Wall: 4 * time.Second}})
		}()
		// the execution's sandbox is made: it has left its traces (a
		// container, cgroups), however long a loaded machine took
		<-started.started
		fmt.Println("running")
		select {}
	case "subreaper":
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		for _, sub := range []sandbox.Submission{
			{Code: "print('ok')\n"},
			{Code: "import os\nif os.fork() == 0:\n    os.setsid()\n    import time; time.sleep(30)\nprint('parent')\n"},
			{Code: "import time\ntime.sleep(30)\n", Limits: sandbox.Limits{Wall: time.Second}},
			{Code: "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n"},
			{Code: "def f():\n    return 1\n", Tests: []map[string]any{{"call": "f()", "expected": 1}, {"call": "f()", "expected": 2}}},
		} {
			if _, err := sandbox.Execute(ctx, pool, py, sub); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
		pool.Close()
		// every process of an execution is collected before Execute
		// returns: a zombie left now stays (no one else waits for this
		// process's children), and a bound only keeps a failing test
		// from waiting for ever
		left := zombies()
		for deadline := time.Now().Add(30 * time.Second); len(left) > 0 && time.Now().Before(deadline); left = zombies() {
			time.Sleep(10 * time.Millisecond)
		}
		fmt.Println(len(left))
		return 0
	}
	fmt.Fprintln(os.Stderr, "unknown helper mode", mode)
	return 2
}

// startNoter is a backend that says when its first sandbox is made.
type startNoter struct {
	sandbox.Backend
	once    sync.Once
	started chan struct{}
}

func (s *startNoter) Start(ctx context.Context, spec sandbox.Spec) (sandbox.Session, error) {
	sess, err := s.Backend.Start(ctx, spec)
	if err == nil {
		s.once.Do(func() { close(s.started) })
	}
	return sess, err
}

// zombies lists this process's children that ended and were not
// collected.
func zombies() []int {
	var out []int
	me := strconv.Itoa(os.Getpid())
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		b, err := os.ReadFile("/proc/" + p.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 1 && f[0] == "Z" && f[1] == me {
			pid, _ := strconv.Atoi(p.Name())
			out = append(out, pid)
		}
	}
	return out
}

// Owned lists what a process (by its pid) has, or has left, of sandbox
// executions on this machine: containers labelled with it on the engine
// at dockerHost ("": the one DOCKER_HOST names), cgroups named after it,
// bubblewrap processes whose environment names it.
func Owned(t testing.TB, dockerHost string, pid int) []string {
	t.Helper()
	var left []string
	owner := strconv.Itoa(pid) + "."
	ps := exec.Command("docker", "ps", "-a", "--filter", "label=trellis.sandbox", "--format", `{{.ID}} {{.Label "trellis.sandbox.owner"}}`)
	if dockerHost != "" {
		ps.Env = append(os.Environ(), "DOCKER_HOST="+dockerHost)
	}
	out, err := ps.Output()
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
