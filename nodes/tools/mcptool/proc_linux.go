package mcptool

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel kill a server this process starts when the
// process dies, however it dies: a SIGKILLed trellis leaves no server.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
