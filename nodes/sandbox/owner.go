package sandbox

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
)

// Everything an execution leaves on the machine while it runs (a Docker
// container, a cgroup, a bubblewrap process) is labelled with its owner:
// the process that made it, named by its pid and its start time (so that
// a pid used again is not taken for it) on this boot of this machine.
// When a backend is made it removes what owners that are gone left
// behind: a process killed (SIGKILL) mid-execution leaves nothing the
// next one does not clear.

// owner identifies a process on this machine: "PID.START" (START in clock
// ticks since boot, as /proc/PID/stat gives it).
type owner string

var self = sync.OnceValue(func() owner {
	o, _ := ownerOf(os.Getpid())
	return o
})

// ownerOf reads a process's owner name; false when it does not run.
func ownerOf(pid int) (owner, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", false
	}
	// the command name is in parentheses and may hold spaces
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return "", false
	}
	// field 22 of the line is the start time; f[0] is field 3
	return owner(fmt.Sprintf("%d.%s", pid, f[19])), true
}

// alive says whether an owner still runs: its pid runs with the same
// start time.
func (o owner) alive() bool {
	pid, _, ok := strings.Cut(string(o), ".")
	n, err := strconv.Atoi(pid)
	if !ok || err != nil {
		return false
	}
	now, ok := ownerOf(n)
	return ok && now == o
}

// parseOwner reads an owner from the start of a name ("PID.START-...").
func parseOwner(name string) (owner, bool) {
	o, _, _ := strings.Cut(name, "-")
	pid, start, ok := strings.Cut(o, ".")
	if !ok {
		return "", false
	}
	if _, err := strconv.Atoi(pid); err != nil {
		return "", false
	}
	if _, err := strconv.ParseUint(start, 10, 64); err != nil {
		return "", false
	}
	return owner(o), true
}

// bootID names this boot of this machine: owners are only judged on the
// machine, and the boot, that made them.
var bootID = sync.OnceValue(func() string {
	b, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(string(b))
})
