package sandbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/trellisflow/trellis/nodes/sandbox"
	"github.com/trellisflow/trellis/nodes/sandbox/sandboxtest"
)

// slowReady is a backend that takes its time to ready its sandbox for
// each process, as a loaded machine does (an engine slow to start an
// exec, bubblewrap slow to set up).
type slowReady struct {
	sandbox.Backend
	delay time.Duration
}

func (b slowReady) Start(ctx context.Context, s sandbox.Spec) (sandbox.Session, error) {
	sess, err := b.Backend.Start(ctx, s)
	if err != nil {
		return nil, err
	}
	return slowSession{sess, b.delay}, nil
}

type slowSession struct {
	sandbox.Session
	delay time.Duration
}

func (s slowSession) Run(ctx context.Context, p *sandbox.Proc) (*sandbox.Outcome, error) {
	time.Sleep(s.delay)
	return s.Session.Run(ctx, p)
}

// The wall time is the time the code runs: what the backend takes to
// ready the sandbox for each process (here longer than the execution's
// wall time) is not the code's, and every test runs.
func TestTheWallTimeIsTheCodes(t *testing.T) {
	local := sandboxtest.Local(t, 1)
	pool := sandbox.NewPool(slowReady{local.Backend(), 8 * time.Second}, 1, sandbox.Images{Root: sandboxtest.Root()})
	defer pool.Close()
	tests := []map[string]any{{"name": "a", "call": "f()", "expected": 1}, {"name": "b", "call": "f()", "expected": 1}}
	r, err := sandbox.Execute(ctx, pool, sandbox.Builtin()["python"], sandbox.Submission{Code: "def f():\n    return 1\n", Tests: tests,
		Limits: sandbox.Limits{Wall: 6 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != sandbox.StatusPassed || r.Passed != 2 || r.Limit != "" {
		t.Fatalf("status %s, %d of %d passed, limit %q: %v", r.Status, r.Passed, r.Total, r.Limit, r.Tests)
	}
	if r.WallMS >= 6000 {
		t.Errorf("wall_ms %d: the sandbox's set-up was counted", r.WallMS)
	}
}

// An engine slower to give a container than the execution's wall time
// makes the execution wait for it, not fail: the wall time is the
// code's, and the engine has its own time (a minute).
func TestAnEngineSlowerThanTheWallTime(t *testing.T) {
	pool, _ := dockerPool(t, 0, 0)
	resume := sandboxtest.PauseEngine(t)
	go func() {
		time.Sleep(12 * time.Second)
		resume()
	}()
	r, err := sandbox.Execute(ctx, pool, sandbox.Builtin()["python"], sandbox.Submission{Code: "print('ok')\n", Limits: sandbox.Limits{Wall: 4 * time.Second}})
	if err != nil || r.Status != sandbox.StatusOK || r.Stdout != "ok\n" {
		t.Fatalf("%+v %v", r, err)
	}
}
