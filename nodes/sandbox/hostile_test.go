package sandbox_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellisflow/trellis/nodes/sandbox"
	"github.com/trellisflow/trellis/nodes/sandbox/sandboxtest"
	"go.uber.org/goleak"
)

// TestMain runs the tests with the Docker engine sandboxtest starts, and
// fails when a goroutine outlives them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(withDocker{m}) }

type withDocker struct{ *testing.M }

func (m withDocker) Run() int { return sandboxtest.Main(m.M) }

var ctx = context.Background()

// hostile is one case of code that tries to escape or exhaust the
// sandbox, and what must come of it.
type hostile struct {
	name   string
	code   string
	limits sandbox.Limits
	stdin  *string
	check  func(t *testing.T, r *sandbox.Result)
}

func hostileCases(t *testing.T, listener string, secretFile string) []hostile {
	short := sandbox.Limits{Wall: 4 * time.Second, CPU: 2 * time.Second}
	bigInput := strings.Repeat("x", 1<<20)
	status := func(want string) func(t *testing.T, r *sandbox.Result) {
		return func(t *testing.T, r *sandbox.Result) {
			t.Helper()
			if r.Status != want {
				t.Errorf("status %s (limit %q, error %q, stderr %q), want %s", r.Status, r.Limit, r.Error, r.Stderr, want)
			}
		}
	}
	limit := func(want ...string) func(t *testing.T, r *sandbox.Result) {
		return func(t *testing.T, r *sandbox.Result) {
			t.Helper()
			for _, w := range want {
				if r.Limit == w {
					return
				}
			}
			t.Errorf("limit %q (status %s, signal %q, error %q), want one of %v", r.Limit, r.Status, r.Signal, r.Error, want)
		}
	}
	prints := func(want string) func(t *testing.T, r *sandbox.Result) {
		return func(t *testing.T, r *sandbox.Result) {
			t.Helper()
			if r.Stdout != want || r.Status != sandbox.StatusOK {
				t.Errorf("stdout %q status %s (stderr %q), want %q", r.Stdout, r.Status, r.Stderr, want)
			}
		}
	}
	both := func(fs ...func(t *testing.T, r *sandbox.Result)) func(t *testing.T, r *sandbox.Result) {
		return func(t *testing.T, r *sandbox.Result) {
			t.Helper()
			for _, f := range fs {
				f(t, r)
			}
		}
	}
	host, port, _ := net.SplitHostPort(listener)
	return []hostile{
		{name: "infinite loop", code: "while True:\n    pass\n", limits: short,
			// CPU time, or wall time when many executions share the cores
			check: both(status(sandbox.StatusLimit), limit(sandbox.LimitCPU, sandbox.LimitWall))},
		{name: "sleep past the wall limit", code: "import time\ntime.sleep(60)\n", limits: short,
			check: both(status(sandbox.StatusLimit), limit(sandbox.LimitWall))},
		{name: "fork bomb", code: "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n", limits: short,
			check: both(status(sandbox.StatusLimit), limit(sandbox.LimitProcesses, sandbox.LimitWall, sandbox.LimitCPU))},
		{name: "memory bomb", code: "x = []\nwhile True:\n    x.append(bytearray(1 << 20))\n", limits: sandbox.Limits{Wall: 10 * time.Second, Memory: 64 << 20},
			check: both(status(sandbox.StatusLimit), limit(sandbox.LimitMemory), func(t *testing.T, r *sandbox.Result) {
				if r.MemoryBytes > 64<<20 {
					t.Errorf("peak memory %d over the 64 MB limit", r.MemoryBytes)
				}
			})},
		{name: "disk filler", code: "with open('big', 'wb') as f:\n    while True:\n        f.write(b'x' * 65536)\n",
			check: both(status(sandbox.StatusLimit), limit(sandbox.LimitFileSize))},
		{name: "workspace filler", code: "i = 0\ntry:\n    while True:\n        with open('f%d' % i, 'wb') as f:\n            f.write(b'x' * 500000)\n        i += 1\nexcept OSError as e:\n    print('full', e.errno)\n",
			limits: sandbox.Limits{Workspace: 4 << 20}, check: prints("full 28\n")},
		{name: "100 MB of output", code: "import sys\nfor _ in range(100):\n    sys.stdout.write('y' * (1 << 20))\n",
			check: both(status(sandbox.StatusLimit), limit(sandbox.LimitOutput), func(t *testing.T, r *sandbox.Result) {
				if !r.StdoutCut || len(r.Stdout) != int(sandbox.DefaultLimits.Output) {
					t.Errorf("stdout of %d bytes, cut %v; want the first %d, cut", len(r.Stdout), r.StdoutCut, sandbox.DefaultLimits.Output)
				}
			})},
		{name: "network", code: fmt.Sprintf(`import socket
for addr in [(%q, %s), ('1.1.1.1', 53), ('8.8.8.8', 443)]:
    try:
        socket.create_connection(addr, timeout=1).close()
        print('connected', addr)
    except OSError:
        print('blocked')
try:
    socket.getaddrinfo('example.com', 80)
    print('resolved')
except OSError:
    print('no dns')
`, host, port), check: prints("blocked\nblocked\nblocked\nno dns\n")},
		{name: "the runtime's environment and files", code: fmt.Sprintf(`import os
print(os.environ.get('OPENAI_API_KEY'), os.environ.get('TRELLIS_TEST_SECRET'))
for p in [%q, '/etc/shadow', '/root/.bashrc', '/proc/1/environ', '/proc/self/environ']:
    try:
        with open(p, 'rb') as f:
            data = f.read()
        print('leaked' if b'must-not-leak' in data or b'top secret' in data or b'root:' in data else 'safe')
    except OSError:
        print('safe')
`, secretFile), check: prints("None None\nsafe\nsafe\nsafe\nsafe\nsafe\n")},
		{name: "writing outside the workspace", code: `for p in ['/usr/x', '/etc/x', '/x', '/proc/x', '/dev/x']:
    try:
        open(p, 'w').write('x')
        print('wrote', p)
    except OSError:
        print('refused')
`, check: prints("refused\nrefused\nrefused\nrefused\nrefused\n")},
		{name: "killing its parent", code: "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nos.kill(-1, signal.SIGKILL)\n",
			check: both(status(sandbox.StatusError), func(t *testing.T, r *sandbox.Result) {
				if r.Error == "" {
					t.Error("no error says the execution ended early")
				}
			})},
		{name: "binary output", code: "import sys\nsys.stdout.buffer.write(bytes(range(256)) * 4)\nsys.stderr.buffer.write(b'\\xff\\xfe\\x00')\n",
			check: both(status(sandbox.StatusOK), func(t *testing.T, r *sandbox.Result) {
				if !strings.Contains(r.Stdout, "\uFFFD") || len([]rune(r.Stdout)) != 1024 {
					t.Errorf("binary stdout as %d runes", len([]rune(r.Stdout)))
				}
			})},
		{name: "never reads stdin", code: "print('done')\n", stdin: &bigInput, check: prints("done\n")},
	}
}

// TestHostileCode runs every hostile case on each backend, at once and
// beside good executions, and then checks that nothing is left behind.
func TestHostileCode(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	defer ln.Close()
	secret := filepath.Join(t.TempDir(), "secret.txt")
	if err := os.WriteFile(secret, []byte("top secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	// whatever this process writes to its temporary directory stays there
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	t.Setenv("OPENAI_API_KEY", "sk-must-not-leak")
	t.Setenv("TRELLIS_TEST_SECRET", "must-not-leak")
	py := sandbox.Builtin()["python"]
	pools := sandboxtest.Backends(t, 4)
	for name, pool := range pools {
		t.Run(name, func(t *testing.T) {
			var wg sync.WaitGroup
			for _, c := range hostileCases(t, ln.Addr().String(), secret) {
				wg.Add(1)
				go func() {
					defer wg.Done()
					t.Run(c.name, func(t *testing.T) {
						start := time.Now()
						r, err := sandbox.Execute(ctx, pool, py, sandbox.Submission{Code: c.code, Limits: c.limits, Stdin: c.stdin})
						if err != nil {
							t.Fatal(err)
						}
						if !r.Executed {
							t.Fatalf("not executed: %+v", r)
						}
						wall := c.limits.Wall
						if wall == 0 {
							wall = sandbox.DefaultLimits.Wall
						}
						if d := time.Since(start); d > wall+30*time.Second {
							t.Errorf("took %v, wall limit %v", d, wall)
						}
						c.check(t, r)
					})
				}()
			}
			// good executions beside the hostile ones still succeed
			for i := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r, err := sandbox.Execute(ctx, pool, py, sandbox.Submission{
						Code:  "def double(x):\n    return 2 * x\n",
						Tests: []map[string]any{{"name": "t", "call": fmt.Sprintf("double(%d)", i), "expected": float64(2 * i)}},
					})
					if err != nil || r.Status != sandbox.StatusPassed {
						t.Errorf("a good execution beside hostile ones: %+v %v", r, err)
					}
				}()
			}
			wg.Wait()
		})
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("the sandbox reached the host's loopback %d times", n)
	}
	leftovers(t, pools)
	if entries, _ := os.ReadDir(tmp); len(entries) > 0 {
		t.Errorf("temporary files left: %v", entries)
	}
}

// leftovers fails when a container, a sandbox process or a job's cgroup
// outlives its execution.
func leftovers(t *testing.T, pools map[string]*sandbox.Pool) {
	t.Helper()
	for name, p := range pools {
		switch b := p.Backend().(type) {
		case *sandbox.Docker:
			if ids, err := b.Leftovers(ctx); err != nil || len(ids) > 0 {
				t.Errorf("%s: containers left: %v %v", name, ids, err)
			}
		case *sandbox.Local:
			if left := b.Leftovers(); len(left) > 0 {
				t.Errorf("%s: left behind: %v", name, left)
			}
		}
	}
}
