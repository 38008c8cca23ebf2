package pgtest

import (
	"os"
	"os/exec"
	"syscall"
)

// A watchdog removes what a server left when the test binary that started
// it is gone before it stopped the server: the binary failed outside a
// test, panicked, was killed by go test's timeout or with SIGKILL. It is a
// shell in a session of its own (a signal to the test's process group
// does not reach it) reading a pipe whose other end only the test binary
// holds: the kernel closes that end when the binary ends, however it
// ends, and the shell's read returns. If the server's directory is still
// there, the shell runs the cleanup command (stopping the server) and
// removes the directory. A server stopped by the test removes its
// directory first and closes the pipe, and the shell ends at once.
//
// Nothing in the test binary waits on it until the server stops: no
// goroutine, no polling.
type watchdog struct {
	cmd *exec.Cmd
	w   *os.File // the end the test binary holds
}

// watchScript is the watchdog: $1 is the directory, the rest the cleanup
// command. cat returns at the pipe's end of file.
const watchScript = `cat >/dev/null; [ -d "$1" ] || exit 0; dir=$1; shift; "$@" >/dev/null 2>&1; rm -rf "$dir"`

// watch starts a watchdog of dir, running as cred (the user the server
// runs as, who owns dir), that runs cleanup if the test binary ends with
// dir still there.
func watch(dir string, cred *syscall.Credential, cleanup ...string) (*watchdog, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cmd := exec.Command("/bin/sh", append([]string{"-c", watchScript, "pgtest-watchdog", dir}, cleanup...)...)
	cmd.Stdin = r
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setsid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, err
	}
	return &watchdog{cmd: cmd, w: w}, nil
}

// release ends the watchdog of a server the test stopped (its directory
// removed): it sees the pipe end, finds no directory and exits.
func (d *watchdog) release() {
	if d == nil {
		return
	}
	d.w.Close()
	_ = d.cmd.Wait()
}
