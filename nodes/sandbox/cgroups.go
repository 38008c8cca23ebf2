// The cgroups an execution runs in (cgroup v1 controllers, or v2): its
// limits, killing everything in it, and what it used.

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cgroups is where this process may make cgroups for its executions.
type cgroups struct {
	version string // v1 or v2
	// dirs are the parent directories of the executions' groups: one per
	// controller (memory, pids, cpuacct) on v1, one on v2
	dirs map[string]string
}

const cgroupRoot = "/sys/fs/cgroup"

// findCgroups finds where execution cgroups can be made, or nil.
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

// jobGroup is one execution's cgroups.
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
		g.remove()
		return nil, err
	}
	return g, nil
}

// join moves a process into the groups.
func (g *jobGroup) join(pid int) error {
	for _, d := range g.dirs {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			return fmt.Errorf("sandbox cgroup: %w", err)
		}
	}
	return nil
}

// settle bounds the wait for the kernel to end what was killed and let
// its cgroups go: killed processes take their time to exit on a loaded
// machine, and giving up early would leave them, or the groups, behind.
// Only a process that cannot die (stuck in the kernel) waits it out.
const settle = time.Minute

// kill ends every process left in the groups, and returns once they are
// empty (or settle has passed).
func (g *jobGroup) kill() {
	for deadline := time.Now().Add(settle); time.Now().Before(deadline); {
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

// counters are what the groups have counted so far: CPU time, kills at
// the memory limit, refusals at the process limit.
type counters struct {
	cpu             time.Duration
	oom, pidsRefuse int64
	failcnt         int64
}

func (g *jobGroup) read(ctl, file string) string {
	b, _ := os.ReadFile(filepath.Join(g.dirs[ctl], file))
	return string(b)
}

func num(s string) int64 {
	n, _ := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	return n
}

func (g *jobGroup) counters() counters {
	var c counters
	if g.c.version == "v2" {
		c.oom = field(g.read("", "memory.events"), "oom_kill")
		c.pidsRefuse = field(g.read("", "pids.events"), "max")
		c.cpu = time.Duration(field(g.read("", "cpu.stat"), "usage_usec")) * time.Microsecond
		return c
	}
	c.oom = field(g.read("memory", "memory.oom_control"), "oom_kill")
	c.failcnt = num(g.read("memory", "memory.failcnt"))
	c.pidsRefuse = field(g.read("pids", "pids.events"), "max")
	if _, ok := g.dirs["cpuacct"]; ok {
		c.cpu = time.Duration(num(g.read("cpuacct", "cpuacct.usage")))
	}
	return c
}

// measure reads what the process used since before, and whether it met
// the memory or the process limit, as the kernel recorded: an OOM kill
// at the memory limit, a fork refused at the process limit. These name
// the limit whatever else stopped the process: a program that meets one
// and goes on (a parent whose child the OOM killer ended, a loop that
// catches the failed fork) until the wall time or the CPU limit ends it
// met that limit first, however fast the machine ran it. stopped says
// that trellis killed the process (at a limit it saw, or its context's
// end): then only the kernel's OOM kill names the memory limit, not a
// failed charge at the limit (which a reclaim may have answered).
func (g *jobGroup) measure(o *Outcome, before counters, stopped bool) {
	now := g.counters()
	if d := now.cpu - before.cpu; d > 0 {
		o.CPU = d
	}
	if g.c.version == "v2" {
		if n := num(g.read("", "memory.peak")); n > 0 {
			o.Memory = n
		}
	} else if n := num(g.read("memory", "memory.max_usage_in_bytes")); n > 0 {
		o.Memory = n
	}
	// (a kernel that does not count OOM kills: the charge failed at the
	// limit and the process ended killed, by no one else)
	oom := now.oom > before.oom || now.oom == before.oom && now.failcnt > before.failcnt && o.Signal == "SIGKILL" && !stopped
	switch {
	case oom:
		o.Limit = LimitMemory
	case now.pidsRefuse > before.pidsRefuse:
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

// remove deletes the groups (they are empty once killed; the kernel may
// take a moment more to let them go).
func (g *jobGroup) remove() {
	for _, d := range g.dirs {
		for deadline := time.Now().Add(settle); ; time.Sleep(10 * time.Millisecond) {
			if err := os.Remove(d); err == nil || errors.Is(err, os.ErrNotExist) || time.Now().After(deadline) {
				break
			}
		}
	}
}
