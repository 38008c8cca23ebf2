package sandbox_test

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

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
// when its context ends, or at its wall time, with an error that says so.
func TestAnEngineThatDoesNotAnswer(t *testing.T) {
	pool, _ := dockerPool(t, 0, 0)
	py := sandbox.Builtin()["python"]
	if r, err := sandbox.Execute(ctx, pool, py, sandbox.Submission{Code: "print('ok')\n"}); err != nil || r.Status != sandbox.StatusOK {
		t.Fatalf("before: %+v %v", r, err)
	}
	resume := sandboxtest.PauseEngine(t)
	c, cancel := context.WithTimeout(ctx, time.Second)
	start := time.Now()
	_, err := sandbox.Execute(c, pool, py, sandbox.Submission{Code: "print('ok')\n"})
	cancel()
	if took := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || took > 4*time.Second {
		t.Errorf("cancelled after 1 s: returned after %v with %v", took, err)
	}
	start = time.Now()
	_, err = sandbox.Execute(ctx, pool, py, sandbox.Submission{Code: "print('ok')\n", Limits: sandbox.Limits{Wall: 2 * time.Second}})
	if took := time.Since(start); err == nil || !strings.Contains(err.Error(), "did not answer") || took > 12*time.Second {
		t.Errorf("a wall time of 2 s: returned after %v with %v", took, err)
	}
	resume()
	if r, err := sandbox.Execute(ctx, pool, py, sandbox.Submission{Code: "print('ok')\n"}); err != nil || r.Status != sandbox.StatusOK {
		t.Fatalf("after: %+v %v", r, err)
	}
}
