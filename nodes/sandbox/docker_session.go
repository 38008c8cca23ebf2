// A Docker session: the processes of one execution run in its container,
// the first by the launcher, the rest by exec, and the container is reset
// or given up between them.

package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"
)

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

// dockerSession is one execution's container.
type dockerSession struct {
	d     *Docker
	image string
	lim   Limits

	mu sync.Mutex
	// used is the time its processes have run, which its wall time
	// bounds
	used  time.Duration
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
	// the engine calls end with the engine's time (and the process's),
	// or with ctx: an engine that does not answer holds nothing up
	ectx, cancel := context.WithTimeout(ctx, limit+s.d.engineTimeout())
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
	case !first && s.d.runtime == "runsc":
		// gVisor's kernel shows the reset neither the IPC namespace's
		// message queues (no /dev/mqueue) nor its System V objects (no
		// /proc/sysvipc): each process gets a container of its own
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
		// the launcher ends the container once the execution's wall time
		// and the engine's time for its later processes have passed: a
		// bound for when trellis is gone, which trellis itself removes
		// when the execution ends
		life := left + s.d.engineTimeout()
		head, err := json.Marshal(map[string]any{"wall": int64((life+time.Second)/time.Second) + 1, "argv": p.Command, "nonce": tag})
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
	s.mu.Lock()
	s.used += o.Wall
	s.mu.Unlock()
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
		ictx, icancel := context.WithTimeout(ctx, s.d.engineTimeout())
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
		g.measure(o, before, stopped)
	}
	// the kernel's records (measure) name a limit first; the wall time,
	// which a loaded machine reaches sooner, only when they name none
	switch {
	case wall:
		o.Exit, o.Signal = -1, "SIGKILL"
		if o.Limit == "" {
			o.Limit = LimitWall
		}
	case tooMuch && o.Limit == "":
		o.Limit = LimitOutput
	default:
		o.attribute(lim, g != nil)
	}
	return o, nil
}

// resetScript readies the container for the next process, as the
// sandbox's user: it kills every process but itself (the container's
// first process is immune) and waits until they are gone, empties every
// place a process may write (the workspace, /tmp, /dev/shm), opening
// what the code closed to its own user and however deep it goes, removes
// the IPC namespace's POSIX message queues and System V shared memory,
// message queues and semaphores, and then checks that nothing is left:
// it exits 1, saying what it found, when something is (the next process
// then gets another container).
const resetScript = `import ctypes, os, signal, sys, time
me = os.getpid()
def others():
    return [p for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, me)]
try:
    os.kill(-1, signal.SIGKILL)
except OSError:
    pass
while others():
    time.sleep(0.002)
def clear(top):
    # one directory open at a time, its path kept by name: no depth is
    # too deep for the path or the open files allowed
    fd, path, stuck = os.open(top, os.O_RDONLY | os.O_DIRECTORY), [], set()
    while True:
        down = None
        with os.scandir(fd) as entries:
            for e in entries:
                if e.inode() in stuck:
                    continue
                try:
                    if e.is_dir(follow_symlinks=False):
                        os.chmod(e.name, 0o700, dir_fd=fd)
                        down = e
                        break
                    os.unlink(e.name, dir_fd=fd)
                except OSError:
                    stuck.add(e.inode())
        if down is not None:
            try:
                sub = os.open(down.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError:
                stuck.add(down.inode())
                continue
            os.close(fd)
            fd = sub
            path.append(down.name)
            continue
        if not path:
            break
        ino = os.fstat(fd).st_ino
        up = os.open("..", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = up
        try:
            os.rmdir(path.pop(), dir_fd=fd)
        except OSError:
            stuck.add(ino)
    os.close(fd)
for d in ("/work", "/tmp", "/dev/shm"):
    if os.path.isdir(d):
        clear(d)
for n in os.listdir("/dev/mqueue"):
    try:
        os.unlink("/dev/mqueue/" + n)
    except OSError:
        pass
libc = ctypes.CDLL(None, use_errno=True)
def sysv(kind):
    with open("/proc/sysvipc/" + kind) as f:
        return [int(l.split()[1]) for l in f.read().splitlines()[1:] if l.strip()]
for i in sysv("shm"):
    libc.shmctl(i, 0, None)
for i in sysv("msg"):
    libc.msgctl(i, 0, None)
for i in sysv("sem"):
    libc.semctl(i, 0, 0)
left = ["process " + p for p in others()]
for d in ("/work", "/tmp", "/dev/shm", "/dev/mqueue"):
    if os.path.isdir(d) or d == "/dev/mqueue":
        left += [d + "/" + n for n in os.listdir(d)]
for kind in ("shm", "msg", "sem"):
    left += ["System V %s %d" % (kind, i) for i in sysv(kind)]
if left:
    sys.stderr.write("left: %s\n" % " ".join(left[:20]))
    sys.exit(1)
`

// reset readies the container for the execution's next process.
func (s *dockerSession) reset(ctx context.Context, id string) error {
	ex, err := s.d.cli.ContainerExecCreate(ctx, id, container.ExecOptions{User: "65534:65534", WorkingDir: "/",
		Cmd: []string{"python3", "-I", "-S", "-c", resetScript}, Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"}})
	if err == nil {
		err = s.d.cli.ContainerExecStart(ctx, ex.ID, container.ExecStartOptions{})
	}
	var ins container.ExecInspect
	if err == nil {
		rctx, cancel := context.WithTimeout(ctx, s.d.engineTimeout())
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
