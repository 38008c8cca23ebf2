package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
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
	// EngineTimeout bounds what the engine may take to ready a sandbox:
	// to make and start a container, to reset it between processes and
	// to start each process and report its end (DefaultEngineTimeout when
	// not positive). None of it counts against the execution's wall time,
	// which is the time its processes run: on a loaded machine an engine
	// slow to start a container makes an execution wait, not fail. An
	// engine that does not answer within it fails the execution, saying
	// so.
	EngineTimeout time.Duration

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

// DefaultEngineTimeout is the default of Docker.EngineTimeout.
const DefaultEngineTimeout = time.Minute

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
	// the execution's wall time runs once it has a container, whatever
	// the engine takes to give one
	cctx, cancel := context.WithTimeout(ctx, d.engineTimeout())
	defer cancel()
	var err error
	if s.box, err = d.container(cctx, image, lim); err != nil {
		return nil, err
	}
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

func (d *Docker) engineTimeout() time.Duration {
	if d.EngineTimeout > 0 {
		return d.EngineTimeout
	}
	return DefaultEngineTimeout
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
			c.Warnings = append(c.Warnings, "gVisor's kernel does not enforce the CPU time limit (a busy loop runs to the wall time), and ends code at the memory or process limit without a record on the host to name the limit by")
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

func ptr[T any](v T) *T { return &v }
