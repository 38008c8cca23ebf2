package sandbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Local runs jobs on this machine without a container engine: bubblewrap
// puts each in new namespaces (no network, its own processes, users,
// mounts), with the language runtime's files read-only, a small tmpfs as
// its workspace, no environment and no capabilities, as an unprivileged
// user; prlimit bounds each process's CPU time and file size, and cgroups
// (v1 or v2, when this process may create them) bound and measure the
// job's memory and processes. It isolates less than a container engine
// does (the host's kernel is shared with no seccomp filter, and without
// cgroups memory and processes are not bounded): for machines with no
// engine and for development.
type Local struct {
	bwrap, prlimit string
	cg             *cgroups // nil: none may be created here
	id             string   // prefixes the ids of this backend's jobs
}

func haveBwrap() bool {
	_, err := exec.LookPath("bwrap")
	return err == nil
}

// NewLocal returns the local backend; it fails when bubblewrap or prlimit
// is not installed.
func NewLocal() (*Local, error) {
	bw, err := exec.LookPath("bwrap")
	if err != nil {
		return nil, fmt.Errorf("the local sandbox needs bubblewrap (apt-get install bubblewrap): %w", err)
	}
	pl, err := exec.LookPath("prlimit")
	if err != nil {
		return nil, fmt.Errorf("the local sandbox needs prlimit (util-linux): %w", err)
	}
	return &Local{bwrap: bw, prlimit: pl, cg: findCgroups(), id: newID()[:8]}, nil
}

// Name implements Backend.
func (l *Local) Name() string { return "local" }

// Close implements Backend.
func (l *Local) Close() error { return nil }

// Check implements Backend: it runs a trivial job.
func (l *Local) Check(ctx context.Context) (*Check, error) {
	c := &Check{Backend: "local", Isolation: "bubblewrap namespaces (user, pid, network, mount, ipc, uts), read-only runtime, tmpfs workspace, no capabilities, prlimit; weaker than a container engine"}
	out, _ := exec.CommandContext(ctx, l.bwrap, "--version").Output()
	c.Details = append(c.Details, strings.TrimSpace(string(out)))
	if l.cg == nil {
		c.Warnings = append(c.Warnings, "no cgroups can be created here: the memory and process limits are not enforced, and peak memory is the largest process's")
	} else {
		c.Details = append(c.Details, "cgroups "+l.cg.version+": memory, processes and CPU time of the whole job")
	}
	o, err := l.Exec(ctx, &Job{Command: []string{"/bin/sh", "-c", "exit 0"}, Limits: Limits{Wall: 10 * time.Second}})
	if err != nil {
		return c, err
	}
	if o.Exit != 0 {
		return c, fmt.Errorf("a trivial job failed (exit %d): %s", o.Exit, short(string(o.Stderr)))
	}
	return c, nil
}

// Exec implements Backend.
func (l *Local) Exec(ctx context.Context, j *Job) (*Outcome, error) {
	lim := j.Limits.withDefaults()
	id := l.id + "-" + newID()
	var cg *jobGroup
	if l.cg != nil {
		var err error
		if cg, err = l.cg.create(id, lim); err != nil {
			return nil, err
		}
		defer cg.remove()
	}
	args := l.bwrapArgs(j.Root, lim)
	// the job's id marks its processes, for Leftovers
	args = append(args, "--setenv", jobEnv, id, "--")
	args = append(args, j.Command...)
	cpu := max(int64(lim.CPU/time.Second), 1)
	// SIGXCPU at the limit, SIGKILL a second later for code that catches it
	pre := []string{fmt.Sprintf("--cpu=%d:%d", cpu, cpu+1), fmt.Sprintf("--fsize=%d", lim.FileSize),
		"--core=0", "--nofile=256"}
	if l.cg == nil && os.Getuid() != 0 {
		pre = append(pre, fmt.Sprintf("--nproc=%d", lim.Processes))
	}
	argv := append(append([]string{l.prlimit}, pre...), append([]string{"--", l.bwrap}, args...)...)
	if cg != nil {
		// the job joins its cgroups before anything of it runs
		argv = append([]string{"/bin/sh", "-c", cg.joinScript() + `exec "$@"`, "sh"}, argv...)
	}
	wctx, cancel := context.WithTimeout(ctx, lim.Wall)
	defer cancel()
	cmd := exec.CommandContext(wctx, argv[0], argv[1:]...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error {
		// bwrap dies, the sandbox's first process with it (die-with-parent),
		// and its pid namespace with that; the cgroup sweep is for certain
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		if cg != nil {
			cg.kill()
		}
		return nil
	}
	cmd.WaitDelay = time.Second
	stdout, stderr := &capped{n: lim.Output}, &capped{n: lim.Output}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(j.Stdin), stdout, stderr
	start := time.Now()
	err := cmd.Run()
	o := &Outcome{Wall: time.Since(start), Stdout: stdout.buf, Stderr: stderr.buf, StdoutCut: stdout.cut, StderrCut: stderr.cut}
	if cg != nil {
		cg.kill()
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee), errors.Is(err, exec.ErrWaitDelay):
	default:
		if wctx.Err() == nil {
			return nil, fmt.Errorf("starting the sandbox: %w", err)
		}
	}
	if ps := cmd.ProcessState; ps != nil {
		if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
			o.CPU = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
			o.Memory = ru.Maxrss << 10
		}
		ws := ps.Sys().(syscall.WaitStatus)
		switch {
		case ws.Signaled():
			o.Exit, o.Signal = -1, signalName(int(ws.Signal()))
		case ws.Exited() && ws.ExitStatus() > 128 && ws.ExitStatus() < 128+32:
			// bubblewrap exits 128+n when a signal ended the job
			o.Exit, o.Signal = -1, signalName(ws.ExitStatus()-128)
		default:
			o.Exit = ps.ExitCode()
		}
	}
	if cg != nil {
		cg.measure(o)
	}
	switch {
	case wctx.Err() != nil && ctx.Err() == nil:
		o.Limit, o.Exit = LimitWall, -1
	case ctx.Err() != nil:
		return o, ctx.Err()
	default:
		o.attribute(lim)
	}
	return o, nil
}

const jobEnv = "TRELLIS_SANDBOX_JOB"

// Leftovers lists what this backend's jobs left behind: processes and
// cgroups (none, once every job has ended).
func (l *Local) Leftovers() []string {
	var left []string
	if l.cg != nil {
		for _, parent := range l.cg.dirs {
			entries, _ := os.ReadDir(parent)
			for _, e := range entries {
				if e.IsDir() && strings.HasPrefix(e.Name(), l.id+"-") {
					left = append(left, "cgroup "+filepath.Join(parent, e.Name()))
				}
			}
		}
	}
	mark := []byte(jobEnv + "\x00" + l.id + "-")
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		if cmd, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline")); err == nil && bytes.Contains(cmd, mark) {
			left = append(left, "process "+p.Name()+": "+short(strings.ReplaceAll(string(cmd), "\x00", " ")))
		}
	}
	return left
}

// bwrapArgs isolates a job: root is the tree holding the language
// runtime ("" is this machine's).
func (l *Local) bwrapArgs(root string, lim Limits) []string {
	if root == "" {
		root = "/"
	}
	a := []string{"--unshare-all", "--unshare-user", "--die-with-parent", "--new-session", "--disable-userns",
		"--uid", "65534", "--gid", "65534", "--hostname", "sandbox", "--cap-drop", "ALL",
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
	return append(a, "--proc", "/proc", "--dev", "/dev", "--remount-ro", "/dev",
		"--size", strconv.FormatInt(lim.Workspace, 10), "--tmpfs", "/work",
		"--size", strconv.FormatInt(1<<20, 10), "--tmpfs", "/tmp",
		"--remount-ro", "/", "--chdir", "/work")
}

func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// cgroups is where this process may create cgroups for its jobs.
type cgroups struct {
	version string // v1 or v2
	// dirs are the parent directories of the jobs' groups: one per
	// controller (memory, pids, cpuacct) on v1, one on v2
	dirs map[string]string
}

const cgroupRoot = "/sys/fs/cgroup"

// findCgroups finds where job cgroups can be made, or nil.
func findCgroups() *cgroups {
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err == nil {
		// v2: a group beside this process's, when its parent delegates
		// the memory and pids controllers
		dir := filepath.Join(cgroupRoot, "trellis-sandbox")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil
		}
		_ = os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+memory +pids +cpu"), 0)
		ctl, _ := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
		if !strings.Contains(string(ctl), "memory") || !strings.Contains(string(ctl), "pids") {
			return nil
		}
		return &cgroups{version: "v2", dirs: map[string]string{"": dir}}
	}
	c := &cgroups{version: "v1", dirs: map[string]string{}}
	for _, ctl := range []string{"memory", "pids", "cpuacct"} {
		dir := filepath.Join(cgroupRoot, ctl, "trellis-sandbox")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			if ctl == "cpuacct" {
				continue
			}
			return nil
		}
		c.dirs[ctl] = dir
	}
	return c
}

// jobGroup is one job's cgroups.
type jobGroup struct {
	c    *cgroups
	dirs map[string]string
}

func (c *cgroups) create(id string, lim Limits) (*jobGroup, error) {
	g := &jobGroup{c: c, dirs: map[string]string{}}
	for ctl, parent := range c.dirs {
		d := filepath.Join(parent, id)
		if err := os.Mkdir(d, 0o755); err != nil {
			g.remove()
			return nil, fmt.Errorf("sandbox cgroup: %w", err)
		}
		g.dirs[ctl] = d
	}
	set := func(ctl, file, v string, must bool) error {
		err := os.WriteFile(filepath.Join(g.dirs[ctl], file), []byte(v), 0)
		if err != nil && must {
			g.remove()
			return fmt.Errorf("sandbox cgroup %s: %w", file, err)
		}
		return nil
	}
	mem, pids := strconv.FormatInt(lim.Memory, 10), strconv.Itoa(lim.Processes)
	var err error
	if c.version == "v2" {
		err = errors.Join(set("", "memory.max", mem, true), set("", "memory.swap.max", "0", false), set("", "pids.max", pids, true))
	} else {
		err = errors.Join(set("memory", "memory.limit_in_bytes", mem, true), set("memory", "memory.memsw.limit_in_bytes", mem, false),
			set("memory", "memory.swappiness", "0", false), set("pids", "pids.max", pids, true))
	}
	if err != nil {
		return nil, err
	}
	return g, nil
}

// joinScript is the shell that moves itself into the job's groups.
func (g *jobGroup) joinScript() string {
	var b strings.Builder
	for _, d := range g.dirs {
		fmt.Fprintf(&b, "echo $$ > %s/cgroup.procs || exit 125; ", d)
	}
	return b.String()
}

// kill ends every process left in the job's groups.
func (g *jobGroup) kill() {
	for range 50 {
		left := false
		for _, d := range g.dirs {
			data, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil {
					_ = syscall.Kill(pid, syscall.SIGKILL)
					left = true
				}
			}
		}
		if !left {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// measure reads what the job used and whether it met its memory or
// process limit.
func (g *jobGroup) measure(o *Outcome) {
	read := func(ctl, file string) string {
		b, _ := os.ReadFile(filepath.Join(g.dirs[ctl], file))
		return string(b)
	}
	num := func(s string) int64 {
		n, _ := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		return n
	}
	var oom, pidsMax int64
	if g.c.version == "v2" {
		if n := num(read("", "memory.peak")); n > 0 {
			o.Memory = n
		}
		oom = field(read("", "memory.events"), "oom_kill")
		pidsMax = field(read("", "pids.events"), "max")
		if us := field(read("", "cpu.stat"), "usage_usec"); us > 0 {
			o.CPU = time.Duration(us) * time.Microsecond
		}
	} else {
		if n := num(read("memory", "memory.max_usage_in_bytes")); n > 0 {
			o.Memory = n
		}
		oom = field(read("memory", "memory.oom_control"), "oom_kill")
		if oom == 0 && num(read("memory", "memory.failcnt")) > 0 && o.Signal == "SIGKILL" {
			oom = 1
		}
		pidsMax = field(read("pids", "pids.events"), "max")
		if _, ok := g.dirs["cpuacct"]; ok {
			if ns := num(read("cpuacct", "cpuacct.usage")); ns > 0 {
				o.CPU = time.Duration(ns)
			}
		}
	}
	switch {
	case oom > 0:
		o.Limit = LimitMemory
	case pidsMax > 0:
		o.Limit = LimitProcesses
	}
}

// field reads "name N" from a cgroup key-value file.
func field(text, name string) int64 {
	for _, line := range strings.Split(text, "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == name {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// remove deletes the job's groups (they are empty once killed).
func (g *jobGroup) remove() {
	for _, d := range g.dirs {
		for range 50 {
			if err := os.Remove(d); err == nil || errors.Is(err, os.ErrNotExist) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
