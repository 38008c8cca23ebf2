package sandbox

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Local runs executions on this machine without a container engine: each
// process of an execution is started by bubblewrap in new namespaces (no
// network, its own processes, users, mounts, IPC and host name), in a PID
// namespace of its own whose first process (localInit: holding nothing,
// not dumpable) starts it and ends with it, and with that everything it
// started (nothing else of the sandbox runs beside it), with the
// language runtime's files read-only, a fresh small tmpfs as its
// workspace, no environment, no capabilities and no new privileges,
// under a seccomp filter (seccompProgram) and with the /proc files that
// tell of the host masked as Docker masks them. When trellis runs as
// root the sandbox's user is the overflow user (65534, nobody) on the
// host too, so its files, inotify and process counts are nobody's, never
// those of the user running trellis. rlimits bound each process's CPU
// time and file size, and cgroups (v1 or v2, when this process may make
// them) bound and measure the execution's memory and processes. It
// shares the host's kernel, as any container does without gVisor: for
// machines with no engine and for development.
type Local struct {
	bwrap   string
	prlimit string
	cg      *cgroups // nil: none may be made here
	owner   owner
	seccomp []byte
	// cred is the host user the sandbox runs as (nil: this process's)
	cred *syscall.Credential

	mu     sync.Mutex
	open   map[*localSession]bool
	closed bool
	reaped []string
	roots  sync.Map // root → error (nil: the sandbox user reaches it)
	inits  sync.Map // root → its init
}

// sandboxUser is the sandbox's user, inside and, when trellis runs as
// root, outside: the kernel's overflow user.
const sandboxUser = 65534

// localInit is the first process of each sandbox: the shell starts the
// process with the sandbox's stdio, lets go of its own, waits for it and
// ends with its status, and with the first process everything of the
// sandbox ends. The process itself is not the first of its PID
// namespace, which the kernel's SIGXCPU and SIGXFSZ would not end.
const localInit = `exec 3<&0; "$@" <&3 3<&- & exec </dev/null >/dev/null 2>&1 3<&-; wait $!`

// init is the sandbox's first process for the tree at root: a copy of its
// shell that the sandbox's user may run but not read, so that the
// process running it is not dumpable (nothing of it can be read or
// written through /proc by the code beside it).
func (l *Local) init(root string) (string, error) {
	if v, ok := l.inits.Load(root); ok {
		return v.(string), nil
	}
	src, err := filepath.EvalSymlinks(filepath.Join(cmp.Or(root, "/"), "bin", "sh"))
	if err != nil {
		return "", fmt.Errorf("the sandbox's shell: %w", err)
	}
	if root != "" && !strings.HasPrefix(src, filepath.Clean(root)+"/") {
		// an absolute link in the tree: the same path in the tree
		if src, err = filepath.EvalSymlinks(filepath.Join(root, src)); err != nil {
			return "", fmt.Errorf("the sandbox's shell: %w", err)
		}
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return "", fmt.Errorf("the sandbox's shell: %w", err)
	}
	sum := sha256.Sum256(data)
	dir := "/run/trellis-sandbox"
	if l.cred == nil {
		dir = filepath.Join(os.TempDir(), fmt.Sprintf("trellis-sandbox-%d", os.Getuid()))
	}
	path := filepath.Join(dir, "init-"+hex.EncodeToString(sum[:8]))
	if fi, err := os.Stat(path); err != nil || fi.Size() != int64(len(data)) || fi.Mode().Perm() != 0o711 {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", fmt.Errorf("the sandbox's shell: %w", err)
		}
		_ = os.Chmod(dir, 0o755)
		tmp, err := os.CreateTemp(dir, ".init-")
		if err == nil {
			_, err = tmp.Write(data)
			err = errors.Join(err, tmp.Chmod(0o711), tmp.Close())
			if err == nil {
				err = os.Rename(tmp.Name(), path)
			}
			if err != nil {
				os.Remove(tmp.Name())
			}
		}
		if err != nil {
			return "", fmt.Errorf("the sandbox's shell: %w", err)
		}
	}
	l.inits.Store(root, path)
	return path, nil
}

// ownerEnv names the owner in the environment of bubblewrap (outside the
// sandbox), so that what it leaves is found.
const ownerEnv = "TRELLIS_SANDBOX_OWNER"

func haveBwrap() bool {
	_, err := exec.LookPath("bwrap")
	return err == nil
}

// NewLocal returns the local backend; it fails when bubblewrap is not
// installed. It first removes what executions of processes that are gone
// left behind (Reaped lists it).
func NewLocal() (*Local, error) {
	bw, err := exec.LookPath("bwrap")
	if err != nil {
		return nil, fmt.Errorf("the local sandbox needs bubblewrap (apt-get install bubblewrap): %w", err)
	}
	pl, err := exec.LookPath("prlimit")
	if err != nil {
		return nil, fmt.Errorf("the local sandbox needs prlimit (util-linux): %w", err)
	}
	l := &Local{bwrap: bw, prlimit: pl, cg: findCgroups(), owner: self(), seccomp: seccompProgram(), open: map[*localSession]bool{}}
	if os.Geteuid() == 0 {
		l.cred = &syscall.Credential{Uid: sandboxUser, Gid: sandboxUser, Groups: []uint32{}}
	}
	l.reaped = l.reap()
	return l, nil
}

// Name implements Backend.
func (l *Local) Name() string { return "local" }

// Reaped lists what the backend removed when it was made: processes and
// cgroups of executions whose owner is gone.
func (l *Local) Reaped() []string { return l.reaped }

// Close implements Backend: the executions still open are ended.
func (l *Local) Close() error {
	l.mu.Lock()
	l.closed = true
	var open []*localSession
	for s := range l.open {
		open = append(open, s)
	}
	l.mu.Unlock()
	for _, s := range open {
		_ = s.Close()
	}
	return nil
}

// Check implements Backend: it runs a trivial job.
func (l *Local) Check(ctx context.Context) (*Check, error) {
	c := &Check{Backend: "local", Isolation: "bubblewrap: each process alone in new user, PID, network, mount, IPC and UTS namespaces, read-only runtime, a tmpfs workspace, no capabilities, no new privileges, a seccomp filter, /proc masked as Docker masks it; the host's kernel is shared"}
	out, _ := exec.CommandContext(ctx, l.bwrap, "--version").Output()
	c.Details = append(c.Details, strings.TrimSpace(string(out)))
	if l.cred != nil {
		c.Details = append(c.Details, fmt.Sprintf("sandbox user %d inside and on the host", sandboxUser))
	} else {
		c.Warnings = append(c.Warnings, fmt.Sprintf("trellis is not root: the sandbox's user is uid %d on the host, the user running trellis, whose files the code can read where the tree lets it", os.Getuid()))
	}
	if l.seccomp == nil {
		c.Warnings = append(c.Warnings, "no seccomp filter on this architecture")
	}
	if l.cg == nil {
		c.Warnings = append(c.Warnings, "no cgroups can be made here: the memory limit is not enforced, the process limit is the sandbox user's, and peak memory is the largest process's")
	} else {
		c.Details = append(c.Details, "cgroups "+l.cg.version+": memory, processes and CPU time of the whole execution")
	}
	if len(l.reaped) > 0 {
		c.Details = append(c.Details, fmt.Sprintf("removed at start-up, left by processes that are gone: %s", strings.Join(l.reaped, "; ")))
	}
	o, err := l.exec(ctx, &Job{Command: []string{"/bin/sh", "-c", "exit 0"}, Limits: Limits{Wall: 10 * time.Second}})
	if err != nil {
		return c, err
	}
	if o.Exit != 0 {
		return c, fmt.Errorf("a trivial job failed (exit %d): %s", o.Exit, short(string(o.Stderr)))
	}
	return c, nil
}

func (l *Local) exec(ctx context.Context, j *Job) (*Outcome, error) {
	s, err := l.Start(ctx, Spec{Root: j.Root, Limits: j.Limits})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return s.Run(ctx, &Proc{Command: j.Command, Stdin: j.Stdin})
}

// Start implements Backend.
func (l *Local) Start(ctx context.Context, spec Spec) (Session, error) {
	if err := l.reachable(spec.Root); err != nil {
		return nil, err
	}
	s := &localSession{l: l, root: spec.Root, lim: spec.Limits.withDefaults(), id: string(l.owner) + "-" + newID()}
	if l.cg != nil {
		var err error
		if s.cg, err = l.cg.create(s.id, s.lim); err != nil {
			return nil, err
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		if s.cg != nil {
			s.cg.remove()
		}
		return nil, errClosed
	}
	l.open[s] = true
	return s, nil
}

// localSession is one execution: its limits, its cgroups and the time
// its processes have run.
type localSession struct {
	l    *Local
	root string
	lim  Limits
	id   string
	cg   *jobGroup // nil: no cgroups here

	mu     sync.Mutex
	closed bool
	run    *exec.Cmd // the process running, if one is
	// used is the time its processes have run, which its wall time
	// bounds
	used time.Duration
}

// Close implements Session.
func (s *localSession) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	if s.run != nil && s.run.Process != nil {
		_ = syscall.Kill(-s.run.Process.Pid, syscall.SIGKILL)
	}
	s.mu.Unlock()
	if s.cg != nil {
		s.cg.kill()
		s.cg.remove()
	}
	s.l.mu.Lock()
	delete(s.l.open, s)
	s.l.mu.Unlock()
	return nil
}

// Run implements Session: bubblewrap starts the process, which waits
// (--block-fd) until it is in the execution's cgroups and under its
// rlimits; only then does it run.
func (s *localSession) Run(ctx context.Context, p *Proc) (*Outcome, error) {
	lim := s.lim
	s.mu.Lock()
	left := lim.Wall - s.used
	s.mu.Unlock()
	if left <= 0 {
		return &Outcome{Exit: -1, Limit: LimitWall}, nil
	}
	limit := left
	if p.Time > 0 && p.Time < limit {
		limit = p.Time
	}
	var files []*os.File
	pipe := func() (r, w *os.File, err error) {
		if r, w, err = os.Pipe(); err == nil {
			files = append(files, r, w)
		}
		return r, w, err
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	statusR, statusW, err := pipe()
	if err != nil {
		return nil, err
	}
	blockR, blockW, err := pipe()
	if err != nil {
		return nil, err
	}
	init, err := s.l.init(s.root)
	if err != nil {
		return nil, err
	}
	extra := []*os.File{statusW, blockR}
	args := append(s.l.bwrapArgs(s.root, init, lim), "--json-status-fd", "3", "--block-fd", "4")
	var secW *os.File
	if s.l.seccomp != nil {
		var secR *os.File
		if secR, secW, err = pipe(); err != nil {
			return nil, err
		}
		extra = append(extra, secR)
		args = append(args, "--seccomp", "5")
	}
	args = append(append(args, "--", "/.init", "-c", localInit, "sh"), p.Command...)
	// prlimit sets the rlimits and becomes bubblewrap, whose environment
	// (never the sandbox's: --clearenv) names its owner
	cmd := exec.Command(s.l.prlimit, append(append(s.rlimits(), "--", s.l.bwrap), args...)...)
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/bin:/bin", ownerEnv + "=" + string(s.l.owner)}
	cmd.ExtraFiles = extra
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: s.l.cred}
	var once sync.Once
	var stopped atomic.Bool
	kill := func() {
		once.Do(func() {
			stopped.Store(true)
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		})
	}
	stdoutCap := p.Stdout
	if stdoutCap <= 0 {
		stdoutCap = lim.Output
	}
	stdout := &capped{n: stdoutCap, full: func() { go kill() }}
	stderr := &capped{n: lim.Output, full: func() { go kill() }}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(p.Stdin), stdout, stderr
	cmd.WaitDelay = time.Second

	// what this process inherited stays with it
	if err := closeInherited(); err != nil {
		return nil, fmt.Errorf("starting the sandbox: %w", err)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errClosed
	}
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		return nil, fmt.Errorf("starting the sandbox: %w", err)
	}
	s.run = cmd
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.run = nil
		s.mu.Unlock()
	}()
	statusW.Close()
	blockR.Close()
	if secW != nil {
		// bubblewrap reads the whole program before it starts the sandbox
		_, _ = secW.Write(s.l.seccomp)
		secW.Close()
	}
	status := bufio.NewReader(statusR)
	child := childPid(status)
	var before counters
	if s.cg != nil {
		before = s.cg.counters()
	}
	if child > 0 {
		err = s.confine(child)
	}
	if child <= 0 || err != nil {
		kill()
		_ = cmd.Wait()
		reapChild(child)
		if err == nil {
			err = fmt.Errorf("bubblewrap: %s", short(string(stderr.buf)))
		}
		return nil, fmt.Errorf("starting the sandbox: %w", err)
	}
	start := time.Now()
	_, _ = blockW.Write([]byte{1})
	blockW.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var wall bool
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case err = <-exited:
	case <-timer.C:
		wall = true
		kill()
		err = <-exited
	case <-ctx.Done():
		kill()
		err = <-exited
	}
	o := &Outcome{Wall: time.Since(start), Stdout: stdout.buf, Stderr: stderr.buf, StdoutCut: stdout.cut, StderrCut: stderr.cut}
	s.mu.Lock()
	s.used += o.Wall
	s.mu.Unlock()
	// the sandbox's first process is bubblewrap's child: when bubblewrap
	// was killed first it is this process's to reap, if this process is a
	// subreaper or PID 1
	if stopped.Load() {
		_ = syscall.Kill(child, syscall.SIGKILL)
	}
	if s.cg != nil {
		s.cg.kill()
	}
	reapChild(child)
	st := readExit(status)
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) && !errors.Is(err, exec.ErrWaitDelay) && !stopped.Load() {
		return nil, fmt.Errorf("running the sandbox: %w", err)
	}
	if ps := cmd.ProcessState; ps != nil {
		if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
			o.CPU = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
			o.Memory = ru.Maxrss << 10
		}
	}
	switch {
	case st.ok:
		o.Exit, o.Signal = exitStatus(st.code)
	case stopped.Load():
		o.Exit, o.Signal = -1, "SIGKILL"
	default:
		// the process had not started: bubblewrap failed to set it up
		return nil, fmt.Errorf("starting the sandbox: bubblewrap: %s", short(string(stderr.buf)))
	}
	if s.cg != nil {
		s.cg.measure(o, before, stopped.Load())
	}
	// the kernel's records (measure) name a limit first; the wall time,
	// which a loaded machine reaches sooner, only when they name none
	switch {
	case ctx.Err() != nil:
		return o, ctx.Err()
	case wall:
		o.Exit, o.Signal = -1, "SIGKILL"
		if o.Limit == "" {
			o.Limit = LimitWall
		}
	case stopped.Load() && (stdout.cut || stderr.cut) && o.Limit == "":
		o.Limit = LimitOutput
	default:
		o.attribute(lim, true)
	}
	return o, nil
}

// confine puts the sandbox's first process, waiting for its go, into the
// execution's cgroups; what it starts stays in them.
func (s *localSession) confine(pid int) error {
	if s.cg != nil {
		return s.cg.join(pid)
	}
	return nil
}

// rlimits are the prlimit arguments that bound each process: SIGXCPU at
// the CPU limit and SIGKILL a second later (for code that catches it),
// the file size, no core dumps, 256 open files, and with no cgroups the
// sandbox user's processes, the best there is then.
func (s *localSession) rlimits() []string {
	lim := s.lim
	cpu := lim.cpuSeconds()
	a := []string{fmt.Sprintf("--cpu=%d:%d", cpu, cpu+1), fmt.Sprintf("--fsize=%d", lim.FileSize), "--core=0", "--nofile=256"}
	if s.cg == nil {
		a = append(a, fmt.Sprintf("--nproc=%d", lim.Processes))
	}
	return a
}

// childPid reads bubblewrap's first status line: the pid of the sandbox's
// first process, as this machine numbers it (0 when bubblewrap failed).
func childPid(r *bufio.Reader) int {
	line, err := r.ReadBytes('\n')
	if err != nil && len(line) == 0 {
		return 0
	}
	var st struct {
		Pid int `json:"child-pid"`
	}
	if json.Unmarshal(line, &st) != nil {
		return 0
	}
	return st.Pid
}

type exitCode struct {
	code int
	ok   bool
}

// readExit reads bubblewrap's last status line, written only when the
// command did start: its exit status.
func readExit(r *bufio.Reader) exitCode {
	var e exitCode
	for {
		line, err := r.ReadBytes('\n')
		var st struct {
			Code *int `json:"exit-code"`
		}
		if len(line) > 0 && json.Unmarshal(line, &st) == nil && st.Code != nil {
			e = exitCode{*st.Code, true}
		}
		if err != nil {
			return e
		}
	}
}

// reapChild collects pid's exit if it became this process's child, as
// the orphans of the processes it started do when it is PID 1 or a
// subreaper; it does nothing otherwise. The sandbox's first process has
// no business outliving bubblewrap: when it is still running here it is
// killed, and waited for.
func reapChild(pid int) {
	if pid <= 0 {
		return
	}
	for deadline := time.Now().Add(settle); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		var ws unix.WaitStatus
		got, err := unix.Wait4(pid, &ws, unix.WNOHANG|unix.WALL, nil)
		if err != nil || got == pid {
			return // not ours (ECHILD), or collected
		}
		_ = unix.Kill(pid, unix.SIGKILL) // ours, and not yet gone
	}
}

// Leftovers lists what this backend's executions left behind: processes
// and cgroups (none, once every execution has ended).
func (l *Local) Leftovers() []string {
	var left []string
	if l.cg != nil {
		for _, parent := range l.cg.dirs {
			entries, _ := os.ReadDir(parent)
			for _, e := range entries {
				if e.IsDir() && strings.HasPrefix(e.Name(), string(l.owner)+"-") {
					left = append(left, "cgroup "+filepath.Join(parent, e.Name()))
				}
			}
		}
	}
	for _, p := range labelled() {
		if p.owner == l.owner {
			left = append(left, fmt.Sprintf("process %d: %s", p.pid, p.cmd))
		}
	}
	return left
}

type labelledProcess struct {
	pid   int
	owner owner
	cmd   string
}

// labelled lists the bubblewrap processes of every owner.
func labelled() []labelledProcess {
	var out []labelledProcess
	procs, _ := os.ReadDir("/proc")
	mark := []byte(ownerEnv + "=")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", p.Name(), "environ"))
		if err != nil {
			continue
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			if v, ok := bytes.CutPrefix(kv, mark); ok {
				cmd, _ := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
				out = append(out, labelledProcess{pid, owner(v), short(strings.ReplaceAll(string(cmd), "\x00", " "))})
				break
			}
		}
	}
	return out
}

// reap removes what executions of owners that are gone left: their
// bubblewrap processes (whose sandboxes die with them) and their cgroups.
func (l *Local) reap() []string {
	var done []string
	for _, p := range labelled() {
		if p.owner != l.owner && !p.owner.alive() {
			if syscall.Kill(p.pid, syscall.SIGKILL) == nil {
				done = append(done, fmt.Sprintf("process %d of %s", p.pid, p.owner))
			}
		}
	}
	if l.cg != nil {
		for _, parent := range l.cg.dirs {
			entries, _ := os.ReadDir(parent)
			for _, e := range entries {
				o, ok := parseOwner(e.Name())
				if !e.IsDir() || !ok || o == l.owner || o.alive() {
					continue
				}
				g := &jobGroup{c: l.cg, dirs: map[string]string{}}
				for ctl, par := range l.cg.dirs {
					g.dirs[ctl] = filepath.Join(par, e.Name())
				}
				g.kill()
				g.remove()
				done = append(done, "cgroup "+e.Name())
			}
		}
	}
	return dedupe(done)
}

func dedupe(list []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range list {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// reachable checks that the sandbox's user can read the tree at root:
// bubblewrap runs as that user and mounts what it can reach.
func (l *Local) reachable(root string) error {
	if l.cred == nil || root == "" {
		return nil
	}
	if err, ok := l.roots.Load(root); ok {
		if err == nil {
			return nil
		}
		return err.(error)
	}
	var problem error
	abs, err := filepath.Abs(root)
	if err != nil {
		problem = err
	}
	for dir := abs; problem == nil; dir = filepath.Dir(dir) {
		fi, err := os.Stat(dir)
		if err != nil {
			problem = fmt.Errorf("the sandbox's file tree %s: %w", root, err)
			break
		}
		if fi.Mode().Perm()&0o001 == 0 {
			problem = fmt.Errorf("the sandbox's file tree %s cannot be reached by the sandbox's user (uid %d): %s is closed to others (chmod o+x %s, or keep the tree elsewhere)", root, sandboxUser, dir, dir)
		}
		if dir == "/" {
			break
		}
	}
	if problem == nil {
		return nil
	}
	l.roots.Store(root, problem)
	return problem
}

// bwrapArgs isolates a process: root is the tree holding the language
// runtime ("" is this machine's), init the sandbox's first process.
func (l *Local) bwrapArgs(root, init string, lim Limits) []string {
	if root == "" {
		root = "/"
	}
	a := []string{"--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--as-pid-1", "--new-session",
		"--uid", strconv.Itoa(sandboxUser), "--gid", strconv.Itoa(sandboxUser), "--hostname", "sandbox", "--cap-drop", "ALL",
		"--clearenv", "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin", "--setenv", "HOME", "/work",
		"--setenv", "LANG", "C.UTF-8", "--setenv", "TMPDIR", "/work",
		"--ro-bind", filepath.Join(root, "usr"), "/usr"}
	for _, d := range []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32"} {
		p := filepath.Join(root, d)
		fi, err := os.Lstat(p)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			if t, err := os.Readlink(p); err == nil {
				a = append(a, "--symlink", t, "/"+d)
			}
		case fi.IsDir():
			a = append(a, "--ro-bind", p, "/"+d)
		}
	}
	if root == "/" {
		// the host's /etc holds its secrets: only what loading programs needs
		a = append(a, "--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache",
			"--ro-bind-try", "/etc/alternatives", "/etc/alternatives")
	} else {
		a = append(a, "--ro-bind-try", filepath.Join(root, "etc"), "/etc")
	}
	a = append(a, "--proc", "/proc")
	a = append(a, procMasks()...)
	return append(a, "--dev", "/dev", "--remount-ro", "/dev",
		"--size", strconv.FormatInt(lim.Workspace, 10), "--tmpfs", "/work",
		"--size", strconv.FormatInt(1<<20, 10), "--tmpfs", "/tmp",
		"--ro-bind", init, "/.init", "--remount-ro", "/", "--chdir", "/work")
}

// maskedPaths are the /proc paths Docker masks and makes read-only by
// default (moby's oci/defaults.go: MaskedPaths, ReadonlyPaths), and those
// the Docker backend masks besides (dockerMasks). Here all are masked: a
// file by /dev/null, a directory by an empty read-only tmpfs.
var maskedPaths = []string{"/proc/asound", "/proc/acpi", "/proc/interrupts", "/proc/kcore", "/proc/keys",
	"/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
	"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}

// localMasks are what else of /proc tells of the host (its kernel's
// symbols, modules, memory map, devices, locks) or of other tenants,
// masked on the local backend only: the Docker backend keeps Docker's
// view of them.
var localMasks = []string{"/proc/kallsyms", "/proc/config.gz", "/proc/modules", "/proc/key-users",
	"/proc/kmsg", "/proc/kpagecgroup", "/proc/kpagecount", "/proc/kpageflags", "/proc/iomem", "/proc/ioports",
	"/proc/vmallocinfo", "/proc/slabinfo", "/proc/pagetypeinfo", "/proc/zoneinfo", "/proc/buddyinfo", "/proc/mtrr",
	"/proc/dma", "/proc/driver", "/proc/tty", "/proc/misc", "/proc/consoles", "/proc/partitions", "/proc/diskstats",
	"/proc/swaps", "/proc/devices", "/proc/locks", "/proc/execdomains", "/proc/crypto", "/proc/pressure"}

// procMasks are the bubblewrap arguments that mask them, for those this
// kernel has.
var procMasks = sync.OnceValue(func() []string {
	var a, dirs []string
	for _, p := range append(append(append([]string{}, maskedPaths...), dockerMasks...), localMasks...) {
		under := slices.ContainsFunc(dirs, func(d string) bool { return p == d || strings.HasPrefix(p, d+"/") })
		fi, err := os.Lstat(p)
		switch {
		case err != nil || under || slices.Contains(a, p):
		case fi.IsDir():
			dirs = append(dirs, p)
			a = append(a, "--perms", "0555", "--tmpfs", p, "--remount-ro", p)
		default:
			a = append(a, "--ro-bind", "/dev/null", p)
		}
	}
	return a
})

func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
