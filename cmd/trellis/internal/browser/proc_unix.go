//go:build unix

package browser

import (
	"os/exec"
	"syscall"
)

// ownGroup starts chromium in a process group of its own, so that
// stopping it stops the processes it started too.
func ownGroup(cmd *exec.Cmd) { cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} }

func kill(cmd *exec.Cmd) {
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	_ = cmd.Process.Kill()
}
