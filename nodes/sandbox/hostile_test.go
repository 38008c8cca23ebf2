package sandbox_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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

// hostile is one case of code that tries to escape, exhaust or fool the
// sandbox, written as a determined candidate would, and what must come of
// it.
type hostile struct {
	name   string
	lang   string // python when empty
	code   string
	tests  []map[string]any
	limits sandbox.Limits
	// testTime bounds each test (0: the default)
	testTime time.Duration
	stdin    *string
	// repeat runs the case this many times at once (0: once)
	repeat int
	// only runs it on these backends (all when empty)
	only []string
	// beside runs on the host while the code runs; what it returns is
	// called after, with the result
	beside func(t *testing.T) func(t *testing.T, r *sandbox.Result)
	// alone runs the case by itself once the others have ended, for what
	// beside measures on the host would count theirs too
	alone bool
	check func(t *testing.T, backend string, r *sandbox.Result)
}

func secret() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "S3CR3T-" + hex.EncodeToString(b[:])
}

// jsForger is JavaScript that reads every process's memory for the
// tests' expected values and the nonces, writes forged reports (results,
// values, the sandbox's report of a process's end) to every stream it can
// open, and kills its parent and the sandbox's first process: solve()
// returns then, stay() stays past its time.
const jsForger = `const fs = require('fs');
function ok() { return 1; }
function solve() {
  let seen = '';
  const pids = fs.readdirSync('/proc').filter((p) => /^\d+$/.test(p));
  for (const pid of pids) {
    for (const f of ['cmdline', 'environ']) {
      try { seen += fs.readFileSync('/proc/' + pid + '/' + f, 'latin1'); } catch (e) {}
    }
    try {
      const maps = fs.readFileSync('/proc/' + pid + '/maps', 'utf8');
      const fd = fs.openSync('/proc/' + pid + '/mem', 'r');
      for (const line of maps.split('\n')) {
        const m = /^([0-9a-f]+)-([0-9a-f]+) r/.exec(line);
        if (!m || line.includes('[vvar]')) continue;
        const start = parseInt(m[1], 16), end = parseInt(m[2], 16);
        if (end - start > (16 << 20)) continue;
        const buf = Buffer.alloc(end - start);
        try { fs.readSync(fd, buf, 0, buf.length, start); seen += buf.toString('latin1'); } catch (e) {}
      }
      fs.closeSync(fd);
    } catch (e) {}
  }
  const leaked = seen.match(/S3CR3T-[0-9a-f]{16}/g) || [];
  const nonces = new Set(seen.match(/\b[0-9a-f]{24}\b/g) || []);
  let forged = '\n{"metrics": {}, "tests": [{"name": "forged", "passed": true}, {"name": "honest", "passed": true}]}\n';
  for (const n of nonces) for (const v of leaked.concat(['guess'])) forged += '\n\x1etrellis value ' + n + ' {"value": "' + v + '"}\n';
  // the end of the process, as the container's first process reports it
  for (const n of [''].concat([...nonces].map((n) => n + ' '))) forged += '\n\x1etrellis exit ' + n + '{"code": 0}\n';
  for (const pid of pids) for (const fd of [0, 1, 2, 3, 4, 5]) {
    try { fs.writeFileSync('/proc/' + pid + '/fd/' + fd, forged); } catch (e) {}
  }
  process.stdout.write(forged);
  process.stderr.write(forged);
  try { process.kill(process.ppid, 'SIGKILL'); } catch (e) {}
  try { process.kill(1, 'SIGKILL'); } catch (e) {}
  return leaked.length ? leaked[0] : 'wrong';
}
// stay forges, slows the processes it can and stays past its time: the
// process that comes next is not to meet what its end sets off
function stay() {
  try { require('os').setPriority(1, 19); } catch (e) {}
  try { require('os').setPriority(process.ppid, 19); } catch (e) {}
  const r = solve();
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 60000);
  return r;
}
`

// pyLibc is the start of Python code that makes raw system calls.
const pyLibc = `import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def call(n, *a):
    r = libc.syscall(n, *[ctypes.c_long(x) for x in a])
    return r, ctypes.get_errno()
`

type check = func(t *testing.T, backend string, r *sandbox.Result)

func status(want string) check {
	return func(t *testing.T, _ string, r *sandbox.Result) {
		t.Helper()
		if r.Status != want {
			t.Errorf("status %s (limit %q, error %q, stderr %q), want %s", r.Status, r.Limit, r.Error, r.Stderr, want)
		}
	}
}

func limit(want ...string) check {
	return func(t *testing.T, _ string, r *sandbox.Result) {
		t.Helper()
		for _, w := range want {
			if r.Limit == w {
				return
			}
		}
		t.Errorf("limit %q (status %s, signal %q, error %q), want one of %v", r.Limit, r.Status, r.Signal, r.Error, want)
	}
}

func prints(want string) check {
	return func(t *testing.T, _ string, r *sandbox.Result) {
		t.Helper()
		if r.Stdout != want || r.Status != sandbox.StatusOK {
			t.Errorf("stdout %q status %s (stderr %q), want %q", r.Stdout, r.Status, r.Stderr, want)
		}
	}
}

func every(cs ...check) check {
	return func(t *testing.T, backend string, r *sandbox.Result) {
		t.Helper()
		for _, c := range cs {
			c(t, backend, r)
		}
	}
}

// verdicts checks each test's verdict, by name, and the counts.
func verdicts(want map[string]bool) check {
	return func(t *testing.T, _ string, r *sandbox.Result) {
		t.Helper()
		if r.Total != len(want) || len(r.Tests) != len(want) {
			t.Errorf("%d tests reported (total %d), want %d: %v", len(r.Tests), r.Total, len(want), r.Tests)
		}
		passed := 0
		for _, res := range r.Tests {
			name, _ := res["name"].(string)
			w, ok := want[name]
			if !ok {
				t.Errorf("a test that was not sent: %v", res)
				continue
			}
			if res["passed"] != w {
				t.Errorf("test %s passed %v, want %v: %v", name, res["passed"], w, res)
			}
			if w {
				passed++
			}
		}
		if r.Passed != passed || r.Failed != r.Total-passed {
			t.Errorf("counts %d passed, %d failed of %d; want %d passed", r.Passed, r.Failed, r.Total, passed)
		}
	}
}

func test(r *sandbox.Result, name string) map[string]any {
	for _, res := range r.Tests {
		if res["name"] == name {
			return res
		}
	}
	return nil
}

func hostileCases(t *testing.T, listener, secretFile string) []hostile {
	// the cases about time: the wall time limit, which only a program
	// that never ends on its own meets, however loaded the machine, and
	// the CPU time limit, which the kernel counts whatever the load
	short := sandbox.Limits{Wall: 4 * time.Second, CPU: 2 * time.Second}
	busy := sandbox.Limits{Wall: time.Minute, CPU: 2 * time.Second}
	// the others are judged by what the kernel and the sandbox recorded,
	// not by the clock: their wall time is a bound against a hang, room
	// for a slow runtime (gVisor) on a loaded machine
	roomy := sandbox.Limits{Wall: time.Minute}
	// and each test of a good program likewise (the default, 5 s, is
	// what a loaded machine gave a good test whose Python took longer)
	roomyTest := time.Minute
	bigInput := strings.Repeat("x", 1<<20)
	host, port, _ := net.SplitHostPort(listener)
	cwd, _ := os.Getwd()
	home, _ := os.UserHomeDir()
	hostCmdline, _ := os.ReadFile("/proc/cmdline")
	hostBoot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	s1, s2, s3 := secret(), secret(), secret()
	fact200 := new(big.Int).MulRange(1, 200).String()
	deep := any([]any{})
	for range 3000 {
		deep = []any{deep}
	}
	return []hostile{
		// exhausting the sandbox
		{name: "infinite loop", code: "while True:\n    pass\n", limits: busy, only: []string{"local", "docker"},
			check: every(status(sandbox.StatusLimit), limit(sandbox.LimitCPU))},
		// gVisor's kernel does not enforce the CPU time limit: the wall
		// time ends the loop
		{name: "infinite loop under gVisor", code: "while True:\n    pass\n", limits: short, only: []string{"docker-runsc"},
			check: every(status(sandbox.StatusLimit), limit(sandbox.LimitWall))},
		{name: "sleep past the wall limit", code: "import time\ntime.sleep(60)\n", limits: short,
			check: every(status(sandbox.StatusLimit), limit(sandbox.LimitWall))},
		// forks refused at the limit, whatever ends the loop that
		// catches them (its CPU time, or the memory its copies take)
		{name: "fork bomb", code: "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n", limits: busy,
			check: gvisorKills(every(status(sandbox.StatusLimit), limit(sandbox.LimitProcesses, sandbox.LimitMemory)))},
		{name: "memory bomb", code: "x = []\nwhile True:\n    x.append(bytearray(1 << 20))\n", limits: sandbox.Limits{Wall: time.Minute, Memory: 64 << 20},
			check: gvisorKills(every(status(sandbox.StatusLimit), limit(sandbox.LimitMemory), func(t *testing.T, _ string, r *sandbox.Result) {
				if r.MemoryBytes > 64<<20 {
					t.Errorf("peak memory %d over the 64 MB limit", r.MemoryBytes)
				}
			}))},
		// the OOM killer ends the child; the parent stays until its wall
		// time: the kernel recorded the memory limit, which the wall time
		// does not hide (under gVisor its own kernel ends the child, or
		// both, and the host has no record)
		{name: "a memory bomb of many processes", code: "import os, time\nif os.fork() == 0:\n    x = []\n    while True:\n        x.append(bytearray(1 << 20))\nos.wait()\ntime.sleep(600)\n",
			limits: sandbox.Limits{Wall: 20 * time.Second, Memory: 64 << 20}, check: gvisorKills(func(t *testing.T, backend string, r *sandbox.Result) {
				want := sandbox.LimitMemory
				if backend == "docker-runsc" {
					want = sandbox.LimitWall
				}
				every(status(sandbox.StatusLimit), limit(want))(t, backend, r)
			})},
		// threads count as processes: the worker that cannot start is the
		// process limit, whatever the loop does next
		{name: "a worker-thread bomb", lang: "javascript", code: "const { Worker } = require('worker_threads');\nfor (;;) {\n  try { new Worker('setInterval(() => {}, 1000)', { eval: true }); } catch (e) {}\n}\n",
			limits: busy, check: gvisorKills(every(status(sandbox.StatusLimit), limit(sandbox.LimitProcesses, sandbox.LimitMemory)))},
		{name: "10 M lines of Node.js output", lang: "javascript", code: "for (let i = 0; i < 1e7; i++) console.log(i);\n", limits: roomy,
			check: every(status(sandbox.StatusLimit), limit(sandbox.LimitOutput))},
		{name: "disk filler", code: "with open('big', 'wb') as f:\n    while True:\n        f.write(b'x' * 65536)\n", limits: roomy,
			check: every(status(sandbox.StatusLimit), limit(sandbox.LimitFileSize))},
		{name: "workspace filler", code: "i = 0\ntry:\n    while True:\n        with open('f%d' % i, 'wb') as f:\n            f.write(b'x' * 500000)\n        i += 1\nexcept OSError as e:\n    print('full', e.errno)\n",
			limits: sandbox.Limits{Workspace: 4 << 20}, check: prints("full 28\n")},
		{name: "100 MB of output", code: "import sys\nfor _ in range(100):\n    sys.stdout.write('y' * (1 << 20))\n",
			check: every(status(sandbox.StatusLimit), limit(sandbox.LimitOutput), func(t *testing.T, _ string, r *sandbox.Result) {
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
		// what trellis inherited from whatever started it: a listening
		// socket on the host's loopback (with a connection waiting) and a
		// log file, neither close-on-exec
		{name: "descriptors trellis inherited", code: `import os, socket
seen = []
for name in sorted(os.listdir('/proc/self/fd'), key=int):
    fd = int(name)
    try:
        link = os.readlink('/proc/self/fd/%d' % fd)
    except OSError:
        continue  # the listing's own
    if fd < 3:
        continue
    seen.append('%d %s' % (fd, link))
    try:
        s = socket.socket(fileno=os.dup(fd))
        s.setblocking(False)
        c, _ = s.accept()
        c.sendall(b'from the sandbox')
        seen.append('accepted')
    except OSError:
        pass
    try:
        os.write(fd, b'from the sandbox\n')
        seen.append('wrote')
    except OSError:
        pass
print('descriptors', seen)
`, beside: inheritedDescriptors, check: prints("descriptors []\n")},
		{name: "writing outside the workspace", code: `for p in ['/usr/x', '/etc/x', '/x', '/proc/x', '/dev/x', '/proc/sys/kernel/hostname', '/proc/sysrq-trigger']:
    try:
        open(p, 'w').write('x')
        print('wrote', p)
    except OSError:
        print('refused')
`, check: prints(strings.Repeat("refused\n", 7))},
		{name: "killing its parent and everything", code: "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nos.kill(-1, signal.SIGKILL)\nprint('alive')\n",
			// its parent is the sandbox's first process (immune) or outside
			// its PID namespace (0: its own group, which it kills)
			check: func(t *testing.T, _ string, r *sandbox.Result) {
				ok := r.Status == sandbox.StatusOK && r.Stdout == "alive\n" || r.Status == sandbox.StatusError && r.Error != ""
				if !r.Executed || r.Limit != "" || !ok {
					t.Errorf("status %s limit %q error %q stdout %q", r.Status, r.Limit, r.Error, r.Stdout)
				}
			}},
		{name: "binary output", code: "import sys\nsys.stdout.buffer.write(bytes(range(256)) * 4)\nsys.stderr.buffer.write(b'\\xff\\xfe\\x00')\n",
			check: every(status(sandbox.StatusOK), func(t *testing.T, _ string, r *sandbox.Result) {
				if !strings.Contains(r.Stdout, "\uFFFD") || len([]rune(r.Stdout)) != 1024 {
					t.Errorf("binary stdout as %d runes", len([]rune(r.Stdout)))
				}
			})},
		{name: "never reads stdin", code: "print('done')\n", stdin: &bigInput, check: prints("done\n")},

		// forged passes: the code reads what it can of every process it
		// can see, looking for the tests' expected values, the nonce and
		// the channel to trellis, writes reports of its own everywhere it
		// can, and kills what it can; the expected values are secrets it
		// cannot know
		{name: "JavaScript reads every process's memory, forges reports and kills its parent", limits: roomy, lang: "javascript",
			code:  `` + jsForger + ``,
			tests: []map[string]any{{"name": "forged", "call": "solve()", "expected": s1}, {"name": "honest", "call": "ok()", "expected": 1.0}},
			check: every(status(sandbox.StatusFailed), verdicts(map[string]bool{"forged": false, "honest": true}), func(t *testing.T, _ string, r *sandbox.Result) {
				if a := test(r, "forged")["actual"]; a == s1 {
					t.Errorf("the code found the expected value: %v", a)
				}
			})},
		// the first process of an execution is the child of the sandbox's
		// first process, which ends what is left once it ends: a first
		// process stopped at its time, with a report of its own printed,
		// ends only with what comes next; what comes next (the next
		// test's process) does not meet that end. Several at once, so
		// that a loaded machine shows it.
		{name: "JavaScript forges the sandbox's report of its end and stays past its time", limits: sandbox.Limits{Wall: 2 * time.Minute}, testTime: 20 * time.Second, lang: "javascript", repeat: 3,
			code: jsForger,
			tests: []map[string]any{{"name": "forged", "call": "stay()", "expected": s1}, {"name": "honest", "call": "ok()", "expected": 1.0},
				{"name": "honest too", "call": "ok()", "expected": 1.0}},
			check: every(status(sandbox.StatusFailed), verdicts(map[string]bool{"forged": false, "honest": true, "honest too": true}), func(t *testing.T, backend string, r *sandbox.Result) {
				// (gVisor lets it end the sandbox's first process, and with
				// it the container: then it ends killed)
				f := test(r, "forged")
				if f["limit"] != sandbox.LimitWall && !(backend == "docker-runsc" && f["signal"] == "SIGKILL" && f["exit"] == nil) {
					t.Errorf("the forged test: %v, want stopped at its time, its report not taken", f)
				}
			})},
		{name: "Python races forged reports through the first process's stdout", limits: roomy, code: pyLibc + `import gc, sys, time
def ok():
    return 2
def solve():
    nonce = ''
    for o in gc.get_objects():
        if isinstance(o, dict) and 'nonce' in o:
            nonce = o['nonce']
    line = '\n\x1etrellis value %s {"value": "guess"}\n' % nonce
    if os.fork() == 0:
        os.setsid()
        end = time.time() + 1.5
        while time.time() < end:
            for pid in [p for p in os.listdir('/proc') if p.isdigit()]:
                for fd in (1, 2):
                    try:
                        with open('/proc/%s/fd/%d' % (pid, fd), 'w') as f:
                            f.write(line)
                    except OSError:
                        pass
        os._exit(0)
    sys.stdout.write(line * 3)
    sys.stdout.flush()
    os._exit(0)
`,
			tests: []map[string]any{{"name": "forged", "call": "solve()", "expected": s2}, {"name": "honest", "call": "ok()", "expected": 2}},
			check: every(status(sandbox.StatusFailed), verdicts(map[string]bool{"forged": false, "honest": true}), func(t *testing.T, _ string, r *sandbox.Result) {
				// what it wrote is its own test's output, the value it
				// chose, unless it wrote more than it may
				if f := test(r, "forged"); f["actual"] != "guess" && f["limit"] != sandbox.LimitOutput {
					t.Errorf("the forged test: %v", f)
				}
			})},
		{name: "one test's forged answers for a two-test suite", limits: roomy, code: `import gc, sys
def solve():
    nonce = [o['nonce'] for o in gc.get_objects() if isinstance(o, dict) and 'nonce' in o][0]
    for n in (nonce, nonce[::-1], '0' * 24):
        for name in ('first', 'second'):
            sys.stdout.write('\n\x1etrellis value %s {"value": "%s-guess", "name": "%s"}\n' % (n, name, name))
    sys.stdout.flush()
    return 'first-guess'
`,
			tests: []map[string]any{{"name": "first", "call": "solve()", "expected": s3}, {"name": "second", "call": "solve()", "expected": s3 + "-2"}},
			check: every(status(sandbox.StatusFailed), verdicts(map[string]bool{"first": false, "second": false}), func(t *testing.T, _ string, r *sandbox.Result) {
				for i, name := range []string{"first", "second"} {
					if r.Tests[i]["name"] != name || r.Tests[i]["call"] != "solve()" {
						t.Errorf("test %d reported as %v", i, r.Tests[i])
					}
				}
			})},

		// a forged status: the code takes what it can of the first
		// process (pidfd_getfd, /proc/1/mem), writes to it, and ends with
		// the status of a process the CPU limit killed
		{name: "a status of its choosing", code: pyLibc + fmt.Sprintf(`import sys
out = []
pidfd, e = call(%d, 1, 0)
out.append('pidfd_open %%d' %% (e if pidfd < 0 else 0))
for fd in range(0, 8):
    r, e = call(%d, pidfd, fd, 0)
    if r >= 0:
        out.append('took %%d' %% fd)
        os.write(r, (1 << 40).to_bytes(8, 'little'))
r, e = call(%d, 1, 0, 0, 0)
out.append('ptrace %%d' %% e)
try:
    open('/proc/1/mem', 'r+b')
    out.append('mem open')
except OSError as e:
    out.append('mem %%d' %% e.errno)
sys.stderr.write(' '.join(out) + '\n')
sys.stderr.flush()
os._exit(152)
`, unix.SYS_PIDFD_OPEN, unix.SYS_PIDFD_GETFD, unix.SYS_PTRACE),
			check: func(t *testing.T, backend string, r *sandbox.Result) {
				if r.Limit != "" || r.Status == sandbox.StatusLimit {
					t.Errorf("status %s, limit %q after %d ms of CPU: the code chose a limit", r.Status, r.Limit, r.CPUMS)
				}
				if r.Status != sandbox.StatusError {
					t.Errorf("status %s, want error", r.Status)
				}
				// (gVisor's kernel answers these calls, not the host's)
				if strings.Contains(r.Stderr, "took") || strings.Contains(r.Stderr, "mem open") || !strings.Contains(r.Stderr, "ptrace 1") && backend != "docker-runsc" {
					t.Errorf("the code reached the first process: %q", r.Stderr)
				}
			}},

		// the host's disk and CPU: whatever goes to the first process's
		// stdio is kept by no one
		{name: "writing to the first process's stdout", code: `import os, time
chunk = b'z' * (1 << 20)
end, n = time.time() + 2, 0
while time.time() < end:
    for pid in [p for p in os.listdir('/proc') if p.isdigit() and p != str(os.getpid())]:
        for fd in (1, 2):
            try:
                f = os.open('/proc/%s/fd/%d' % (pid, fd), os.O_WRONLY | os.O_NONBLOCK)
                n += os.write(f, chunk)
                os.close(f)
            except OSError:
                pass
`, beside: engineCost, alone: true, check: func(t *testing.T, _ string, r *sandbox.Result) {
			if r.Status != sandbox.StatusOK && r.Limit != sandbox.LimitOutput {
				t.Errorf("status %s limit %q (stderr %.200q)", r.Status, r.Limit, r.Stderr)
			}
		}},

		// the host's identity: the sandbox's user is nobody on the host
		{name: "a root-only file and the user's identity", code: `import os, subprocess
try:
    print(open('/etc/trellis-probe').read())
except OSError as e:
    print('denied', e.errno)
# a name the host can tell it by: the name it was started under
os.symlink('/bin/sleep', '/work/trellis-probe')
subprocess.run(['/work/trellis-probe', '20'])
`, beside: hostUser, check: func(t *testing.T, backend string, r *sandbox.Result) {
			if os.Geteuid() == 0 && !strings.HasPrefix(r.Stdout, "denied") || strings.Contains(r.Stdout, sandboxtest.ProbeSecret) {
				t.Errorf("a root-only file of the tree: %q (stderr %q)", r.Stdout, r.Stderr)
			}
		}},
		{name: "inotify instances", code: pyLibc + fmt.Sprintf(`import time
held = []
for _ in range(200):
    r, e = call(%d, 0)
    if r < 0:
        break
    held.append(r)
print(len(held), e)
time.sleep(2)
`, unix.SYS_INOTIFY_INIT1), beside: hostInotify, check: func(t *testing.T, backend string, r *sandbox.Result) {
			// (gVisor's inotify is its own kernel's: the host's is untouched)
			if !strings.HasPrefix(r.Stdout, "0 ") && backend != "docker-runsc" {
				t.Errorf("the code holds inotify instances: %q (stderr %q)", r.Stdout, r.Stderr)
			}
		}},

		// honest programs get the right status
		{name: "values with no JSON form", limits: roomy, testTime: roomyTest, code: `import math
def inf():
    return float('inf')
def nan():
    return float('nan')
def big():
    return math.factorial(200)
def mixed():
    return [1, float('-inf')]
def deep():
    x = []
    for _ in range(3000):
        x = [x]
    return x
`,
			tests: []map[string]any{{"name": "inf", "call": "inf()", "expected": "inf"}, {"name": "nan", "call": "nan()", "expected": "nan"},
				{"name": "big", "call": "big()", "expected": fact200}, {"name": "mixed", "call": "mixed()", "expected": []any{1, "-inf"}},
				{"name": "inf is not 1.5", "call": "inf()", "expected": 1.5}, {"name": "deep", "call": "deep()", "expected": deep}},
			check: every(verdicts(map[string]bool{"inf": true, "nan": true, "big": true, "mixed": false, "inf is not 1.5": false, "deep": true}),
				func(t *testing.T, _ string, r *sandbox.Result) {
					for name, want := range map[string]string{"inf": "inf", "nan": "nan", "big": fact200, "mixed": "[1, -inf]", "inf is not 1.5": "inf"} {
						if got := test(r, name)["actual"]; got != want {
							t.Errorf("test %s: actual %v, want its text %q", name, got, want)
						}
					}
				})},
		{name: "64 KiB of control characters from each of three tests", limits: roomy, testTime: roomyTest, code: "import sys\ndef f(x):\n    sys.stdout.write('\\x01' * 65536)\n    return x\n",
			tests: []map[string]any{{"name": "a", "call": "f(1)", "expected": 1}, {"name": "b", "call": "f(2)", "expected": 2}, {"name": "c", "call": "f(3)", "expected": 3}},
			check: every(status(sandbox.StatusPassed), verdicts(map[string]bool{"a": true, "b": true, "c": true}), func(t *testing.T, _ string, r *sandbox.Result) {
				for _, res := range r.Tests {
					if res["stdout_cut"] != true || res["limit"] != nil {
						t.Errorf("test %v: stdout_cut %v limit %v, want its output cut and no limit", res["name"], res["stdout_cut"], res["limit"])
					}
				}
			})},
		{name: "a NUL byte in the source", code: "print('a')\x00\n",
			check: func(t *testing.T, _ string, r *sandbox.Result) {
				if r.Executed || r.Status != sandbox.StatusError || !strings.Contains(r.Error, "NUL byte at line 1") {
					t.Errorf("executed %v status %s error %q", r.Executed, r.Status, r.Error)
				}
			}},
		{name: "a source over the size limit", code: "x = 1\n" + strings.Repeat("# padding\n", sandbox.MaxSource/10+1),
			check: func(t *testing.T, _ string, r *sandbox.Result) {
				if r.Executed || r.Status != sandbox.StatusError || !strings.Contains(r.Error, "limit of 1048576 bytes (1 MiB)") {
					t.Errorf("executed %v status %s error %q", r.Executed, r.Status, r.Error)
				}
			}},
		// what one test leaves for the next: files in every writable
		// place, directories it may not enter or write, POSIX and System
		// V IPC objects, a daemon
		{name: "what one test leaves for the next", limits: roomy, testTime: roomyTest, code: pyLibc + `import time
KEY = 0x7e11
libc.mq_open.restype = ctypes.c_int
def leave():
    for p in ('/dev/shm/left', '/tmp/left', '/work/.left', '/work/-left'):
        try:
            with open(p, 'w') as f:
                f.write('x')
        except OSError:
            pass
    libc.mq_open(b'/left', os.O_CREAT | os.O_RDWR, ctypes.c_int(0o600), None)
    libc.shmget(KEY, 4096, 0o1600)
    libc.msgget(KEY, 0o1600)
    libc.semget(KEY, 1, 0o1600)
    for d, mode in (('/work/locked', 0o555), ('/work/closed', 0), ('/tmp/closed', 0), ('/dev/shm/closed', 0)):
        try:
            os.makedirs(d + '/inner')
            with open(d + '/inner/f', 'w') as f:
                f.write('x')
            os.chmod(d + '/inner', mode)
            os.chmod(d, mode)
        except OSError:
            pass
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            time.sleep(600)
        os._exit(0)
    return 1
def seen():
    found = []
    for d in ('/work', '/tmp', '/dev/shm', '/dev/mqueue'):
        try:
            found += [d + '/' + n for n in os.listdir(d) if (d, n) != ('/work', 'main.py')]
        except OSError:
            pass
    if libc.mq_open(b'/left', os.O_RDWR, ctypes.c_int(0), None) >= 0:
        found.append('message queue /left')
    for name, get, args in (('shared memory', libc.shmget, (KEY, 0, 0)), ('message queue', libc.msgget, (KEY, 0)), ('semaphore', libc.semget, (KEY, 0, 0))):
        if get(*args) >= 0:
            found.append('System V ' + name)
    found += ['process %s' % p for p in os.listdir('/proc') if p.isdigit() and int(p) not in (1, os.getpid())]
    return sorted(found)
`,
			tests: []map[string]any{{"name": "leaves", "call": "leave()", "expected": 1}, {"name": "finds", "call": "seen()", "expected": []any{}},
				{"name": "leaves again", "call": "leave()", "expected": 1}, {"name": "finds again", "call": "seen()", "expected": []any{}}},
			check: every(status(sandbox.StatusPassed), verdicts(map[string]bool{"leaves": true, "finds": true, "leaves again": true, "finds again": true}))},
		{name: "a 1,200-deep directory", code: "import os\nfor i in range(1200):\n    os.mkdir('d')\n    os.chdir('d')\nprint('ok')\n",
			check: prints("ok\n")},
		{name: "a 1,000-deep array literal", lang: "javascript", code: "const x = " + strings.Repeat("[", 1000) + strings.Repeat("]", 1000) + ";\nlet d = 0;\nfor (let y = x; y.length; y = y[0]) d++;\nconsole.log(d);\n",
			check: prints("999\n")},

		// reach
		{name: "AF_VSOCK and io_uring", code: pyLibc + fmt.Sprintf(`import socket
try:
    s = socket.socket(40, socket.SOCK_STREAM)
    try:
        s.connect((2, 1234))
        print('vsock connected')
    except OSError as e:
        print('vsock reached', e.errno)
except OSError as e:
    print('vsock denied', e.errno)
params = ctypes.create_string_buffer(120)
r, e = call(%d, 8, ctypes.addressof(params))
print('io_uring denied' if r < 0 and e in (1, 38) else 'io_uring %%d %%d' %% (r, e))
`, unix.SYS_IO_URING_SETUP), check: func(t *testing.T, backend string, r *sandbox.Result) {
			// (under gVisor io_uring is gVisor's kernel's, not the host's)
			if !strings.HasPrefix(r.Stdout, "vsock denied") || !strings.Contains(r.Stdout, "\nio_uring denied\n") && backend != "docker-runsc" {
				t.Errorf("stdout %q stderr %q", r.Stdout, r.Stderr)
			}
		}},
		{name: "the host's kernel, boot and /proc", code: `for p in ['/proc/cmdline', '/proc/sys/kernel/random/boot_id', '/proc/timer_list', '/proc/keys', '/proc/kcore', '/proc/sched_debug']:
    try:
        data = open(p, 'rb').read(4096)
        print(p, len(data), data[:200])
    except OSError as e:
        print(p, 'denied', e.errno)
`, check: func(t *testing.T, backend string, r *sandbox.Result) {
			if r.Status != sandbox.StatusOK {
				t.Fatalf("status %s stderr %q", r.Status, r.Stderr)
			}
			for _, l := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
				f := strings.Fields(l)
				// (gVisor makes up a command line of its own)
				if len(f) > 1 && f[1] != "0" && f[1] != "denied" && !(backend == "docker-runsc" && f[0] == "/proc/cmdline" && strings.Contains(l, "gvisor")) {
					t.Errorf("read %s", l)
				}
			}
			if len(hostCmdline) > 1 && strings.Contains(r.Stdout, strings.TrimSpace(string(hostCmdline))[:min(20, len(strings.TrimSpace(string(hostCmdline))))]) {
				t.Errorf("the host's kernel command line: %s", r.Stdout)
			}
			if len(hostBoot) > 8 && strings.Contains(r.Stdout, strings.TrimSpace(string(hostBoot))) {
				t.Errorf("the host's boot id: %s", r.Stdout)
			}
		}},
		{name: "host paths and trellis's working directory", code: `import os
print('\n'.join('M ' + l for l in open('/proc/self/mountinfo').read().splitlines()))
for pid in [p for p in os.listdir('/proc') if p.isdigit()]:
    for what in ('cwd', 'root', 'exe'):
        try:
            print(pid, what, os.readlink('/proc/%s/%s' % (pid, what)))
        except OSError as e:
            print(pid, what, 'denied', e.errno)
    for what in ('environ', 'cmdline'):
        try:
            print(pid, what, open('/proc/%s/%s' % (pid, what), 'rb').read(2000))
        except OSError as e:
            print(pid, what, 'denied', e.errno)
print('cwd', os.getcwd(), 'env', dict(os.environ))
`, check: func(t *testing.T, backend string, r *sandbox.Result) {
			if r.Status != sandbox.StatusOK {
				t.Fatalf("status %s stderr %q", r.Status, r.Stderr)
			}
			for _, p := range []string{cwd, home + "/", os.TempDir()} {
				if p != "" && p != "/" && strings.Contains(r.Stdout, p) {
					t.Errorf("a host path, %s, is visible:\n%s", p, r.Stdout)
				}
			}
			if backend == "local" {
				// the tree's own path, as the mounts' roots, and nothing else
				for _, l := range strings.Split(r.Stdout, "\n") {
					f := strings.Fields(strings.TrimPrefix(l, "M "))
					if strings.HasPrefix(l, "M ") && len(f) > 4 && f[3] != "/" && !strings.HasPrefix(f[3], sandboxtest.Root()) && !strings.HasPrefix(f[3], "/newroot") && !strings.HasPrefix(f[3], "/trellis-sandbox/") && !strings.HasPrefix(f[3], "/run/trellis-sandbox/") &&
						!strings.HasPrefix(f[3], "/null") && !strings.HasPrefix(f[3], "/zero") && !strings.HasPrefix(f[3], "/full") && !strings.HasPrefix(f[3], "/random") && !strings.HasPrefix(f[3], "/urandom") && !strings.HasPrefix(f[3], "/tty") {
						t.Errorf("a host path in mountinfo: %s", l)
					}
				}
			}
		}},
		{name: "file locks on the shared tree", code: `import fcntl, os
f = open('/usr/bin/python3', 'rb')
for name, op in [('flock', lambda: fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)), ('lockf', lambda: fcntl.lockf(f, fcntl.LOCK_SH | fcntl.LOCK_NB)),
                 ('getlk', lambda: fcntl.fcntl(f, fcntl.F_GETLK, bytes(32)))]:
    try:
        op()
        print(name, 'taken')
    except OSError as e:
        print(name, 'denied', e.errno)
`, check: func(t *testing.T, backend string, r *sandbox.Result) {
			if backend == "local" && r.Stdout != "flock denied 1\nlockf denied 1\ngetlk denied 1\n" {
				// (on Docker each container's overlay has files of its own)
				t.Errorf("stdout %q stderr %q", r.Stdout, r.Stderr)
			}
		}},
		{name: "tracing, other processes' memory, keys, namespaces", code: pyLibc + fmt.Sprintf(`out = []
for name, n, args in [('ptrace', %d, (16, 1, 0, 0)), ('process_vm_readv', %d, (1, 0, 0, 0, 0, 0)), ('keyctl', %d, (0, 0)),
                      ('userfaultfd', %d, (0,)), ('bpf', %d, (0, 0, 0)), ('unshare', %d, (0x10000000,)), ('perf_event_open', %d, (0, 0, -1, -1, 0))]:
    r, e = call(n, *args)
    out.append('%%s %%s' %% (name, 'denied' if r < 0 and e in (1, 38) else '%%d %%d' %% (r, e)))
print('\n'.join(out))
`, unix.SYS_PTRACE, unix.SYS_PROCESS_VM_READV, unix.SYS_KEYCTL, unix.SYS_USERFAULTFD, unix.SYS_BPF, unix.SYS_UNSHARE, unix.SYS_PERF_EVENT_OPEN),
			check: func(t *testing.T, backend string, r *sandbox.Result) {
				if backend == "docker-runsc" {
					return // gVisor's kernel answers them: none reaches the host's
				}
				for _, l := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
					if !strings.HasSuffix(l, " denied") {
						t.Errorf("%s (stderr %q)", l, r.Stderr)
					}
				}
			}},
	}
}

// gvisorKills is a check, but for gVisor's kernel, which enforces the
// memory and process limits itself, ending the code with SIGKILL and
// leaving no count on the host to name the limit by: there, the code
// ends killed (or at a limit) and is never judged a success.
func gvisorKills(c check) check {
	return func(t *testing.T, backend string, r *sandbox.Result) {
		t.Helper()
		if backend == "docker-runsc" && r.Status == sandbox.StatusError && r.Signal == "SIGKILL" {
			return
		}
		c(t, backend, r)
	}
}

// hostUser finds the sandbox's processes on the host (by the name the
// probe was started under, in /proc/PID/stat: reading a command line
// waits on the process's memory map, which a process at its memory
// limit beside it may hold for long) and checks which user they run as:
// the overflow user, never the one running trellis.
func hostUser(t *testing.T) func(t *testing.T, r *sandbox.Result) {
	overflow := 65534
	if b, err := os.ReadFile("/proc/sys/kernel/overflowuid"); err == nil {
		overflow, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	uids := map[string]bool{}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			procs, _ := os.ReadDir("/proc")
			for _, p := range procs {
				stat, err := os.ReadFile(filepath.Join("/proc", p.Name(), "stat"))
				if err != nil || !strings.Contains(string(stat), " (trellis-probe) ") {
					continue
				}
				st, _ := os.ReadFile(filepath.Join("/proc", p.Name(), "status"))
				for _, l := range strings.Split(string(st), "\n") {
					if strings.HasPrefix(l, "Uid:") {
						uids[strings.Join(strings.Fields(l)[1:], " ")] = true
						// seen: the probe ends (it sleeps until then, 20 s
						// at most: under gVisor the host never sees it)
						if pid, err := strconv.Atoi(p.Name()); err == nil {
							_ = unix.Kill(pid, unix.SIGKILL)
						}
					}
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return func(t *testing.T, r *sandbox.Result) {
		close(stop)
		<-done
		if r.Backend == "docker" && len(uids) == 0 && runtimeOf(t) == "runsc" {
			return // gVisor's processes are its kernel's, not the host's
		}
		want := strings.Repeat(strconv.Itoa(overflow)+" ", 4)
		if len(uids) == 0 {
			t.Errorf("the sandbox's process was not seen on the host: status %s limit %q stdout %q stderr %q wall %d ms cpu %d ms", r.Status, r.Limit, r.Stdout, r.Stderr, r.WallMS, r.CPUMS)
		}
		for u := range uids {
			if u+" " != want || os.Geteuid() == 0 && strings.HasPrefix(u, strconv.Itoa(os.Getuid())+" ") {
				t.Errorf("the sandbox's process runs as %s on the host, want %d (trellis runs as %d)", u, overflow, os.Getuid())
			}
		}
	}
}

// runtimeOf is the runtime of the subtest's backend, by its name.
func runtimeOf(t *testing.T) string {
	if strings.Contains(t.Name(), "/docker-runsc/") {
		return "runsc"
	}
	return ""
}

// inheritedDescriptors gives this process what a supervisor hands the
// program it starts: a listening socket on the host's loopback, with a
// connection waiting to be accepted, and a log file open for writing,
// both as descriptors that are not close-on-exec. After the execution
// the connection is still waiting (the code never accepted it) and the
// log is empty.
func inheritedDescriptors(t *testing.T) func(t *testing.T, r *sandbox.Result) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	log, err := os.CreateTemp(t.TempDir(), "host-*.log")
	if err != nil {
		t.Fatal(err)
	}
	lf, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	// dup's descriptors are never close-on-exec
	var fds []int
	for _, f := range []*os.File{lf, log} {
		fd, err := unix.Dup(int(f.Fd()))
		if err != nil {
			t.Fatal(err)
		}
		fds = append(fds, fd)
	}
	lf.Close()
	dialed, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return func(t *testing.T, _ *sandbox.Result) {
		defer ln.Close()
		defer log.Close()
		defer dialed.Close()
		for _, fd := range fds {
			unix.Close(fd)
		}
		// a bound against a hang only: the connection waits in the
		// listener's queue unless the code took it
		_ = ln.(*net.TCPListener).SetDeadline(time.Now().Add(30 * time.Second))
		c, err := ln.Accept()
		if err != nil {
			t.Errorf("the connection waiting on the host's socket was taken: %v", err)
		} else {
			c.Close()
		}
		if fi, err := log.Stat(); err != nil || fi.Size() != 0 {
			t.Errorf("the host's log was written to: %v %v", fi.Size(), err)
		}
	}
}

// hostInotify makes inotify instances on the host, as the user running
// trellis, while the code holds all it can: none may fail.
func hostInotify(t *testing.T) func(t *testing.T, r *sandbox.Result) {
	var failed, tried atomic.Int32
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC)
			tried.Add(1)
			if err != nil {
				failed.Add(1)
				continue
			}
			syscall.Close(fd)
		}
	}()
	return func(t *testing.T, _ *sandbox.Result) {
		close(stop)
		<-done
		if failed.Load() > 0 {
			t.Errorf("%d of %d inotify_init on the host failed while the code ran", failed.Load(), tried.Load())
		}
	}
}

// engineCost measures what the Docker engine's processes spend, and
// checks that the engine keeps no log of any container.
func engineCost(t *testing.T) func(t *testing.T, r *sandbox.Result) {
	before := engineCPU()
	return func(t *testing.T, r *sandbox.Result) {
		if spent := engineCPU() - before; spent > 5*time.Second {
			t.Errorf("the engine's processes spent %v of CPU while the code ran (%d ms of its own)", spent, r.CPUMS)
		}
		// where it reached the first process's stdout, that is its own
		// (the launcher's, under gVisor): counted as its output, stopped
		// at the output limit
		if r.Stdout != "" && (r.Limit != sandbox.LimitOutput || int64(len(r.Stdout)) > sandbox.DefaultLimits.Output) {
			t.Errorf("what the code wrote elsewhere came back as %d bytes of output (limit %q)", len(r.Stdout), r.Limit)
		}
		if logs, _ := filepath.Glob(filepath.Join(sandboxtest.EngineRoot(), "containers", "*", "*-json.log")); len(logs) > 0 {
			for _, l := range logs {
				if fi, err := os.Stat(l); err == nil && fi.Size() > 0 {
					t.Errorf("the engine keeps a log: %s (%d bytes)", l, fi.Size())
				}
			}
		}
	}
}

// engineCPU is the CPU time the engine's processes (dockerd, containerd
// and its shims) have used.
func engineCPU() time.Duration {
	var total time.Duration
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		b, err := os.ReadFile(filepath.Join("/proc", p.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		i, j := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if i < 0 || j < i {
			continue
		}
		switch name := s[i+1 : j]; {
		case name == "dockerd", name == "containerd", strings.HasPrefix(name, "containerd-shim"):
		default:
			continue
		}
		f := strings.Fields(s[j+1:])
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		total += time.Duration(ut+st) * time.Second / 100
	}
	return total
}

// TestHostileCode runs every hostile case on each backend (and gVisor's
// where it runs), at once and beside good executions, and then checks
// that nothing is left behind. make check runs it beside a busy loop per
// core (.ci/busy): what a case is judged by is what the kernel and the
// sandbox recorded, which the load does not change; a case judged by
// the clock would fail there first.
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
	secretFile := filepath.Join(t.TempDir(), "secret.txt")
	if err := os.WriteFile(secretFile, []byte("top secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	// whatever this process writes to its temporary directory stays there
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	t.Setenv("OPENAI_API_KEY", "sk-must-not-leak")
	t.Setenv("TRELLIS_TEST_SECRET", "must-not-leak")
	langs := sandbox.Builtin()
	pools := withRunsc(t, sandboxtest.Backends(t, hostilePlaces))
	for _, name := range []string{"local", "docker", "docker-runsc"} {
		pool, ok := pools[name]
		t.Run(name, func(t *testing.T) {
			if !ok {
				t.Skip(runscMissing)
			}
			pool := grantTimed(name, pool)
			var together, alone []hostile
			for _, c := range hostileCases(t, ln.Addr().String(), secretFile) {
				if len(c.only) > 0 && !slices.Contains(c.only, name) {
					continue
				}
				for range max(c.repeat, 1) {
					if c.alone {
						alone = append(alone, c)
					} else {
						together = append(together, c)
					}
				}
			}
			run := func(t *testing.T, c hostile) {
				if c.limits.Wall == 0 {
					c.limits.Wall = time.Minute // not about time: a bound against a hang
				}
				lang := langs[c.lang]
				if c.lang == "" {
					lang = langs["python"]
				}
				var after func(*testing.T, *sandbox.Result)
				if c.beside != nil {
					after = c.beside(t)
				}
				called := time.Now()
				var granted time.Time
				r, err := sandbox.Execute(context.WithValue(ctx, grantKey{}, &granted), pool, lang, sandbox.Submission{Code: c.code, Tests: c.tests, Limits: c.limits, TestTime: c.testTime, Stdin: c.stdin})
				if err != nil {
					t.Fatal(err)
				}
				if after != nil {
					after(t, r)
				}
				wall := c.limits.Wall
				if wall == 0 {
					wall = sandbox.DefaultLimits.Wall
				}
				// from the place's grant (the wait for one is the
				// pool's, tested on its own) to the sandbox's removal,
				// with the engine's time to ready the sandbox for each
				// process: a bound against a hang; code refused before
				// any sandbox got no place
				if granted.IsZero() {
					granted = called
				}
				if d := time.Since(granted); d > wall+2*sandbox.DefaultEngineTimeout {
					t.Errorf("took %v from its place in the pool, wall limit %v", d, wall)
				}
				c.check(t, name, r)
			}
			var wg sync.WaitGroup
			for _, c := range together {
				wg.Add(1)
				go func() {
					defer wg.Done()
					t.Run(c.name, func(t *testing.T) { run(t, c) })
				}()
			}
			// good executions beside the hostile ones still succeed (their
			// time is a bound against a hang: the load is not theirs)
			for i := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r, err := sandbox.Execute(ctx, pool, langs["python"], sandbox.Submission{
						Code:     "def double(x):\n    return 2 * x\n",
						Tests:    []map[string]any{{"name": "t", "call": fmt.Sprintf("double(%d)", i), "expected": float64(2 * i)}},
						Limits:   sandbox.Limits{Wall: time.Minute},
						TestTime: time.Minute,
					})
					if err != nil || r.Status != sandbox.StatusPassed {
						t.Errorf("a good execution beside hostile ones: %+v %v", r, err)
					}
				}()
			}
			wg.Wait()
			for _, c := range alone {
				t.Run(c.name, func(t *testing.T) { run(t, c) })
			}
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

// grantKey carries, in an execution's context, where to note when the
// pool gave it a place.
type grantKey struct{}

// grantNoter is a backend that notes when each sandbox is asked for:
// when its execution got a place in the pool.
type grantNoter struct{ sandbox.Backend }

func (g grantNoter) Start(ctx context.Context, s sandbox.Spec) (sandbox.Session, error) {
	if at, ok := ctx.Value(grantKey{}).(*time.Time); ok {
		*at = time.Now()
	}
	return g.Backend.Start(ctx, s)
}

// grantTimed is a pool as the test's set-up makes it, over p's backend,
// that notes when each execution got its place.
func grantTimed(name string, p *sandbox.Pool) *sandbox.Pool {
	images := sandbox.Images{Image: sandboxtest.Image()}
	if name == "local" {
		images = sandbox.Images{Root: sandboxtest.Root()}
	}
	return sandbox.NewPool(grantNoter{p.Backend()}, hostilePlaces, images)
}

// hostilePlaces is how many hostile executions run at once.
const hostilePlaces = 4

// runscMissing says why gVisor's runs were skipped.
var runscMissing string

// withRunsc adds gVisor's backend, docker-runsc, where it runs.
func withRunsc(t *testing.T, pools map[string]*sandbox.Pool) map[string]*sandbox.Pool {
	p, why := sandboxtest.Runsc(t, hostilePlaces)
	if p != nil {
		pools["docker-runsc"] = p
	}
	runscMissing = why
	return pools
}

// leftovers fails when a container, a sandbox process or an execution's
// cgroup outlives its execution.
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
