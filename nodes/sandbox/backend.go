package sandbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Backend runs the processes of executions in isolation: no network, a
// small private workspace as their working directory, nothing of the
// host's files but the language's runtime, read-only, and the
// execution's limits.
type Backend interface {
	// Name is the backend's name (docker, local).
	Name() string
	// Check reports whether the backend can run jobs, and how.
	Check(ctx context.Context) (*Check, error)
	// Start opens an execution's sandbox, whose processes share its
	// workspace, its memory and process limits and its wall time, which
	// runs from now. Once the session is closed nothing of it remains.
	Start(ctx context.Context, s Spec) (Session, error)
	// Close releases the backend's resources; sessions still open are
	// ended.
	Close() error
}

// Spec is what an execution's sandbox holds.
type Spec struct {
	// Image is the Docker image holding the language's runtime; Root is
	// the same file tree as a directory ("" is the host's /usr).
	Image, Root string
	Limits      Limits
}

// Session is one execution's sandbox.
type Session interface {
	// Run runs one process in the sandbox to its end, or until its time,
	// the execution's wall time or ctx ends. It returns an error only when
	// it could not run the process at all, or ctx ended.
	Run(ctx context.Context, p *Proc) (*Outcome, error)
	// Close ends the execution: whatever of it still runs is killed, and
	// its workspace removed.
	Close() error
}

// Proc is one process of an execution.
type Proc struct {
	// Command is the command line; Stdin its whole input.
	Command []string
	Stdin   []byte
	// Time bounds the process's wall time (0: what is left of the
	// execution's).
	Time time.Duration
	// Stdout bounds what is kept of its stdout (0: Limits.Output); more
	// stops it, at the output limit. Its stderr is bounded by
	// Limits.Output.
	Stdout int64
}

// Job is an execution of one process.
type Job struct {
	Image, Root string
	Command     []string
	Stdin       []byte
	Limits      Limits
}

// Limits bound an execution. A zero field takes its default.
type Limits struct {
	// Wall is the time the execution may take from start to end; CPU the
	// processor time of each of its processes.
	Wall, CPU time.Duration
	// Memory bounds the memory (and swap) of the whole execution, in
	// bytes; Processes the number of its processes and threads at once.
	Memory    int64
	Processes int
	// Output bounds what each process prints on each of stdout and
	// stderr; FileSize each file it writes; Workspace the whole workspace.
	Output, FileSize, Workspace int64
}

// DefaultLimits are the limits of an execution that sets none.
var DefaultLimits = Limits{Wall: 10 * time.Second, CPU: 5 * time.Second, Memory: 256 << 20, Processes: 64,
	Output: 64 << 10, FileSize: 1 << 20, Workspace: 16 << 20}

// withDefaults fills l's zero fields from DefaultLimits.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	return Limits{Wall: cmp.Or(l.Wall, d.Wall), CPU: cmp.Or(l.CPU, d.CPU), Memory: cmp.Or(l.Memory, d.Memory),
		Processes: cmp.Or(l.Processes, d.Processes), Output: cmp.Or(l.Output, d.Output),
		FileSize: cmp.Or(l.FileSize, d.FileSize), Workspace: cmp.Or(l.Workspace, d.Workspace)}
}

// cpuSeconds is the CPU limit as the kernel takes it: whole seconds.
func (l Limits) cpuSeconds() int64 { return max(int64(l.CPU/time.Second), 1) }

// The limits a process can meet, as Outcome.Limit names them.
const (
	LimitWall      = "wall_time"
	LimitCPU       = "cpu_time"
	LimitMemory    = "memory"
	LimitProcesses = "processes"
	LimitOutput    = "output"
	LimitFileSize  = "file_size"
)

// Outcome is how a process ended, as the backend saw it from outside the
// sandbox.
type Outcome struct {
	// Exit is the exit status, -1 when a signal ended the process (Signal
	// names it) or it was killed at a limit.
	Exit   int
	Signal string
	// Stdout and Stderr are what it printed, cut at their bounds (Cut says
	// which was).
	Stdout, Stderr       []byte
	StdoutCut, StderrCut bool
	// Wall and CPU are the times it took (CPU 0 when the backend cannot
	// tell); Memory the execution's peak memory so far, in bytes (0 when
	// the backend cannot tell).
	Wall, CPU time.Duration
	Memory    int64
	// Limit names the limit that stopped it, if one did. A limit is named
	// only on evidence from outside the sandbox: the wall clock, the bytes
	// read, the kernel's counters; an exit status the code could have
	// chosen itself (128+n) is not enough.
	Limit string
}

// Check is what a backend reports of itself.
type Check struct {
	Backend string
	// Isolation describes how jobs are isolated, for users to judge.
	Isolation string
	// Details are facts found (engine version, runtime, cgroups).
	Details []string
	// Warnings are limits the backend cannot enforce here.
	Warnings []string
}

// ErrUnavailable says no sandbox backend is configured or reachable.
var ErrUnavailable = errors.New("no sandbox is available")

// FromEnv returns the backend configured by the environment:
// TRELLIS_SANDBOX names it (docker, local, none; empty: docker when
// DOCKER_HOST is set, else local when bwrap is installed, else none).
// TRELLIS_SANDBOX_IMAGE and TRELLIS_SANDBOX_ROOT name the image and the
// root directory of the language runtimes; TRELLIS_SANDBOX_RUNTIME a
// Docker runtime (runsc for gVisor); TRELLIS_SANDBOX_CONCURRENCY bounds
// the executions that run at once (default 4); TRELLIS_SANDBOX_WARM the
// Docker containers kept started and ready for the next execution (default
// 2). It returns nil, nil for none. A backend, once made, removes what
// earlier processes that died left of their executions (see Reap).
func FromEnv() (*Pool, error) {
	name := os.Getenv("TRELLIS_SANDBOX")
	if name == "" {
		switch {
		case os.Getenv("DOCKER_HOST") != "":
			name = "docker"
		case haveBwrap():
			name = "local"
		default:
			return nil, nil
		}
	}
	var b Backend
	var err error
	switch name {
	case "none", "off":
		return nil, nil
	case "docker":
		var d *Docker
		if d, err = NewDocker(os.Getenv("TRELLIS_SANDBOX_RUNTIME")); err == nil {
			d.Warm = 2
			if s := os.Getenv("TRELLIS_SANDBOX_WARM"); s != "" {
				if d.Warm, err = strconv.Atoi(s); err != nil || d.Warm < 0 {
					d.Close()
					return nil, fmt.Errorf("TRELLIS_SANDBOX_WARM=%q is not a count", s)
				}
			}
			b = d
		}
	case "local":
		b, err = NewLocal()
	default:
		return nil, fmt.Errorf("TRELLIS_SANDBOX=%q: the backends are docker, local and none", name)
	}
	if err != nil {
		return nil, err
	}
	n := 4
	if s := os.Getenv("TRELLIS_SANDBOX_CONCURRENCY"); s != "" {
		if n, err = strconv.Atoi(s); err != nil || n < 1 {
			b.Close()
			return nil, fmt.Errorf("TRELLIS_SANDBOX_CONCURRENCY=%q is not a positive number", s)
		}
	}
	return NewPool(b, n, Images{Image: os.Getenv("TRELLIS_SANDBOX_IMAGE"), Root: os.Getenv("TRELLIS_SANDBOX_ROOT")}), nil
}

// Images says where the language runtimes are: the Docker image and the
// same tree as a directory, for the local backend.
type Images struct {
	Image, Root string
}

// DefaultImage is the image `make sandbox-image` builds.
const DefaultImage = "trellis-sandbox:1"

func (im Images) image() string {
	if im.Image != "" {
		return im.Image
	}
	return DefaultImage
}

// signalName names a signal number as Python and Node.js do (SIGKILL).
func signalName(n int) string {
	if s, ok := signalNames[n]; ok {
		return s
	}
	return "SIG" + strconv.Itoa(n)
}

var signalNames = map[int]string{1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE",
	9: "SIGKILL", 11: "SIGSEGV", 13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM", 24: "SIGXCPU", 25: "SIGXFSZ", 31: "SIGSYS"}

// exitStatus splits a status as shells and engines report it (128+n for
// a process a signal ended) into exit and signal.
func exitStatus(status int) (exit int, signal string) {
	if status > 128 && status < 128+65 {
		return -1, signalName(status - 128)
	}
	return status, ""
}

// attribute names the limit that stopped a process, on what was seen
// from outside: the signal the kernel sends at the CPU limit (or its
// SIGKILL a second later) counts only when the process did use its CPU
// time (at least half of it as the cgroup counts, which on a loaded
// machine trails the kernel's own count), so that an exit status the
// code chose is not taken for a limit; where the backend cannot measure
// CPU time (cpuKnown false), SIGXCPU alone is taken.
func (o *Outcome) attribute(lim Limits, cpuKnown bool) {
	used := o.CPU >= time.Duration(lim.cpuSeconds())*time.Second/2
	switch {
	case o.Limit != "":
	case (o.Signal == "SIGXCPU" || o.Signal == "SIGKILL") && cpuKnown && used, o.Signal == "SIGXCPU" && !cpuKnown:
		o.Limit = LimitCPU
	case o.Signal == "SIGXFSZ":
		o.Limit = LimitFileSize
	case o.StdoutCut || o.StderrCut:
		o.Limit = LimitOutput
	}
}

// capped collects at most n bytes, remembering whether more came; full,
// when set, is called once as more comes.
type capped struct {
	n    int64
	buf  []byte
	cut  bool
	full func()
}

func (c *capped) Write(p []byte) (int, error) {
	room := c.n - int64(len(c.buf))
	if int64(len(p)) > room {
		c.buf = append(c.buf, p[:max(room, 0)]...)
		if !c.cut && c.full != nil {
			c.full()
		}
		c.cut = true
		return len(p), nil
	}
	c.buf = append(c.buf, p...)
	return len(p), nil
}

// short trims an error text for messages.
func short(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 300 {
		s = s[:300]
		for !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
		s += "…"
	}
	return s
}
