// What the local sandbox's processes inherit: nothing but their stdio.

package sandbox

import (
	"fmt"
	"math"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// closeInherited marks every descriptor of this process above stderr
// close-on-exec, so that no program it starts inherits one it was not
// handed on purpose (exec.Cmd's ExtraFiles still are: the child clears
// the flag on what it is given). Go opens its own descriptors
// close-on-exec, but not those this process inherited (a supervisor's
// listening socket, its log file) nor those C code opened, and
// bubblewrap hands the sandbox whatever it inherits: sandboxed code
// could accept connections on the host's socket or write to the host's
// log. bubblewrap closes its own (the status, block and seccomp
// descriptors) before the sandbox's process starts.
func closeInherited() error {
	if err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC); err == nil {
		return nil
	}
	// before Linux 5.11: one at a time
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return fmt.Errorf("the descriptors the sandbox would inherit: %w", err)
	}
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd < 3 {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC != 0 {
			continue // the directory's own, closed by now, or marked
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, flags|unix.FD_CLOEXEC); err != nil {
			return fmt.Errorf("the descriptors the sandbox would inherit: %d: %w", fd, err)
		}
	}
	return nil
}
