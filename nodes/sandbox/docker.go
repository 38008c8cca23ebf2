package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
	"github.com/moby/profiles/seccomp"
)

// Docker runs each execution in a container of its own on a Docker
// engine (the one DOCKER_HOST names): no network, a read-only root, a
// small tmpfs workspace, every capability dropped, no new privileges, an
// unprivileged user, the engine's default seccomp profile with more
// denied (dockerProfile), more of /proc masked, memory with no swap, a
// process count, a CPU share, and no log: nothing the container prints
// is kept by the engine. The container's first process (launcher, in
// Python, which the image must have) is started in advance, attached,
// and waits on stdin: it starts the execution's first process with the
// container's stdio, lets go of its own, and reports how that process
// ended; then it only keeps the container, ending it at the execution's
// wall time, so that nothing outlives its limit even if trellis dies
// (and if trellis goes before an execution comes, its stdin ends and so
// does the container). Each later process runs as an exec, after what
// the one before left was killed and the workspace emptied. The
// container is killed and removed when the execution ends, at its wall
// time, when its context ends, or when the engine does not answer in
// time.
type Docker struct {
	cli     *client.Client
	runtime string // "" or runsc
	// Warm is how many started containers to keep ready for each image
	// and set of limits once one has been asked for (0: none). An
	// execution takes one instead of making its own, and a replacement is
	// started in the background; a container still serves one execution.
	Warm int
	// Idle is how long a warm container is kept for an execution (default
	// 10 minutes): one that has waited longer is removed, not handed out.
	Idle time.Duration

	owner   string // the owner label of this backend's containers
	profile string // the seccomp profile

	mu      sync.Mutex
	spares  map[string][]*box // started containers ready, by key
	filling map[string]int    // spares being started, by key
	open    map[*dockerSession]bool
	made    map[string]bool // the containers this backend made
	closed  bool
	wg      sync.WaitGroup // spares being started, containers being removed
	reaped  []string
}

// box is a started container, attached to its first process's stdio.
type box struct {
	id   string
	att  types.HijackedResponse
	born time.Time
	warm bool // it waited as a spare
}

// The labels of this backend's containers: the first marks them all, the
// second names their owner (this machine's boot, a process and its start
// time; see owner).
const (
	label      = "trellis.sandbox"
	ownerLabel = "trellis.sandbox.owner"
)

// runscThreads is what gVisor's runtime adds to the container's process
// limit for threads of its own.
const runscThreads = 256

// engineGrace is how long past a process's time an engine call may take
// before the execution gives up on the engine.
const engineGrace = 5 * time.Second

// dockerMasks are the /proc paths the Docker backend masks besides
// Docker's defaults: the host kernel's command line and its boot id.
var dockerMasks = []string{"/proc/cmdline", "/proc/sys/kernel/random/boot_id"}

// dockerReadonly are Docker's default read-only paths.
var dockerReadonly = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}

// deniedInDocker are the system calls removed from the engine's default
// profile: tracing and reading other processes, inotify and fanotify (a
// channel between executions), the kernel's keyrings, io_uring,
// userfaultfd, perf and bpf.
var deniedInDocker = []string{"ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp", "process_madvise",
	"inotify_init", "inotify_init1", "inotify_add_watch", "fanotify_init", "fanotify_mark",
	"keyctl", "add_key", "request_key", "io_uring_setup", "io_uring_enter", "io_uring_register",
	"userfaultfd", "perf_event_open", "bpf"}

// dockerProfile is the engine's default seccomp profile (moby's) without
// deniedInDocker; it denies AF_VSOCK sockets already.
var dockerProfile = sync.OnceValue(func() string {
	p := seccomp.DefaultProfile()
	var rules []*seccomp.Syscall
	for _, s := range p.Syscalls {
		s.Names = slices.DeleteFunc(s.Names, func(n string) bool { return slices.Contains(deniedInDocker, n) })
		if s.Name != "" && slices.Contains(deniedInDocker, s.Name) {
			s.Name = ""
		}
		if len(s.Names) > 0 || s.Name != "" {
			rules = append(rules, s)
		}
	}
	p.Syscalls = rules
	b, err := json.Marshal(p)
	if err != nil {
		panic("sandbox: the seccomp profile: " + err.Error())
	}
	return string(b)
})

// NewDocker connects to the engine from the environment (DOCKER_HOST);
// runtime is an OCI runtime to run containers with ("": the engine's
// default; runsc for gVisor). It first removes the containers that
// processes of this machine that are gone left behind (Reaped lists
// them).
func NewDocker(runtime string) (*Docker, error) {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, err
	}
	d := &Docker{cli: cli, runtime: runtime, Idle: 10 * time.Minute, owner: bootID() + "/" + string(self()),
		profile: dockerProfile(), spares: map[string][]*box{}, filling: map[string]int{}, open: map[*dockerSession]bool{}, made: map[string]bool{}}
	// an engine that does not answer holds up no flow: executions will
	// say so
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d.reaped, _ = d.Reap(ctx)
	return d, nil
}

// Name implements Backend.
func (d *Docker) Name() string { return "docker" }

// Reaped lists the containers the backend removed when it was made.
func (d *Docker) Reaped() []string { return d.reaped }

// Close implements Backend: the executions still open are ended and the
// warm containers removed; it waits for the engine a minute at most.
func (d *Docker) Close() error {
	d.mu.Lock()
	d.closed = true
	var open []*dockerSession
	for s := range d.open {
		open = append(open, s)
	}
	d.mu.Unlock()
	for _, s := range open {
		_ = s.Close()
	}
	done := make(chan struct{})
	go func() {
		d.wg.Wait() // spares being started see closed and remove themselves
		d.mu.Lock()
		var boxes []*box
		for _, list := range d.spares {
			boxes = append(boxes, list...)
		}
		d.spares = map[string][]*box{}
		d.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var wg sync.WaitGroup
		for _, b := range boxes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				b.att.Close()
				d.remove(ctx, b.id)
			}()
		}
		wg.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-time.After(time.Minute):
		err = errors.New("the Docker engine did not answer in a minute: some sandbox containers may be left (the next start removes them)")
	}
	return errors.Join(err, d.cli.Close())
}

// key is what warm containers are kept by: the image and the limits.
func key(image string, lim Limits) string { return image + fmt.Sprint(lim) }

// Start implements Backend: a warm container, or a new one.
func (d *Docker) Start(ctx context.Context, spec Spec) (Session, error) {
	lim := spec.Limits.withDefaults()
	image := spec.Image
	if image == "" {
		image = DefaultImage
	}
	s := &dockerSession{d: d, image: image, lim: lim, first: true}
	// the engine may take the wall time (and a grace) to give a
	// container; the execution's wall time runs once it has one
	cctx, cancel := context.WithTimeout(ctx, lim.Wall+engineGrace)
	defer cancel()
	var err error
	if s.box, err = d.container(cctx, image, lim); err != nil {
		return nil, err
	}
	s.deadline = time.Now().Add(lim.Wall)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		d.discard(s.box)
		return nil, errClosed
	}
	d.open[s] = true
	return s, nil
}

// container returns a started container for an execution: a warm one, or
// a new one; either way a replacement is started for the next.
func (d *Docker) container(ctx context.Context, image string, lim Limits) (*box, error) {
	k := key(image, lim)
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, errClosed
	}
	var b *box
	for len(d.spares[k]) > 0 && b == nil {
		sp := d.spares[k][0]
		d.spares[k] = d.spares[k][1:]
		if time.Since(sp.born) < d.idle() {
			b = sp
		} else {
			d.discard(sp)
		}
	}
	for d.Warm > 0 && len(d.spares[k])+d.filling[k] < d.Warm {
		d.filling[k]++
		d.wg.Add(1)
		go d.fill(k, image, lim)
	}
	d.mu.Unlock()
	if b != nil {
		return b, nil
	}
	return d.startNew(ctx, image, lim)
}

func (d *Docker) idle() time.Duration {
	if d.Idle > 0 {
		return d.Idle
	}
	return 10 * time.Minute
}

// startNew creates a container, attaches to its first process and
// starts it.
func (d *Docker) startNew(ctx context.Context, image string, lim Limits) (*box, error) {
	id, err := d.create(ctx, image, lim)
	if err != nil {
		return nil, err
	}
	b := &box{id: id, born: time.Now()}
	if b.att, err = d.cli.ContainerAttach(ctx, id, container.AttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true}); err != nil {
		d.discard(b)
		return nil, fmt.Errorf("attaching to the sandbox container: %w", engineErr(ctx, err))
	}
	if err := d.cli.ContainerStart(ctx, id, container.StartOptions{}); err != nil {
		d.discard(b)
		return nil, fmt.Errorf("starting the sandbox container: %w", engineErr(ctx, err))
	}
	return b, nil
}

// fill starts a spare container.
func (d *Docker) fill(k, image string, lim Limits) {
	defer d.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := d.startNew(ctx, image, lim)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.filling[k]--
	switch {
	case err != nil:
	case d.closed:
		d.discard(b)
	default:
		b.warm = true
		d.spares[k] = append(d.spares[k], b)
	}
}

// Check implements Backend: the engine answers.
func (d *Docker) Check(ctx context.Context) (*Check, error) {
	c := &Check{Backend: "docker", Isolation: "a container per execution: no network, read-only root, tmpfs workspace, no capabilities, no new privileges, unprivileged user, the default seccomp profile and more, /proc masked, memory, process and CPU limits, no container log"}
	v, err := d.cli.ServerVersion(ctx)
	if err != nil {
		return c, fmt.Errorf("the Docker engine does not answer (DOCKER_HOST=%s): %w", d.cli.DaemonHost(), err)
	}
	c.Details = append(c.Details, fmt.Sprintf("engine %s (API %s) at %s", v.Version, v.APIVersion, d.cli.DaemonHost()))
	if d.runtime != "" {
		c.Details = append(c.Details, "runtime "+d.runtime)
		if d.runtime == "runsc" {
			c.Isolation += "; gVisor: the code's system calls go to gVisor's kernel, not the host's"
		}
	} else {
		c.Warnings = append(c.Warnings, "runc shares the host's kernel with the code; TRELLIS_SANDBOX_RUNTIME=runsc runs it under gVisor")
	}
	if len(d.reaped) > 0 {
		c.Details = append(c.Details, "removed at start-up, left by processes that are gone: "+strings.Join(d.reaped, ", "))
	}
	return c, nil
}

// CheckImage reports whether the engine has image.
func (d *Docker) CheckImage(ctx context.Context, image string) error {
	if _, err := d.cli.ImageInspect(ctx, image); err != nil {
		return fmt.Errorf("image %s: %w (build it with make sandbox-image)", image, err)
	}
	return nil
}

// launcher is the container's first process. Not dumpable, and deaf to
// every signal the code may send it, it waits on stdin for one line (the
// wall time left, the command of the execution's first process and a
// nonce), starts that process with the container's stdio and lets go of
// its own; when the process ends it kills what is left, reports how the
// process ended as the last line of stdout and of stderr, with the nonce
// (which the code never sees, so that a report it prints of its own is
// not taken for the launcher's), and then keeps the container for the
// execution's later processes until the wall time, when it ends
// everything. If stdin ends first (trellis is gone), it ends.
const launcher = `import ctypes, json, os, signal, threading, time
try:
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
except Exception:
    pass
caught = [s for s in signal.Signals if s not in (signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD)]
for s in caught:
    try:
        signal.signal(s, signal.SIG_IGN)
    except (OSError, ValueError):
        pass
line = b""
while not line.endswith(b"\n"):
    c = os.read(0, 1)
    if not c:
        os._exit(0)
    line += c
job = json.loads(line)
end = time.monotonic() + job["wall"]
pid = os.fork()
if pid == 0:
    try:
        for s in caught:
            try:
                signal.signal(s, signal.SIG_DFL)
            except (OSError, ValueError):
                pass
        os.execvp(job["argv"][0], job["argv"])
    finally:
        os._exit(127)
null = os.open("/dev/null", os.O_RDWR)
os.dup2(null, 0)
def wall():
    time.sleep(max(end - time.monotonic(), 0))
    try:
        os.kill(-1, signal.SIGKILL)
    except OSError:
        pass
    os._exit(0)
threading.Thread(target=wall, daemon=True).start()
while True:
    try:
        _, status = os.waitpid(pid, 0)
        break
    except InterruptedError:
        pass
try:
    os.kill(-1, signal.SIGKILL)
except OSError:
    pass
report = {"code": os.WEXITSTATUS(status)} if os.WIFEXITED(status) else {"signal": os.WTERMSIG(status)}
line = b"\n\x1etrellis exit " + job["nonce"].encode() + b" " + json.dumps(report).encode() + b"\n"
for fd in (1, 2):
    try:
        os.write(fd, line)
    except OSError:
        pass
os.dup2(null, 1)
os.dup2(null, 2)
while True:
    try:
        os.waitpid(-1, 0)
    except ChildProcessError:
        time.sleep(0.2)
    except InterruptedError:
        pass
`

// exitFrame starts the launcher's last line on stdout and stderr, which
// goes on with the process's nonce: exitFrame+nonce+" "+report.
const exitFrame = "\n\x1etrellis exit "

// watch passes a stream on and calls seen once the launcher's last line
// (starting with frame) has come whole.
type watch struct {
	w     io.Writer
	frame []byte
	tail  []byte
	done  bool
	seen  func()
}

func (w *watch) Write(p []byte) (int, error) {
	n, err := w.w.Write(p)
	if !w.done {
		w.tail = append(w.tail, p...)
		if len(w.tail) > 512 {
			w.tail = w.tail[len(w.tail)-512:]
		}
		if i := bytes.LastIndex(w.tail, w.frame); i >= 0 && bytes.IndexByte(w.tail[i+len(w.frame):], '\n') >= 0 {
			w.done = true
			w.seen()
		}
	}
	return n, err
}

// killLeftovers is the preamble of every exec'd process: it kills what
// the process before left running (the container's first process is
// spared: the first of its PID namespace) and runs the process.
const killLeftovers = `kill -9 -1 2>/dev/null; exec "$@"`

func (d *Docker) create(ctx context.Context, image string, lim Limits) (string, error) {
	cpu := lim.cpuSeconds()
	pids := int64(lim.Processes)
	if d.runtime == "runsc" {
		// gVisor's own threads count too
		pids += runscThreads
	}
	hc := &container.HostConfig{
		NetworkMode:    "none",
		ReadonlyRootfs: true,
		Tmpfs: map[string]string{
			"/work": fmt.Sprintf("rw,nosuid,nodev,size=%d,mode=1777", lim.Workspace),
			"/tmp":  "rw,nosuid,nodev,noexec,size=1m,mode=1777",
		},
		CapDrop:     []string{"ALL"},
		SecurityOpt: []string{"no-new-privileges", "seccomp=" + d.profile},
		Runtime:     d.runtime,
		AutoRemove:  true,
		LogConfig:   container.LogConfig{Type: "none"},
		IpcMode:     "private",
		// setting either list replaces Docker's: its defaults, and more
		MaskedPaths:   append(append(slices.Clone(maskedPaths[:10]), "/sys/firmware", "/sys/devices/virtual/powercap"), dockerMasks...),
		ReadonlyPaths: dockerReadonly,
		Resources: container.Resources{
			Memory: lim.Memory, MemorySwap: lim.Memory,
			PidsLimit: ptr(pids),
			NanoCPUs:  1e9,
			Ulimits: []*container.Ulimit{
				{Name: "cpu", Soft: cpu, Hard: cpu + 1},
				{Name: "fsize", Soft: lim.FileSize, Hard: lim.FileSize},
				{Name: "core", Soft: 0, Hard: 0},
				{Name: "nofile", Soft: 256, Hard: 256},
			},
		},
	}
	cfg := &container.Config{
		Image: image, User: "65534:65534", WorkingDir: "/work",
		Cmd:       []string{"python3", "-I", "-S", "-c", launcher},
		OpenStdin: true, StdinOnce: true, AttachStdin: true, AttachStdout: true, AttachStderr: true,
		NetworkDisabled: true, Labels: map[string]string{label: "1", ownerLabel: d.owner},
		Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/work", "LANG=C.UTF-8", "TMPDIR=/work"},
	}
	resp, err := d.cli.ContainerCreate(ctx, cfg, hc, nil, nil, "")
	if err != nil {
		return "", fmt.Errorf("creating the sandbox container: %w", engineErr(ctx, err))
	}
	d.mu.Lock()
	d.made[resp.ID] = true
	d.mu.Unlock()
	return resp.ID, nil
}

// engineErr says that the engine did not answer in time, when that is
// why a call failed.
func engineErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("the Docker engine did not answer in time: %w", err)
	}
	return err
}

// dockerSession is one execution's container.
type dockerSession struct {
	d        *Docker
	image    string
	lim      Limits
	deadline time.Time

	mu    sync.Mutex
	box   *box
	first bool // the next process is the first: the launcher starts it
	// spent says that the launcher has not reported the end of the first
	// process: it still waits for it, and once it ends kills every
	// process of the container, whenever it next gets to run (on a loaded
	// machine, that may be when a later process already runs). The next
	// process gets another container.
	spent  bool
	closed bool
}

// Run implements Session.
func (s *dockerSession) Run(ctx context.Context, p *Proc) (*Outcome, error) {
	lim := s.lim
	left := time.Until(s.deadline)
	if left <= 0 {
		return &Outcome{Exit: -1, Limit: LimitWall}, nil
	}
	limit := left
	if p.Time > 0 && p.Time < limit {
		limit = p.Time
	}
	// every engine call ends with the process's time (and a grace), or
	// with ctx: an engine that does not answer holds nothing up
	ectx, cancel := context.WithTimeout(ctx, limit+engineGrace)
	defer cancel()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errClosed
	}
	first, spent, b := s.first, s.spent, s.box
	s.first, s.spent = false, false
	s.mu.Unlock()
	// renew gives this process a container of its own in place of b: a
	// warm one when one is ready (warm), else a new one
	renew := func(warm bool) error {
		s.d.discard(b)
		var nb *box
		var err error
		if warm {
			nb, err = s.d.container(ectx, s.image, lim)
		} else {
			nb, err = s.d.startNew(ectx, s.image, lim)
		}
		if err != nil {
			return ctxErr(ctx, fmt.Errorf("the sandbox process: %w", err))
		}
		s.mu.Lock()
		s.box, b = nb, nb
		s.mu.Unlock()
		first = true
		return nil
	}
	switch {
	case spent:
		// the launcher still waits for the first process, to kill what
		// runs once it ends: nothing of this container may run beside it
		if err := renew(true); err != nil {
			return nil, err
		}
	case !first:
		// nothing of the process before may reach this one: what it left
		// running is killed, and what it left in the workspace removed,
		// before this one starts
		if err := s.reset(ectx, b.id); err != nil {
			if ectx.Err() != nil {
				return nil, ctxErr(ctx, err)
			}
			// the container is gone (under gVisor the code may end its
			// first process): this process gets another
			if err := renew(true); err != nil {
				return nil, err
			}
		}
	}
	if first && b.warm {
		// a warm container may have died (killed, the engine restarted)
		if ins, err := s.d.cli.ContainerInspect(ectx, b.id); err != nil || ins.State == nil || !ins.State.Running {
			if ectx.Err() != nil {
				return nil, ctxErr(ctx, engineErr(ectx, err))
			}
			if err := renew(false); err != nil {
				return nil, err
			}
		}
	}
	var before counters
	g := s.d.cgroup(b.id)
	if g != nil {
		before = g.counters()
	}
	var stream types.HijackedResponse
	var input []byte
	var ex container.ExecCreateResponse
	// the launcher's report of a first process's end carries its nonce
	tag := nonce()
	frame := []byte(exitFrame + tag + " ")
	if first {
		// the launcher is waiting: one line, then the process's input
		head, err := json.Marshal(map[string]any{"wall": int64((left+time.Second)/time.Second) + 1, "argv": p.Command, "nonce": tag})
		if err != nil {
			return nil, err
		}
		stream, input = b.att, append(append(head, '\n'), p.Stdin...)
	} else {
		opts := container.ExecOptions{
			User: "65534:65534", WorkingDir: "/work", Cmd: append([]string{"/bin/sh", "-c", killLeftovers, "sh"}, p.Command...),
			Env:         []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/work", "LANG=C.UTF-8", "TMPDIR=/work"},
			AttachStdin: true, AttachStdout: true, AttachStderr: true,
		}
		var err error
		if ex, err = s.d.cli.ContainerExecCreate(ectx, b.id, opts); err != nil {
			return nil, ctxErr(ctx, fmt.Errorf("the sandbox process: %w", engineErr(ectx, err)))
		}
		if stream, err = s.d.cli.ContainerExecAttach(ectx, ex.ID, container.ExecAttachOptions{}); err != nil {
			return nil, ctxErr(ctx, fmt.Errorf("attaching to the sandbox process: %w", engineErr(ectx, err)))
		}
		input = p.Stdin
	}
	defer stream.Close()
	start := time.Now()
	go func() {
		_, _ = stream.Conn.Write(input)
		_ = stream.CloseWrite()
	}()
	full := make(chan struct{})
	var fullOnce sync.Once
	stop := func() { fullOnce.Do(func() { close(full) }) }
	stdoutCap := p.Stdout
	if stdoutCap <= 0 {
		stdoutCap = lim.Output
	}
	// the launcher's report ends each of stdout and stderr once the
	// process, and all it started, are gone: the streams themselves do not
	// end while the container stands
	stdout, stderr := &capped{n: stdoutCap + 256, full: stop}, &capped{n: lim.Output + 256, full: stop}
	reported := make(chan struct{})
	var outW, errW io.Writer = stdout, stderr
	if first {
		var seen atomic.Int32
		done := func() {
			if seen.Add(1) == 2 {
				close(reported)
			}
		}
		outW, errW = &watch{w: stdout, frame: frame, seen: done}, &watch{w: stderr, frame: frame, seen: done}
	}
	copied := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(outW, errW, stream.Reader)
		copied <- err
	}()
	timer := time.NewTimer(limit)
	defer timer.Stop()
	var wall, stopped, tooMuch, ended bool
	select {
	case <-copied:
	case <-reported:
		ended = true
		stream.Close()
		<-copied
	case <-full:
		stopped, tooMuch = true, true
	case <-timer.C:
		wall, stopped = true, true
	case <-ctx.Done():
		stopped = true
	}
	if stopped {
		// the process goes on until the next one's reset, or the
		// container's end, kills it; its output is no longer read
		stream.Close()
		<-copied
	}
	if first && !ended {
		// the launcher did not report the process's end: it may yet
		// come, and with it the launcher's kill of every process
		s.mu.Lock()
		s.spent = true
		s.mu.Unlock()
	}
	o := &Outcome{Wall: time.Since(start), Exit: -1, StdoutCut: stdout.cut}
	out, errOut := stdout.buf, stderr.buf
	if ended {
		if i := bytes.LastIndex(out, frame); i >= 0 {
			out = out[:i]
		}
	}
	if int64(len(out)) > stdoutCap {
		out, o.StdoutCut = out[:stdoutCap], true
	}
	o.Stdout = out
	switch {
	case ctx.Err() != nil:
		return o, ctx.Err()
	case stopped:
		o.Signal = "SIGKILL"
	case first:
		// the launcher's report, the stream's last bytes
		if i := bytes.LastIndex(errOut, frame); ended && i >= 0 {
			var st struct{ Code, Signal *int }
			if json.Unmarshal(bytes.TrimSpace(errOut[i+len(frame):]), &st) == nil {
				switch {
				case st.Code != nil:
					o.Exit = *st.Code
				case st.Signal != nil:
					o.Signal = signalName(*st.Signal)
				}
			}
			errOut = errOut[:i]
		}
		if o.Exit < 0 && o.Signal == "" {
			o.Signal = "SIGKILL" // the launcher was ended with it (gVisor lets the code)
		}
	default:
		ictx, icancel := context.WithTimeout(ctx, engineGrace)
		ins, err := s.d.inspectExec(ictx, ex.ID)
		icancel()
		switch {
		case err != nil:
			return nil, ctxErr(ctx, fmt.Errorf("the sandbox process's end: %w", engineErr(ictx, err)))
		case !ins.Running:
			o.Exit, o.Signal = exitStatus(ins.ExitCode)
		}
	}
	o.StderrCut = stderr.cut
	if int64(len(errOut)) > lim.Output {
		errOut, o.StderrCut = errOut[:lim.Output], true
	}
	o.Stderr = errOut
	if g != nil {
		g.measure(o, before)
	}
	switch {
	case wall:
		o.Limit, o.Exit, o.Signal = LimitWall, -1, "SIGKILL"
	case tooMuch:
		o.Limit = LimitOutput
	default:
		o.attribute(lim, g != nil)
	}
	return o, nil
}

// resetScript kills every process of the sandbox's user but itself (the
// container's first process is immune) and empties the workspace.
const resetScript = `kill -9 -1 2>/dev/null; for d in /work /tmp; do cd "$d" && rm -rf -- ./* ./.[!.]* ./..?* 2>/dev/null; done; exit 0`

// reset readies the container for the execution's next process.
func (s *dockerSession) reset(ctx context.Context, id string) error {
	ex, err := s.d.cli.ContainerExecCreate(ctx, id, container.ExecOptions{User: "65534:65534", WorkingDir: "/",
		Cmd: []string{"/bin/sh", "-c", resetScript}, Env: []string{"PATH=/usr/bin:/bin"}})
	if err == nil {
		err = s.d.cli.ContainerExecStart(ctx, ex.ID, container.ExecStartOptions{})
	}
	var ins container.ExecInspect
	if err == nil {
		rctx, cancel := context.WithTimeout(ctx, engineGrace)
		for ins, err = s.d.cli.ContainerExecInspect(rctx, ex.ID); err == nil && ins.Running; ins, err = s.d.cli.ContainerExecInspect(rctx, ex.ID) {
			select {
			case <-rctx.Done():
				err = rctx.Err()
			case <-time.After(2 * time.Millisecond):
			}
		}
		cancel()
	}
	switch {
	case err != nil:
		return fmt.Errorf("resetting the sandbox for the next process: %w", engineErr(ctx, err))
	case ins.ExitCode != 0:
		return fmt.Errorf("resetting the sandbox for the next process: exit status %d", ins.ExitCode)
	}
	return nil
}

// ctxErr is ctx's error when it ended, else err.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// Close implements Session: the container is killed and removed in the
// background.
func (s *dockerSession) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	b := s.box
	s.mu.Unlock()
	s.d.mu.Lock()
	delete(s.d.open, s)
	s.d.mu.Unlock()
	s.d.discard(b)
	return nil
}

// inspectExec waits briefly for the engine to record the process's end.
func (d *Docker) inspectExec(ctx context.Context, id string) (container.ExecInspect, error) {
	for i := 0; ; i++ {
		ins, err := d.cli.ContainerExecInspect(ctx, id)
		if err != nil || !ins.Running || i == 100 {
			return ins, err
		}
		select {
		case <-ctx.Done():
			return ins, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

// cgroup is the container's cgroups when the engine runs on this machine
// (v1 with the cgroupfs driver, or v2), else nil.
func (d *Docker) cgroup(id string) *jobGroup {
	v1 := filepath.Join(cgroupRoot, "memory", "docker", id)
	if _, err := os.Stat(v1); err == nil {
		return &jobGroup{c: &cgroups{version: "v1"}, dirs: map[string]string{"memory": v1,
			"pids": filepath.Join(cgroupRoot, "pids", "docker", id), "cpuacct": filepath.Join(cgroupRoot, "cpuacct", "docker", id)}}
	}
	for _, v2 := range []string{filepath.Join(cgroupRoot, "system.slice", "docker-"+id+".scope"), filepath.Join(cgroupRoot, "docker", id)} {
		if _, err := os.Stat(filepath.Join(v2, "memory.peak")); err == nil {
			return &jobGroup{c: &cgroups{version: "v2"}, dirs: map[string]string{"": v2}}
		}
	}
	return nil
}

// discard kills a container at once, with whatever it runs, and removes
// it, in the background (a minute at most).
func (d *Docker) discard(b *box) {
	if b == nil {
		return
	}
	if b.att.Conn != nil {
		b.att.Close()
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		d.remove(ctx, b.id)
	}()
}

// remove removes a container and returns once it is gone (or ctx ends).
func (d *Docker) remove(ctx context.Context, id string) {
	for i := range 3 {
		err := d.cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true})
		switch {
		case err == nil || cerrdefs.IsNotFound(err) || ctx.Err() != nil:
			return
		case cerrdefs.IsConflict(err):
			// its removal is already under way (the engine's auto-remove,
			// once the container's first process ended): it is done
			// when the container is gone, and tried again if it failed
			waited, failed := d.cli.ContainerWait(ctx, id, container.WaitConditionRemoved)
			select {
			case <-waited:
				continue
			case err := <-failed:
				if err == nil || cerrdefs.IsNotFound(err) || ctx.Err() != nil {
					return
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(i+1) * 100 * time.Millisecond):
		}
	}
}

// Spares lists the warm containers ready, of every image and set of
// limits (after those being started are).
func (d *Docker) Spares() []string {
	d.wg.Wait()
	d.mu.Lock()
	defer d.mu.Unlock()
	var ids []string
	for _, l := range d.spares {
		for _, b := range l {
			ids = append(ids, b.id)
		}
	}
	return ids
}

// Leftovers lists the containers this backend made that still exist,
// but for its warm ones (none, once every execution has ended).
func (d *Docker) Leftovers(ctx context.Context) ([]string, error) {
	d.wg.Wait() // spares being started, containers being removed
	list, err := d.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", ownerLabel+"="+d.owner))})
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	spare := map[string]bool{}
	for _, l := range d.spares {
		for _, b := range l {
			spare[b.id] = true
		}
	}
	var ids []string
	for _, c := range list {
		if d.made[c.ID] && !spare[c.ID] {
			ids = append(ids, c.ID)
		}
	}
	return ids, nil
}

// Reap removes the sandbox containers that processes of this machine,
// now gone, left behind (on this boot; those of other machines sharing
// the engine are theirs to remove).
func (d *Docker) Reap(ctx context.Context) ([]string, error) {
	list, err := d.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", label))})
	if err != nil {
		return nil, err
	}
	var gone []string
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, c := range list {
		boot, o, ok := strings.Cut(c.Labels[ownerLabel], "/")
		if !ok || boot != bootID() || o == string(self()) || owner(o).alive() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.remove(ctx, c.ID)
			mu.Lock()
			gone = append(gone, c.ID[:12])
			mu.Unlock()
		}()
	}
	wg.Wait()
	slices.Sort(gone)
	return gone, nil
}

func ptr[T any](v T) *T { return &v }
