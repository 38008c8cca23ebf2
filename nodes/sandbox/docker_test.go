package sandbox_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/trellisflow/trellis/nodes/sandbox"
	"github.com/trellisflow/trellis/nodes/sandbox/sandboxtest"
)

func dockerPool(t *testing.T, warm int, idle time.Duration) (*sandbox.Pool, *sandbox.Docker) {
	t.Helper()
	defer sandboxtest.SetWarm(2)
	sandboxtest.SetWarm(warm)
	p := sandboxtest.Docker(t, 1)
	d := p.Backend().(*sandbox.Docker)
	if idle > 0 {
		d.Idle = idle
	}
	return p, d
}

// existing lists the containers among ids that the engine still has.
func existing(t *testing.T, ids []string) []string {
	t.Helper()
	out, err := exec.Command("docker", "ps", "-aq", "--no-trunc").Output()
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, id := range ids {
		if strings.Contains(string(out), id) {
			left = append(left, id)
		}
	}
	return left
}

// Warm containers are kept by image and limits only: executions with
// any number of tests take them and leave no more than asked for.
func TestWarmContainersAreKeptByImageAndLimits(t *testing.T) {
	pool, d := dockerPool(t, 1, 0)
	py := sandbox.Builtin()["python"]
	for n := range 4 {
		var tests []map[string]any
		for i := range n + 1 {
			tests = append(tests, map[string]any{"call": "f()", "expected": 1, "name": string(rune('a' + i))})
		}
		r, err := sandbox.Execute(ctx, pool, py, sandbox.Submission{Code: "def f():\n    return 1\n", Tests: tests})
		if err != nil || r.Status != sandbox.StatusPassed {
			t.Fatalf("%d tests: %+v %v", n+1, r, err)
		}
	}
	if spares := d.Spares(); len(spares) != 1 {
		t.Errorf("%d warm containers, want 1: %v", len(spares), spares)
	}
	if left, err := d.Leftovers(ctx); err != nil || len(left) > 0 {
		t.Errorf("containers left: %v %v", left, err)
	}
}

// A warm container that died (killed) or has been kept longer than Idle
// is not handed out: the execution gets a live one, and the old one is
// removed.
func TestAWarmContainerThatDiedIsNotHandedOut(t *testing.T) {
	pool, d := dockerPool(t, 1, 4*time.Second)
	py := sandbox.Builtin()["python"]
	run := func(what string) {
		t.Helper()
		r, err := sandbox.Execute(ctx, pool, py, sandbox.Submission{Code: "print('ok')\n"})
		if err != nil || r.Status != sandbox.StatusOK {
			t.Fatalf("%s: %+v %v", what, r, err)
		}
	}
	run("the first execution")
	spares := d.Spares()
	if len(spares) != 1 {
		t.Fatalf("%d warm containers", len(spares))
	}
	if out, err := exec.Command("docker", "kill", spares[0]).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	run("after the warm container was killed")
	spares = d.Spares()
	time.Sleep(5 * time.Second) // past Idle
	run("after the warm container was kept past its idle time")
	d.Spares() // what was discarded is removed
	if left := existing(t, spares); len(left) > 0 {
		t.Errorf("the warm container kept past its idle time is still there: %v", left)
	}
}

// An engine that does not answer holds nothing up: the execution ends
// when its context ends, or once the engine's time has passed, with an
// error that says so.
func TestAnEngineThatDoesNotAnswer(t *testing.T) {
	pool, d := dockerPool(t, 0, 0)
	py := sandbox.Builtin()["python"]
	if r, err := sandbox.Execute(ctx, pool, py, sandbox.Submission{Code: "print('ok')\n"}); err != nil || r.Status != sandbox.StatusOK {
		t.Fatalf("before: %+v %v", r, err)
	}
	resume := sandboxtest.PauseEngine(t)
	// the engine's time would end it with DeadlineExceeded only after an
	// hour: the cancellation ends it
	d.EngineTimeout = time.Hour
	c, cancel := context.WithCancel(ctx)
	go func() {
		time.Sleep(time.Second)
		cancel()
	}()
	_, err := sandbox.Execute(c, pool, py, sandbox.Submission{Code: "print('ok')\n"})
	cancel()
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled while the engine does not answer: %v, want the cancellation", err)
	}
	d.EngineTimeout = 2 * time.Second
	_, err = sandbox.Execute(ctx, pool, py, sandbox.Submission{Code: "print('ok')\n"})
	if err == nil || !strings.Contains(err.Error(), "did not answer") || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("the engine's time passed: %v", err)
	}
	resume()
	d.EngineTimeout = 0
	if r, err := sandbox.Execute(ctx, pool, py, sandbox.Submission{Code: "print('ok')\n"}); err != nil || r.Status != sandbox.StatusOK {
		t.Fatalf("after: %+v %v", r, err)
	}
}

// The execution's first process is the child of the container's first
// process (the launcher), which kills every process of the container
// once that child ends, and then reports how it ended. A first process
// stopped at its time, or one that prints a report of its own and goes
// on, is still its child: the next process's reset ends it, and on a
// loaded machine the launcher may get to run only once the next process
// runs. That process must not be the one it kills. Here the launcher is
// held (SIGSTOP) as a busy machine would hold it, and let go while the
// next process runs.
func TestALauncherLateToItsChildsEndKillsNoLaterProcess(t *testing.T) {
	for _, c := range []struct {
		name  string
		first []string
		check func(t *testing.T, o *sandbox.Outcome)
	}{
		{"stopped at its time", []string{"sleep", "60"}, func(t *testing.T, o *sandbox.Outcome) {
			if o.Limit != sandbox.LimitWall {
				t.Errorf("the first process: %+v, want stopped at its time", o)
			}
		}},
		{"a report of its own", []string{"/bin/sh", "-c", `r='\n\036trellis exit {"code": 0}\n'; printf "$r"; printf "$r" >&2; exec sleep 60`}, func(t *testing.T, o *sandbox.Outcome) {
			if o.Limit != sandbox.LimitWall || o.Exit == 0 {
				t.Errorf("the first process: exit %d signal %q limit %q, want stopped at its time, its report not taken", o.Exit, o.Signal, o.Limit)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, d := dockerPool(t, 0, 0)
			s, err := d.Start(ctx, sandbox.Spec{Image: sandboxtest.Image(), Limits: sandbox.Limits{Wall: time.Minute}})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			o, err := s.Run(ctx, &sandbox.Proc{Command: c.first, Time: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			c.check(t, o)
			ids, err := d.Leftovers(ctx)
			if err != nil || len(ids) != 1 {
				t.Fatalf("the execution's containers: %v %v", ids, err)
			}
			out, err := exec.Command("docker", "inspect", "-f", "{{.State.Pid}}", ids[0]).Output()
			if err != nil {
				t.Fatal(err)
			}
			pid, _ := strconv.Atoi(strings.TrimSpace(string(out)))
			launcher, err := unix.PidfdOpen(pid, 0)
			if err != nil {
				t.Fatalf("the launcher (pid %d): %v", pid, err)
			}
			defer unix.Close(launcher)
			if err := unix.PidfdSendSignal(launcher, unix.SIGSTOP, nil, 0); err != nil {
				t.Fatal(err)
			}
			resume := func() { _ = unix.PidfdSendSignal(launcher, unix.SIGCONT, nil, 0) }
			defer resume()

			marker := "trellis-later-" + strconv.FormatInt(time.Now().UnixNano(), 36)
			type result struct {
				o   *sandbox.Outcome
				err error
			}
			done := make(chan result, 1)
			go func() {
				o, err := s.Run(ctx, &sandbox.Proc{Command: []string{"/bin/sh", "-c", ": " + marker + "; sleep 2; echo done"}, Time: 30 * time.Second})
				done <- result{o, err}
			}()
			// the launcher runs again once the next process does
			deadline := time.Now().Add(30 * time.Second)
			for !running(marker) {
				if time.Now().After(deadline) {
					t.Fatal("the next process did not start in 30 s")
				}
				time.Sleep(10 * time.Millisecond)
			}
			resume()
			r := <-done
			if r.err != nil || r.o.Exit != 0 || r.o.Signal != "" || string(r.o.Stdout) != "done\n" {
				t.Errorf("the next process: %+v %v, want it undisturbed", r.o, r.err)
			}
		})
	}
}

// running says whether a process of this machine has marker in its
// command line.
func running(marker string) bool {
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		if cmd, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline")); err == nil && strings.Contains(string(cmd), marker) {
			return true
		}
	}
	return false
}

// A container whose first process ended (gVisor lets the code end it)
// is removed by the engine (auto-remove) while the backend removes it
// too, and the backend may be told that the engine's removal is under
// way. Once the
// backend says its removals are done, the containers are gone: on runc
// and, where it runs, on gVisor, whose containers take longer to go.
func TestAContainerTheEngineIsRemovingIsGoneOnceDiscarded(t *testing.T) {
	pools := map[string]*sandbox.Pool{}
	pools["docker"], _ = dockerPool(t, 0, 0)
	sandboxtest.SetWarm(0)
	defer sandboxtest.SetWarm(2)
	if p, why := sandboxtest.Runsc(t, 1); p != nil {
		pools["docker-runsc"] = p
	} else {
		t.Log(why)
	}
	for name, pool := range pools {
		t.Run(name, func(t *testing.T) {
			d := pool.Backend().(*sandbox.Docker)
			var sessions []sandbox.Session
			for range 6 {
				s, err := d.Start(ctx, sandbox.Spec{Image: sandboxtest.Image()})
				if err != nil {
					t.Fatal(err)
				}
				sessions = append(sessions, s)
			}
			// the containers' first processes end (as gVisor lets the code
			// end them), and the engine starts removing the containers
			ids, err := d.Leftovers(ctx)
			if err != nil || len(ids) != len(sessions) {
				t.Fatalf("the executions' containers: %v %v", ids, err)
			}
			if out, err := exec.Command("docker", append([]string{"kill"}, ids...)...).CombinedOutput(); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			for _, s := range sessions {
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
			}
			if ids, err := d.Leftovers(ctx); err != nil || len(ids) > 0 {
				t.Errorf("containers left: %v %v", ids, err)
			}
		})
	}
}
